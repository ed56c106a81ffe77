"""The generated schedules (the `auto` template) against the hand-written templates and the
vendor libraries, per task, in one run on this CPU.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/auto.py [--quick] [--trials 64,256]
        [--tasks matmul-1024,dense,C1,...,C12,depthwise,softmax,layernorm] [--rounds 3]

Each task is tuned twice with the same cost model, explorer and seed (xgboost + annealing,
seed 0): through `auto` alone, and through its hand templates (every template that serves
it but the generic ones, sharing the task's trials as a task that names no template shares
them, `auto` left out); hand's figure is the best of its templates. Trials are measured
once: the best GFLOPS within the first 64 trials is read from the same run's history as
the best within 256 (--trials: the counts to read, the last one the budget). The bests at
the budget of both and the baseline (numpy for matmul and dense, PyTorch for conv2d, the
depthwise conv2d, softmax and layer norm) are then re-timed side by side, each in its own
process, rounds alternating in rotating order: the median of the rounds and their spread
(min-max); auto/hand is the ratio of those medians. The goal: auto >= 0.9x hand as a
geometric mean over the tasks with a hand template, no task below 0.75x.

Tasks: matmul 1024, dense 1x1000x512, ResNet-18 C1-C12, a MobileNet-v2 depthwise layer
(144 channels, 56x56, 3x3, stride 1), and a softmax and a layer norm of BERT-base's shape
(128 x 768): no op of tunekit's library computes those two, so they are this script's
computations (`tunekit.Task.from_compute`), with no hand template (auto against PyTorch).
--quick: matmul-1024, dense, C2, C6, C9, C12, the depthwise layer, softmax and layer norm, at
16 and 64 trials (estimated 20 minutes on 2 cores; 256 trials a side would take over an hour).

Tuning resumes from bench/results/auto.db (another model, explorer or seed: give another
--db, or the histories mix); the figures are also written to bench/results/auto.json.
Needs `pip install torch==2.13.0 threadpoolctl` for the PyTorch baselines (without torch
those tasks have no baseline).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from common import (
    alternate,
    geomean_worst,
    in_process,
    load_now,
    machine_report,
    numpy_blas_report,
    per_task,
    time_fn,
    torch_report,
)

HERE = os.path.dirname(os.path.abspath(__file__))
GOAL_MEAN, GOAL_WORST = 0.9, 0.75   # auto/hand: geometric mean over the tasks, and the lowest task
BERT = dict(M=128, N=768)           # BERT-base: 128 tokens of 768 features


#: name: (the function in examples/computations.py, its args)
COMPUTATIONS = {"softmax": ("softmax", BERT), "layer_norm": ("layer_norm", {**BERT, "eps": 1e-5})}

# name: (the task as recipe data, or {"compute": a computation above}; its baseline)
TASKS = {
    "matmul-1024": ({"workload": "matmul-1024"}, "numpy"),
    "dense": ({"op": "dense", "args": dict(M=1, N=1000, K=512)}, "numpy"),
    **{f"C{i}": ({"workload": f"resnet18.C{i}"}, "pytorch") for i in range(1, 13)},
    # MobileNet-v2's first 144-channel depthwise layer (expansion 6 of 24 channels, 56x56, stride 1)
    "depthwise": ({"op": "depthwise_conv2d", "args": dict(N=1, C=144, H=56, W=56, R=3, S=3, stride=1, padding=1)},
                  "pytorch"),
    "softmax": ({"compute": "softmax"}, "pytorch"),
    "layernorm": ({"compute": "layer_norm"}, "pytorch"),
}
QUICK = "matmul-1024,dense,C2,C6,C9,C12,depthwise,softmax,layernorm"
# 1024 trials at ~0.75 s each on 2 cores (as smoke runs measured), and the re-timing: ~20 minutes
QUICK_TRIALS = "16,64"


def make_task(spec: dict, template: str | None):
    """The tunekit Task of `spec` through `template` (None: any). AttributeError when the spec is a
    computation and this tunekit has no `Task.from_compute`."""
    import tunekit
    if "compute" in spec:
        import computations
        fn, args = COMPUTATIONS[spec["compute"]]
        fn = getattr(computations, fn)
        return tunekit.Task.from_compute(fn, args, name=spec["compute"], template=template)
    return tunekit.Task(spec.get("op"), spec.get("args"), workload=spec.get("workload"), template=template)


def tune_side(spec: dict, templates: list[str], trials: int, a):
    """Tune the task through `templates` together (they share its `trials`); returns its TaskResult."""
    import tunekit
    tasks = [make_task(spec, t) if "compute" in spec else {**spec, "template": t} for t in templates]
    states = tunekit.tune(tasks, target="x86", model=a.model, explorer=a.explorer, trials=trials, seed=a.seed,
                          database=a.db, tuning={"batch_size": 8}, progress=True)
    (res,) = per_task(states)
    return res


def kernel_times(spec: dict, template: str, index: int) -> list[float]:
    """Seconds per call of config `index` of the task through `template`, checked against the op's reference."""
    import numpy as np

    from tunekit.memory import arena
    from tunekit.plugin.registry import make_component
    target = make_component("target", "x86")
    task = make_task(spec, template)
    fn = target.load(target.build(task.bind(target).program(index)))
    inputs = task.op.random_inputs(task.args, np.random.default_rng(0))
    arrays = arena(inputs + [np.empty(s, d) for s, d in task.op.output_shapes(task.args)])   # as tuning timed it
    inputs, outs = arrays[:len(inputs)], arrays[len(inputs):]
    fn(*inputs, *outs)
    ref = task.op.reference(*inputs, **task.args)
    rtol, atol = task.op.tolerance(task.args)
    assert all(np.allclose(o, r, rtol=rtol, atol=atol) for o, r in zip(outs, ref)), \
        f"{task.name}: config {index} of template {template!r} computes a wrong result"
    return time_fn(lambda: fn(*inputs, *outs))


def numpy_matmul(args):
    import numpy as np
    rng = np.random.default_rng(0)
    a, b = rng.random((args["M"], args["K"]), np.float32), rng.random((args["K"], args["N"]), np.float32)
    c = np.empty((args["M"], args["N"]), np.float32)
    return time_fn(lambda: np.matmul(a, b, out=c))


def numpy_dense(args):
    import numpy as np
    rng = np.random.default_rng(0)
    x, w = rng.random((args["M"], args["K"]), np.float32), rng.random((args["N"], args["K"]), np.float32)
    c = np.empty((args["M"], args["N"]), np.float32)
    return time_fn(lambda: np.matmul(x, w.T, out=c))


def _torch():
    import torch
    torch.set_num_threads(os.cpu_count())
    return torch


def torch_conv(args):
    torch = _torch()
    groups = args["C"] if "K_out" not in args else 1   # depthwise: one filter per channel
    x = torch.rand(args["N"], args["C"], args["H"], args["W"])
    w = torch.rand(args.get("K_out", args["C"]), args["C"] // groups, args["R"], args["S"])
    with torch.inference_mode():
        return time_fn(lambda: torch.nn.functional.conv2d(x, w, stride=args["stride"], padding=args["padding"],
                                                          dilation=args["dilation"], groups=groups))


def torch_softmax(args):
    torch = _torch()
    x = torch.rand(args["M"], args["N"])
    with torch.inference_mode():
        return time_fn(lambda: torch.softmax(x, dim=1))


def torch_layer_norm(args):
    torch = _torch()
    x, gamma, beta = torch.rand(args["M"], args["N"]), torch.rand(args["N"]), torch.rand(args["N"])
    with torch.inference_mode():
        return time_fn(lambda: torch.nn.functional.layer_norm(x, (args["N"],), gamma, beta, eps=args["eps"]))


BASELINES = {"matmul": numpy_matmul, "dense": numpy_dense, "conv2d": torch_conv, "depthwise_conv2d": torch_conv,
             "softmax": torch_softmax, "layer_norm": torch_layer_norm}


def baseline(name: str, task, has_torch: bool):
    """(library, timing function, its args) of the task's baseline, or None where there is none here."""
    lib = TASKS[name][1]
    if lib == "pytorch" and not has_torch:
        return None
    return lib, BASELINES[task.op.name], (task.args,)


def bench_task(name: str, a, counts: list[int], has_torch: bool) -> dict:
    """Tune one task both ways, re-time both bests and the baseline; returns its row of figures."""
    from tunekit.plugin.registry import make_component
    spec = TASKS[name][0]
    task = make_task(spec, None)
    hand = [t.name for t in task.serving(make_component("target", "x86")) if not t.generic]
    budget = counts[-1]
    row: dict = {"task": name, "name": task.name, "flops": task.flops, "hand templates": hand}
    t0 = time.monotonic()
    sides = {}
    for side, templates in (("auto", ["auto"]), ("hand", hand)):
        if not templates:
            continue
        try:
            sides[side] = tune_side(spec, templates, budget, a)
        except Exception as e:   # one side's failure leaves the other's figures (and fails the goal)
            row[f"{side} error"] = _first_line(e)
    row["tuning_s"] = time.monotonic() - t0
    timed = {}
    for side, res in sides.items():
        row[f"{side} trials"] = min(len(res.trials), budget)
        for n in counts:
            best, template = res.best_within(n)
            row[f"{side}@{n}"] = best.gflops(task.flops) if best is not None else 0.0
        best, template = res.best_within(budget)
        row[f"{side} template"] = template
        if best is not None:
            timed[side] = (kernel_times, (spec, template, best.index))
    base = baseline(name, task, has_torch)
    if base is not None:
        row["baseline"] = base[0]
        timed[base[0]] = base[1:]
    res = alternate(timed, a.rounds)
    for side, r in res.items():
        if r:   # seconds (median, min, max) as GFLOPS: the fastest round gives the highest
            row[f"{side} re-timed"] = dict(zip(("median", "max", "min"), (task.flops / x / 1e9 for x in r)))
    auto = row.get("auto re-timed")
    for other, key in (("hand", "auto/hand"), (base[0] if base else "", "auto/baseline")):
        if auto and row.get(f"{other} re-timed"):
            row[key] = auto["median"] / row[f"{other} re-timed"]["median"]
    return row


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


def _rt(r: dict | None) -> str:
    """Re-timed GFLOPS as median (min-max)."""
    return f"{r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f})" if r else "-"


def _ratio(row: dict, key: str) -> str:
    return f"{row[key]:.2f}" if key in row else "-"


def table(rows: list[dict], counts: list[int], rounds: int) -> str:
    """The per-task table (a header of two lines, then a line per task) and the summary against the goal."""
    cols = [(side, n) for side in ("auto", "hand") for n in counts]
    lines = [f"best GFLOPS within the first {', '.join(map(str, counts))} trials of each run (trials: auto/hand, "
             f"the run's), then the bests at {counts[-1]} and the baseline re-timed: GFLOPS, median of {rounds} "
             "rotating rounds (min-max); auto/hand and auto/base: ratios of those medians",
             f"  {'task':12s} {'trials':>9s} " + " ".join(f"{f'{s}@{n}':>9s}" for s, n in cols)
             + f" {'hand best':>9s} {'auto':>20s} {'hand':>20s} {'baseline':>28s} {'auto/hand':>9s} {'auto/base':>9s}"]
    for row in rows:
        base = row.get("baseline")
        at = [f"{row[f'{s}@{n}']:.1f}" if f"{s}@{n}" in row else "-" for s, n in cols]
        lines.append(f"  {row['task']:12s} {row.get('auto trials', '-')!s:>4s}/{row.get('hand trials', '-')!s:<4s} "
                     + " ".join(f"{x:>9s}" for x in at)
                     + f" {row.get('hand template') or '-':>9s} {_rt(row.get('auto re-timed')):>20s}"
                     f" {_rt(row.get('hand re-timed')):>20s}"
                     f" {f'{base} ' + _rt(row.get(f'{base} re-timed')) if base else '-':>28s}"
                     f" {_ratio(row, 'auto/hand'):>9s} {_ratio(row, 'auto/baseline'):>9s}")
    lines += [f"  {row['task']}: {side} tuning failed: {row[f'{side} error']}" for row in rows
              for side in ("auto", "hand") if f"{side} error" in row]
    lines.append(summary(rows))
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    """The goal line: auto/hand's geometric mean and lowest task against the goal; a task with a hand
    figure but no working auto config fails it."""
    goal = f"goal: auto >= {GOAL_MEAN}x hand geomean, no layer below {GOAL_WORST}x"
    none = [r["task"] for r in rows if r.get("hand re-timed") and not r.get("auto re-timed")]
    found = geomean_worst({r["task"]: r["auto/hand"] for r in rows if "auto/hand" in r})
    if found is None:
        return f"{goal}: NOT met (auto ran no config of {', '.join(none)})" if none else \
            f"{goal}: no task has both an auto and a hand figure"
    mean, worst, low = found
    met = "met" if mean >= GOAL_MEAN and low >= GOAL_WORST and not none else "NOT met"
    n = sum("auto/hand" in r for r in rows)
    return (f"{goal}: geometric mean auto/hand {mean:.2f}x over {n} tasks, lowest {worst} {low:.2f}x"
            + (f", and auto ran no config of {', '.join(none)}" if none else "") + f": {met}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"only the tasks {QUICK}, at {QUICK_TRIALS} trials")
    ap.add_argument("--trials", default=None,
                    help="trial counts to read the best at, from each run's history; the last is the budget "
                         f"(default 64,256; --quick {QUICK_TRIALS})")
    ap.add_argument("--tasks", default=None, help=f"comma-separated, of {', '.join(TASKS)} (default: all; "
                                                  "--quick: fewer)")
    ap.add_argument("--model", default="xgboost")
    ap.add_argument("--explorer", default="annealing")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per side")
    ap.add_argument("--db", default=os.path.join(HERE, "results", "auto.db"))
    a = ap.parse_args()
    counts = sorted({int(n) for n in (a.trials or (QUICK_TRIALS if a.quick else "64,256")).split(",") if n})
    names = (a.tasks or (QUICK if a.quick else ",".join(TASKS))).split(",")
    if unknown := [n for n in names if n not in TASKS]:
        ap.error(f"unknown tasks {', '.join(unknown)} (known: {', '.join(TASKS)})")
    os.makedirs(os.path.dirname(a.db), exist_ok=True)
    has_torch = importlib.util.find_spec("torch") is not None
    print(machine_report())
    # the baselines' libraries as their own processes load them (this one loads others' while tuning)
    print(f"baselines: {in_process(numpy_blas_report)}\n           "
          + (in_process(torch_report) if has_torch else "PyTorch: not installed (no PyTorch baselines)"))
    print(f"tuning: {a.model} + {a.explorer}, seed {a.seed}, {counts[-1]} trials per task and side; hand: the best "
          "of the task's hand templates (every non-generic one serving it), tuned together on those trials as a task "
          "naming no template is, auto left out")

    import tunekit
    rows, failed = [], {}
    t0 = time.monotonic()
    print("\n".join(table([], counts, a.rounds).splitlines()[:2]))   # the header; each task's line as it is done
    for name in names:
        if "compute" in TASKS[name][0] and not hasattr(tunekit.Task, "from_compute"):
            print(f"{name}: needs Task.from_compute")
            continue
        try:
            row = bench_task(name, a, counts, has_torch)
        except Exception as e:   # say it and go on with the other tasks (listed again at the end)
            failed[name] = _first_line(e)
            print(f"{name}: FAILED: {failed[name]}")
            continue
        rows.append(row)
        print("\n".join(table([row], counts, a.rounds).splitlines()[2:-1]))   # its line, and any errors
    print()
    print(table(rows, counts, a.rounds))
    for name, why in failed.items():
        print(f"  {name}: FAILED: {why}")
    out = os.path.join(os.path.dirname(a.db), "auto.json")
    with open(out, "w") as f:
        json.dump({"trials": counts, "model": a.model, "explorer": a.explorer, "seed": a.seed, "rounds": a.rounds,
                   "rows": rows, "failed": failed}, f, indent=1)
    print(f"\nfigures: {out}; whole benchmark {time.monotonic() - t0:.0f} s; machine load now {load_now()}")


if __name__ == "__main__":
    main()
