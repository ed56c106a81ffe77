"""max_pool2d: out[n, c, y, x] = max over the R x S window of data (NCHW); padding
never wins (it is -inf). H, W are input sizes, as for conv2d."""
from __future__ import annotations

import numpy as np

from .. import ir, te
from .conv2d import Window2dArgs, out_size, pair, windows
from .op import Op


class MaxPool2dArgs(Window2dArgs):
    pass


def compute(N, C, H, W, R, S, stride=1, padding=0, dilation=1, dtype="float32"):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    data = te.placeholder((N, C, H, W), "data", dtype)
    ry, rx = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    lowest = ir.cast(float("-inf"), dtype)

    def window(n, c, y, x):
        h, w = y * sh + ry * dh - ph, x * sw + rx * dw - pw
        if not (ph or pw):   # the window never leaves the input
            return te.max(data[n, c, h, w], axis=[ry, rx])
        inside = te.tensor.all_(h >= 0, h < H, w >= 0, w < W)
        return te.max(te.if_then_else(inside, data[n, c, h, w], lowest), axis=[ry, rx])
    out = te.compute((N, C, out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)), window, name="max_pool")
    return [data, out]


def reference(data, *, R, S, stride=1, padding=0, dilation=1, **_):
    (ph, pw) = pair(padding)
    padded = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    win = windows(padded, R, S, stride, 0, dilation)
    return [win.max(axis=(4, 5)).astype(data.dtype, order="C")]


def flops(N, C, H, W, R, S, stride=1, padding=0, dilation=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return N * C * out_size(H, R, sh, ph, dh) * out_size(W, S, sw, pw, dw) * R * S


max_pool2d = Op("max_pool2d", MaxPool2dArgs, compute, reference, flops=flops)
