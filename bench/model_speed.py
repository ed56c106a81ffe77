"""Cost-model speed: training on 1000 trials and predicting 2000 candidates, for
each installed model, on NullTarget programs of matmul 720^3. The programs are
lowered first (reported apart); prediction is timed twice: on first sight of the
candidates (the model extracts its features from the lowered programs) and again
(features cached per config, as when annealing revisits configs).

    python bench/model_speed.py [--models treegru,xgboost,lightgbm]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import machine_report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="treegru,xgboost,lightgbm")
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--predict", type=int, default=2000)
    a = ap.parse_args()
    print(machine_report())
    import tunekit
    from tunekit import registry
    from tunekit.testing import NULL_PLUGIN_NAME, NullTarget, null_plugin, simulated_trials
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    ts = tunekit.Task("matmul", {"M": 720, "N": 720, "K": 720}, template="null-matmul").bind(NullTarget())
    idx = ts.space.sample(random.Random(0), a.train + a.predict)
    train, test = idx[:a.train], idx[a.train:]
    t0 = time.perf_counter()
    trials = simulated_trials(ts, train)
    cands = ts.candidates(test)
    for c in cands:
        _ = c.program   # accessing the property lowers the candidate, so that is timed here too
    print(f"{len(idx)} configs of a {ts.space.size}-config space lowered and simulated in "
          f"{time.perf_counter() - t0:.1f} s")
    for name in a.models.split(","):
        cls = registry().component("cost model", name)
        if cls.available():
            print(f"  {name}: unavailable ({cls.available()})")
            continue
        model = cls()
        t0 = time.perf_counter()
        model.fit(trials)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        model.predict(cands)                           # first call: also reads what the model needs
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        model.predict(cands)
        pred_s = time.perf_counter() - t0
        print(f"  {name:9s} fit on {len(trials)} trials {fit_s:6.2f} s;  predict {len(cands) / pred_s:9.0f} "
              f"candidates/s ({len(cands) / first_s:.0f}/s on first sight, reading their features)")

if __name__ == "__main__":
    main()
