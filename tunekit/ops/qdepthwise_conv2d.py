"""qdepthwise_conv2d: the int8 depthwise convolution of 8-bit inference, channels last: 8-bit
data X [N, H, W, C] (zero point x0) times int8 weights [R, S, C] (zero point 0, held as int32),
each channel alone, accumulated in int32, then requantized to 8 bits:

    acc[n, y, x, c] = sum_{r, s} X[n, y*sh + r*dh - ph, x*sw + s*dw - pw, c] * W[r, s, c]
    out[n, y, x, c] = saturate(round((acc + offset[c]) * scale[c]) + zero)

where padding reads x0 (`pad_value`) and offset[c] = bias[c] - x0 * sum_{r, s} W[r, s, c] (as in
`tunekit.ops.qconv2d`). Stages "pad" (absent without padding), "qdw" (the sum) and "qdw_out"."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .. import ir, te
from ..topi.quantize import RANGES, quantized
from .conv2d import NonNegativePair, PositivePair, WindowArgs, out_size, pair
from .op import Op, Size
from .qconv2d import padded


class QdepthwiseArgs(WindowArgs):
    N: Size
    H: Size
    W: Size
    C: Size
    R: Size
    S: Size
    stride: PositivePair = (1, 1)
    padding: NonNegativePair = (0, 0)
    dilation: PositivePair = (1, 1)
    dtype: Literal["uint8", "int8"] = Field("uint8", description="The data's type")
    out_dtype: Literal["int8", "uint8"] = Field("uint8", description="The requantized output's type")
    zero: int = Field(0, ge=-128, le=255, description="The output's zero point")
    pad_value: int = Field(0, ge=-128, le=255, description="The data's zero point, which padding reads")

    @model_validator(mode="after")
    def _check_points(self):
        for what, value, dtype in (("zero", self.zero, self.out_dtype), ("pad_value", self.pad_value, self.dtype)):
            if not RANGES[dtype][0] <= value <= RANGES[dtype][1]:
                raise ValueError(f"{what} {value} is outside the range of {dtype}")
        return self


def compute(N: int, H: int, W: int, C: int, R: int, S: int, stride=1, padding=0, dilation=1, dtype: str = "uint8",
            out_dtype: str = "uint8", zero: int = 0, pad_value: int = 0):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    X, Wt = te.placeholder((N, H, W, C), "X", dtype), te.placeholder((R, S, C), "W", "int32")
    offset, scale = te.placeholder((C,), "offset", "int32"), te.placeholder((C,), "scale", "float32")
    data = padded(X, ph, pw, ir.const(pad_value, dtype))
    r, s = te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    acc = te.compute((N, OH, OW, C), lambda n, y, x, c: te.sum(
        ir.cast(data[n, y * sh + r * dh, x * sw + s * dw, c], "int32") * Wt[r, s, c], axis=[r, s]), name="qdw")
    out = te.compute((N, OH, OW, C), lambda n, y, x, c: quantized(
        ir.cast(acc[n, y, x, c] + offset[c], "float32") * scale[c], ir.const(zero, "int32"), out_dtype),
        name="qdw_out")
    return [X, Wt, offset, scale, out]


def reference(X, Wt, offset, scale, R, S, stride=1, padding=0, dilation=1, out_dtype="uint8", zero=0,
              pad_value=0, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    xp = np.pad(X.astype(np.int64), ((0, 0), (ph, ph), (pw, pw), (0, 0)), constant_values=pad_value)
    OH, OW = (xp.shape[1] - dh * (R - 1) - 1) // sh + 1, (xp.shape[2] - dw * (S - 1) - 1) // sw + 1
    acc = sum(xp[:, r * dh:r * dh + sh * (OH - 1) + 1:sh, s * dw:s * dw + sw * (OW - 1) + 1:sw] * Wt[r, s]
              for r in range(R) for s in range(S))
    value = np.rint((acc + offset).astype(np.float32) * scale.astype(np.float32))
    return [np.clip(value + zero, *RANGES[out_dtype]).astype(out_dtype)]


def flops(N, H, W, C, R, S, stride=1, padding=0, dilation=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return 2 * N * C * out_size(H, R, sh, ph, dh) * out_size(W, S, sw, pw, dw) * R * S


qdepthwise_conv2d = Op("qdepthwise_conv2d", QdepthwiseArgs, compute, reference, flops=flops,
                       reduction_size=lambda R, S, **_: R * S)
