"""Whole networks, end to end: tunekit's tuned kernels against onnxruntime (CPU, all
cores) and PyTorch CPU eager (all cores) on the same ONNX file, weights and input,
measured in the same run, each side in its own process, alternating; the latency
after 0, 16 and 64 (--quick: 0, 8, 32) trials per task (a curve, PNG), the wall
time of tuning, a per-layer table, and how far the outputs are from onnxruntime's.

    python bench/e2e.py [--quick] [--nets resnet18,mobilenet_v2] [--size 224]

The networks are examples/networks.py's (ResNet-18, MobileNet-v2) and
examples/small_net.py's, with seeded weights, written at --size x --size. Tuning
resumes from bench/results/e2e/ (xgboost + annealing, the network's tasks weighted
by their counts, each task over every template that serves it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from common import alternate, machine_report, time_fn

HERE = os.path.dirname(os.path.abspath(__file__))


def _input(shape):
    import numpy as np
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _compiled(path: str, db: str | None):
    import warnings

    import tunekit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the fallback warning: expected before tuning
        return tunekit.compile_model(path, target="x86", database=db)


def run_times(net) -> list[float]:
    """Seconds per run of a compiled model on a seeded input."""
    x = _input(next(iter(net.graph.inputs.values()))[0])
    return time_fn(lambda: net(x), min_s=0.3, repeat=7)


def tunekit_times(path: str, db: str | None) -> list[float]:
    return run_times(_compiled(path, db))


def _ort(path: str):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    return (lambda x: sess.run(None, {inp.name: x})), inp.shape


def ort_times(path: str) -> list[float]:
    run, shape = _ort(path)
    x = _input(shape)
    return time_fn(lambda: run(x), min_s=0.3, repeat=7)


def torch_times(path: str) -> list[float]:
    import torch
    from torch_onnx import torch_model
    torch.set_num_threads(os.cpu_count())
    run, shape = torch_model(path)
    x = _input(shape)
    return time_fn(lambda: run(x), min_s=0.3, repeat=7)


def agreement(path: str, model) -> str:
    """The largest difference of tunekit's and PyTorch's outputs from onnxruntime's on one input."""
    import numpy as np
    from torch_onnx import torch_model
    run, shape = _ort(path)
    x = _input(shape)
    ref = run(x)[0]
    tk, pt = model(x)[0], torch_model(path)[0](x)[0]
    scale = float(np.abs(ref).max())
    return (f"max |difference| from onnxruntime's output (max |output| {scale:.3g}): tunekit "
            f"{float(np.abs(tk - ref).max()):.2e}, PyTorch {float(np.abs(pt - ref).max()):.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="0, 8 and 32 trials per task")
    ap.add_argument("--nets", default="resnet18,mobilenet_v2", help="resnet18, mobilenet_v2, small_net")
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "e2e"))
    a = ap.parse_args()
    print(machine_report())
    os.makedirs(a.out, exist_ok=True)
    t0 = time.monotonic()
    curves = {net: bench(net, a.size, a.out, (8, 32) if a.quick else (16, 64)) for net in a.nets.split(",")}
    print(f"\nwhole benchmark: {time.monotonic() - t0:.0f} s; machine load now "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    plot(curves, os.path.join(a.out, f"e2e_{a.size}.png"))


def bench(net: str, size: int, out: str, stages: tuple) -> dict:
    import networks
    from small_net import small_net

    import tunekit
    make = {"small_net": small_net, "resnet18": networks.resnet18, "mobilenet_v2": networks.mobilenet_v2}[net]
    path = make(os.path.join(out, f"{net}_{size}.onnx"), size=size)
    print(f"\n{net} {size}x{size}:")
    points = {"tunekit": [], "onnxruntime": [], "pytorch": []}
    t_tune, db = 0.0, None
    for trials in (0, *stages):
        if trials:
            # each stage tunes on in its own copy of the previous stage's database (resumable, and
            # the latency after 8 trials is measured on the records of 8 trials, not of the last stage)
            db, before = os.path.join(out, f"{net}_{size}.t{trials}.db"), db
            if before is not None and not os.path.exists(db):
                copy_database(before, db)
            t0 = time.monotonic()
            states = tunekit.tune([{"model": path}], target="x86", model="xgboost", explorer="annealing",
                                  trials=trials, database=db, tuning={"batch_size": 8})
            t_tune += time.monotonic() - t0
            print(f"tuned to {trials} trials per task: {sum(st.done for st in states)} trials of "
                  f"{len({st.key.workload for st in states})} tasks ({len(states)} task-templates) in "
                  f"{time.monotonic() - t0:.0f} s (a resumed run measures only what is missing); "
                  f"tuning so far {t_tune:.0f} s")
        r = alternate({"onnxruntime": (ort_times, (path,)), "pytorch": (torch_times, (path,)),
                       "tunekit": (tunekit_times, (path, db))})
        for side in points:
            points[side].append((trials, r[side][0]))
        (ort, ort_lo, ort_hi), (pt, pt_lo, pt_hi), (tk, tk_lo, tk_hi) = r["onnxruntime"], r["pytorch"], r["tunekit"]
        print(f"  latency after {trials:3d} trials/task (median of 3 alternating rounds, min-max): tunekit "
              f"{tk * 1e3:.3f} ms ({tk_lo * 1e3:.3f}-{tk_hi * 1e3:.3f}), onnxruntime {ort * 1e3:.3f} ms "
              f"({ort_lo * 1e3:.3f}-{ort_hi * 1e3:.3f}), PyTorch {pt * 1e3:.3f} ms ({pt_lo * 1e3:.3f}-"
              f"{pt_hi * 1e3:.3f}): tunekit is {ort / tk:.2f}x onnxruntime's speed, {pt / tk:.2f}x PyTorch's")
    model = _compiled(path, db)
    print("  " + agreement(path, model))
    rows = model.profile(repeat=20)
    total = sum(r["seconds"] for r in rows)
    print(f"per layer of {net} (tuned):")
    for r in rows:
        print(f"  {r['layer']:8s} {r['op']:17s} {r['template']:7s} {r['seconds'] * 1e3:7.3f} ms "
              f"{r['seconds'] / total:5.0%} {r['gflops']:7.1f} GFLOPS {'tuned' if r['tuned'] else 'fallback'}")
    print(f"  activation buffers {model.peak_bytes / 2**20:.2f} MiB; layer sum {total * 1e3:.3f} ms, "
          f"median run {statistics.median(run_times(model)) * 1e3:.3f} ms")
    return points


def copy_database(src: str, dst: str) -> None:
    """Copy a tuning database with sqlite's backup (consistent with its write-ahead log)."""
    import sqlite3
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    with b:
        a.backup(b)
    a.close()
    b.close()


def plot(curves: dict, png: str) -> None:
    """Latency against trials per task, one panel per network (the baselines as flat lines)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(install matplotlib for the latency curve PNG)")
        return
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.6), squeeze=False)
    for ax, (net, points) in zip(axes[0], curves.items()):
        for side, style in (("tunekit", "o-"), ("onnxruntime", "s--"), ("pytorch", "^:")):
            xs, ys = zip(*points[side])
            ax.plot(xs, [y * 1e3 for y in ys], style, label=side)
        ax.set(title=net, xlabel="trials per task", ylabel="latency (ms)")
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"latency curve: {png}")


if __name__ == "__main__":
    main()
