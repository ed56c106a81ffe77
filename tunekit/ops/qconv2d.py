"""qconv2d: the int8 2-D convolution of 8-bit inference on the dot instruction (`te.dot4_u8s8`,
VNNI's vpdpbusd), channels last: uint8 data X [N, H, W, C] (zero point x0) times int8
weights [R, S, C, K_out] (zero point 0), accumulated in int32, then requantized to 8 bits:

    acc[n, oh, ow, k] = sum_{r, s, c} X[n, oh*sh + r*dh - ph, ow*sw + s*dw - pw, c] * W[r, s, c, k]
    out[n, oh, ow, k] = saturate(round((acc + offset[k]) * scale[k]) + zero)

where padding reads x0 (`pad_value`) and offset[k] = bias[k] - x0 * sum_{r, s, c} W[r, s, c, k],
a constant of the weights (`offset`): so acc + offset is the product of the data less its zero
point, plus the int32 bias, as ONNX's QLinearConv defines it.

C is a multiple of 4: the kernel reads X as int32 [N, H, W, C/4], four channels of a pixel per
int32 (the same bytes), and the weights in the instruction's layout, int32 [R, S, C/4, K_out],
four channels of an output channel per int32 (`pack_weights`, done once for constant weights).
Stages "pad" (absent without padding), "qconv" (the product) and "qconv_out"."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .. import ir, te
from ..te.tensor import all_
from ..topi.quantize import RANGES, quantized
from .conv2d import NonNegativePair, PositivePair, WindowArgs, out_size, pair
from .op import Op, Size


class Qconv2dArgs(WindowArgs):
    N: Size
    H: Size
    W: Size
    C: Size
    K_out: Size
    R: Size
    S: Size
    stride: PositivePair = (1, 1)
    padding: NonNegativePair = (0, 0)
    dilation: PositivePair = (1, 1)
    dtype: Literal["uint8"] = Field("uint8", description="The data's type (unsigned: the dot instruction's).")
    out_dtype: Literal["int8", "uint8"] = Field("uint8", description="The requantized output's type")
    zero: int = Field(0, ge=-128, le=255, description="The output's zero point")
    pad_value: int = Field(0, ge=0, le=255, description="The data's zero point, which padding reads")

    @model_validator(mode="after")
    def _check_channels(self):
        if self.C % 4:
            raise ValueError(f"C = {self.C} is not a multiple of 4 (the dot instruction takes four channels at "
                             "once; pad the channels with the zero point and the weights with zeros)")
        if not RANGES[self.out_dtype][0] <= self.zero <= RANGES[self.out_dtype][1]:
            raise ValueError(f"zero {self.zero} is outside the range of {self.out_dtype}")
        return self


def compute(N: int, H: int, W: int, C: int, K_out: int, R: int, S: int, stride=1, padding=0, dilation=1,
            dtype: str = "uint8", out_dtype: str = "uint8", zero: int = 0, pad_value: int = 0):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    X = te.placeholder((N, H, W, C // 4), "X", "int32")
    Wt = te.placeholder((R, S, C // 4, K_out), "W", "int32")
    offset, scale = te.placeholder((K_out,), "offset", "int32"), te.placeholder((K_out,), "scale", "float32")
    data = padded(X, ph, pw, ir.const(int(np.array([pad_value] * 4, np.uint8).view(np.int32)[0]), "int32"))
    r, s, c = te.reduce_axis(R, "r"), te.reduce_axis(S, "s"), te.reduce_axis(C // 4, "c")
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    acc = te.compute((N, OH, OW, K_out), lambda n, y, x, k: te.sum(
        te.dot4_u8s8(data[n, y * sh + r * dh, x * sw + s * dw, c], Wt[r, s, c, k]), axis=[r, s, c]), name="qconv")
    out = te.compute((N, OH, OW, K_out), lambda n, y, x, k: quantized(
        ir.cast(acc[n, y, x, k] + offset[k], "float32") * scale[k], ir.const(zero, "int32"), out_dtype),
        name="qconv_out")
    return [X, Wt, offset, scale, out]


def padded(X: te.Tensor, ph: int, pw: int, value: ir.Expr) -> te.Tensor:
    """Channels-last `X` [N, H, W, C] padded by `value` (stage "pad"; `X` itself without padding)."""
    if ph == pw == 0:
        return X
    N, H, W, C = X.shape

    def pad(n, h, w, c):
        inside = all_(*([h >= ph, h < H + ph] if ph else []), *([w >= pw, w < W + pw] if pw else []))
        return te.if_then_else(inside, X[n, h - ph, w - pw, c], value)
    return te.compute((N, H + 2 * ph, W + 2 * pw, C), pad, name="pad")


def pack_weights(w: np.ndarray) -> np.ndarray:
    """numpy: int8 weights [K_out, C, R, S] (OIHW, C a multiple of 4) in the instruction's layout,
    int32 [R, S, C/4, K_out] (four channels of an output channel per int32)."""
    K, C, R, S = w.shape
    hwio = w.astype(np.int8).transpose(2, 3, 1, 0).reshape(R, S, C // 4, 4, K)
    return np.ascontiguousarray(hwio.transpose(0, 1, 2, 4, 3)).view(np.int32)[..., 0]


def reference(X, Wt, offset, scale, R, S, stride=1, padding=0, dilation=1, out_dtype="uint8", zero=0,
              pad_value=0, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    x = np.ascontiguousarray(X).view(np.uint8).reshape(*X.shape[:3], -1).astype(np.int64)
    w = np.ascontiguousarray(Wt)[..., None].view(np.int8).reshape(*Wt.shape, 4).transpose(0, 1, 2, 4, 3)
    w = w.reshape(R, S, -1, Wt.shape[-1]).astype(np.int64)
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)), constant_values=pad_value)
    OH, OW = (xp.shape[1] - dh * (R - 1) - 1) // sh + 1, (xp.shape[2] - dw * (S - 1) - 1) // sw + 1
    acc = sum(xp[:, r * dh:r * dh + sh * (OH - 1) + 1:sh, s * dw:s * dw + sw * (OW - 1) + 1:sw] @ w[r, s]
              for r in range(R) for s in range(S))
    value = np.rint((acc + offset).astype(np.float32) * scale.astype(np.float32))
    return [np.clip(value + zero, *RANGES[out_dtype]).astype(out_dtype)]


def flops(N, H, W, C, K_out, R, S, stride=1, padding=0, dilation=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return 2 * N * K_out * out_size(H, R, sh, ph, dh) * out_size(W, S, sw, pw, dw) * C * R * S


qconv2d = Op("qconv2d", Qconv2dArgs, compute, reference, flops=flops, reduction_size=lambda C, R, S, **_: C * R * S)
