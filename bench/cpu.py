"""CPU targets against the vendor libraries, in one run:
(a) tuned matmul 1024 vs numpy/OpenBLAS, (b) ResNet-18 C1-C12 tuned conv2d vs
PyTorch CPU conv2d (oneDNN), per layer and geometric mean.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/cpu.py [--quick] [--trials N]

Needs `pip install torch==2.13.0 threadpoolctl` (benchmark only). Tuning resumes
from bench/results/cpu.db; every best config is then re-timed beside its
baseline, each side in its own process, alternating (median and spread).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, machine_report, time_fn

HERE = os.path.dirname(os.path.abspath(__file__))


def numpy_matmul(n):
    import numpy as np
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    c = np.empty((n, n), np.float32)
    return time_fn(lambda: np.matmul(a, b, out=c))


def torch_conv(args):
    import torch
    torch.set_num_threads(os.cpu_count())
    x = torch.rand(args["N"], args["C"], args["H"], args["W"])
    w = torch.rand(args["K_out"], args["C"], args["R"], args["S"])
    with torch.no_grad():
        return time_fn(lambda: torch.nn.functional.conv2d(x, w, stride=args["stride"], padding=args["padding"],
                                                          dilation=args["dilation"]))


def tunekit_kernel(op, args, db):
    import tunekit
    with tunekit.apply_history_best(db):
        k = tunekit.build(op, args, target="x86")
    task = k.task
    import numpy as np
    rng = np.random.default_rng(0)
    from tunekit.memory import arena
    inputs = task.op.random_inputs(task.args, rng)
    arrays = arena(inputs + [np.empty(s, d) for s, d in task.op.output_shapes(task.args)])   # as tuning timed it
    inputs, outs = arrays[:len(inputs)], arrays[len(inputs):]
    k(*inputs, *outs)
    ref = task.op.reference(*inputs, **task.args)
    rtol, atol = task.op.tolerance(task.args)
    assert all(np.allclose(o, r, rtol=rtol, atol=atol) for o, r in zip(outs, ref)), "tuned kernel is wrong"
    return time_fn(lambda: k(*inputs, *outs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="64 trials per task instead of the default")
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--model", default="xgboost")
    ap.add_argument("--explorer", default="annealing")
    ap.add_argument("--layers", default=",".join(f"C{i}" for i in range(1, 13)))
    ap.add_argument("--db", default=os.path.join(HERE, "results", "cpu.db"))
    a = ap.parse_args()
    trials = 64 if a.quick else a.trials
    os.makedirs(os.path.dirname(a.db), exist_ok=True)
    print(machine_report())
    from tunekit import registry
    from tunekit.recipe.model import Recipe
    from tunekit.tuning.progress import TuneProgress
    from tunekit.tuning.tuner import Tuner
    layers = [f"resnet18.{c}" for c in a.layers.split(",") if c]
    recipe = Recipe.from_dict({
        "target": "x86", "tasks": ["matmul-1024", *layers], "model": a.model, "explorer": a.explorer,
        "tuning": {"trials": trials, "seed": 0, "batch_size": 8}, "database": {"path": a.db}},
        source="bench/cpu.py")
    states = Tuner(recipe, TuneProgress()).run()
    used = {st.ts.task.name: st.done for st in states}

    print(f"\n(a) matmul 1024 float32 ({used['matmul-1024']} trials), median of 3 alternating rounds (min-max):")
    res = alternate({"numpy": (numpy_matmul, (1024,)),
                     "tunekit": (tunekit_kernel, ("matmul", dict(M=1024, N=1024, K=1024), a.db))})
    fl = 2 * 1024 ** 3
    for name, (med, lo, hi) in res.items():
        print(f"  {name:8s} {fl / med / 1e9:7.1f} GFLOPS  ({fl / hi / 1e9:.1f}-{fl / lo / 1e9:.1f})")
    print(f"  ratio tunekit/numpy: {res['numpy'][0] / res['tunekit'][0]:.2f}")

    print("\n(b) ResNet-18 conv2d vs PyTorch CPU (oneDNN), float32, batch 1:")
    print(f"  {'layer':6s} {'trials':>6s} {'torch ms':>9s} {'tunekit ms':>10s} {'torch GF':>9s} {'tunekit GF':>10s}"
          f" {'ratio':>6s}")
    ratios = []
    for w in layers:
        op, args = registry().workload(w)
        flops = registry().op(op).flops(**registry().op(op).canonical(args))
        r = alternate({"torch": (torch_conv, (registry().op(op).canonical(args),)),
                       "tunekit": (tunekit_kernel, (op, args, a.db))}, rounds=2)
        ratio = r["torch"][0] / r["tunekit"][0]
        ratios.append(ratio)
        print(f"  {w.split('.')[1]:6s} {used[w]:6d} {r['torch'][0] * 1e3:9.3f} {r['tunekit'][0] * 1e3:10.3f} "
              f"{flops / r['torch'][0] / 1e9:9.1f} {flops / r['tunekit'][0] / 1e9:10.1f} {ratio:6.2f}")
    if ratios:
        print(f"  geometric mean ratio tunekit/torch: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")


if __name__ == "__main__":
    main()
