"""How repeatable tunekit's measurements are on this machine: the best known
matmul-1024 config (from bench/results/cpu.db or --db) measured again and again
by tunekit's own runner (isolated process, timing lock, re-timing of noisy sets).

    python bench/repeat.py [--times 8] [--flush]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import machine_report

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--times", type=int, default=8)
    ap.add_argument("--flush", action="store_true", help="evict caches before each timed repeat")
    ap.add_argument("--db", default=os.path.join(HERE, "results", "cpu.db"))
    a = ap.parse_args()
    print(machine_report())
    from tunekit.deploy.kernels import best_config
    from tunekit.measure.measurer import Measurer
    from tunekit.recipe.model import Recipe
    from tunekit.store.database import Database
    recipe = Recipe.from_dict({"target": "x86", "tasks": ["matmul-1024"],
                               "measure": {"flush_cache": a.flush, "cutoff": None}}, source="bench/repeat.py")
    db = Database(a.db, readonly=True)
    best = best_config(db, recipe.task_objects()[0], recipe.target.create())
    db.close()
    if best is None:
        sys.exit(f"{a.db}: no matmul-1024 record; run bench/cpu.py first")
    ts, index = best
    m = Measurer(ts.target, recipe.measure)
    try:
        trials = m.measure(ts, [index] * a.times)
    finally:
        m.close()
    meds = [t.cost for t in trials]
    fl = ts.task.flops
    print(f"\nconfig {index} measured {a.times} times (each: {recipe.measure.repeat} repeats, "
          f"re-timed while they spread > {recipe.measure.max_spread:.0%}):")
    for t in trials:
        spread = (max(t.costs) - min(t.costs)) / t.cost
        print(f"  {fl / t.cost / 1e9:7.1f} GFLOPS  (repeats spread {spread:.1%})")
    mid = statistics.median(meds)
    print(f"across measurements: median {fl / mid / 1e9:.1f} GFLOPS, spread (max-min)/median "
          f"{(max(meds) - min(meds)) / mid:.1%}, stdev/median {statistics.stdev(meds) / mid:.1%}")


if __name__ == "__main__":
    main()
