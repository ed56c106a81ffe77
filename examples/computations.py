"""Computations of a transformer that no op of tunekit's library computes, written with
`tunekit.te` for `tunekit.Task.from_compute` (bench/auto.py tunes them; the tests check
their generated schedules)."""
from __future__ import annotations

from tunekit import te


def softmax(M, N):
    """Softmax over each row of x[M, N] (max subtracted first, as every library does)."""
    x = te.placeholder((M, N), "x")
    k, k2 = te.reduce_axis(N, "k"), te.reduce_axis(N, "k2")
    top = te.compute((M,), lambda i: te.max(x[i, k], axis=k), name="row_max")
    e = te.compute((M, N), lambda i, j: te.exp(x[i, j] - top[i]), name="exp")
    total = te.compute((M,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    return [x, te.compute((M, N), lambda i, j: e[i, j] / total[i], name="softmax")]


def layer_norm(M, N, eps=1e-5):
    """Layer norm of each row of x[M, N], scaled by gamma[N] and shifted by beta[N]."""
    x, gamma, beta = te.placeholder((M, N), "x"), te.placeholder((N,), "gamma"), te.placeholder((N,), "beta")
    k, k2 = te.reduce_axis(N, "k"), te.reduce_axis(N, "k2")
    mean = te.compute((M,), lambda i: te.sum(x[i, k] * (1.0 / N), axis=k), name="mean")
    d = te.compute((M, N), lambda i, j: x[i, j] - mean[i], name="centred")
    var = te.compute((M,), lambda i: te.sum(d[i, k2] * d[i, k2] * (1.0 / N), axis=k2), name="var")
    y = te.compute((M, N), lambda i, j: d[i, j] / te.sqrt(var[i] + eps) * gamma[j] + beta[j], name="layer_norm")
    return [x, gamma, beta, y]


def conv1d(N, C, L, K_out, R, stride=1):
    """1-D convolution of x[N, C, L] by w[K_out, C, R] (no padding), as a speech or sequence model runs it."""
    x, w = te.placeholder((N, C, L), "x"), te.placeholder((K_out, C, R), "w")
    c, r = te.reduce_axis(C, "c"), te.reduce_axis(R, "r")
    out = (L - R) // stride + 1
    return [x, w, te.compute((N, K_out, out), lambda n, k, i: te.sum(x[n, c, i * stride + r] * w[k, c, r], axis=[c, r]),
                             name="conv1d")]


def attention_scores(B, H, S, D):
    """Scaled attention scores q[B, H, S, D] . kt[B, H, D, S] / sqrt(D): a batched matmul per head, the
    keys transposed as an exported transformer's graph transposes them before its MatMul."""
    q, kt = te.placeholder((B, H, S, D), "q"), te.placeholder((B, H, D, S), "kt")
    d = te.reduce_axis(D, "d")
    scale = 1.0 / D ** 0.5
    return [q, kt, te.compute((B, H, S, S), lambda b, h, i, j: te.sum(q[b, h, i, d] * kt[b, h, d, j], axis=d) * scale,
                              name="scores")]
