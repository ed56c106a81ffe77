"""Compile once, deploy anywhere: for ResNet-18, MobileNet-v2 and BERT-base from their tuned
databases (bench/deploy_dbs.py: bench/e2e.py's files and databases, tuned where missing),

- the time of `tunekit.compile_model` (in a fresh process, the call alone) and of
  `tunekit compile MODEL --database DB -o model.tk` (the command, process start included),
  and the saved file's size;
- the time from a fresh process's start to its first output: `tunekit.runtime.load` and one
  run (process start and imports included) against onnxruntime's (import, InferenceSession
  on the ONNX file, one run), with onnxruntime's session creation alone beside it;
- the steady-state latency of the loaded file against the in-process compiled model's.

Each side runs in its own process, rounds alternating in rotating order; the figure is the
median of the rounds with their spread (min-max).

    python bench/deploy.py [--quick] [--nets resnet18,mobilenet_v2,bert] [--trials 8] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import e2e
from common import alternate, load_now, machine_facts, machine_report, time_fn, write_result
from deploy_dbs import OUT, network

_START = """
import time
import numpy as np
{imports}
x = dict(np.load({feeds!r}))
{body}
print("first", time.time())
"""
_SIDES = {   # what a fresh process does before its first output
    "tunekit.runtime": ("import tunekit.runtime", "net = tunekit.runtime.load({file!r})\nnet(**x)"),
    "onnxruntime": ("import onnxruntime", "t = time.perf_counter()\ns = onnxruntime.InferenceSession({file!r}, "
                    "providers=['CPUExecutionProvider'])\nprint('session', time.perf_counter() - t)\n"
                    "s.run(None, x)"),
}


def start_to_first(side: str, file: str, feeds: str) -> list[float]:
    """Seconds from starting a Python process to its first output (and onnxruntime's session alone)."""
    imports, body = _SIDES[side]
    code = _START.format(imports=imports, feeds=feeds, body=body.format(file=file))
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    said = dict(line.split() for line in out.splitlines())
    return [float(said["first"]) - t0]


def session_seconds(file: str, feeds: str) -> list[float]:
    imports, body = _SIDES["onnxruntime"]
    code = _START.format(imports=imports, feeds=feeds, body=body.format(file=file))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return [float(dict(line.split() for line in out.splitlines())["session"])]


def compile_seconds(path: str, db: str) -> list[float]:
    """The `compile_model` call, in this (fresh) process."""
    import warnings

    import tunekit
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tunekit.compile_model(path, target="x86", database=db)
    return [time.perf_counter() - t0]


def command_seconds(path: str, db: str, out: str) -> list[float]:
    """`tunekit compile`, the whole command."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tunekit", "compile", path, "--database", db, "-o", out], check=True,
                   capture_output=True)
    return [time.perf_counter() - t0]


def in_process_latency(path: str, db: str, x: dict) -> list[float]:
    import warnings

    import tunekit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(path, target="x86", database=db)
    return time_fn(lambda: net(**x))


def loaded_latency(file: str, x: dict) -> list[float]:
    import tunekit.runtime
    net = tunekit.runtime.load(file)
    return time_fn(lambda: net(**x))


def bench(net: str, trials: int, rounds: int) -> dict:
    import numpy as np
    path, db = network(net, trials)
    tag = os.path.basename(path)[:-5]
    x = e2e.feeds(net, 224)
    feeds = os.path.join(OUT, f"{tag}.feeds.npz")
    np.savez(feeds, **x)
    saved = os.path.join(OUT, f"{tag}.tk")
    print(f"\n{net}: {path}, {db}", flush=True)
    t = alternate({"compile_model": (compile_seconds, (path, db)),
                   "tunekit compile": (command_seconds, (path, db, saved))}, rounds)
    size = os.path.getsize(saved)
    print(f"  compile_model {_s(t['compile_model'])}; tunekit compile {_s(t['tunekit compile'])}; "
          f"{saved}: {size / 2**20:.1f} MiB", flush=True)
    start = alternate({"tunekit.runtime": (start_to_first, ("tunekit.runtime", saved, feeds)),
                       "onnxruntime": (start_to_first, ("onnxruntime", path, feeds)),
                       "onnxruntime session": (session_seconds, (path, feeds))}, max(rounds, 5))
    print(f"  process start to first output: tunekit.runtime {_s(start['tunekit.runtime'])}, onnxruntime "
          f"{_s(start['onnxruntime'])} (its InferenceSession alone {_s(start['onnxruntime session'])})", flush=True)
    steady = alternate({"in-process": (in_process_latency, (path, db, x)),
                        "tunekit.runtime": (loaded_latency, (saved, x))}, rounds)
    print(f"  steady state: in-process {_ms(steady['in-process'])}, tunekit.runtime "
          f"{_ms(steady['tunekit.runtime'])}", flush=True)
    figures = lambda d: {k: v.as_dict() for k, v in d.items()}
    return {"net": net, "onnx": os.path.basename(path), "trials_per_task": trials, "file_bytes": size,
            "compile": figures(t), "start_to_first": figures(start), "steady": figures(steady)}


def _s(t) -> str:
    return f"{t[0]:.2f} s ({t[1]:.2f}-{t[2]:.2f})"


def _ms(t) -> str:
    return f"{t[0] * 1e3:.3f} ms ({t[1] * 1e3:.3f}-{t[2] * 1e3:.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds of the compiles and of the steady state")
    ap.add_argument("--nets", default="resnet18,mobilenet_v2,bert")
    ap.add_argument("--trials", type=int, default=8, help="trials per task of the databases (default 8)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    started = time.time()
    facts = machine_facts()
    print(machine_report(facts))
    import onnxruntime
    facts["baselines"] = [f"onnxruntime {onnxruntime.__version__} (CPU provider, default threads)"]
    print(facts["baselines"][0])
    nets = {n: bench(n, a.trials, 2 if a.quick else a.rounds) for n in a.nets.split(",")}
    print(f"load at the end: {load_now()}")
    print("wrote " + write_result("deploy", facts, {"nets": nets}, started))


if __name__ == "__main__":
    main()
