"""Tune matmul M=N=K=1024 float32 on this CPU and compare with numpy in the same run.

    python bench/matmul.py [--quick] [--trials N] [--model random] [--explorer random]

Resumes from its database (bench/results/matmul.db): rerunning skips what was
measured. The task is tuned over every template that serves it; the best config
of any and numpy are then re-timed side by side, each in its own process, rounds
alternating in rotating order; the median of the rounds and their spread are printed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import (
    alternate,
    in_process,
    load_now,
    machine_facts,
    machine_report,
    numpy_blas_report,
    per_task,
    time_fn,
    write_result,
)

N = 1024
FLOPS = 2 * N ** 3


def numpy_side(n):
    import numpy as np
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    c = np.empty((n, n), np.float32)
    return time_fn(lambda: np.matmul(a, b, out=c))


def tunekit_side(n, db):
    import numpy as np

    import tunekit
    args = dict(M=n, N=n, K=n, dtype="float32")
    with tunekit.apply_history_best(db):
        k = tunekit.build("matmul", args, target="x86")
    rng = np.random.default_rng(0)
    from tunekit.memory import arena
    a, b, c = arena([rng.random((n, n), np.float32), rng.random((n, n), np.float32),
                     np.empty((n, n), np.float32)])   # as tuning timed it
    k(a, b, c)
    assert np.allclose(c, a @ b, rtol=1e-3, atol=1e-2), "tuned kernel is wrong"
    return time_fn(lambda: k(a, b, c))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="32 trials instead of the default")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--model", default="random")
    ap.add_argument("--explorer", default="random")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per side")
    ap.add_argument("--db", default=os.path.join(os.path.dirname(__file__), "results", "matmul.db"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.db), exist_ok=True)
    trials = 32 if a.quick else a.trials
    started = time.time()
    facts = machine_facts()
    print(machine_report(facts))

    import tunekit
    # the task is tuned over every template that serves it (the best of any is the task's)
    states = tunekit.tune([{"op": "matmul", "args": {"M": N, "N": N, "K": N}}], target="x86", model=a.model,
                          explorer=a.explorer, trials=trials, seed=0, database=a.db, progress=True)
    (t,) = per_task(states)
    print(f"tuning: {t.done} trials this run, {len(t.trials)} known, over templates "
          + ", ".join(f"{st.ts.template.name} ({len(st.trials)} trials, best {st.best_gflops:.1f} GFLOPS)"
                      for st in t.states)
          + f"; best {t.best_gflops:.1f} GFLOPS ({t.template}) during tuning; tuner {t.tuner_s:.1f} s, "
          f"measuring {t.measure_s:.1f} s")

    print(f"baseline: {in_process(numpy_blas_report)}")
    res = alternate({"numpy": (numpy_side, (N,)), "tunekit": (tunekit_side, (N, a.db))}, a.rounds)
    print(f"\nmatmul {N}x{N}x{N} float32, median of {a.rounds} rotating rounds (min-max):")
    for name, (med, lo, hi) in res.items():
        print(f"  {name:8s} {FLOPS / med / 1e9:7.1f} GFLOPS  ({FLOPS / hi / 1e9:.1f}-{FLOPS / lo / 1e9:.1f})")
    print(f"  ratio tunekit/numpy: {res['numpy'][0] / res['tunekit'][0]:.2f}")
    print(f"machine load now {load_now()}")
    facts["baselines"] = [f"numpy: {in_process(numpy_blas_report)}"]
    figures = {"flops": FLOPS, "rounds": a.rounds, "model": a.model, "explorer": a.explorer,
               "trials_per_task": trials, "trials_this_run": t.done, "trials_known": len(t.trials),
               "from_scratch": t.done == len(t.trials), "template": t.template,
               "seconds": {k: v.as_dict() for k, v in res.items()}}
    print(f"figures: {write_result('matmul', facts, figures, started)}")

if __name__ == "__main__":
    main()
