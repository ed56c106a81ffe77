"""Shared benchmark plumbing: machine facts, side-by-side timing in fresh processes."""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time


def machine_report() -> str:
    """Load, cores, the BLAS kernel numpy will use (via threadpoolctl) and the FMA peak."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [f"machine: {os.cpu_count()} cores, load average {load}",
             f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '<unset>')} "
             f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '<unset>')}"]
    try:
        import numpy as np
        from threadpoolctl import threadpool_info
        np.ones(1) @ np.ones(1)
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                lines.append(f"numpy BLAS: {info.get('internal_api')} {info.get('version')} "
                             f"kernel={info.get('architecture')} threads={info.get('num_threads')}")
    except ImportError:
        lines.append("numpy BLAS: (install threadpoolctl to see which kernel runs)")
    try:
        cpu, w, _ = _peak_shape()
        lines.append(f"float32 FMA peak (measured now, all cores at once, {w} lanes): {fma_peak():.0f} GFLOPS "
                     f"on {cpu_model()} ({cpu})")
    except ImportError:
        lines.append("float32 FMA peak: (install llvmlite to measure it)")
    return "\n".join(lines)


def cpu_model() -> str:
    """Returns the CPU's model name: /proc/cpuinfo's "model name", else platform.processor()."""
    import platform
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


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


def alternate(sides: dict, rounds: int = 3) -> dict:
    """Time each side in its own process, alternating, `rounds` times.
    sides: name -> (fn, args) with fn returning a list of seconds."""
    got = {k: [] for k in sides}
    for _ in range(rounds):
        for name, (fn, args) in sides.items():
            got[name] += in_process(fn, *args)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in got.items()}


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
