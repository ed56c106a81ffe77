"""Shared benchmark plumbing: machine facts, side-by-side timing in fresh processes."""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time


def machine_report() -> str:
    """Load, cores and the BLAS kernel numpy will use (via threadpoolctl)."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [f"machine: {os.cpu_count()} cores, load average {load}",
             f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '<unset>')} "
             f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '<unset>')}"]
    try:
        import numpy as np
        from threadpoolctl import threadpool_info
        np.ones(1) @ np.ones(1)
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                lines.append(f"numpy BLAS: {info.get('internal_api')} {info.get('version')} "
                             f"kernel={info.get('architecture')} threads={info.get('num_threads')}")
    except ImportError:
        lines.append("numpy BLAS: (install threadpoolctl to see which kernel runs)")
    return "\n".join(lines)


def _child(fn, args, q):
    q.put(fn(*args))


def in_process(fn, *args):
    """Run fn(*args) in a fresh spawned process and return its result."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(fn, args, q))
    p.start()
    out = q.get()
    p.join()
    return out


def time_fn(fn, min_s: float = 0.2, repeat: int = 5) -> list[float]:
    """Seconds per call: `repeat` timings of enough calls to last `min_s` each."""
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, int(min_s / max(time.perf_counter() - t0, 1e-7)))
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return out


def alternate(sides: dict, rounds: int = 3) -> dict:
    """Time each side in its own process, alternating, `rounds` times.
    sides: name -> (fn, args) with fn returning a list of seconds."""
    got = {k: [] for k in sides}
    for _ in range(rounds):
        for name, (fn, args) in sides.items():
            got[name] += in_process(fn, *args)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in got.items()}
