"""Plausibility of bench/common.py's FMA peak: no real matmul may beat it, and it is above a sane floor."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite.binding")
# bench/ is not a package; on sys.path its spawned processes can import `common` too
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import common


def _matmul_gflops(n: int = 1024, seconds: float = 1.0) -> float:
    """Returns numpy's (BLAS, all threads) best float32 `A @ B` rate on n x n, in GFLOPS."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def test_fma_peak_bounds_a_fast_matmul():
    # two rates timed at different moments differ as other processes come and go (one FMA peak taken
    # while the machine was busy, a matmul just after, when it was not): each is the best of three
    # samples taken in turn, so that a quiet moment serves both; a peak wrong by a core or a factor of
    # lanes is below the matmul in every sample
    samples = [(common.fma_peak(seconds=0.2, rounds=2), _matmul_gflops(seconds=0.3)) for _ in range(3)]
    peak, matmul = max(p for p, _ in samples), max(m for _, m in samples)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cpu, lanes, chains = common._peak_shape()
    print(f"\nFMA peak {peak:.0f} GFLOPS ({common.cpu_model()}, {cpu}, {lanes} lanes, {chains} chains, "
          f"{cores} cores); numpy 1024 matmul {matmul:.0f} GFLOPS")
    assert peak > cores, f"FMA peak {peak:.1f} GFLOPS is below 1 GFLOPS per core"
    assert matmul <= 1.1 * peak, f"numpy matmul {matmul:.0f} GFLOPS beats the FMA peak {peak:.0f} (all cores?)"
