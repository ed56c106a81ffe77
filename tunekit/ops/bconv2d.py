"""bconv2d: the bfloat16 convolution of `precision="bf16"`: conv2d's float32 data and output in a
blocked layout (`tunekit.ops.layout`), the data rounded to bfloat16 in pairs of neighbouring
channels (`pairs`: stage "pairs", padded), the weights [K_out/b, C/2, R, S, b] int32, two input
channels of an output channel per int32 (`pack_weights`, done once), float32 accumulation
(`te.dot2_bf16`: AVX512-BF16's vdpbf16ps), with conv2d's fused epilogue.

C is even, and so is the data's own block (pairs never straddle two blocks)."""
from __future__ import annotations

import numpy as np
from pydantic import model_validator

from .. import te
from ..ir.interp import bf16_halves, bf16x2
from . import conv2d
from . import layout as layouts
from .bmatmul import PairsOp, unpack
from .conv2d import Conv2dArgs, in_input, out_size, pair
from .epilogue import fused, has_epilogue
from .layout import block_of


class Bconv2dArgs(Conv2dArgs):
    @model_validator(mode="after")
    def _check_pairs(self):
        db = block_of(self.data_layout or self.layout)
        if not block_of(self.layout):
            raise ValueError("bconv2d takes a blocked layout (\"NCHW{b}c\"), not NCHW")
        if self.C % 2 or db % 2:
            raise ValueError(f"C = {self.C} in blocks of {db or self.C}: the bfloat16 product takes channels "
                             "in pairs (an even C and an even data block)")
        return self


def pairs(data: te.Tensor, db: int, icb: int, Hp: int, Wp: int, ph: int, pw: int, name: str = "pairs") -> te.Tensor:
    """[N, C/2/icb, Hp, Wp, icb] int32: float32 `data` (NCHW, or in blocks of `db`, then icb = db/2)
    zero-padded to Hp x Wp, channels 2c and 2c + 1 rounded to one bfloat16 pair (`te.bf16x2`)."""
    N, H, W = data.shape[0], data.shape[2], data.shape[3]
    C = data.shape[1] * (db or 1)

    def pair_at(n, c, h, w, ci):
        ch = c * icb + ci
        at = [(n, c, h - ph, w - pw, 2 * ci + e) if db else (n, 2 * ch + e, h - ph, w - pw) for e in (0, 1)]
        return te.if_then_else(in_input(h, w, H, W, ph, pw, Hp, Wp), te.bf16x2(data[at[0]], data[at[1]]), 0)
    return te.compute((N, C // 2 // icb, Hp, Wp, icb), pair_at, name=name)


def compute(N: int, C: int, H: int, W: int, K_out: int, R: int, S: int, stride=1, padding=0, dilation=1,
            dtype: str = "float32", layout: str = "NCHW", data_layout: str | None = None, **epilogue):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    b, db = block_of(layout), block_of(data_layout or layout)
    icb = db // 2 or 1
    data = layouts.placeholder(N, C, H, W, db, "data", dtype)
    weight = te.placeholder((K_out // b, C // 2, R, S, b), "weight", "int32")
    P = pairs(data, db, icb, H + 2 * ph, W + 2 * pw, ph, pw)
    rc, ry, rx = te.reduce_axis(C // 2, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    acc = te.compute(layouts.shape(N, K_out, OH, OW, b), lambda n, k, y, x, ki: te.sum(te.dot2_bf16(
        P[n, rc // icb, y * sh + ry * dh, x * sw + rx * dw, rc % icb], weight[k, rc, ry, rx, ki]), axis=[rc, ry, rx]),
        name="bconv_acc" if has_epilogue(epilogue) else "bconv")
    return [data, weight, *fused(acc, K_out, dtype, epilogue, "bconv", b)]


def pack_weights(w: np.ndarray) -> np.ndarray:
    """numpy: blocked float32 conv2d weights [K_out/b, C, R, S, b] as bconv2d's [K_out/b, C/2, R, S, b]."""
    return bf16x2(w[:, 0::2], w[:, 1::2])


def rounded(x: np.ndarray) -> np.ndarray:
    """numpy: float32 `x` rounded to bfloat16 (to nearest, ties to even), as float32."""
    return bf16_halves(bf16x2(x, x))[0]


def reference(data, weight, *extra, **args):
    return conv2d.reference(rounded(data), unpack(weight, 1), *extra, **args)


bconv2d = PairsOp("bconv2d", Bconv2dArgs, compute, reference, flops=conv2d.flops,
                  reduction_size=lambda C, R, S, **_: C * R * S, pairs=(1,))
