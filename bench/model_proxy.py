"""Screen cost models offline: replay a search from scratch on configs random search already measured.

    python bench/model_proxy.py --from /tmp/fs [--layers resnet18.C1,...] [--reps 30] \
        [--variants '{"relation": {"name": "xgboost", "features": "relation"}, "knob": {"name": "xgboost"}}']

Why: a search from scratch of the 14 held-out layers (8 seeds) takes an hour of measuring, while a
change to the model alone changes only which configs it ranks first. So, per layer, the pool is every
config of its random searches in --from (METHOD-seedS.db per layer, as bench/search.py --out writes
them; a config's timing is that run's own), and one replay of a variant (a cost model, as a recipe's
[model] section) is: trials 1-8 drawn at random from the pool, 9-16 the model's 8 best-ranked of the
rest after fitting on those 8, 17-21 its 5 best after fitting on 16 (the goal's 21 trials, batches of
8). It hits when the fastest of its 21 is at least random search's 64-trial best, taken as the median
over 400 draws of 64 from the pool. Random draws hit with probability 1 - 0.5 ** (21 / 64) = 0.20.
What it leaves out: the explorer (the pool stands for the space) and the timing noise of new trials.
bench/replay.py replays whole searches, explorer included, but on a space timed config by config,
which only the small layers allow (C10-C12); this screen takes any layer and measures nothing.

Prints each variant's hit rate per layer (--reps replays, the same draws for every variant) and
writes results/step20/model_proxy@LABEL.json.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from contextlib import closing

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import RESULTS, machine_facts, machine_report, write_result
from search import HELD_OUT, METHODS, layer_tag

DEFAULT = {"xgb-rank-relation": METHODS["xgb-rank-relation+annealing"][0],
           "xgb-rank-knob": METHODS["xgb-rank+annealing"][0]}
SCHEDULE = ((8, 8), (16, 5))   # (trials the model has learned from, picks it then makes)


def pool(layer_dir: str) -> tuple[list, object]:
    """Every distinct config random search measured in `layer_dir` (its first trial, with the
    candidate the model reads) and the layer's TaskSpace (of its last template)."""
    from tunekit.plugin.registry import make_component
    from tunekit.store.database import Database
    from tunekit.tuning.dataset import current_trials
    target, seen = make_component("target", "x86"), {}
    paths = sorted(glob.glob(os.path.join(layer_dir, "random-seed*.db")))
    if not paths:
        sys.exit(f"{layer_dir}: no random search databases (random-seedS.db); give --from a bench/search.py --out")
    for path in paths:
        with closing(Database(path, readonly=True)) as db:
            ((name, device),) = db.devices()
            for _, ts, t in current_trials(db.history(name, device, set(), limit=None), target):
                if (ts.template.name, t.index) not in seen:
                    t.candidate = ts.candidates([t.index])[0]
                    seen[ts.template.name, t.index] = t
    if not seen:
        sys.exit(f"{layer_dir}: no trial of today's code (made by another tunekit or code generator)")
    return list(seen.values()), ts


def replay(spec, space, trials: list, speed: np.ndarray, seed: int) -> float:
    """One search from scratch on the pool with the cost model `spec` (a [model] section): the fastest
    `speed` among its 21 trials."""
    from tunekit.recipe.components import component_spec
    rng = np.random.default_rng([seed, 7])
    chosen = list(rng.choice(len(trials), SCHEDULE[0][0], replace=False))
    model = component_spec("cost model", "xgboost", spec).create()
    model.start(space)
    for _, picks in SCHEDULE:
        model.fit([trials[i] for i in chosen])
        score = np.asarray(model.predict([t.candidate for t in trials]), np.float64)
        score[chosen] = -np.inf
        chosen += list(np.argsort(-score, kind="stable")[:picks])
    return float(speed[chosen].max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="src", required=True, help="a bench/search.py --out folder")
    ap.add_argument("--layers", default=HELD_OUT)
    ap.add_argument("--template", default="nchwc", help="as bench/search.py was given it")
    ap.add_argument("--variants", default=json.dumps(DEFAULT), help="JSON: label -> a [model] section")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="resnet18.C11 only, 10 replays")
    ap.add_argument("--label", default="", help="figures to results/step20/model_proxy@LABEL.json")
    a = ap.parse_args()
    if a.quick:
        a.layers, a.reps = "resnet18.C11", 10
    variants = json.loads(a.variants)
    facts, started = machine_facts(), time.time()
    print(machine_report(facts))
    figures: dict = {"from": a.src, "reps": a.reps, "variants": variants, "layers": {}}
    hits: dict = {label: [] for label in variants}
    for layer in a.layers.split(","):
        _, tag = layer_tag(layer, a.template)
        trials, space = pool(os.path.join(a.src, tag))
        speed = np.array([space.task.flops / t.cost / 1e9 if t.ok else 0.0 for t in trials])
        draws = np.random.default_rng(0)
        target = float(np.median([speed[draws.choice(len(speed), 64, replace=False)].max() for _ in range(400)]))
        row = {}
        for label, spec in variants.items():
            best = [replay(spec, space, trials, speed, r) for r in range(a.reps)]
            row[label] = {"hit": float(np.mean([b >= target for b in best])), "best_gflops": best}
            hits[label].append(row[label]["hit"])
        figures["layers"][tag] = {"pool": len(trials), "random_64_best": target, "variants": row}
        print(f"{tag}: {len(trials)} configs, random search's 64-trial best {target:.1f} GFLOPS; hit by trial 21: "
              + ", ".join(f"{label} {v['hit']:.2f}" for label, v in row.items()), flush=True)
    print(f"\nover {len(figures['layers'])} layers ({a.reps} replays each; random draws: 0.20):")
    for label, h in hits.items():
        print(f"  {label}: mean hit rate {np.mean(h):.2f}, at least 0.5 on {sum(v >= 0.5 for v in h)} layers")
    path = write_result(f"model_proxy{'@' + a.label if a.label else ''}", facts, figures, started,
                        os.path.join(RESULTS, "step20"))
    print(f"figures: {path}")


if __name__ == "__main__":
    main()
