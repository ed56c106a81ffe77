"""CPU pooling templates: max_pool2d, avg_pool2d and global_avg_pool2d, NCHW (`rows`)
or blocked (`blocked`: one vector of b channels per output pixel, rows across cores).
NCHW pools run (image, channel) pairs across cores, each output row in order. The
window loop is unrolled or not (a knob, for windows of up to 64 taps); an average's
sum is computed per output pixel, scaled as it is written."""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops.pool import avg_compute, compute, global_compute, window_stage

from ._common import vectorize

MAX_UNROLL = 64


def _schedule(cfg, device, tensors, blocked: bool):
    *_, out = tensors
    total = window_stage(out)
    s = te.create_schedule(out)
    ry, rx = s[total].op.reduce_axis
    cfg.define_knob("unroll_window", [False, True] if ry.extent * rx.extent <= MAX_UNROLL else [False])
    lanes = device.lanes(out.dtype)
    if blocked:
        *pixel, ci = s[total].op.axis
        s[total].reorder(*pixel, ry, rx, ci)
        vectorize(s, total, ci, lanes)
    if cfg["unroll_window"]:
        s[total].unroll(ry)
        s[total].unroll(rx)
    n, c, y, x, *ci = s[out].op.axis
    s[out].parallel(s[out].fuse(n, c, y) if blocked else s[out].fuse(n, c))
    if total is not out:
        if blocked:
            vectorize(s, out, ci[0], lanes)
        s[total].compute_at(s[out], x)
    return s, tensors


def _template(op: str, compute_fn, blocked: bool) -> Template:
    def fn(cfg, device, **args):
        return _schedule(cfg, device, compute_fn(**args), blocked)
    fn.__name__ = f"{op}_{'blocked' if blocked else 'rows'}"
    fn.__doc__ = f"{op} on {'blocked' if blocked else 'NCHW'} data (see the module's doc)."
    return Template(op, "blocked" if blocked else "rows", ("cpu",), fn, priority=20, blocked=blocked)


TEMPLATES = [_template(op, fn, blocked) for op, fn in (("max_pool2d", compute), ("avg_pool2d", avg_compute),
                                                        ("global_avg_pool2d", global_compute))
             for blocked in (False, True)]
