"""conv2d_winograd: a 3x3, stride-1 conv2d computed by Winograd's F(m x m, 3 x 3)
(`tunekit.ops.winograd`) in a blocked layout, its weights transformed beforehand:
data [N, C/db, H, W, db] * U [alpha, alpha, K_out/b, C, b] = out [N, K_out/b, OH, OW, b]
(db: `data_layout`'s block, else the layout's). The args are conv2d's (R = S = 3,
stride 1, dilation 1, a blocked layout) plus `tile` = m; the fused epilogue is
conv2d's. A network's conv2d becomes one when its records say it runs faster
(`tunekit.graph.alternatives.winograd`); its weights are transformed once, at compile time.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .. import te
from . import conv2d, winograd
from . import layout as layouts
from .conv2d import Conv2dArgs, out_size
from .epilogue import fused, has_epilogue
from .layout import block_of
from .op import Op


class WinogradArgs(Conv2dArgs):
    tile: Literal[2, 4] = Field(2, description="m of F(m x m, 3 x 3): the side of the output tiles (2 or 4).")

    @model_validator(mode="after")
    def _check_winograd(self):
        if (self.R, self.S) != (3, 3) or self.stride != (1, 1) or self.dilation != (1, 1):
            raise ValueError(f"Winograd F({self.tile}x{self.tile}, 3x3) takes 3x3 kernels at stride 1 and dilation "
                             f"1 (got {self.R}x{self.S}, stride {self.stride}, dilation {self.dilation}); use conv2d")
        if not block_of(self.layout) or not block_of(self.data_layout or self.layout):
            raise ValueError('conv2d_winograd takes blocked layouts ("NCHW{b}c") for its data and output')
        return self


def tiles(H: int, W: int, padding, m: int) -> tuple[int, int]:
    """The output tiles (TH, TW) that cover the output."""
    ph, pw = conv2d.pair(padding)
    return -(-out_size(H, 3, 1, ph, 1) // m), -(-out_size(W, 3, 1, pw, 1) // m)


def compute(N: int, C: int, H: int, W: int, K_out: int, R: int = 3, S: int = 3, padding=0, tile: int = 2,
            stride=1, dilation=1, dtype: str = "float32", layout: str = "NCHW", data_layout: str | None = None,
            TW: int | None = None, transforms: bool = True, **epilogue):
    """The op's tensors. `TW` (for templates): compute that many tile columns, at least the
    output's (the rest on zero padding), so that a schedule's chunks of tiles divide them.
    `transforms` False: a placeholder for the transforms' stages, for the parameters alone."""
    m, (ph, pw) = tile, conv2d.pair(padding)
    b, db = block_of(layout), block_of(data_layout or layout)
    OH, OW = out_size(H, 3, 1, ph, 1), out_size(W, 3, 1, pw, 1)
    TH, tw = tiles(H, W, padding, m)
    TW = TW or tw
    data = layouts.placeholder(N, C, H, W, db, "data", dtype)
    U = te.placeholder((m + 2, m + 2, K_out // b, C, b), "weight", dtype)
    if transforms:
        pad = winograd.tile_pad(data, (ph, pw), TH * m + 2, TW * m + 2)
        Y = winograd.stages(pad, U, m, db, TH, TW)[2]
    else:
        Y = te.placeholder((N, K_out // b, TH, TW, m, m, b), "wino_out", dtype)
    out = te.compute((N, K_out // b, OH, OW, b), lambda n, k, y, x, ki: Y[n, k, y // m, x // m, y % m, x % m, ki],
                     name="conv_acc" if has_epilogue(epilogue) else "conv")
    return [data, U, *fused(out, K_out, dtype, epilogue, "conv", b)]


def reference(data, U, *extra, tile=2, layout="NCHW", **args):
    b = block_of(layout)
    w = layouts.conv_weight(winograd.weights_oihw(U, tile), b)
    return conv2d.reference(data, w, *extra, layout=layout, **args)


class WinogradOp(Op):
    """conv2d_winograd's Op: its random weights are transformed ones (a random U is not one)
    and its tolerance allows for the transforms' rounding on the data, no more."""

    def random_inputs(self, args: dict, rng: np.random.Generator) -> list[np.ndarray]:
        out = super().random_inputs(args, rng)
        a = self.Args(**args)
        b, dtype = block_of(a.layout), a.dtype
        w = rng.uniform(-1, 1, (a.K_out, a.C, 3, 3)).astype(dtype)
        out[1] = winograd.transform_weights(w, a.tile, b)
        return out

    def buffers(self, args: dict) -> list[tuple[str, tuple, str]]:
        # without the transforms' stages, whose expressions take milliseconds to build (planning a network
        # asks this of every variant it weighs)
        return [(t.name, tuple(t.shape), t.dtype) for t in self.compute(**args, transforms=False)]

    def tolerance(self, args: dict, inputs: list | None = None) -> tuple:
        """The rounding error bound of the transforms and products on `inputs` (required), and the
        epilogue's few roundings relative to the output: no more, so a wrong config does not pass."""
        if inputs is None:
            raise ValueError("conv2d_winograd's tolerance bounds the transforms' error on the inputs: pass them")
        a = self.Args(**args)
        bound = winograd.error_bound(inputs[0], inputs[1], a.tile, conv2d.pair(a.padding), block_of(a.layout))
        return 4 * float(np.finfo(a.dtype).eps), bound


conv2d_winograd = WinogradOp("conv2d_winograd", WinogradArgs, compute, reference, flops=conv2d.flops,
                             reduction_size=lambda C, **_: C * 9, generated=False)
