"""Re-time what the searches of bench/search.py picked, side by side: is a method's pick as fast as
random search's when both are timed together, not each in its own run?

    python bench/retime.py --from bench/results/search [--layers resnet18.C1,...] [--rounds 5] [--trials 64]
    python bench/retime.py --from /tmp/tunekit-first-batch --random bench/results/search

Why: the same config timed in two runs came out up to 30% apart on a shared machine, and random
search's 64-trial best is the fastest of 64 timings, so it is also the luckiest of 64, while a
method judged after 8 trials had 8 draws. Judged by the searches' own timings, a method that picks
random search's very config can still fall short of it.

For each layer of a bench/search.py output (its databases: one per method and seed), each search's
pick after every trial is its fastest config so far by its own timings: what a user who stopped
there would deploy. Every distinct pick of a layer, of all methods and seeds, is timed again
(tunekit's own runner and timing settings) for --rounds rounds in rotating order; a pick's time is
the median of its rounds. It prints the tables of bench/search.py twice per layer, from the
searches' own timings and re-timed (the median GFLOPS of the picks at 8/16/32/64 trials, and the
trials each method needed to reach random search's median pick at 64), and each method's median pick
over random search's per round (a round's picks are timed within half a minute); then per method
how much its own timings flattered its pick after --trials (own over re-timed, geometric mean over the
layers) and on how many layers its pick reached random search's in the median round, and
writes results/step20/retime@LABEL.json. With --random, random search's databases come from a full run's
folder, so that a bench/first_batch.py screen's 8-trial picks are judged against random search's
64-trial picks, all re-timed together (a search shorter than --trials keeps its last pick).
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from contextlib import closing

sys.path.insert(0, os.path.dirname(__file__))
from common import RESULTS, geomean_worst, machine_facts, machine_report, rotation, write_result
from search import HELD_OUT, at, layer_tag, report


def databases(layer_dir: str, random_dir: str | None = None) -> list[str]:
    """A layer's search databases (METHOD-seedS.db) in `layer_dir`; random search's from `random_dir`
    instead, when given."""
    paths = glob.glob(os.path.join(layer_dir, "*-seed*.db"))
    if random_dir:
        paths = [p for p in paths if not os.path.basename(p).startswith("random-seed")]
        paths += glob.glob(os.path.join(random_dir, "random-seed*.db"))
    if not paths:
        sys.exit(f"{layer_dir}: no search databases (METHOD-seedS.db); give --from a bench/search.py --out folder")
    return paths


def searches(paths: list[str], trials: int) -> tuple[dict, dict]:
    """The searches of a layer's databases: method -> [per seed: the pick after each of its first `trials`
    trials, as a (template, index, cost in its own run)], and template -> its TaskSpace."""
    from tunekit.plugin.registry import make_component
    from tunekit.store.database import Database
    from tunekit.tuning.dataset import current_trials
    target, spaces, runs = make_component("target", "x86"), {}, {}
    label_seed = lambda p: (os.path.basename(p).rsplit("-seed", 1)[0], int(p.rsplit("-seed", 1)[1][:-3]))
    for path in sorted(paths, key=label_seed):
        with closing(Database(path, readonly=True)) as db:
            ((name, device),) = db.devices()
            # newest first: reversed, every template's trials in the order measured
            found = list(current_trials(reversed(db.history(name, device, set(), limit=None)), target))
        spaces.update((ts.template.name, ts) for _, ts, _ in found)
        picks, best = [], None
        for _, ts, t in found[:trials]:
            if t.ok and (best is None or t.cost < best[2]):
                best = (ts.template.name, t.index, t.cost)
            picks.append(best)
        runs.setdefault(label_seed(path)[0], []).append(picks)
    return runs, spaces


def retime(picks: set, spaces: dict, rounds: int) -> dict:
    """(template, index) -> its cost in each of `rounds` rounds, every pick timed once a round, the order
    rotating from round to round (inf: a pick that failed to run)."""
    from tunekit.measure.measurer import Measurer
    from tunekit.recipe.model import MeasureSection
    by_template: dict = {}
    for template, index in sorted(picks):
        by_template.setdefault(template, []).append(index)
    costs: dict = {p: [] for p in picks}
    m = Measurer(next(iter(spaces.values())).target, MeasureSection())
    try:
        for r in range(rounds):
            for template in rotation(sorted(by_template), r):
                for t in m.measure(spaces[template], rotation(by_template[template], r)):
                    costs[template, t.index].append(t.cost)
    finally:
        m.close()
    return costs


def paired(runs: dict, flops: int, costs: dict, marks: list[int], n: int) -> dict:
    """method -> mark -> per round: the median GFLOPS (over seeds) of its picks after `mark` trials over
    random search's after `n`, both from that round's timings. Why per round: a slow spell of the
    machine slowed every config timed in its few seconds by up to half (8 configs of C9, 5 processes x 4
    rounds, 2026-12-06), so a round's picks, timed within half a minute of each other, compare better
    than medians taken across rounds, and the rounds' spread shows what the machine's mood can do to a ratio."""
    out: dict = {}
    for r in range(len(next(iter(costs.values())))):
        this = curves(runs, flops, {p: c[r] for p, c in costs.items()})
        base = statistics.median(at(c, n) for c in this["random"])
        for label, seeds in this.items():
            longest = max(len(c) for c in seeds)   # a first-batch screen: its mark 8 only
            for m in [m for m in marks if m <= longest] or marks[:1] if label != "random" else ():
                ratio = statistics.median(at(c, m) for c in seeds) / base if base > 0 else 0.0
                out.setdefault(label, {}).setdefault(str(m), []).append(ratio)
    for label, by_mark in out.items():
        print(f"  {label}: its median pick over random search's after {n}, per round (median, min-max): " +
              ", ".join(f"after {m} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
                        for m, v in by_mark.items()))
    return out


def curves(runs: dict, flops: int, again: dict | None = None) -> dict:
    """method -> [per seed: the GFLOPS of its pick after each trial], by the search's own timing of the
    pick, or by its re-timing in `again` ((template, index) -> seconds)."""
    cost = lambda p: p[2] if again is None else again[p[:2]]
    g = lambda p: flops / cost(p) / 1e9 if p is not None and cost(p) < float("inf") else 0.0
    return {label: [[g(p) for p in picks] for picks in seeds] for label, seeds in runs.items()}


def flattery(own: dict, new: dict, n: int) -> dict:
    """method -> the median GFLOPS of its picks after `n` trials by the searches' own timings over the same
    re-timed (two `search.report` figures of one layer): how much its own timings flattered it."""
    med = lambda fig, label: statistics.median(fig["methods"][label]["gflops"][str(n)])
    return {label: med(own, label) / med(new, label) for label in own["methods"] if med(new, label) > 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="src", default=os.path.join(RESULTS, "search"),
                    help="a bench/search.py --out folder (one folder per layer)")
    ap.add_argument("--random", default="", metavar="DIR",
                    help="random search's databases from this bench/search.py --out folder instead (to judge a "
                         "bench/first_batch.py screen, whose --out has none, against a full run's random search)")
    ap.add_argument("--layers", default=HELD_OUT)
    ap.add_argument("--template", default="nchwc", help="as bench/search.py was given it")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="resnet18.C11 only, 3 rounds")
    ap.add_argument("--label", default="", help="figures to results/step20/retime@LABEL.json")
    a = ap.parse_args()
    if a.quick:
        a.layers, a.rounds = "resnet18.C11", 3
    facts, started = machine_facts(), time.time()
    print(machine_report(facts))
    n = a.trials
    marks = sorted({m for m in (8, n // 4, n // 2, n) if 0 < m <= n})
    figures, ratios = {}, {}   # method -> layer -> own over re-timed
    for layer in a.layers.split(","):
        _, tag = layer_tag(layer, a.template)
        runs, spaces = searches(databases(os.path.join(a.src, tag), a.random and os.path.join(a.random, tag)), n)
        flops = next(iter(spaces.values())).task.flops
        picks = {p[:2] for seeds in runs.values() for ps in seeds for p in ps if p is not None}
        t0 = time.monotonic()
        timed = retime(picks, spaces, a.rounds)
        again = {p: statistics.median(c) for p, c in timed.items()}
        print(f"\n{tag}: {len(picks)} distinct picks re-timed, {a.rounds} rounds, {time.monotonic() - t0:.0f} s")
        own = report(f"{tag}, the searches' own timings", curves(runs, flops), marks, n)
        new = report(f"{tag}, re-timed together", curves(runs, flops, again), marks, n)
        figures[tag] = {"picks": len(picks), "own": own, "retimed": new,
                        "per_round": paired(runs, flops, timed, marks, n)}
        for label, r in flattery(own, new, n).items():
            ratios.setdefault(label, {})[tag] = r
        path = write_result(f"retime{'@' + a.label if a.label else ''}", facts,
                            {"from": a.src, "trials": n, "rounds": a.rounds, "marks": marks, "layers": figures,
                             "own_over_retimed": ratios},
                            started, os.path.join(RESULTS, "step20"))
    print(f"\nthe median {n}-trial pick, the searches' own timing over the re-timing (how much luck flattered it):")
    for label, r in ratios.items():
        print(f"  {label}: geometric mean {geomean_worst(r)[0]:.3f} over {len(r)} layers, "
              f"highest {max(r.values()):.3f}")
    for label in sorted({label for f in figures.values() for label in f["per_round"]}):
        for m in marks:
            r = {tag: f["per_round"][label][str(m)] for tag, f in figures.items()
                 if str(m) in f["per_round"].get(label, {})}
            if not r:
                continue
            ahead = [t for t, v in r.items() if statistics.median(v) >= 1]
            level = [t for t, v in r.items() if statistics.median(v) < 1 <= max(v)]
            print(f"  {label} after {m}: at least random search's pick after {n} on {len(ahead)} of {len(r)} layers "
                  f"(median of the rounds), below it in some rounds only on {len(level)} ({', '.join(level)}), "
                  f"below in every round on {len(r) - len(ahead) - len(level)}")
    print(f"figures: {path}")


if __name__ == "__main__":
    main()
