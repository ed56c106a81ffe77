"""conv2d: data[N, C, H, W] (NCHW) * weight[K_out, C, R, S] (OIHW) = out[N, K_out, OH, OW].

OH = (H + 2*pad_h - dil_h*(R-1) - 1) // stride_h + 1 (OW likewise); H, W are input
sizes. Stages: "pad" (zero padding; absent when padding is 0) feeding "conv",
a sum over (rc, ry, rx). With padding, templates find "pad" as `out.op.inputs[0]`.
The helpers here (pair types, WindowArgs, padded, windows) are shared with depthwise_conv2d.
"""
from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from .. import ir, te
from ..te.tensor import all_
from . import epilogue
from .epilogue import Epilogue, EpilogueArgs, has_epilogue
from .op import MAX_SIZE, Op, OpArgs, Size


def pair(v) -> tuple:
    """`3` -> (3, 3); an (h, w) pair stays a pair."""
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def _pair_type(minimum: int):
    """An int or an (h, w) pair of ints >= `minimum`, canonically a pair (the JSON schema allows both)."""
    item = Annotated[int, Field(ge=minimum, le=MAX_SIZE)]
    number = {"type": "integer", "minimum": minimum, "maximum": MAX_SIZE}
    return Annotated[tuple[item, item], BeforeValidator(pair), WithJsonSchema(
        {"anyOf": [number, {"type": "array", "items": number, "minItems": 2, "maxItems": 2}]})]


PositivePair = _pair_type(1)       # stride, dilation
NonNegativePair = _pair_type(0)    # padding


def out_size(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


class WindowArgs(OpArgs):
    """Checks the sliding-window geometry of a conv-like op's args (fields in the subclass)."""

    @model_validator(mode="after")
    def _check_geometry(self):
        for size, k, axis in ((self.H, self.R, 0), (self.W, self.S, 1)):
            if out_size(size, k, self.stride[axis], self.padding[axis], self.dilation[axis]) < 1:
                raise ValueError(f"the {k}-wide kernel (dilation {self.dilation[axis]}) does not fit the input "
                                 f"of size {size} padded by {self.padding[axis]}")
        return self


class Window2dArgs(WindowArgs):
    """The args of a per-channel sliding window over NCHW data (depthwise conv2d, pooling)."""
    N: Size
    C: Size
    H: Size
    W: Size
    R: Size
    S: Size
    stride: PositivePair = (1, 1)
    padding: NonNegativePair = (0, 0)
    dilation: PositivePair = (1, 1)


class Conv2dArgs(Window2dArgs, EpilogueArgs):
    K_out: Size


def padded(data: te.Tensor, padding) -> te.Tensor:
    """Zero-pad the two spatial axes of an NCHW tensor (stage "pad"); `data` itself when padding is 0."""
    ph, pw = pair(padding)
    if ph == pw == 0:
        return data
    N, C, H, W = data.shape
    zero = ir.cast(0, data.dtype)

    def f(n, c, h, w):
        inside = all_(*([h >= ph, h < H + ph] if ph else []), *([w >= pw, w < W + pw] if pw else []))
        return te.if_then_else(inside, data[n, c, h - ph, w - pw], zero)
    return te.compute((N, C, H + 2 * ph, W + 2 * pw), f, name="pad")


def windows(x: np.ndarray, R: int, S: int, stride, padding, dilation) -> np.ndarray:
    """View of the receptive fields of NCHW `x`: [N, C, OH, OW, R, S] (float64, no copy of the windows)."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (dh * (R - 1) + 1, dw * (S - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


def compute(N: int, C: int, H: int, W: int, K_out: int, R: int, S: int, stride=1, padding=0, dilation=1,
            dtype: str = "float32", **epilogue):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    data = te.placeholder((N, C, H, W), "data", dtype)
    weight = te.placeholder((K_out, C, R, S), "weight", dtype)
    pad = padded(data, padding)
    rc, ry, rx = te.reduce_axis(C, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    shape = (N, K_out, out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw))
    out = te.compute(
        shape, lambda n, k, y, x: te.sum(pad[n, rc, y * sh + ry * dh, x * sw + rx * dw] * weight[k, rc, ry, rx],
                                         axis=[rc, ry, rx]),
        name="conv_acc" if has_epilogue(epilogue) else "conv")
    return [data, weight, *fused(out, K_out, dtype, epilogue, "conv")]


def fused(out: te.Tensor, channels: int, dtype: str, epilogue: dict, name: str) -> list:
    """The epilogue's inputs and the output: `out` itself, or a stage `name` applying the epilogue to it."""
    if not has_epilogue(epilogue):
        return [out]
    epi = Epilogue(channels, out.shape, dtype, **epilogue)
    return [*epi.inputs, te.compute(out.shape, lambda *i: epi(out[i], i), name=name)]


def reference(data, weight, *extra, R, S, stride=1, padding=0, dilation=1, bias=False, residual=False,
              activation="none", **_):
    win = windows(data, R, S, stride, padding, dilation)
    out = np.tensordot(win, weight.astype(np.float64), axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    out = epilogue.reference(out, extra, bias, residual, activation)
    return [out.astype(data.dtype, order="C")]


def flops(N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return 2 * N * K_out * out_size(H, R, sh, ph, dh) * out_size(W, S, sw, pw, dw) * C * R * S


conv2d = Op("conv2d", Conv2dArgs, compute, reference, flops=flops,
            reduction_size=lambda C, R, S, **_: C * R * S)
