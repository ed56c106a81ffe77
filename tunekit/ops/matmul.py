"""matmul (dense): A[M, K] x B[K, N] = C[M, N], with an optional fused epilogue
(a bias per column n, a residual [M, N], relu/relu6: `tunekit.ops.epilogue`). B may be
given in column panels (`b_panel`): constant weights are packed so when a model is
compiled (`tunekit.graph.panels`), not by the kernel on every call."""
from __future__ import annotations

import numpy as np
from pydantic import Field

from .. import te
from . import epilogue
from .epilogue import EpilogueArgs, fused, has_epilogue
from .layout import from_panels
from .op import Op, OpArgs, Size


class MatmulArgs(OpArgs, EpilogueArgs):
    M: Size
    N: Size
    K: Size
    b_panel: int = Field(0, ge=0, le=1024, description="0: B is [K, N]; nv: B is in column panels of nv, "
                         "[ceil(N / nv), K, nv], the last zero-padded (`tunekit.ops.layout.panels`)")


def compute(M: int, N: int, K: int, dtype: str = "float32", b_panel: int = 0, **epi):
    A = te.placeholder((M, K), "A", dtype)
    k = te.reduce_axis(K, "k")
    if b_panel:
        B = te.placeholder((-(-N // b_panel), K, b_panel), "B", dtype)

        def b(kk, j):
            return B[j // b_panel, kk, j % b_panel]
    else:
        B = te.placeholder((K, N), "B", dtype)

        def b(kk, j):
            return B[kk, j]
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * b(k, j), axis=k), name="C_acc" if has_epilogue(epi) else "C")
    return [A, B, *fused(C, N, dtype, epi, "C")]


def reference(A, B, *extra, bias=False, residual=False, activation="none", b_panel=0, N=0, **_):
    if b_panel:
        B = from_panels(B, N)
    if not (bias or residual or activation != "none"):
        return [A @ B]
    return [epilogue.reference(A.astype(np.float64) @ B, extra, bias, residual, activation).astype(A.dtype)]


matmul = Op("matmul", MatmulArgs, compute, reference,
            flops=lambda M, N, K, **_: 2 * M * N * K, reduction_size=lambda K, **_: K)
