"""A downstream compiler's use of tunekit: tune an operator of its own, written with
tensor expressions (no op to register), then build it from the records and run it.

The operator fuses a matmul, a bias and GELU (its tanh approximation: the loop IR has
tanh but no erf). It is tuned through the generated template `auto`; the records are
keyed by the structure of the computation, so an equal computation elsewhere, however
named, gets the same kernel.

    python examples/downstream.py [--trials 8] [--database downstream.db]
"""
import argparse
import time

import numpy as np

import tunekit
from tunekit import te


def gelu_tanh(x):
    return 0.5 * x * (1.0 + te.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def fused(M, N, K):
    A = te.placeholder((M, K), "A")
    W = te.placeholder((K, N), "W")
    b = te.placeholder((N,), "b")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    out = te.compute((M, N), lambda i, j: gelu_tanh(C[i, j] + b[j]), name="out")
    return [A, W, b, out]   # kernel parameter order: inputs, then outputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=8, help="configs to measure (default 8)")
    p.add_argument("--database", default="downstream.db", help="where the records go (default downstream.db)")
    opts = p.parse_args()
    M, N, K = 128, 256, 64
    task = tunekit.Task.from_compute(fused, dict(M=M, N=N, K=K), name="my_fused_op", template="auto")
    tunekit.tune([task], target="x86", trials=opts.trials, database=opts.database)
    with tunekit.apply_history_best(opts.database):
        kernel = tunekit.build(task, target="x86")

    rng = np.random.default_rng(0)
    A, W, b, out = (tunekit.empty(s, "float32") for s in ((M, K), (K, N), (N,), (M, N)))   # 64-byte aligned
    A[...], W[...], b[...] = rng.standard_normal((M, K)), rng.standard_normal((K, N)), rng.standard_normal(N)
    kernel(A, W, b, out)
    x = A.astype(np.float64) @ W + b
    expected = 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)

    runs, t0 = 0, time.perf_counter()
    while runs < 10 or time.perf_counter() - t0 < 0.2:
        kernel(A, W, b, out)
        runs += 1
    seconds = (time.perf_counter() - t0) / runs
    print(f"{kernel}: {seconds * 1e6:.1f} us, {task.flops / seconds / 1e9:.1f} GFLOPS, "
          f"max error vs numpy {float(np.abs(out - expected).max()):.2e}")


if __name__ == "__main__":
    main()
