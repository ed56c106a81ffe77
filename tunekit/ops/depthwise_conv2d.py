"""depthwise_conv2d (channel multiplier 1): data[N, C, H, W] (NCHW) * weight[C, 1, R, S]
= out[N, C, OH, OW]; each channel is convolved with its own R x S filter. In a blocked
layout the activations are [N, C/b, H, W, b] and the weights [C/b, R, S, b].

Output sizes, stride/padding/dilation and the "pad" stage are as in conv2d; the
convolution stage is "depthwise_conv", a sum over (ry, rx).
"""
from __future__ import annotations

import numpy as np

from .. import te
from . import epilogue
from . import layout as layouts
from .conv2d import Window2dArgs, nchw_extra, out_size, padded, pair, windows
from .epilogue import EpilogueArgs, fused, has_epilogue
from .layout import block_of
from .op import Op


class DepthwiseConv2dArgs(Window2dArgs, EpilogueArgs):
    pass


def compute(N: int, C: int, H: int, W: int, R: int, S: int, stride=1, padding=0, dilation=1,
            dtype: str = "float32", layout: str = "NCHW", **epi):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    b = block_of(layout)
    data = layouts.placeholder(N, C, H, W, b, "data", dtype)
    weight = te.placeholder((C // b, R, S, b) if b else (C, 1, R, S), "weight", dtype)
    pad = padded(data, padding)
    ry, rx = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")

    def conv(n, c, y, x, *ci):
        w = weight[c, ry, rx, ci[0]] if b else weight[c, 0, ry, rx]
        return te.sum(pad[(n, c, y * sh + ry * dh, x * sw + rx * dw, *ci)] * w, axis=[ry, rx])
    out = te.compute(layouts.shape(N, C, out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw), b), conv,
                     name="depthwise_conv_acc" if has_epilogue(epi) else "depthwise_conv")
    return [data, weight, *fused(out, C, dtype, epi, "depthwise_conv", b)]


def reference(data, weight, *extra, R, S, stride=1, padding=0, dilation=1, bias=False, residual=False,
              activation="none", layout: str = "NCHW", **_):
    b = block_of(layout)
    win = windows(layouts.to_nchw(data, b), R, S, stride, padding, dilation)
    out = np.einsum("nchwrs,crs->nchw", win, layouts.depthwise_weight_nchw(weight, b)[:, 0].astype(np.float64))
    out = epilogue.reference(out, nchw_extra(extra, residual, b), bias, residual, activation)
    return [layouts.to_blocked(out, b).astype(data.dtype, order="C")]


def flops(N, C, H, W, R, S, stride=1, padding=0, dilation=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return 2 * N * C * out_size(H, R, sh, ph, dh) * out_size(W, S, sw, pw, dw) * R * S


depthwise_conv2d = Op("depthwise_conv2d", DepthwiseConv2dArgs, compute, reference, flops=flops,
                      reduction_size=lambda R, S, **_: R * S)
