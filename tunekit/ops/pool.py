"""max_pool2d: out[n, c, y, x] = max over the R x S window of data (NCHW); padding
never wins (it is -inf). H, W are input sizes, as for conv2d; a blocked layout
(`tunekit.ops.layout`) pools [N, C/b, H, W, b] into the same layout."""
from __future__ import annotations

import numpy as np

from .. import ir, te
from . import layout as layouts
from .conv2d import Window2dArgs, out_size, pair, windows
from .layout import block_of
from .op import Op


class MaxPool2dArgs(Window2dArgs):
    pass


def compute(N, C, H, W, R, S, stride=1, padding=0, dilation=1, dtype="float32", layout="NCHW"):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    b = block_of(layout)
    data = layouts.placeholder(N, C, H, W, b, "data", dtype)
    ry, rx = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    lowest = ir.cast(float("-inf"), dtype)

    def window(n, c, y, x, *ci):
        h, w = y * sh + ry * dh - ph, x * sw + rx * dw - pw
        if not (ph or pw):   # the window never leaves the input
            return te.max(data[(n, c, h, w, *ci)], axis=[ry, rx])
        inside = te.tensor.all_(h >= 0, h < H, w >= 0, w < W)
        return te.max(te.if_then_else(inside, data[(n, c, h, w, *ci)], lowest), axis=[ry, rx])
    out = te.compute(layouts.shape(N, C, out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw), b), window,
                     name="max_pool")
    return [data, out]


def reference(data, *, R, S, stride=1, padding=0, dilation=1, layout="NCHW", **_):
    (ph, pw), b = pair(padding), block_of(layout)
    padded = np.pad(layouts.to_nchw(data, b).astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)),
                    constant_values=-np.inf)
    win = windows(padded, R, S, stride, 0, dilation)
    return [layouts.to_blocked(win.max(axis=(4, 5)), b).astype(data.dtype, order="C")]


def flops(N, C, H, W, R, S, stride=1, padding=0, dilation=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return N * C * out_size(H, R, sh, ph, dh) * out_size(W, S, sw, pw, dw) * R * S


max_pool2d = Op("max_pool2d", MaxPool2dArgs, compute, reference, flops=flops)
