"""qmatmul: the int8 matrix product of 8-bit inference on the dot instruction (`te.dot4_u8s8`,
VNNI's vpdpbusd): uint8 data A [M, K], less its zero point a0 (a uint8 scalar, given at run
time: a dynamic quantization's), times int8 weights B [K, N] (zero point 0), accumulated in
int32, then either kept or requantized to 8 bits:

    acc[m, n] = sum_k (A[m, k] - a0) * B[k, n] = sum_k A[m, k] * B[k, n] - a0 * sums[n]   ("int32")
    out[m, n] = saturate(round(acc[m, n] * scale[n]) + zero)           (out_dtype "int8"/"uint8")

with sums[n] = sum_k B[k, n], a constant of the weights.

K is a multiple of 4: the kernel reads A as int32 [M, K/4], four k of a row per int32 (the
same bytes), and B in the instruction's layout, int32 [K/4, N], the four k of a column per
int32 (`pack_weights`, done once for constant weights). Stages "qmm" (the product) and
"qmm_out"."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .. import ir, te
from ..topi.quantize import RANGES, quantized
from .op import Op, OpArgs, Size


class QmatmulArgs(OpArgs):
    M: Size
    N: Size
    K: Size
    dtype: Literal["uint8"] = Field("uint8", description="The data's type (unsigned: the dot instruction's).")
    out_dtype: Literal["int32", "int8", "uint8"] = Field("int32", description="int32: the accumulator plus the "
                                                         "bias; int8 or uint8: requantized with `scale` and `zero`")
    zero: int = Field(0, ge=-128, le=255, description="The output's zero point (requantized outputs)")

    @model_validator(mode="after")
    def _check_k(self):
        if self.K % 4:
            raise ValueError(f"K = {self.K} is not a multiple of 4 (the dot instruction takes four k at once)")
        if self.out_dtype != "int32" and not RANGES[self.out_dtype][0] <= self.zero <= RANGES[self.out_dtype][1]:
            raise ValueError(f"zero {self.zero} is outside the range of {self.out_dtype}")
        return self


def compute(M: int, N: int, K: int, dtype: str = "uint8", out_dtype: str = "int32", zero: int = 0):
    A = te.placeholder((M, K // 4), "A", "int32")
    B = te.placeholder((K // 4, N), "B", "int32")
    sums, a0 = te.placeholder((N,), "sums", "int32"), te.placeholder((), "a0", "uint8")
    k = te.reduce_axis(K // 4, "k")
    acc = te.compute((M, N), lambda i, j: te.sum(te.dot4_u8s8(A[i, k], B[k, j]), axis=k), name="qmm")
    less = lambda i, j: acc[i, j] - ir.cast(a0[()], "int32") * sums[j]   # the zero point's part
    if out_dtype == "int32":
        return [A, B, sums, a0, te.compute((M, N), less, name="qmm_out")]
    scale = te.placeholder((N,), "scale", "float32")
    out = te.compute((M, N), lambda i, j: quantized(ir.cast(less(i, j), "float32") * scale[j],
                                                    ir.const(zero, "int32"), out_dtype), name="qmm_out")
    return [A, B, sums, a0, scale, out]


def pack_weights(b: np.ndarray) -> np.ndarray:
    """numpy: int8 weights [K, N] in the instruction's layout, int32 [K/4, N] (the four k of a column)."""
    K, N = b.shape
    return np.ascontiguousarray(b.astype(np.int8).reshape(K // 4, 4, N).transpose(0, 2, 1)).view(np.int32)[..., 0]


def unpack(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy: A int32 [M, K/4] and B int32 [K/4, N] as uint8 [M, K] and int8 [K, N]."""
    a8 = np.ascontiguousarray(a).view(np.uint8).reshape(a.shape[0], -1)
    b8 = np.ascontiguousarray(b)[..., None].view(np.int8).reshape(b.shape[0], b.shape[1], 4)
    return a8, b8.transpose(0, 2, 1).reshape(-1, b.shape[1])


def reference(A, B, sums, a0, scale=None, out_dtype="int32", zero=0, **_):
    a8, b8 = unpack(A, B)
    acc = a8.astype(np.int64) @ b8.astype(np.int64) - int(a0) * sums.astype(np.int64)
    if out_dtype == "int32":
        return [acc.astype(np.int32)]
    value = np.rint(acc.astype(np.float32) * scale.astype(np.float32))
    return [np.clip(value + zero, *RANGES[out_dtype]).astype(out_dtype)]


qmatmul = Op("qmatmul", QmatmulArgs, compute, reference, flops=lambda M, N, K, **_: 2 * M * N * K,
             reduction_size=lambda K, **_: K)
