"""Shared benchmark plumbing: machine facts, side-by-side timing in fresh processes, and
tuning results per task over all its templates."""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

# the features that decide which kernels a CPU runs, printed when the host has them
_FEATURES = ("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16",
             "avx512fp16", "amx-tile", "neon", "sve", "sve2")


def machine_facts() -> dict:
    """The facts a figure depends on, as data: the CPU (model, LLVM's name, the features that decide which
    kernels run, float32 lanes of its widest vectors, read from the features), cores, the load average at
    the start (1, 5, 15 min), the OPENBLAS_* settings, numpy's BLAS kernel and the float32 FMA peak
    measured now (None without llvmlite)."""
    facts = {"cpu": cpu_model(), "cores": os.cpu_count(), "load": list(os.getloadavg()),
             "openblas_env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
             "llvm_cpu": None, "features": [], "lanes": None, "numpy_blas": numpy_blas_report(), "fma_peak": None}
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return facts
    cpu, w, _ = _peak_shape()
    feats = llvm.get_host_cpu_features()
    facts.update(llvm_cpu=cpu, features=[f for f in _FEATURES if feats.get(f)], lanes=w, fma_peak=fma_peak())
    return facts


def machine_report(facts: dict | None = None) -> str:
    """`machine_facts()` (measured now unless given) as the lines every benchmark prints first."""
    f = facts or machine_facts()
    env = f["openblas_env"]
    lines = [f"machine: {f['cpu']}, {f['cores']} cores, load average "
             f"{', '.join(f'{x:.2f}' for x in f['load'])} (1, 5, 15 min)",
             " ".join(f"{k}={v or '<unset>'}" for k, v in env.items())]
    if f["llvm_cpu"] is None:
        return "\n".join([*lines, "CPU features, FMA peak: (install llvmlite to see them)", f["numpy_blas"]])
    have = " ".join(f["features"]) or "none of " + ", ".join(_FEATURES)
    return "\n".join([*lines, f"CPU as LLVM sees it: {f['llvm_cpu']}; features: {have}; widest float32 vector: "
                      f"{f['lanes']} lanes (from the features)", f["numpy_blas"],
                      f"float32 FMA peak (measured now, all cores at once, {f['lanes']} lanes): "
                      f"{f['fma_peak']:.0f} GFLOPS"])


def versions() -> dict:
    """The code behind a figure: tunekit's git commit (with "+dirty" when the tree has uncommitted changes
    to tracked files) and the versions of Python and of the libraries either side may use."""
    import platform
    import subprocess
    from importlib import metadata
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = None
    out = {"tunekit_commit": commit, "python": platform.python_version()}
    for dist in ("numpy", "llvmlite", "xgboost-cpu", "onnx", "onnxruntime", "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
_RUN_STARTED = time.time()   # one run = one process: every file it writes names the same start


def write_result(name: str, facts: dict, figures: dict, started: float, results: str = RESULTS) -> str:
    """Write one benchmark's figures as `results/<name>.json` (committed: the README's table is generated
    from these files by bench/table.py) beside what they depend on: the command line, when it started and
    ended (UTC) and when the run that wrote it started (the files of one run share it), the machine's facts
    (`machine_facts()` at the start), the load at the end, `versions()`.

    Returns the file's path."""
    import json
    import shlex
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    doc = {"command": " ".join(["python", os.path.relpath(os.path.abspath(sys.argv[0]), root),
                                *map(shlex.quote, sys.argv[1:])]),
           "run_started": stamp(_RUN_STARTED), "started": stamp(started), "finished": stamp(time.time()),
           "machine": facts,
           "load_end": list(os.getloadavg()), "versions": versions(), "figures": figures}
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, f"{name}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return path


def load_now() -> str:
    """The load average now (1, 5, 15 minutes), for the end of a run."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _blas_lines(user_apis=("blas",)) -> list[str]:
    """threadpoolctl's view of the loaded thread pools: library, version, kernel, threads, file."""
    from threadpoolctl import threadpool_info
    return [" ".join(filter(None, (info.get("internal_api"), info.get("version"),
                                   info.get("architecture") and f"kernel={info['architecture']}",
                                   f"threads={info.get('num_threads')}",
                                   f"({os.path.basename(info.get('filepath', ''))})")))
            for info in threadpool_info() if info.get("user_api") in user_apis]


def numpy_blas_report() -> str:
    """The BLAS library numpy calls and the kernel it picked for this CPU (threadpoolctl)."""
    try:
        import numpy as np
        np.ones(1) @ np.ones(1)
        return "numpy BLAS: " + ("; ".join(_blas_lines()) or "(threadpoolctl sees none)")
    except ImportError:
        return "numpy BLAS: (install threadpoolctl to see which kernel runs)"


def torch_report() -> str:
    """PyTorch's CPU kernel libraries: its version, the ISA its kernels dispatch to, oneDNN (convolutions),
    its BLAS, the threads (torch.__config__), and the thread pools threadpoolctl sees once it is loaded."""
    try:
        import torch
    except ImportError:
        return "PyTorch: not installed"
    import re
    show = torch.__config__.show()
    dnn = re.search(r"(?:MKL-DNN|oneDNN) (v[\d.]+)", show)
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", show)
    blas = re.search(r"BLAS_INFO=(\w+)", show)
    out = (f"PyTorch {torch.__version__}: CPU kernels {torch.backends.cpu.get_cpu_capability()}, "
           f"oneDNN {dnn.group(1) if dnn else 'none'}, BLAS {blas.group(1) if blas else '?'}"
           f"{' ' + mkl.group(1) if mkl else ''}, {torch.get_num_threads()} threads")
    try:
        out += "; thread pools: " + "; ".join(_blas_lines(("blas", "openmp")))
    except ImportError:
        pass
    return out


def cpu_model() -> str:
    """Returns the CPU's model name: /proc/cpuinfo's "model name", else platform.processor()."""
    import platform
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


@dataclass
class TaskResult:
    """One task's tuning over every template that served it: `tunekit.tune` returns one TaskState per
    (task, template); this is what the task got, as a TaskState would say it for a single template.

    Attributes:
        name: the task's name (its workload name, else op(args)).
        workload: the workload key the templates' states share (`TaskKey.workload`).
        flops: the task's flop count.
        states: its TaskStates, one per template.
        trials: every known trial of the task (earlier runs too), all templates, in the order measured.
        curve: the task's best cost (seconds) after each of `trials` (inf before the first ok one).
        best: the fastest ok trial of any template, or None; template: its template's name.
        done: trials of this run, all templates.
        tuner_s, measure_s: the tuner's own time (fitting, proposing) and measuring time, all templates.
    """
    name: str
    workload: str
    flops: int
    states: list = field(repr=False)
    trials: list = field(repr=False)
    curve: list
    best: object
    template: str | None
    done: int
    tuner_s: float
    measure_s: float

    @property
    def best_gflops(self) -> float:
        return self.best.gflops(self.flops) if self.best is not None else 0.0

    def gflops_curve(self, last: int | None = None) -> list[float]:
        """Best GFLOPS so far after each trial (of the `last` trials only, when given; 0 before an ok one)."""
        curve = self.curve if last is None else self.curve[len(self.curve) - last:] if last > 0 else []
        return [self.flops / c / 1e9 if c != float("inf") else 0.0 for c in curve]

    def best_within(self, n: int) -> tuple[object, str | None]:
        """The fastest ok trial among the task's first `n` trials, all templates, in the order measured
        (what `n` trials of its tuning found), and its template's name; (None, None) when none ran ok."""
        best = min((t for t in self.trials[:n] if t.ok), key=lambda t: t.cost, default=None)
        owner = next((st for st in self.states if best is not None and any(t is best for t in st.trials)), None)
        return best, owner.ts.template.name if owner else None


def per_task(states) -> list[TaskResult]:
    """Group `tunekit.tune`'s TaskStates by task (their workload key), in the order the tasks came: each
    task's best is the fastest ok trial of any of its templates, its trials the sum over them, its curve the
    best so far after each of its trials, all templates merged in the order they were measured."""
    groups: dict[str, list] = {}
    for st in states:
        groups.setdefault(st.key.workload, []).append(st)
    out = []
    for key, sts in groups.items():
        # (timestamp, template, order) keeps each template's own order where timestamps tie
        merged = sorted(((t.timestamp, k, i), t) for k, st in enumerate(sts) for i, t in enumerate(st.trials))
        trials = [t for _, t in merged]
        curve, best = [], None
        for t in trials:
            if t.ok and (best is None or t.cost < best.cost):
                best = t
            curve.append(best.cost if best is not None else float("inf"))
        owner = next((st for st in sts if best is not None and any(t is best for t in st.trials)), None)
        out.append(TaskResult(
            name=sts[0].ts.task.name, workload=key, flops=sts[0].ts.task.flops, states=sts, trials=trials,
            curve=curve, best=best, template=owner.ts.template.name if owner else None,
            done=sum(st.done for st in sts), tuner_s=sum(st.fit_s + st.propose_s for st in sts),
            measure_s=sum(st.measure_s for st in sts)))
    return out


def geomean_worst(ratios: dict[str, float]) -> tuple[float, str, float] | None:
    """The geometric mean of `ratios` (name -> ratio), and the name and ratio of the lowest; None if empty."""
    if not ratios:
        return None
    worst = min(ratios, key=lambda k: ratios[k])
    return math.exp(sum(map(math.log, ratios.values())) / len(ratios)), worst, ratios[worst]


def _child(fn, args, q):
    q.put(fn(*args))


def in_process(fn, *args):
    """Run fn(*args) in a fresh spawned process and return its result
    (RuntimeError if the process dies without one, e.g. a driver crash)."""
    import queue
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(fn, args, q))
    p.start()
    while True:
        try:
            out = q.get(timeout=1.0)
            break
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"{fn.__name__} died (exit code {p.exitcode})") from None
    p.join()
    return out


def time_fn(fn, min_s: float = 0.2, repeat: int = 5) -> list[float]:
    """Seconds per call: `repeat` timings of enough calls to last `min_s` each."""
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, int(min_s / max(time.perf_counter() - t0, 1e-7)))
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return out


class Timing(tuple):
    """(median, min, max) over rounds of one side's timing; `.rounds` keeps every round's value, in the
    order timed, for the results file."""
    rounds: list

    def __new__(cls, rounds: list) -> Timing:
        t = super().__new__(cls, (statistics.median(rounds), min(rounds), max(rounds)))
        t.rounds = list(rounds)
        return t

    def as_dict(self) -> dict:
        return {"median": self[0], "min": self[1], "max": self[2], "rounds": self.rounds}


def rotation(names: list, r: int) -> list:
    """`names` in the order of round `r`: ABC, BCA, CAB, ... so that no side always runs first or after the same one."""
    return names[r % len(names):] + names[:r % len(names)]


def rotate(sides: dict, rounds: int = 3) -> dict:
    """Run each side in its own fresh process, `rounds` rounds, the order of the sides rotating from
    round to round (ABC, BCA, CAB, ...) so that no side always runs first or after the same one.
    sides: name -> (fn, args). Returns name -> what fn returned, per round."""
    names = list(sides)
    got: dict = {k: [] for k in names}
    for r in range(rounds):
        for name in rotation(names, r):
            fn, args = sides[name]
            got[name].append(in_process(fn, *args))
    return got


def alternate(sides: dict, rounds: int = 3) -> dict:
    """`rotate` the sides, each fn returning a list of seconds (its repeats; [] = nothing to time).

    Returns name -> Timing: (median, min, max) over the rounds of each round's median (the headline and
    the spread: never the best round alone), or None for a side that timed nothing."""
    got = {k: [statistics.median(secs) for secs in v if secs] for k, v in rotate(sides, rounds).items()}
    return {k: Timing(v) if v else None for k, v in got.items()}


def rounds_args(doc: str, trials: int = 8) -> argparse.Namespace:
    """The arguments of a benchmark that tunes a database and times rounds: --quick (2 rounds),
    --rounds, --trials (per task of the database); `doc`: the script's docstring."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=trials, help=f"trials per task of the database (default {trials})")
    a = ap.parse_args()
    a.rounds = 2 if a.quick else a.rounds
    return a


_PEAK_IR = """
declare <{w} x float> @llvm.fmuladd.v{w}f32(<{w} x float>, <{w} x float>, <{w} x float>)
define void @peak(i64 %n, float* %out) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
{phis}
{fmas}
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
{sums}
  %e = extractelement <{w} x float> %s{last}, i32 0
  store float %e, float* %out
  ret void
}}
"""


def _peak_shape() -> tuple[str, int, int]:
    """The host as LLVM sees it; returns (CPU name, float32 lanes of its widest vectors, FMA chains per core).
    Chains: 12 of 16 ymm / 24 of 32 zmm registers, leaving room for the constant and above what hides
    the FMA latency (2 pipes x 4-5 cycles = 8-10 chains in flight)."""
    import llvmlite.binding as llvm
    feats = llvm.get_host_cpu_features()
    w = 16 if feats.get("avx512f") else 8 if feats.get("avx") else 4
    return llvm.get_host_cpu_name(), w, 24 if w == 16 else 12


def _peak_kernel():
    """Compile `peak(n, out)`: n iterations of `chains` independent vector FMAs (a = a * c + c; llvm.fmuladd
    fuses where the host has FMA); returns (ctypes function, flops per iteration, the engine to keep alive)."""
    import ctypes

    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu, w, chains = _peak_shape()
    vec = f"<{w} x float>"
    one = f"{vec} <{', '.join(['float 0x3FF0000020000000'] * w)}>"
    phis = "\n".join(f"  %a{k} = phi {vec} [zeroinitializer, %entry], [%b{k}, %loop]" for k in range(chains))
    fmas = "\n".join(f"  %b{k} = call {vec} @llvm.fmuladd.v{w}f32({vec} %a{k}, {one}, {one})" for k in range(chains))
    sums = "\n".join([f"  %s0 = fadd {vec} %b0, %b1"] + [f"  %s{k - 1} = fadd {vec} %s{k - 2}, %b{k}"
                                                          for k in range(2, chains)])
    ir = _PEAK_IR.format(w=w, phis=phis, fmas=fmas, sums=sums, last=chains - 2)
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(ir), tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(ctypes.c_float))(engine.get_function_address("peak"))
    return fn, chains * w * 2, engine


def _peak_child(seconds: float, rounds: int, barrier, q) -> None:
    """One core's share of `fma_peak` (a spawned process): compile, size a call to ~5 ms, then `rounds` times
    wait for every core at the barrier and call the kernel for `seconds`; puts the GFLOPS of each round."""
    import ctypes
    fn, flops, _engine = _peak_kernel()
    out, n = ctypes.c_float(), 1 << 16
    t0 = time.perf_counter()
    fn(n, ctypes.byref(out))
    n = max(n, int(n * 0.005 / max(time.perf_counter() - t0, 1e-7)))
    rates = []
    for _ in range(rounds):
        barrier.wait(timeout=120)
        calls, t0 = 0, time.perf_counter()
        while (t := time.perf_counter() - t0) < seconds:
            fn(n, ctypes.byref(out))
            calls += 1
        rates.append(calls * n * flops / t / 1e9)
    q.put(rates)


def fma_peak(seconds: float = 0.3, rounds: int = 3) -> float:
    """This machine's float32 FMA throughput on all cores at once: one spawned process per usable core, each
    running a loop of independent vector FMAs (`_peak_kernel`, the widest vectors the host has) for `seconds`
    after a common barrier, `rounds` times. The ceiling every CPU figure should be read against.

    Returns the best round's GFLOPS summed over the processes. Raises ImportError without llvmlite and
    RuntimeError if a process dies."""
    import queue

    import llvmlite.binding  # noqa: F401  (ImportError here, not in the children)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(cores), ctx.Queue()
    procs = [ctx.Process(target=_peak_child, args=(seconds, rounds, barrier, q), daemon=True) for _ in range(cores)]
    for p in procs:
        p.start()
    got = []
    try:
        while len(got) < cores:
            try:
                got.append(q.get(timeout=1.0))
            except queue.Empty:
                if any(p.exitcode for p in procs):
                    raise RuntimeError(f"an fma_peak process died (exit codes {[p.exitcode for p in procs]})") \
                        from None
    finally:
        for p in procs:
            p.join(timeout=5 if len(got) == cores else 0)
            if p.is_alive():
                p.kill()
                p.join()
    return max(map(sum, zip(*got)))
