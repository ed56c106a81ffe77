"""Screen candidates for the pretrained search's first batch before a full bench/search.py run.

    python bench/first_batch.py [--quick] [--models A.json,...] [--walks 256x16,top_multiple=4,...] [--layers ...]

Issue #44's goal for the pretrained model is random search's 64-trial best within 8 trials: the
first batch. Each candidate, a model file (`tunekit dataset train`) with the shipped walk or the
shipped model with another annealing walk (CHAINSxSTEPS, or annealing options KEY=VALUE joined
by +), tunes each held-out layer for --trials trials beside the shipped model with the shipped
walk, seed by seed in rotating order, each search in its own database. There is no random search:
a layer takes about 7 s a search instead of bench/search.py's minutes, so a candidate costs
minutes, and only one that is clearly ahead of the shipped model here is worth the full run. The
same configs timed in two runs of this script came out up to 30% apart on a shared machine:
compare only the figures of one run, or judge the screen with bench/retime.py --from OUT
--random FULL_RUN (its picks and random search's 64-trial picks, re-timed together).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import RESULTS, geomean_worst, machine_facts, machine_report, rotation, write_result
from search import HELD_OUT, METHODS, at, db_for, layer_tag, run


def candidates(models: str, walks: str) -> dict:
    """label -> (model, explorer): the shipped method first, then each model file and each walk."""
    model, walk = METHODS["xgb-pretrained+annealing"]
    out = {"shipped": (model, walk)}
    for path in filter(None, models.split(",")):
        out[os.path.basename(path)] = (dict(model, pretrained=os.path.abspath(path)), walk)
    for w in filter(None, walks.split(",")):
        out[f"walk-{w}"] = (model, dict(walk, **walk_options(w)))
    return out


def walk_options(spec: str) -> dict:
    """Annealing options from CHAINSxSTEPS (256x16) or KEY=VALUE pairs joined by + (top_multiple=4+diversity=0.5)."""
    if "=" not in spec:
        chains, steps = map(int, spec.split("x"))
        return {"n_chains": chains, "steps": steps}
    return {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in spec.split("+"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 seeds")
    ap.add_argument("--models", default="", help="model files to start from, with the shipped walk")
    ap.add_argument("--walks", default="", help="annealing walks for the shipped model: CHAINSxSTEPS, or annealing "
                                                "options KEY=VALUE joined by + (top_multiple=4+diversity=0.5)")
    ap.add_argument("--layers", default=HELD_OUT)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--out", default="/tmp/tunekit-first-batch", help="the searches' databases")
    ap.add_argument("--label", default="", help="figures to results/first_batch@LABEL.json")
    a = ap.parse_args()
    a.seeds = 2 if a.quick else a.seeds
    facts, started = machine_facts(), time.time()
    print(machine_report(facts))
    methods = candidates(a.models, a.walks)
    labels, layers = list(methods), {}
    for layer in a.layers.split(","):
        template, tag = layer_tag(layer, "nchwc")
        best = {label: [] for label in labels}
        for s in range(a.seeds):
            for label in rotation(labels, s):
                curve = run(db_for(a.out, tag, f"{label}-seed{s}"), layer, *methods[label], a.trials, s,
                            template=template)
                best[label].append(at(curve, a.trials))
        layers[tag] = best
        print(f"{tag:22s}" + "".join(f"  {label}: {statistics.median(v):6.1f} ({', '.join(f'{g:.0f}' for g in v)})"
                                     for label, v in best.items()), flush=True)
    summary = {}
    for label in labels[1:]:
        ratio = {tag: statistics.median(v[label]) / statistics.median(v["shipped"]) for tag, v in layers.items()}
        mean, _, lowest = geomean_worst(ratio)
        summary[label] = {"geomean": mean, "ahead": sum(r > 1 for r in ratio.values()), "lowest": lowest}
        print(f"{label}: median best over the shipped one's after {a.trials} trials, geometric mean "
              f"{mean:.3f}, ahead on {summary[label]['ahead']} of {len(ratio)} layers, lowest {lowest:.2f}")
    path = write_result(f"first_batch{'@' + a.label if a.label else ''}", facts,
                        {"trials": a.trials, "seeds": a.seeds, "layers": layers, "summary": summary}, started,
                        os.path.join(RESULTS, "step20"))
    print(f"figures: {path}")


if __name__ == "__main__":
    main()
