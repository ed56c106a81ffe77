"""matmul (dense): A[M, K] x B[K, N] = C[M, N]."""
from __future__ import annotations

from .. import te
from .op import Op, OpArgs, Size


class MatmulArgs(OpArgs):
    M: Size
    N: Size
    K: Size


def compute(M: int, N: int, K: int, dtype: str = "float32"):
    A = te.placeholder((M, K), "A", dtype)
    B = te.placeholder((K, N), "B", dtype)
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def reference(A, B, **args):
    return [A @ B]


matmul = Op("matmul", MatmulArgs, compute, reference,
            flops=lambda M, N, K, **_: 2 * M * N * K, reduction_size=lambda K, **_: K)
