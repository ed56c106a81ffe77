"""batch_matmul: A[B, M, K] x W[B, K, N] = C[B, M, N] (one matmul per batch index)."""
from __future__ import annotations

from .. import te
from .op import Op, OpArgs, Size


class BatchMatmulArgs(OpArgs):
    B: Size
    M: Size
    N: Size
    K: Size


def compute(B: int, M: int, N: int, K: int, dtype: str = "float32"):
    A = te.placeholder((B, M, K), "A", dtype)
    W = te.placeholder((B, K, N), "W", dtype)
    k = te.reduce_axis(K, "k")
    C = te.compute((B, M, N), lambda b, i, j: te.sum(A[b, i, k] * W[b, k, j], axis=k), name="C")
    return [A, W, C]


def reference(A, W, **args):
    return [A @ W]


batch_matmul = Op("batch_matmul", BatchMatmulArgs, compute, reference,
                  flops=lambda B, M, N, K, **_: 2 * B * M * N * K, reduction_size=lambda K, **_: K)
