"""dense (a fully connected layer): data[M, K] x weight[N, K]^T = out[M, N], the weights
stored [out features, in features] as ONNX Gemm (transB=1) and PyTorch's Linear keep
them, with an optional fused epilogue (a bias per output feature n, a residual
[M, N], relu/relu6: `tunekit.ops.epilogue`). One stage, "dense" (with an epilogue:
"dense_acc" feeding it)."""
from __future__ import annotations

import numpy as np

from .. import te
from . import epilogue
from .epilogue import EpilogueArgs, fused, has_epilogue
from .op import Op, OpArgs, Size


class DenseArgs(OpArgs, EpilogueArgs):
    M: Size
    N: Size
    K: Size


def compute(M: int, N: int, K: int, dtype: str = "float32", **epi):
    data = te.placeholder((M, K), "data", dtype)
    weight = te.placeholder((N, K), "weight", dtype)
    k = te.reduce_axis(K, "k")
    out = te.compute((M, N), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k),
                     name="dense_acc" if has_epilogue(epi) else "dense")
    return [data, weight, *fused(out, N, dtype, epi, "dense")]


def reference(data, weight, *extra, bias=False, residual=False, activation="none", **_):
    out = data.astype(np.float64) @ weight.T.astype(np.float64)
    return [epilogue.reference(out, extra, bias, residual, activation).astype(data.dtype)]


dense = Op("dense", DenseArgs, compute, reference, flops=lambda M, N, K, **_: 2 * M * N * K,
           reduction_size=lambda K, **_: K)
