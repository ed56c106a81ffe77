"""Symbolic shapes: BERT-base exported with a symbolic sequence length, compiled once for
sequences 1..384, run at sequences 32, 128 and 384 against onnxruntime on the same file, and at
128 against step 13's static compile of BERT-base at 128. Two symbolic compiles: one set of
kernels scheduled at 128, and sets scheduled at 32, 128 and 384 (a call runs the nearest). One
database of 8 trials a task for all: the static file's tasks and the symbolic file's at 32, 128
and 384.

Each side runs in its own process, rounds alternating in rotating order; the figure is the
median of the rounds with their spread (min-max). The compiled models are saved once
(`tunekit.runtime` files) and each side's process loads its file.

    python bench/symbolic.py [--quick] [--rounds 3] [--trials 8]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from common import alternate, in_process, load_now, machine_facts, machine_report, rounds_args, time_fn, write_result
from deploy_dbs import OUT

SEQS = (32, 128, 384)
AT = 128
DIMS = {"batch": (1, 1), "sequence": (1, 384)}


def write(path: str, dynamic: bool) -> str:
    import transformer_nets
    return transformer_nets.export("bert", path, 0, dynamic=dynamic)


def files(trials: int) -> tuple[str, str, str]:
    """(the static file, the symbolic file, the database), written and tuned where missing."""
    import tunekit
    os.makedirs(OUT, exist_ok=True)
    static, dynamic = os.path.join(OUT, "bert.onnx"), os.path.join(OUT, "bert_dynamic.onnx")
    db = os.path.join(OUT, f"bert_symbolic.t{trials}.db")
    for path, dyn in ((static, False), (dynamic, True)):
        if not os.path.exists(path):
            in_process(write, path, dyn)
    t0 = time.monotonic()
    states = tunekit.tune([{"model": static}, {"model": dynamic, "dims": {"batch": [1], "sequence": list(SEQS)}}],
                          target="x86", model="xgboost", explorer="annealing", trials=trials, database=db,
                          tuning={"batch_size": 8})
    print(f"{sum(len(s.trials) for s in states)} trials known over {len(states)} task-templates in {db} "
          f"({time.monotonic() - t0:.0f} s; a resumed run measures only what is missing)", flush=True)
    return static, dynamic, db


def compile_and_save(path: str, db: str, out: str, at) -> list[float]:
    """Compile (symbolic when `at` is given: for DIMS, scheduled at `at`) and save; returns the compile's seconds."""
    import warnings

    import tunekit
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(path, target="x86", database=db,
                                    **({"dims": DIMS, "at": {"sequence": at}} if at else {}))
    seconds = time.perf_counter() - t0
    net.save(out)
    return [seconds]


def feeds(seq: int) -> dict:
    import transformer_nets
    return transformer_nets.inputs("bert", 0, seq=seq)


def tunekit_latency(file: str, seq: int) -> list[float]:
    import tunekit.runtime
    net, x = tunekit.runtime.load(file), feeds(seq)
    return time_fn(lambda: net(**x))


def ort_latency(path: str, seq: int) -> list[float]:
    import onnxruntime
    s, x = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]), feeds(seq)
    return time_fn(lambda: s.run(None, x))


def check(file: str, path: str, seq: int) -> float:
    """The largest difference of the symbolic model's output from onnxruntime's."""
    import numpy as np
    import onnxruntime

    import tunekit.runtime
    x = feeds(seq)
    ref = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, x)[0]
    return float(np.abs(tunekit.runtime.load(file)(**x)[0] - ref).max())


def _ms(t) -> str:
    return f"{t[0] * 1e3:.2f} ms ({t[1] * 1e3:.2f}-{t[2] * 1e3:.2f})"


def main() -> None:
    a = rounds_args(__doc__)
    started = time.time()
    facts = machine_facts()
    print(machine_report(facts))
    import onnxruntime
    facts["baselines"] = [f"onnxruntime {onnxruntime.__version__} (CPU provider, default threads) on the same "
                          "symbolic file", "tunekit's static compile of BERT-base at 128 (step 13)"]
    print("; ".join(facts["baselines"]))
    static, dynamic, db = files(a.trials)
    compiles = {"static": None, "symbolic": AT, "symbolic-sets": list(SEQS)}
    saved = {k: os.path.join(OUT, f"bert_{k}.tk") for k in compiles}
    compile_s = {k: in_process(compile_and_save, static if at is None else dynamic, db, saved[k], at)[0]
                 for k, at in compiles.items()}
    print("compile_model: " + ", ".join(f"{k} {s:.1f} s" for k, s in compile_s.items()), flush=True)
    error = {f"{k} @{s}": in_process(check, saved[k], dynamic, s) for k in ("symbolic", "symbolic-sets") for s in SEQS}
    print("largest difference from onnxruntime: " + ", ".join(f"{k}: {e:.2e}" for k, e in error.items()))
    sides = {f"tunekit {k} @{s}": (tunekit_latency, (saved[k], s)) for k in ("symbolic", "symbolic-sets")
             for s in SEQS}
    sides |= {f"onnxruntime @{s}": (ort_latency, (dynamic, s)) for s in SEQS}
    sides["tunekit static @128"] = (tunekit_latency, (saved["static"], AT))
    t = alternate(sides, a.rounds)
    for s in SEQS:
        theirs = t[f"onnxruntime @{s}"]
        print(f"sequence {s}: onnxruntime {_ms(theirs)}; " + "; ".join(
            f"tunekit {k} {_ms(t[f'tunekit {k} @{s}'])} ({theirs[0] / t[f'tunekit {k} @{s}'][0]:.2f}x)"
            for k in ("symbolic", "symbolic-sets")), flush=True)
    st = t["tunekit static @128"]
    print(f"sequence 128: static {_ms(st)}; symbolic / static {t['tunekit symbolic @128'][0] / st[0]:.3f}")
    print(f"load at the end: {load_now()}")
    figures = {"compile_s": compile_s, "max_abs_error": error, "at": {k: v for k, v in compiles.items() if v},
               "trials_per_task": a.trials, "dims": DIMS,
               "latency": {k: v.as_dict() for k, v in t.items()}}
    print("wrote " + write_result("symbolic", facts, figures, started))


if __name__ == "__main__":
    main()
