"""Whole networks, end to end: tunekit's tuned kernels against onnxruntime (CPU, all
cores) on the same ONNX file and input, measured in the same run, each side in its
own process, alternating; the latency after 0, 16 and 64 (--quick: 0, 8) trials per
task, the wall time of tuning, and a per-layer table.

    python bench/e2e.py [--quick] [--nets resnet18,mobilenet_v2] [--size 224]

The networks are examples/networks.py's (ResNet-18, MobileNet-v2) and
examples/small_net.py's, with seeded weights, written at --size x --size. Tuning
resumes from bench/results/e2e/ (xgboost + annealing, the network's tasks weighted
by their counts).
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


def tunekit_times(path: str, db: str | None) -> list[float]:
    import warnings

    import numpy as np

    import tunekit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(path, target="x86", database=db)
    x = np.random.default_rng(0).standard_normal(next(iter(net.graph.inputs.values()))[0]).astype(np.float32)
    return time_fn(lambda: net(x), min_s=0.3, repeat=7)


def ort_times(path: str) -> list[float]:
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
    return time_fn(lambda: sess.run(None, {inp.name: x}), min_s=0.3, repeat=7)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="0 and 8 trials per task")
    ap.add_argument("--nets", default="resnet18,mobilenet_v2", help="resnet18, mobilenet_v2, small_net")
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "e2e"))
    a = ap.parse_args()
    print(machine_report())
    os.makedirs(a.out, exist_ok=True)
    for net in a.nets.split(","):
        bench(net, a.size, a.out, (8,) if a.quick else (16, 64))


def bench(net: str, size: int, out: str, stages: tuple) -> None:
    import networks
    from small_net import small_net

    import tunekit
    make = {"small_net": small_net, "resnet18": networks.resnet18, "mobilenet_v2": networks.mobilenet_v2}[net]
    path = make(os.path.join(out, f"{net}_{size}.onnx"), size=size)
    db = os.path.join(out, f"{net}_{size}.db")
    print(f"\n{net} {size}x{size}:")
    curve = [("0 (default configs)", None)]
    for trials in stages:
        t0 = time.monotonic()
        states = tunekit.tune([{"model": path}], target="x86", model="xgboost", explorer="annealing", trials=trials,
                              database=db, tuning={"batch_size": 8})
        done = sum(st.done for st in states)
        print(f"tuned to {trials} trials per task: {done} trials of {len(states)} tasks in "
              f"{time.monotonic() - t0:.0f} s (resumed runs measure only what is missing)")
        curve.append((f"{trials}", db))

    print(f"{net} {size}x{size}, batch 1, float32: latency (median of 3 alternating rounds, min-max)")
    for label, database in curve:
        r = alternate({"onnxruntime": (ort_times, (path,)), "tunekit": (tunekit_times, (path, database))})
        (ort, ort_lo, ort_hi), (tk, tk_lo, tk_hi) = r["onnxruntime"], r["tunekit"]
        print(f"  after {label:>20s} trials/task: tunekit {tk * 1e3:7.3f} ms ({tk_lo * 1e3:.3f}-{tk_hi * 1e3:.3f}), "
              f"onnxruntime {ort * 1e3:7.3f} ms ({ort_lo * 1e3:.3f}-{ort_hi * 1e3:.3f}): "
              f"tunekit is {ort / tk:.2f}x onnxruntime's speed")

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tunekit.compile_model(path, target="x86", database=db)
    rows = model.profile(repeat=20)
    total = sum(r["seconds"] for r in rows)
    print(f"per layer of {net} (tuned):")
    for r in rows:
        print(f"  {r['layer']:6s} {r['op']:17s} {r['seconds'] * 1e3:7.3f} ms {r['seconds'] / total:5.0%} "
              f"{r['gflops']:7.1f} GFLOPS {'tuned' if r['tuned'] else 'fallback'}")
    print(f"  activation buffers {model.peak_bytes / 2**20:.2f} MiB; layer sum {total * 1e3:.3f} ms, "
          f"median run {statistics.median(tunekit_times(path, db)) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
