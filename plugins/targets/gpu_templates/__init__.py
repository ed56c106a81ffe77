"""Schedule templates for GPU targets (cuda, opencl, mali), shared by their plugins.

For each op there is a shared-memory template and a register-only one:

    op                 "shared" (block tiles in shared memory)   "register" (no shared memory)
    matmul             matmul_shared                              matmul_register
    dense              dense_shared                               dense_register
    conv2d             conv2d_shared                              conv2d_register
    group_conv2d       -                                          conv2d_register
    depthwise_conv2d   -                                          depthwise_register

and a default template "gpu" (highest priority) that picks by device: the
shared-memory one where local memory is on chip, the register one where it is
emulated in global memory (CPU OpenCL devices such as PoCL, and Mali: Midgard /
Bifrost have no on-chip local memory, so their templates vectorize float4 columns
instead). Device limits are constraints of each space, checked per config without
enumeration: threads per block and per axis, shared bytes, register tile size.
The pools (max_pool2d, avg_pool2d, global_avg_pool2d) have one template, "gpu"
(`pool_template`: `pool_threads`, a thread per output element).

`templates(targets)` returns Template objects serving the given target names;
a third-party GPU target can register them for its own name the same way.
"""
from __future__ import annotations

from tunekit import Template
from tunekit.ops import pool as pools

from .common import on_chip_shared
from .conv import conv2d_register, conv2d_shared, depthwise_register
from .matmul import dense_register, dense_shared, matmul_register, matmul_shared
from .pool import pool_template, pool_threads

__all__ = [
    "conv2d_register",
    "conv2d_shared",
    "dense_register",
    "dense_shared",
    "depthwise_register",
    "matmul_register",
    "matmul_shared",
    "on_chip_shared",
    "pool_template",
    "pool_threads",
    "templates",
]


def _auto(shared, register):
    def fn(cfg, device, **args):
        return (shared if shared is not None and on_chip_shared(device) else register)(cfg, device, **args)
    fn.__name__ = f"{(shared or register).__name__.rsplit('_', 1)[0]}_gpu"
    fn.__doc__ = f"{shared.__name__ if shared else register.__name__} or {register.__name__}, by device."
    return fn


def templates(targets: tuple[str, ...]) -> list[Template]:
    """The GPU templates, serving the target names (or families) in `targets`."""
    out = []
    for op, shared, register in (("matmul", matmul_shared, matmul_register),
                                 ("dense", dense_shared, dense_register),
                                 ("conv2d", conv2d_shared, conv2d_register),
                                 ("group_conv2d", None, conv2d_register),
                                 ("depthwise_conv2d", None, depthwise_register)):
        out.append(Template(op, "gpu", targets, _auto(shared, register), priority=10, epilogue=True))
        if shared is not None:
            out.append(Template(op, "shared", targets, shared, priority=5, epilogue=True))
        out.append(Template(op, "register", targets, register, priority=5, epilogue=True))
    for op, compute in (("max_pool2d", pools.compute), ("avg_pool2d", pools.avg_compute),
                        ("global_avg_pool2d", pools.global_compute)):
        out.append(Template(op, "gpu", targets, pool_template(compute), priority=10))
    return out
