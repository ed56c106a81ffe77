"""bmatmul: the bfloat16 product of `precision="bf16"`: data A [M, K] and weights B [K, N] rounded
to bfloat16 and multiplied with float32 accumulation (`te.dot2_bf16`: AVX512-BF16's vdpbf16ps,
AMX's tdpbf16ps), with matmul's fused epilogue (a bias per column, a residual, relu/relu6:
`tunekit.ops.epilogue`).

K is even: the kernel reads A as int32 [M, K/2], two k of a row per int32 (`te.bf16x2`, made from
the float32 data by whatever computes it), and B as int32 [K/2, N], two k of a column per int32
(`pack_weights`, done once for constant weights). Stage "bmm" is the product."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import model_validator

from .. import te
from ..ir.interp import bf16_halves, bf16x2
from . import epilogue
from .epilogue import EpilogueArgs, fused, has_epilogue
from .op import Op, OpArgs, Size


class BmatmulArgs(OpArgs, EpilogueArgs):
    M: Size
    N: Size
    K: Size

    @model_validator(mode="after")
    def _check_k(self):
        if self.K % 2:
            raise ValueError(f"K = {self.K} is odd (the bfloat16 product takes two k at once)")
        return self


def compute(M: int, N: int, K: int, dtype: str = "float32", **epi):
    A = te.placeholder((M, K // 2), "A", "int32")
    B = te.placeholder((K // 2, N), "B", "int32")
    k = te.reduce_axis(K // 2, "k")
    C = te.compute((M, N), lambda i, j: te.sum(te.dot2_bf16(A[i, k], B[k, j]), axis=k),
                   name="bmm_acc" if has_epilogue(epi) else "bmm")
    return [A, B, *fused(C, N, dtype, epi, "bmm")]


def pack_data(a: np.ndarray) -> np.ndarray:
    """numpy: float32 data [M, K] as the op reads it, int32 [M, K/2] (two bfloat16 of a row)."""
    return bf16x2(a[:, 0::2], a[:, 1::2])


def pack_weights(b: np.ndarray) -> np.ndarray:
    """numpy: float32 weights [K, N] in the instruction's layout, int32 [K/2, N] (two k of a column)."""
    return bf16x2(b[0::2], b[1::2])


def unpack(pairs: np.ndarray, axis: int) -> np.ndarray:
    """numpy: int32 pairs as the float32 values they hold, their two k interleaved along `axis`."""
    return np.stack(bf16_halves(pairs), axis=axis + 1).reshape(
        *(d * (2 if i == axis else 1) for i, d in enumerate(pairs.shape)))


def reference(A, B, *extra, bias=False, residual=False, activation="none", **_):
    out = unpack(A, 1).astype(np.float64) @ unpack(B, 0)
    return [epilogue.reference(out, extra, bias, residual, activation).astype(np.float32)]


@dataclass
class PairsOp(Op):
    """An op of bfloat16 pairs: its random inputs at `pairs` (their indices) are pairs of uniform values
    (random bits are NaNs)."""
    pairs: tuple[int, ...] = ()

    def random_inputs(self, args: dict, rng: np.random.Generator) -> list[np.ndarray]:
        out = super().random_inputs(args, rng)
        for i in self.pairs:
            out[i] = bf16x2(*(rng.uniform(-1, 1, out[i].shape).astype(np.float32) for _ in "lh"))
        return out


bmatmul = PairsOp("bmatmul", BmatmulArgs, compute, reference, flops=lambda M, N, K, **_: 2 * M * N * K,
                  reduction_size=lambda K, **_: K, pairs=(0, 1))
