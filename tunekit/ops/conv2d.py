"""conv2d: data[N, C, H, W] (NCHW) * weight[K_out, C, R, S] (OIHW) = out[N, K_out, OH, OW];
in a blocked layout (`tunekit.ops.layout`) the activations are [N, C/b, H, W, b] and
the weights [K_out/b, C, R, S, b].

OH = (H + 2*pad_h - dil_h*(R-1) - 1) // stride_h + 1 (OW likewise); H, W are input
sizes. Stages: "pad" (zero padding; absent when padding is 0) feeding "conv",
a sum over (rc, ry, rx). With padding, templates find "pad" as `out.op.inputs[0]`.
The helpers here (pair types, WindowArgs, padded, windows) are shared with depthwise_conv2d;
compute, reference and flops take `groups` for group_conv2d.
"""
from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from .. import ir, te
from ..te.tensor import all_
from . import epilogue
from . import layout as layouts
from .epilogue import EpilogueArgs, fused, has_epilogue
from .layout import Layout, block_of, check_channels
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
    layout: Layout = "NCHW"

    @model_validator(mode="after")
    def _check_blocks(self):
        check_channels(block_of(self.layout), C=self.C)
        return self


class Conv2dArgs(Window2dArgs, EpilogueArgs):
    K_out: Size
    data_layout: Layout | None = Field(None, description="The data's layout when it is not `layout` (which the "
                                       "output, residual and weights follow).")

    @model_validator(mode="after")
    def _check_blocks(self):
        b = block_of(self.layout)
        check_channels(b, K_out=self.K_out)
        check_channels(block_of(self.data_layout or self.layout), C=self.C)
        if block_of(self.data_layout or self.layout) and not b:
            raise ValueError(f"data_layout {self.data_layout!r} needs a blocked layout too (layout is \"NCHW\")")
        return self


def padded(data: te.Tensor, padding) -> te.Tensor:
    """Zero-pad the two spatial axes (2 and 3) of an NCHW or blocked tensor (stage "pad");
    `data` itself when padding is 0."""
    ph, pw = pair(padding)
    if ph == pw == 0:
        return data
    N, C, H, W, *lane = data.shape
    zero = ir.cast(0, data.dtype)

    def f(n, c, h, w, *i):
        inside = all_(*([h >= ph, h < H + ph] if ph else []), *([w >= pw, w < W + pw] if pw else []))
        return te.if_then_else(inside, data[(n, c, h - ph, w - pw, *i)], zero)
    return te.compute((N, C, H + 2 * ph, W + 2 * pw, *lane), f, name="pad")


def in_input(h, w, H: int, W: int, ph: int, pw: int, Hp: int, Wp: int) -> ir.Expr:
    """Whether padded position (h, w) of an input H x W padded by (ph, pw) into Hp x Wp holds
    data (only the conditions that can fail)."""
    return all_(*([h >= ph] if ph else []), *([h < H + ph] if Hp > H + ph else []),
                          *([w >= pw] if pw else []), *([w < W + pw] if Wp > W + pw else []))


def windows(x: np.ndarray, R: int, S: int, stride, padding, dilation) -> np.ndarray:
    """View of the receptive fields of NCHW `x`: [N, C, OH, OW, R, S] (float64, no copy of the windows)."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (dh * (R - 1) + 1, dw * (S - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


def compute(N: int, C: int, H: int, W: int, K_out: int, R: int, S: int, stride=1, padding=0, dilation=1,
            dtype: str = "float32", layout: str = "NCHW", data_layout: str | None = None, groups: int = 1,
            **epilogue):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    b, db = block_of(layout), block_of(data_layout or layout)
    Cg, Kg = C // groups, K_out // groups    # groups (NCHW only): output channel k reads group k // Kg
    data = layouts.placeholder(N, C, H, W, db, "data", dtype)
    weight = te.placeholder((K_out // b, C, R, S, b) if b else (K_out, Cg, R, S), "weight", dtype)
    pad = padded(data, padding)
    rc, ry, rx = te.reduce_axis(Cg, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)

    def conv(n, k, y, x, *ki):
        c = rc if groups == 1 else k // Kg * Cg + rc
        d = layouts.load(pad, db, n, (c // db, c % db) if db else c, y * sh + ry * dh, x * sw + rx * dw)
        return te.sum(d * weight[(k, rc, ry, rx, *ki)], axis=[rc, ry, rx])
    out = te.compute(layouts.shape(N, K_out, OH, OW, b), conv, name="conv_acc" if has_epilogue(epilogue) else "conv")
    return [data, weight, *fused(out, K_out, dtype, epilogue, "conv", b)]


def nchw_extra(extra, residual: bool, b: int) -> list:
    """The epilogue's bias and residual arrays with the residual in NCHW."""
    extra = list(extra)
    if residual:
        extra[-1] = layouts.to_nchw(extra[-1], b)
    return extra


def reference(data, weight, *extra, R, S, stride=1, padding=0, dilation=1, bias=False, residual=False,
              activation="none", layout: str = "NCHW", data_layout: str | None = None, groups: int = 1, **_):
    b, db = block_of(layout), block_of(data_layout or layout)
    win = windows(layouts.to_nchw(data, db), R, S, stride, padding, dilation)
    w = layouts.conv_weight_oihw(weight, b).astype(np.float64)
    cg, kg = win.shape[1] // groups, w.shape[0] // groups
    out = np.concatenate([np.tensordot(win[:, g * cg:(g + 1) * cg], w[g * kg:(g + 1) * kg], axes=([1, 4, 5], [1, 2, 3]))
                          for g in range(groups)], axis=3).transpose(0, 3, 1, 2)
    out = epilogue.reference(out, nchw_extra(extra, residual, b), bias, residual, activation)
    return [layouts.to_blocked(out, b).astype(data.dtype, order="C")]


def flops(N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, groups=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return 2 * N * K_out * out_size(H, R, sh, ph, dh) * out_size(W, S, sw, pw, dw) * C // groups * R * S


conv2d = Op("conv2d", Conv2dArgs, compute, reference, flops=flops,
            reduction_size=lambda C, R, S, **_: C * R * S)
