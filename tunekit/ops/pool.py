"""Pooling over NCHW data (or a blocked layout, `tunekit.ops.layout`, pooled into the
same layout); H, W are input sizes, as for conv2d.

- max_pool2d: out[n, c, y, x] = max over the R x S window; padding never wins (-inf).
  One stage, "max_pool".
- avg_pool2d: the mean over the window. Padding counts as zeros in the sum; the
  divisor is R * S with `count_include_pad`, else the number of the window's
  elements inside the input (ONNX AveragePool's default). Stages "pool_sum" (the
  sum, a reduction) and "avg_pool" (the scaling).
- global_avg_pool2d: the mean of each channel's H x W image, out [N, C, 1, 1]:
  avg_pool2d with the whole image as its window (the same stages).
"""
from __future__ import annotations

import numpy as np
from pydantic import model_validator

from .. import ir, te
from . import layout as layouts
from .conv2d import Window2dArgs, out_size, pair, windows
from .layout import Layout, block_of, check_channels
from .op import Op, OpArgs, Size


class Pool2dArgs(Window2dArgs):
    @model_validator(mode="after")
    def _check_padding(self):
        if self.padding[0] >= self.R or self.padding[1] >= self.S:
            raise ValueError(f"padding {self.padding} must be smaller than the {self.R}x{self.S} window (a window "
                             "wholly in the padding has nothing to pool)")
        return self


class MaxPool2dArgs(Pool2dArgs):
    pass


class AvgPool2dArgs(Pool2dArgs):
    count_include_pad: bool = False

    @model_validator(mode="after")
    def _check_dilation(self):
        if self.dilation != (1, 1):
            raise ValueError(f"avg_pool2d takes no dilation (got {self.dilation}); leave dilation out")
        return self


class GlobalAvgPool2dArgs(OpArgs):
    N: Size
    C: Size
    H: Size
    W: Size
    layout: Layout = "NCHW"

    @model_validator(mode="after")
    def _check_blocks(self):
        check_channels(block_of(self.layout), C=self.C)
        return self


def _out_shape(N, C, H, W, R, S, stride, padding, dilation, b) -> tuple:
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return layouts.shape(N, C, out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw), b)


def _window(data, H, W, R, S, stride, padding, dilation, outside, reduce):
    """The body of a pooling stage: `reduce` over the window, reading `outside` off the input."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    ry, rx = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")

    def body(n, c, y, x, *ci):
        h, w = y * sh + ry * dh - ph, x * sw + rx * dw - pw
        if not (ph or pw):   # the window never leaves the input
            return reduce(data[(n, c, h, w, *ci)], axis=[ry, rx])
        inside = te.tensor.all_(h >= 0, h < H, w >= 0, w < W)
        return reduce(te.if_then_else(inside, data[(n, c, h, w, *ci)], outside), axis=[ry, rx])
    return body


def compute(N, C, H, W, R, S, stride=1, padding=0, dilation=1, dtype="float32", layout="NCHW"):
    b = block_of(layout)
    data = layouts.placeholder(N, C, H, W, b, "data", dtype)
    body = _window(data, H, W, R, S, stride, padding, dilation, ir.cast(float("-inf"), dtype), te.max)
    return [data, te.compute(_out_shape(N, C, H, W, R, S, stride, padding, dilation, b), body, name="max_pool")]


def avg_compute(N, C, H, W, R, S, stride=1, padding=0, dilation=1, count_include_pad=False, dtype="float32",
                layout="NCHW"):
    (sh, sw), (ph, pw) = pair(stride), pair(padding)
    b = block_of(layout)
    data = layouts.placeholder(N, C, H, W, b, "data", dtype)
    shape = _out_shape(N, C, H, W, R, S, stride, padding, 1, b)
    total = te.compute(shape, _window(data, H, W, R, S, stride, padding, 1, ir.cast(0, dtype), te.sum),
                       name="pool_sum")

    def mean(n, c, y, x, *ci):
        if count_include_pad or not (ph or pw):
            return total[(n, c, y, x, *ci)] * ir.cast(1.0 / (R * S), dtype)
        rows = ir.min_(y * sh - ph + R, H) - ir.max_(y * sh - ph, 0)   # the window's part inside the input
        cols = ir.min_(x * sw - pw + S, W) - ir.max_(x * sw - pw, 0)
        return total[(n, c, y, x, *ci)] / ir.cast(rows * cols, dtype)
    return [data, te.compute(shape, mean, name="avg_pool")]


def global_compute(N, C, H, W, dtype="float32", layout="NCHW"):
    return avg_compute(N, C, H, W, H, W, dtype=dtype, layout=layout)


def window_stage(out: te.Tensor) -> te.Tensor:
    """The stage of a pooling's output `out` that reduces over the window (for templates):
    `out` itself for max_pool2d, the sum it scales for the averages."""
    return out if out.op.reduce_axis else out.op.inputs[0]


def _pool_reference(data, R, S, stride, padding, dilation, layout, fill, reduce):
    (ph, pw), b = pair(padding), block_of(layout)
    x = np.pad(layouts.to_nchw(data, b).astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)),
               constant_values=fill)
    return reduce(windows(x, R, S, stride, 0, dilation))


def reference(data, *, R, S, stride=1, padding=0, dilation=1, layout="NCHW", **_):
    out = _pool_reference(data, R, S, stride, padding, dilation, layout, -np.inf, lambda w: w.max(axis=(4, 5)))
    return [layouts.to_blocked(out, block_of(layout)).astype(data.dtype, order="C")]


def avg_reference(data, *, R, S, stride=1, padding=0, count_include_pad=False, layout="NCHW", **_):
    total = _pool_reference(data, R, S, stride, padding, 1, layout, 0, lambda w: w.sum(axis=(4, 5)))
    ones = np.ones(layouts.to_nchw(data, block_of(layout)).shape[:1] + (1,) + data.shape[2:4])
    count = R * S if count_include_pad else _pool_reference(ones, R, S, stride, padding, 1, "NCHW", 0,
                                                             lambda w: w.sum(axis=(4, 5)))
    return [layouts.to_blocked(total / count, block_of(layout)).astype(data.dtype, order="C")]


def global_reference(data, *, H, W, layout="NCHW", **_):
    return avg_reference(data, R=H, S=W, layout=layout)


def flops(N, C, H, W, R, S, stride=1, padding=0, dilation=1, **_):
    return N * C * int(np.prod(_out_shape(1, 1, H, W, R, S, stride, padding, dilation, 0))) * R * S


max_pool2d = Op("max_pool2d", MaxPool2dArgs, compute, reference, flops=flops)
avg_pool2d = Op("avg_pool2d", AvgPool2dArgs, avg_compute, avg_reference, flops=flops,
                reduction_size=lambda R, S, **_: R * S)
global_avg_pool2d = Op("global_avg_pool2d", GlobalAvgPool2dArgs, global_compute, global_reference,
                       flops=lambda N, C, H, W, **_: N * C * H * W, reduction_size=lambda H, W, **_: H * W)
