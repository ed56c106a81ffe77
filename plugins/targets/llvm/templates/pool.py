"""CPU max_pool2d: a parallel loop over (image, channel) pairs, the window unrolled or not."""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops.pool import compute as pool_compute


def max_pool2d_cpu(cfg, device, N, C, H, W, R, S, stride=1, padding=0, dilation=1, dtype="float32"):
    """max_pool2d over NCHW data: channels across cores, each output row in order."""
    data, out = pool_compute(N, C, H, W, R, S, stride, padding, dilation, dtype)
    cfg.define_knob("unroll_window", [False, True])
    s = te.create_schedule(out)
    n, c, _, _ = s[out].op.axis
    ry, rx = s[out].op.reduce_axis
    s[out].parallel(s[out].fuse(n, c))
    if cfg["unroll_window"]:
        s[out].unroll(ry)
        s[out].unroll(rx)
    return s, [data, out]


TEMPLATES = [Template("max_pool2d", "rows", ("cpu",), max_pool2d_cpu, priority=20)]
