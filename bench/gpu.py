"""Tune matmul 1024 and 4096 and ResNet-18 C1-C12 on a CUDA GPU and compare each with
cuBLAS / cuDNN in the same run.

    python bench/gpu.py [--quick] [--trials N] [--tasks matmul-1024,resnet18.C6] [--baseline auto|torch|cupy]

Needs a CUDA machine: pycuda for tunekit's cuda target, and PyTorch (cuBLAS and
cuDNN, TF32 disabled so float32 is float32, cudnn.benchmark on) or CuPy (cuBLAS
only: convolutions get no baseline) for the baselines. Tuning resumes from
bench/results/gpu.db. Each best config is then re-timed with CUDA events beside
its baseline, each side in its own process, alternating; the table gives GFLOPS,
the ratio tunekit/baseline (> 1: tunekit is faster) and their geometric mean.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import in_process, machine_report

TASKS = ["matmul-1024", "matmul-4096"] + [f"resnet18.C{i}" for i in range(1, 13)]


def task_spec(name: str) -> dict:
    """A recipe task for a bench task name."""
    if name.startswith("matmul-"):
        n = int(name.split("-")[1])
        return {"op": "matmul", "args": {"M": n, "N": n, "K": n}}
    return {"workload": name}


def tunekit_side(name: str, db: str) -> list[float]:
    """Seconds per run of the best recorded config, timed by the cuda target (CUDA events)."""
    import numpy as np

    import tunekit
    from tunekit import registry
    from tunekit.deploy.kernels import best_config
    spec = task_spec(name)
    task = tunekit.Task(spec.get("op"), spec.get("args"), workload=spec.get("workload"))
    target = registry().component("target", "cuda")()
    with tunekit.apply_history_best(db) as d:
        best = best_config(d, task, target)
    if best is None:
        return []
    ts, index = best
    art = target.build(ts.program(index))
    inputs = task.op.random_inputs(task.args, np.random.default_rng(0))
    outs = [np.empty(s, d) for s, d in task.op.output_shapes(task.args)]
    costs = target.run(art, inputs + outs, tunekit.RunSettings(number=10, repeat=5, min_repeat_ms=100))
    ref = task.op.reference(*inputs, **task.args)[0]
    assert np.allclose(outs[0], ref, *task.op.tolerance(task.args)), f"{name}: the tuned kernel is wrong"
    return costs


def baseline_side(name: str, which: str) -> list[float]:
    """Seconds per run of cuBLAS / cuDNN on the same problem ([] when there is none)."""
    import tunekit
    spec = task_spec(name)
    task = tunekit.Task(spec.get("op"), spec.get("args"), workload=spec.get("workload"))
    a = task.args
    if which == "torch":
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        dev = torch.device("cuda")
        if task.op.name == "matmul":
            x, w = torch.rand(a["M"], a["K"], device=dev), torch.rand(a["K"], a["N"], device=dev)
            out = torch.empty(a["M"], a["N"], device=dev)
            fn = lambda: torch.matmul(x, w, out=out)
        else:
            x = torch.rand(a["N"], a["C"], a["H"], a["W"], device=dev)
            w = torch.rand(a["K_out"], a["C"], a["R"], a["S"], device=dev)
            fn = lambda: torch.nn.functional.conv2d(x, w, stride=a["stride"], padding=a["padding"],
                                                    dilation=a["dilation"])
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sync = torch.cuda.synchronize
    else:
        import cupy
        if task.op.name != "matmul":
            return []
        x = cupy.random.rand(a["M"], a["K"], dtype=cupy.float32)
        w = cupy.random.rand(a["K"], a["N"], dtype=cupy.float32)
        out = cupy.empty((a["M"], a["N"]), cupy.float32)
        fn = lambda: cupy.matmul(x, w, out=out)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        sync = cupy.cuda.Device().synchronize
    for _ in range(3):
        fn()
    sync()
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max((start.elapsed_time(end) if which == "torch" else cupy.cuda.get_elapsed_time(start, end)) / 1e3, 1e-7)
    number = max(10, int(0.1 / one))
    costs = []
    for _ in range(5):
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) if which == "torch" else cupy.cuda.get_elapsed_time(start, end)
        costs.append(ms / 1e3 / number)
    return costs


def pick_baseline(which: str) -> str | None:
    import importlib.util
    order = ["torch", "cupy"] if which == "auto" else [which]
    return next((m for m in order if importlib.util.find_spec(m) is not None), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="64 trials per task instead of --trials")
    ap.add_argument("--trials", type=int, default=512, help="mean trials per task (default 512)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated subset of: " + ", ".join(TASKS))
    ap.add_argument("--model", default="xgboost")
    ap.add_argument("--explorer", default="annealing")
    ap.add_argument("--baseline", default="auto", choices=["auto", "torch", "cupy"])
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per side")
    ap.add_argument("--db", default=os.path.join(os.path.dirname(__file__), "results", "gpu.db"))
    a = ap.parse_args()
    names = [t for t in a.tasks.split(",") if t]
    unknown = set(names) - set(TASKS)
    if unknown:
        ap.error(f"unknown tasks {sorted(unknown)}")
    os.makedirs(os.path.dirname(a.db), exist_ok=True)
    print(machine_report())

    from tunekit import registry
    from tunekit.recipe.model import Recipe
    from tunekit.tuning.progress import TuneProgress
    from tunekit.tuning.tuner import Tuner
    why = registry().component("target", "cuda").available()
    if why:
        sys.exit(f"bench/gpu.py needs a CUDA GPU: {why}")
    comps = registry().components
    model = a.model if a.model in comps["cost model"] and comps["cost model"][a.model].obj.available() is None \
        else "random"
    explorer = a.explorer if a.explorer in comps["explorer"] else "random"
    recipe = Recipe.from_dict({
        "target": {"name": "cuda"}, "tasks": [task_spec(n) for n in names],
        "model": {"name": model}, "explorer": {"name": explorer},
        "tuning": {"trials": 64 if a.quick else a.trials, "seed": 0},
        "database": {"path": a.db},
    }, source="bench/gpu.py")
    tuner = Tuner(recipe, TuneProgress())
    print(f"device: {tuner.target.device().name}; model {model}, explorer {explorer}")
    states = tuner.run()

    base = pick_baseline(a.baseline)
    print(f"\nbaseline: {base or 'none (install torch or cupy)'}; median of {a.rounds} alternating rounds x 5 repeats")
    print(f"{'task':14s} {'trials':>6} {'tunekit GFLOPS':>15} {'baseline GFLOPS':>16} {'ratio':>6}")
    ratios = []
    for name, st in zip(names, states):
        flops = st.ts.task.flops
        tk, bl = [], []
        for _ in range(a.rounds):
            tk += in_process(tunekit_side, name, a.db)
            if base:
                bl += in_process(baseline_side, name, base)
        med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
        t, b = med(tk), med(bl)
        g = lambda s, f=flops: f"{f / s / 1e9:.0f}" if s else "-"
        ratio = b / t if t and b else None
        if ratio:
            ratios.append(ratio)
        print(f"{name:14s} {len(st.trials):6d} {g(t):>15} {g(b):>16} {f'{ratio:.2f}' if ratio else '-':>6}")
    if ratios:
        print(f"geometric mean of tunekit/baseline: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f} "
              f"over {len(ratios)} tasks")


if __name__ == "__main__":
    main()
