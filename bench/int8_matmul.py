"""The int8 matrix product on this CPU: tunekit's qmatmul (uint8 data x int8 weights, int32 out, on
the dot instruction) against onnxruntime's own MatMulInteger on the same shape, and both against
float32 (tunekit's matmul, onnxruntime's MatMul), at the shapes of BERT-base's layers (128 tokens).

    python bench/int8_matmul.py [--quick] [--trials N] [--shapes 128x768x768,128x3072x768]

Resumes from its database (bench/results/int8_matmul.db). Each side runs in its own process,
rounds alternating in rotating order; the median of the rounds and their spread are printed, in
GOPS (2*M*N*K operations a run), and written to bench/results/int8_matmul.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, load_now, machine_facts, machine_report, per_task, time_fn, write_result


def _operands(M, N, K):
    import numpy as np
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (M, K)).astype(np.uint8), rng.integers(-128, 128, (K, N)).astype(np.int8)


def ort_side(M, N, K, int8):
    """onnxruntime (CPU, its threads on every core) running one MatMulInteger (or float MatMul) node."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    a, b = _operands(M, N, K)
    if int8:
        node = helper.make_node("MatMulInteger", ["a", "b", "a0"], ["y"])
        inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(131, np.uint8), "a0")]
        types = (TensorProto.UINT8, TensorProto.INT32)
    else:
        a, b = a.astype(np.float32), b.astype(np.float32)
        node, inits, types = helper.make_node("MatMul", ["a", "b"], ["y"]), [numpy_helper.from_array(b, "b")], \
            (TensorProto.FLOAT, TensorProto.FLOAT)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", types[0], [M, K])],
                              [helper.make_tensor_value_info("y", types[1], [M, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = (a.astype(np.int64) - (131 if int8 else 0)) @ b.astype(np.int64)
    assert np.allclose(s.run(None, {"a": a})[0], want, rtol=1e-5), "onnxruntime's product is wrong"
    return time_fn(lambda: s.run(None, {"a": a}))


def tunekit_side(M, N, K, int8, db):
    """tunekit's best config of qmatmul (or float32 matmul) in `db`, on arrays laid out as tuning timed them."""
    import numpy as np

    import tunekit
    from tunekit.memory import arena
    from tunekit.ops.qmatmul import pack_weights
    a, b = _operands(M, N, K)
    with tunekit.apply_history_best(db):
        k = tunekit.build(*_task(M, N, K, int8), target="x86")
    if int8:
        arrays = arena([a.view(np.int32), pack_weights(b), b.astype(np.int32).sum(0).astype(np.int32),
                        np.array(131, np.uint8), np.empty((M, N), np.int32)])
    else:
        arrays = arena([a.astype(np.float32), b.astype(np.float32), np.empty((M, N), np.float32)])
    k(*arrays)
    want = (a.astype(np.int64) - (131 if int8 else 0)) @ b.astype(np.int64)
    assert np.allclose(arrays[-1], want, rtol=1e-5), "tunekit's product is wrong"
    return time_fn(lambda: k(*arrays))


def _task(M, N, K, int8):
    return ("qmatmul", dict(M=M, N=N, K=K)) if int8 else ("matmul", dict(M=M, N=N, K=K, dtype="float32"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="32 trials per task instead of the default")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--shapes", default="128x768x768,128x3072x768", help="MxNxK, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per side")
    ap.add_argument("--db", default=os.path.join(os.path.dirname(__file__), "results", "int8_matmul.db"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.db), exist_ok=True)
    trials, started, facts = 32 if a.quick else a.trials, time.time(), machine_facts()
    print(machine_report(facts))
    import onnxruntime

    import tunekit
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    tasks = [{"op": op, "args": args} for M, N, K in shapes for op, args in (_task(M, N, K, True),
                                                                             _task(M, N, K, False))]
    states = tunekit.tune(tasks, target="x86", trials=trials, seed=0, database=a.db, progress=True)
    done = sum(t.done for t in per_task(states))
    facts["baselines"] = [f"onnxruntime {onnxruntime.__version__} (CPU, {os.cpu_count()} threads)"]
    print(f"baseline: {facts['baselines'][0]}; tuning: {done} trials this run, {trials} per task")
    figures = {"rounds": a.rounds, "trials_per_task": trials, "trials_this_run": done, "shapes": {}}
    for M, N, K in shapes:
        ops = 2 * M * N * K
        res = alternate({"tunekit int8": (tunekit_side, (M, N, K, True, a.db)),
                         "onnxruntime int8": (ort_side, (M, N, K, True)),
                         "tunekit float32": (tunekit_side, (M, N, K, False, a.db)),
                         "onnxruntime float32": (ort_side, (M, N, K, False))}, a.rounds)
        print(f"\n{M}x{N}x{K} (MxNxK), median of {a.rounds} rotating rounds (min-max):")
        for name, (med, lo, hi) in res.items():
            print(f"  {name:20s} {ops / med / 1e9:7.1f} GOPS  ({ops / hi / 1e9:.1f}-{ops / lo / 1e9:.1f})")
        print(f"  tunekit int8 / onnxruntime int8: {res['onnxruntime int8'][0] / res['tunekit int8'][0]:.2f}; "
              f"tunekit int8 / tunekit float32: {res['tunekit float32'][0] / res['tunekit int8'][0]:.2f}")
        figures["shapes"][f"{M}x{N}x{K}"] = {"ops": ops, "seconds": {k: v.as_dict() for k, v in res.items()}}
    print(f"machine load now {load_now()}")
    print(f"figures: {write_result('int8_matmul', facts, figures, started)}")


if __name__ == "__main__":
    main()
