"""Replay searches on a fully measured space: is the learned search ahead of random search when
every config has one fixed time? (step 20's diagnosis: on a shared machine the same config timed
in two runs differs by more than the top of a space is wide, so measured searches are partly luck.)

    python bench/replay.py [--layers resnet18.C10,resnet18.C11] [--seeds 8] [--trials 64]

Each layer's every config is timed once, in its database under bench/results/replay/ (a rerun
resumes). Then each method searches the table instead of the machine: the tuner's own proposal
step (`tunekit.tuning.tuner.propose_batch`: the untuned default, epsilon-greedy random picks;
batches of 8) with the real explorer and cost model, each "measured" config read from the table.
It prints, per method, the median fraction of the space's best found at 8/16/32/64 trials and
the trials to reach random search's median 64-trial best, and writes results/replay.json.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from contextlib import closing

sys.path.insert(0, os.path.dirname(__file__))
from common import RESULTS, machine_facts, machine_report, write_result
from search import METHODS, trials_to_reach

SIZES = {"resnet18.C10": 1344, "resnet18.C11": 224, "resnet18.C12": 1344}
REPLAYED = ("random", "xgb-rank-relation+annealing", "xgb-pretrained+annealing")


def table_of(layer: str, out: str) -> tuple:
    """(the layer's TaskSpace, its valid configs' seconds by index; inf: failed), timing any not timed yet."""
    import tunekit
    from tunekit.plugin.registry import make_component
    from tunekit.store.database import Database
    from tunekit.tuning.dataset import current_trials
    db = os.path.join(out, f"{layer}.db")
    tunekit.tune([{"workload": layer, "template": "nchwc"}], target="x86", model="random", explorer="grid",
                 trials=SIZES[layer], database=db, tuning={"batch_size": 16})
    target = make_component("target", "x86")
    with closing(Database(db, readonly=True)) as d:
        ((name, device),) = d.devices()
        rows = list(current_trials(d.history(name, device, set(), limit=None), target))
    return rows[0][1], {t.index: t.cost if t.ok else float("inf") for _, _, t in rows}


def replay(ts, table: dict, label: str, seed: int, trials: int, batch: int = 8, eps: float = 0.05) -> list[float]:
    """The best speed (1 / seconds) after each trial of one search of `table`, as the tuner runs it."""
    from tunekit.recipe.components import component_spec
    from tunekit.records import Trial
    from tunekit.tuning.tuner import propose_batch
    model_spec, explorer_spec = METHODS[label]
    rng = random.Random(f"{seed}:{ts.task.key}")   # as the tuner seeds a task
    ts.measured = set()
    model, explorer = (component_spec(kind, "", spec).create()
                       for kind, spec in (("cost model", model_spec), ("explorer", explorer_spec)))
    model.start(ts)
    explorer.start(ts, model, rng)
    done, curve, best, default = [], [], float("inf"), ts.space.default()
    while len(done) < trials:
        picks = propose_batch(ts, rng, min(batch, trials - len(done)), eps, default, explorer.propose,
                             lambda idx: model.predict(ts.candidates(idx)))
        new = []
        for i in picks:
            ok = table[i] < float("inf")
            t = Trial(index=i, config={}, costs=[table[i]] if ok else [], error=None if ok else "run error")
            t.candidate = ts.candidates([i])[0]
            ts.measured.add(i)
            new.append(t)
            best = min(best, table[i])
            curve.append(1.0 / best)
        done += new
        model.fit(done)
        explorer.observe(new)
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="resnet18.C10,resnet18.C11", help=f"of {', '.join(SIZES)}")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="resnet18.C11 only, 4 seeds")
    ap.add_argument("--out", default=os.path.join(RESULTS, "replay"))
    a = ap.parse_args()
    if a.quick:
        a.layers, a.seeds = "resnet18.C11", 4
    os.makedirs(a.out, exist_ok=True)
    facts, started = machine_facts(), time.time()
    print(machine_report(facts))
    marks, figures = [8, 16, 32, a.trials], {}
    for layer in a.layers.split(","):
        ts, table = table_of(layer, a.out)
        top = 1.0 / min(table.values())
        curves = {label: [replay(ts, table, label, s, a.trials) for s in range(a.seeds)] for label in REPLAYED}
        base = statistics.median(c[-1] for c in curves["random"])
        print(f"\n{layer} (nchwc): {sum(v < float('inf') for v in table.values())} valid configs timed once; "
              f"random search's median {a.trials}-trial best is {base / top:.3f} of the best")
        figures[layer] = {"configs": len(table), "random_best": base / top, "methods": {}}
        for label, runs in curves.items():
            reach = [trials_to_reach(c, base * (1 - 1e-9)) for c in runs]
            med = statistics.median_high([r or float("inf") for r in reach])
            at = {m: statistics.median(c[m - 1] for c in runs) / top for m in marks}
            print(f"  {label:28s} " + " ".join(f"{m}: {v:.3f}" for m, v in at.items())
                  + f"   reach {med if med != float('inf') else 'never'} ({', '.join(str(r or '-') for r in reach)})")
            figures[layer]["methods"][label] = {"reach": reach, "at": at}
    print(f"\nfigures: {write_result('replay', facts, {'seeds': a.seeds, 'layers': figures}, started)}")


if __name__ == "__main__":
    main()
