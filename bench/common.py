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
        lines.append(f"float32 FMA peak (measured now, all cores): {fma_peak():.0f} GFLOPS")
    except ImportError:
        lines.append("float32 FMA peak: (install llvmlite to measure it)")
    return "\n".join(lines)


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
declare <{w} x float> @llvm.fma.v{w}f32(<{w} x float>, <{w} x float>, <{w} x float>)
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


def fma_peak(seconds: float = 0.5) -> float:
    """This machine's float32 FMA throughput in GFLOPS, on all cores: a loop of
    16 independent vector FMA chains per core (the widest vectors the host has),
    compiled with llvmlite and run in one thread per core. The ceiling every
    CPU figure should be read against."""
    import ctypes
    import threading

    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    feats = llvm.get_host_cpu_features()
    w = 16 if feats.get("avx512f") else 8 if feats.get("avx") else 4
    chains = 16
    phis = "\n".join(f"  %a{k} = phi <{w} x float> [zeroinitializer, %entry], [%b{k}, %loop]" for k in range(chains))
    one = f"<{w} x float> <{', '.join(['float 0x3FF0000020000000'] * w)}>"
    fmas = "\n".join(f"  %b{k} = call <{w} x float> @llvm.fma.v{w}f32(<{w} x float> %a{k}, {one}, {one})"
                     for k in range(chains))
    sums = "\n".join([f"  %s0 = fadd <{w} x float> %b0, %b1"] +
                     [f"  %s{k - 1} = fadd <{w} x float> %s{k - 2}, %b{k}" for k in range(2, chains)])
    ir = _PEAK_IR.format(w=w, phis=phis, fmas=fmas, sums=sums, last=chains - 2)
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=feats.flatten(), opt=2)
    mod = llvm.parse_assembly(ir)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(ctypes.c_float))(engine.get_function_address("peak"))
    out = ctypes.c_float()
    n = 1 << 20
    t0 = time.perf_counter()
    fn(n, ctypes.byref(out))
    n = max(n, int(n * seconds / 3 / max(time.perf_counter() - t0, 1e-6)))
    cores = os.cpu_count() or 1
    best = 0.0
    for _ in range(3):
        threads = [threading.Thread(target=fn, args=(n, ctypes.byref(ctypes.c_float()))) for _ in range(cores)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = max(best, cores * n * chains * w * 2 / (time.perf_counter() - t0) / 1e9)
    return best
