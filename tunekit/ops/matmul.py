"""matmul (dense): A[M, K] x B[K, N] = C[M, N], with an optional fused epilogue
(a bias per column n, a residual [M, N], relu/relu6: `tunekit.ops.epilogue`)."""
from __future__ import annotations

import numpy as np

from .. import te
from . import epilogue
from .epilogue import EpilogueArgs, fused, has_epilogue
from .op import Op, OpArgs, Size


class MatmulArgs(OpArgs, EpilogueArgs):
    M: Size
    N: Size
    K: Size


def compute(M: int, N: int, K: int, dtype: str = "float32", **epi):
    A = te.placeholder((M, K), "A", dtype)
    B = te.placeholder((K, N), "B", dtype)
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C_acc" if has_epilogue(epi) else "C")
    return [A, B, *fused(C, N, dtype, epi, "C")]


def reference(A, B, *extra, bias=False, residual=False, activation="none", **_):
    if not (bias or residual or activation != "none"):
        return [A @ B]
    return [epilogue.reference(A.astype(np.float64) @ B, extra, bias, residual, activation).astype(A.dtype)]


matmul = Op("matmul", MatmulArgs, compute, reference,
            flops=lambda M, N, K, **_: 2 * M * N * K, reduction_size=lambda K, **_: K)
