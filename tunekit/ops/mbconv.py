"""mbconv: MobileNet-v2's inverted-residual block as one op, so that the expanded
activations never go to memory. In a blocked layout "NCHW{b}c" (`tunekit.ops.layout`):

    x    = data                                        [N, C/b, H, W, b]
    e    = relu6(conv1x1(x, w_expand) + b_expand)      [N, E/b, H, W, b]   (only with `expand`)
    d    = relu6(depthwise3x3(e, w_dw) + b_dw)         [N, E/b, OH, OW, b]  (padding 1, `stride`)
    out  = conv1x1(d, w_project) + b_project (+ x)     [N, K_out/b, OH, OW, b]

Weights are in the blocked forms a network's blocked conv2d and depthwise_conv2d take
(`layout.conv_weight`, `layout.depthwise_weight`): w_expand [E/b, C, 1, 1, b],
w_dw [E/b, 3, 3, b], w_project [K_out/b, E, 1, 1, b]; the biases are [E], [E], [K_out].
Kernel parameters: data, (w_expand, b_expand,) w_dw, b_dw, w_project, b_project, out.
Without `expand` (the network's first block) the depthwise reads the data (E = C).
`residual` adds the data itself to the output (stride 1, C = K_out).

OH = (H - 1) // stride + 1 (OW likewise). The depthwise's zero padding pads the
expanded tensor: a padded position is 0, not relu6(b_expand). Stages: "pad" (the data
zero-padded by 1), "expand_acc" (the 1x1 sums over padded positions), "expand" (bias,
relu6, zero outside the image), "dw_acc", "dw" (bias, relu6), "project_acc", "mbconv".
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .. import ir, te
from . import layout as layouts
from .conv2d import out_size, windows
from .layout import Layout, block_of
from .op import Op, OpArgs, Size


class MBConvArgs(OpArgs):
    N: Size
    C: Size = Field(description="Input channels.")
    H: Size
    W: Size
    E: Size = Field(description="Expanded channels (the depthwise's); equal to C without `expand`.")
    K_out: Size = Field(description="Output channels.")
    expand: bool = Field(True, description="Expand C -> E by a 1x1 conv with bias and relu6 first (false in "
                         "MobileNet-v2's first block, whose expansion factor is 1).")
    stride: Literal[1, 2] = Field(1, description="The depthwise's stride (1 or 2).")
    residual: bool = Field(False, description="Add the block's input to its output (stride 1, C = K_out).")
    layout: Layout = Field(description='The blocked layout "NCHW{b}c" of the data, the expanded activations and '
                           "the output; b divides C, E and K_out.")

    @model_validator(mode="after")
    def _check_block(self):
        b = block_of(self.layout)
        if not b:
            raise ValueError('mbconv takes a blocked layout: set layout to "NCHW{b}c" (e.g. "NCHW8c")')
        for name in ("C", "E", "K_out"):
            if getattr(self, name) % b:
                raise ValueError(f"{name}={getattr(self, name)} is not a multiple of the channel block {b} of "
                                 f"layout {self.layout!r}; use a block that divides C, E and K_out")
        if not self.expand and self.E != self.C:
            raise ValueError(f"E={self.E} differs from C={self.C} but expand is false: without an expand layer the "
                             "depthwise runs on the input's channels; set E=C, or expand=true")
        if self.residual and (self.stride != 1 or self.C != self.K_out):
            raise ValueError(f"residual adds the input to the output, so it needs stride 1 and C == K_out (got "
                             f"stride {self.stride}, C={self.C}, K_out={self.K_out}); set residual=false")
        return self


def _relu6(v):
    return ir.min_(ir.max_(v, ir.cast(0, v.dtype)), ir.cast(6, v.dtype))


def _inside(h, w, H: int, W: int, rows: int, cols: int) -> ir.Expr:
    """Whether position (h, w) of a tensor padded by 1 (rows x cols) holds an input pixel."""
    return te.all_(h >= 1, *([h < H + 1] if rows > H + 1 else []), w >= 1, *([w < W + 1] if cols > W + 1 else []))


def compute(N: int, C: int, H: int, W: int, E: int, K_out: int, layout: str, expand: bool = True, stride: int = 1,
            residual: bool = False, dtype: str = "float32", OHp: int | None = None, OWp: int | None = None,
            Wxp: int | None = None):
    """The op's tensors. For templates: `OHp` x `OWp` (at least OH x OW) output pixels are
    computed before the last stage crops them, and "pad" and "expand_acc" are `Wxp` wide
    (at least what the depthwise reads), so that a schedule's tiles divide them."""
    b, s = block_of(layout), stride
    OH, OW = out_size(H, 3, s, 1, 1), out_size(W, 3, s, 1, 1)
    OHp, OWp = OHp or OH, OWp or OW
    Hx, Wx = (OHp - 1) * s + 3, (OWp - 1) * s + 3     # the padded rows and columns the depthwise reads
    Wxp = Wxp or Wx
    zero = ir.cast(0, dtype)
    data = layouts.placeholder(N, C, H, W, b, "data", dtype)
    pad = te.compute((N, C // b, Hx, Wxp, b), lambda n, c, h, w, ci: te.if_then_else(
        _inside(h, w, H, W, Hx, Wxp), data[n, c, h - 1, w - 1, ci], zero), name="pad")
    inputs = [data]
    if expand:
        w_e, b_e = te.placeholder((E // b, C, 1, 1, b), "w_expand", dtype), te.placeholder((E,), "b_expand", dtype)
        rc, rci = te.reduce_axis(C // b, "rc"), te.reduce_axis(b, "rci")
        acc = te.compute((N, E // b, Hx, Wxp, b), lambda n, e, h, w, ei: te.sum(
            pad[n, rc, h, w, rci] * w_e[e, rc * b + rci, 0, 0, ei], axis=[rc, rci]), name="expand_acc")
        expanded = te.compute((N, E // b, Hx, Wx, b), lambda n, e, h, w, ei: te.if_then_else(
            _inside(h, w, H, W, Hx, Wx), _relu6(acc[n, e, h, w, ei] + b_e[e * b + ei]), zero), name="expand")
        inputs += [w_e, b_e]
    else:
        expanded = pad
    w_d, b_d = te.placeholder((E // b, 3, 3, b), "w_dw", dtype), te.placeholder((E,), "b_dw", dtype)
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    dw_acc = te.compute((N, E // b, OHp, OWp, b), lambda n, e, y, x, ei: te.sum(
        expanded[n, e, y * s + ry, x * s + rx, ei] * w_d[e, ry, rx, ei], axis=[ry, rx]), name="dw_acc")
    dw = te.compute(dw_acc.shape, lambda n, e, y, x, ei: _relu6(dw_acc[n, e, y, x, ei] + b_d[e * b + ei]), name="dw")
    w_p, b_p = te.placeholder((K_out // b, E, 1, 1, b), "w_project", dtype), te.placeholder((K_out,), "b_project",
                                                                                                dtype)
    re, rei = te.reduce_axis(E // b, "re"), te.reduce_axis(b, "rei")
    p_acc = te.compute((N, K_out // b, OHp, OWp, b), lambda n, k, y, x, ki: te.sum(
        dw[n, re, y, x, rei] * w_p[k, re * b + rei, 0, 0, ki], axis=[re, rei]), name="project_acc")

    def project(n, k, y, x, ki):
        v = p_acc[n, k, y, x, ki] + b_p[k * b + ki]
        return v + data[n, k, y, x, ki] if residual else v
    out = te.compute((N, K_out // b, OH, OW, b), project, name="mbconv")
    return [*inputs, w_d, b_d, w_p, b_p, out]


def reference(data, *weights, C, E, K_out, layout, expand=True, stride=1, residual=False, **_):
    """numpy, in float64: the three layers one after the other."""
    b = block_of(layout)
    x = layouts.to_nchw(data, b).astype(np.float64)
    weights = [w.astype(np.float64) for w in weights]
    if expand:
        w_e, b_e, *weights = weights
        e = np.tensordot(layouts.conv_weight_oihw(w_e, b)[:, :, 0, 0], x, axes=([1], [1])).transpose(1, 0, 2, 3)
        e = np.clip(e + b_e[:, None, None], 0, 6)
    else:
        e = x
    w_d, b_d, w_p, b_p = weights
    win = windows(e, 3, 3, stride, 1, 1)
    d = np.clip(np.einsum("nchwrs,crs->nchw", win, layouts.depthwise_weight_nchw(w_d, b)[:, 0])
                + b_d[:, None, None], 0, 6)
    out = np.tensordot(layouts.conv_weight_oihw(w_p, b)[:, :, 0, 0], d, axes=([1], [1])).transpose(1, 0, 2, 3)
    out = out + b_p[:, None, None] + (x if residual else 0)
    return [layouts.to_blocked(out, b).astype(data.dtype, order="C")]


def flops(N, C, H, W, E, K_out, expand=True, stride=1, **_):
    OH, OW = out_size(H, 3, stride, 1, 1), out_size(W, 3, stride, 1, 1)
    return 2 * N * (H * W * C * E * expand + OH * OW * E * (9 + K_out))


mbconv = Op("mbconv", MBConvArgs, compute, reference, flops=flops,
            reduction_size=lambda C, E, expand=True, **_: C * expand + 9 + E, generated=False)
