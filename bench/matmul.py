"""Tune matmul M=N=K=1024 float32 on this CPU and compare with numpy in the same run.

    python bench/matmul.py [--quick] [--trials N] [--model random] [--explorer random]

Resumes from its database (bench/results/matmul.db): rerunning skips what was
measured. The best config and numpy are then re-timed side by side, each in its
own process, alternating; the median and the spread are printed.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, machine_report, time_fn

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
    ap.add_argument("--db", default=os.path.join(os.path.dirname(__file__), "results", "matmul.db"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.db), exist_ok=True)
    trials = 32 if a.quick else a.trials
    print(machine_report())

    from tunekit.recipe.model import Recipe
    from tunekit.tuning.progress import TuneProgress
    from tunekit.tuning.tuner import Tuner
    recipe = Recipe.from_dict({
        "target": {"name": "x86"},
        "tasks": [{"op": "matmul", "args": {"M": N, "N": N, "K": N}}],
        "model": {"name": a.model}, "explorer": {"name": a.explorer},
        "tuning": {"trials": trials, "seed": 0},
        "database": {"path": a.db},
    }, source="bench/matmul.py")
    states = Tuner(recipe, TuneProgress()).run()
    st = states[0]
    print(f"tuning: {st.done} trials this run, {len(st.trials)} known, best {st.best_gflops:.1f} GFLOPS "
          f"during tuning; tuner {st.fit_s + st.propose_s:.1f} s, measuring {st.measure_s:.1f} s")

    res = alternate({"numpy": (numpy_side, (N,)), "tunekit": (tunekit_side, (N, a.db))})
    print(f"\nmatmul {N}x{N}x{N} float32, median of 3 alternating rounds x 5 repeats (min-max):")
    for name, (med, lo, hi) in res.items():
        print(f"  {name:8s} {FLOPS / med / 1e9:7.1f} GFLOPS  ({FLOPS / hi / 1e9:.1f}-{FLOPS / lo / 1e9:.1f})")
    print(f"  ratio tunekit/numpy: {res['numpy'][0] / res['tunekit'][0]:.2f}")


if __name__ == "__main__":
    main()
