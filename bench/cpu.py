"""CPU targets against the vendor libraries, in one run:
(a) tuned matmul 1024 vs numpy/OpenBLAS, (b) ResNet-18 C1-C12 tuned conv2d vs
PyTorch CPU conv2d (oneDNN), per layer and geometric mean.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/cpu.py [--quick] [--trials N]

Needs `pip install torch==2.13.0 threadpoolctl` (benchmark only). Tuning resumes
from bench/results/cpu.db, each task over every template that serves it (its
trials are counted over all of them, its best is the fastest of any); every best
config is then re-timed beside its baseline, each side in its own process, rounds
alternating in rotating order: the median of the rounds and their spread (min-max).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, in_process, load_now, machine_report, numpy_blas_report, per_task, time_fn, torch_report

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
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per side")
    ap.add_argument("--db", default=os.path.join(HERE, "results", "cpu.db"))
    a = ap.parse_args()
    trials = 64 if a.quick else a.trials
    os.makedirs(os.path.dirname(a.db), exist_ok=True)
    print(machine_report())
    import tunekit
    from tunekit import registry
    layers = [f"resnet18.{c}" for c in a.layers.split(",") if c]
    # each task is tuned over every template that serves it; a task's result is its best over them
    states = tunekit.tune(["matmul-1024", *layers], target="x86", model=a.model, explorer=a.explorer, trials=trials,
                          seed=0, database=a.db, tuning={"batch_size": 8}, progress=True)
    tasks = {t.name: t for t in per_task(states)}

    # the baselines' libraries as their own processes load them (this one has loaded others' while tuning)
    print(f"\nbaselines: {in_process(numpy_blas_report)}\n           {in_process(torch_report)}")
    mm = tasks["matmul-1024"]
    print(f"\n(a) matmul 1024 float32 ({len(mm.trials)} trials over templates "
          f"{', '.join(st.ts.template.name for st in mm.states)}; best {mm.template}), "
          f"median of {a.rounds} rotating rounds (min-max):")
    res = alternate({"numpy": (numpy_matmul, (1024,)),
                     "tunekit": (tunekit_kernel, ("matmul", dict(M=1024, N=1024, K=1024), a.db))}, a.rounds)
    fl = 2 * 1024 ** 3
    for name, (med, lo, hi) in res.items():
        print(f"  {name:8s} {fl / med / 1e9:7.1f} GFLOPS  ({fl / hi / 1e9:.1f}-{fl / lo / 1e9:.1f})")
    print(f"  ratio tunekit/numpy: {res['numpy'][0] / res['tunekit'][0]:.2f}")

    print(f"\n(b) ResNet-18 conv2d vs PyTorch CPU (oneDNN), float32, batch 1; ms: median of {a.rounds} rotating "
          "rounds (min-max); trials: the task's, all its templates together; template: its best's")
    print(f"  {'layer':6s} {'trials':>6s} {'template':>8s} {'torch ms':>21s} {'tunekit ms':>21s} {'torch GF':>9s} "
          f"{'tunekit GF':>10s} {'ratio':>6s}")
    ms = lambda r: f"{r[0] * 1e3:.3f} ({r[1] * 1e3:.3f}-{r[2] * 1e3:.3f})"
    ratios = []
    for w in layers:
        op, args = registry().workload(w)
        t = tasks[w]
        r = alternate({"torch": (torch_conv, (registry().op(op).canonical(args),)),
                       "tunekit": (tunekit_kernel, (op, args, a.db))}, a.rounds)
        ratio = r["torch"][0] / r["tunekit"][0]
        ratios.append(ratio)
        print(f"  {w.split('.')[1]:6s} {len(t.trials):6d} {t.template or '-':>8s} {ms(r['torch']):>21s} "
              f"{ms(r['tunekit']):>21s} {t.flops / r['torch'][0] / 1e9:9.1f} {t.flops / r['tunekit'][0] / 1e9:10.1f} "
              f"{ratio:6.2f}")
    if ratios:
        print(f"  geometric mean ratio tunekit/torch: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")
    print(f"\nmachine load now {load_now()}")


if __name__ == "__main__":
    main()
