"""GPU pooling template (max_pool2d, avg_pool2d, global_avg_pool2d; NCHW): one thread
per output element, `threads` of them per block over the flattened output (the last
block guarded); the window reduction in registers, unrolled or not. Pools read each
input a few times at most: what matters is that neighbouring threads read
neighbouring pixels, which the flat order gives."""
from __future__ import annotations

from tunekit import te
from tunekit.ops.pool import window_stage

from .common import block_limits

MAX_UNROLL = 64


def pool_threads(tensors, cfg, device):
    """Schedule a pooling's `tensors` (data, out) for a GPU (see the module's doc)."""
    *params, out = tensors
    s = te.create_schedule(out)
    total = window_stage(out)
    most, dims, _ = block_limits(device)
    ry, rx = s[total].op.reduce_axis
    cfg.define_knob("threads", [t for t in (32, 64, 128, 256) if t <= min(most, dims[0])] or [min(most, dims[0])])
    cfg.define_knob("unroll_window", [False, True] if ry.extent * rx.extent <= MAX_UNROLL else [False])
    bx, tx = s[out].split(s[out].fuse(*s[out].op.axis), factor=cfg["threads"])
    s[out].bind(bx, "blockIdx.x")
    s[out].bind(tx, "threadIdx.x")
    if total is not out:
        s[total].scope = "local"
        s[total].compute_at(s[out], tx)
    if cfg["unroll_window"]:
        s[total].unroll(ry)
        s[total].unroll(rx)
    return s, [*params, out]


def pool_template(compute):
    """The template function `fn(cfg, device, **args)` scheduling a pooling op whose
    compute is `compute` (`tunekit.ops.pool`) with `pool_threads`."""
    def fn(cfg, device, **args):
        return pool_threads(compute(**args), cfg, device)
    fn.__name__ = f"{compute.__name__}_gpu"
    fn.__doc__ = f"pool_threads on {compute.__name__}."
    return fn
