"""Tune matmul 1024 and 4096 and ResNet-18 C1-C12 on a CUDA GPU and compare each with
cuBLAS / cuDNN in the same run.

    python bench/gpu.py [--quick] [--trials N] [--tasks matmul-1024,resnet18.C6] [--baseline auto|torch|cupy]

Needs a CUDA machine: pycuda for tunekit's cuda target, and PyTorch (cuBLAS and
cuDNN, TF32 disabled so float32 is float32, cudnn.benchmark on) or CuPy (cuBLAS
only: convolutions get no baseline) for the baselines. Tuning resumes from
bench/results/gpu.db, each task over every template that serves it (its trials are
counted over all of them, its best is the fastest of any). Each best config is then
re-timed with CUDA events beside its baseline, each side in its own process, rounds
alternating in rotating order; the table gives GFLOPS (median of the rounds, min-max),
the ratio tunekit/baseline (> 1: tunekit is faster) and their geometric mean.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, in_process, load_now, machine_report, per_task

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


def baseline_report(which: str) -> str:
    """The baseline's GPU libraries (a spawned process)."""
    if which == "torch":
        import torch
        return (f"PyTorch {torch.__version__}: CUDA {torch.version.cuda}, cuBLAS, cuDNN "
                f"{torch.backends.cudnn.version()} (TF32 off, cudnn.benchmark on) on {torch.cuda.get_device_name()}")
    import cupy
    return (f"CuPy {cupy.__version__}: CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, cuBLAS "
            f"{cupy.cuda.cublas.getVersion(cupy.cuda.device.get_cublas_handle())} (matmul only)")


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

    import tunekit
    from tunekit import registry
    cuda = registry().component("target", "cuda")
    why = cuda.available()
    if why:
        sys.exit(f"bench/gpu.py needs a CUDA GPU: {why}")
    comps = registry().components
    model = a.model if a.model in comps["cost model"] and comps["cost model"][a.model].obj.available() is None \
        else "random"
    explorer = a.explorer if a.explorer in comps["explorer"] else "random"
    print(f"device: {cuda().device().name}; model {model}, explorer {explorer}")
    # each task is tuned over every template that serves it (the best of any is the task's)
    states = tunekit.tune([task_spec(n) for n in names], target="cuda", model=model, explorer=explorer,
                          trials=64 if a.quick else a.trials, seed=0, database=a.db, progress=True)
    results = {t.workload: t for t in per_task(states)}

    base = pick_baseline(a.baseline)
    print(f"\nbaseline: {in_process(baseline_report, base) if base else 'none (install torch or cupy)'}")
    print(f"median of {a.rounds} rotating rounds (min-max), each side in its own process; trials: the task's, "
          "all its templates together; template: its best's")
    print(f"{'task':14s} {'trials':>6} {'template':>8} {'tunekit GFLOPS':>20} {'baseline GFLOPS':>20} {'ratio':>6}")
    ratios = []
    for name in names:
        spec = task_spec(name)
        t = results[tunekit.Task(spec.get("op"), spec.get("args"), workload=spec.get("workload")).key]
        sides = {"tunekit": (tunekit_side, (name, a.db))}
        if base:
            sides["baseline"] = (baseline_side, (name, base))
        r = alternate(sides, a.rounds)
        tk, bl = r["tunekit"], r.get("baseline")
        g = lambda m, f=t.flops: f"{f / m[0] / 1e9:.0f} ({f / m[2] / 1e9:.0f}-{f / m[1] / 1e9:.0f})" if m else "-"
        ratio = bl[0] / tk[0] if tk and bl else None
        if ratio:
            ratios.append(ratio)
        print(f"{name:14s} {len(t.trials):6d} {t.template or '-':>8} {g(tk):>20} {g(bl):>20} "
              f"{f'{ratio:.2f}' if ratio else '-':>6}")
    if ratios:
        print(f"geometric mean of tunekit/baseline: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f} "
              f"over {len(ratios)} tasks")
    print(f"machine load now {load_now()}")


if __name__ == "__main__":
    main()
