"""Checking and timing one artifact in this process: what every runner calls
where its device is (the local runner's isolated process, a remote worker)."""
from __future__ import annotations

import fcntl
import os
import tempfile
import time
import traceback
from contextlib import contextmanager

import numpy as np

from tunekit.memory import arena
from tunekit.records import RUN_ERROR, WRONG_ANSWER, Outcome
from tunekit.runners import TimingPolicy
from tunekit.targets import RunSettings

_DATA: dict = {}


@contextmanager
def timing_lock():
    """Machine-wide: one tunekit process times kernels at a time (per device: a farm's
    workers on one machine, each on its own cores, name their own lock in the environment
    variable TUNEKIT_TIMING_LOCK, which their isolated children inherit)."""
    path = os.path.join(tempfile.gettempdir(), os.environ.get("TUNEKIT_TIMING_LOCK", "tunekit-timing.lock"))
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _data(task, policy: TimingPolicy):
    """The kernel's arrays (inputs drawn from the seed, then outputs) in one aligned
    arena, its outputs among them, the numpy reference outputs and the check's (rtol, atol);
    cached per task. Returns (arrays, outputs, reference, tolerance, whether they were made just now)."""
    key = (task.key, policy.seed)
    d = _DATA.get(key)
    if d is not None:
        return (*d, False)
    if len(_DATA) > 4:
        _DATA.clear()
    rng = np.random.default_rng([policy.seed, int(task.key, 16) % (1 << 32)])
    inputs = task.op.random_inputs(task.args, rng)
    ref = task.op.reference(*inputs, **task.args)
    rtol, atol = task.op.tolerance(task.args, inputs)
    tol = (rtol if policy.rtol is None else policy.rtol, atol if policy.atol is None else policy.atol)
    arrays = arena(inputs + [np.empty(shape, dtype) for shape, dtype in task.op.output_shapes(task.args)])
    d = _DATA[key] = (arrays, arrays[len(inputs):], ref, tol)
    return (*d, True)


def execute(target, task, artifact, policy: TimingPolicy, warmup_s: float = 0.0) -> Outcome:
    """Check one artifact's output against the reference, then time it (after running
    it for `warmup_s` seconds when it is the first kernel timed on new data)."""
    t0 = time.perf_counter()
    try:
        arrays, outs, ref, tol, fresh = _data(task, policy)
        for o in outs:   # NaN marks what the kernel never writes
            o[...] = np.nan if o.dtype.kind in "fc" else 0
        with timing_lock():
            if policy.check and getattr(target, "produces_output", True):
                target.load(artifact)(*arrays)
                bad = mismatch(outs, ref, *tol)
                if bad:
                    return Outcome(error=WRONG_ANSWER, message=bad, seconds=time.perf_counter() - t0)
            if policy.cutoff_s:
                # one run timed the target's way (device events on GPUs, not host time with copies)
                first = target.run(artifact, arrays, RunSettings(number=1, repeat=1, min_repeat_ms=0, warmup=0))[0]
                if first > policy.cutoff_s:
                    return Outcome(costs=[float(first)], message=f"timed by one run: slower than the cutoff "
                                   f"{policy.cutoff_s:.3g} s", seconds=time.perf_counter() - t0)
            if fresh and warmup_s:
                # the BLAS threads that computed the reference slowed kernels timed up to 0.5 s
                # later (the scheduler still balances against their recent load), and so did
                # idle cores' clocks: run the kernel until that has passed
                fn, until = target.load(artifact), time.monotonic() + warmup_s
                while time.monotonic() < until:
                    fn(*arrays)
            costs = target.run(artifact, arrays, policy.settings)
            # a noisy machine: re-time while the repeats disagree, keep the tightest set
            for _ in range(policy.retries if len(costs) > 1 else 0):
                if spread(costs) <= policy.max_spread:
                    break
                again = target.run(artifact, arrays, policy.settings)
                costs = min(costs, again, key=spread)
        return Outcome(costs=[float(c) for c in costs], seconds=time.perf_counter() - t0)
    except Exception as e:
        tb = traceback.format_exc(limit=-2)
        return Outcome(error=RUN_ERROR, message=f"{type(e).__name__}: {e}\n{tb}", seconds=time.perf_counter() - t0)


def spread(costs) -> float:
    """(max - min) / median of a config's repeated timings."""
    med = float(np.median(costs))
    return (max(costs) - min(costs)) / med if med > 0 else 0.0


def mismatch(outs, ref, rtol: float, atol) -> str:
    """Why `outs` fail the check against the reference outputs `ref` (integers exactly, floats within
    rtol and atol, atol an array where the op bounds each output's error), or "" when they pass."""
    for k, (o, r) in enumerate(zip(outs, ref)):
        if not (np.array_equal(o, r) if o.dtype.kind in "iub" else np.allclose(o, r, rtol=rtol, atol=atol)):
            diff = np.abs(o.astype(np.float64) - r)
            n_bad = int(np.sum(~(diff <= atol + rtol * np.abs(r))))
            return (f"output {k}: {n_bad} of {o.size} elements differ from the reference "
                    f"(max abs error {np.nanmax(diff) if np.isfinite(diff).any() else 'nan'}, "
                    f"{int(np.isnan(o).sum())} never written; rtol={rtol:g}, atol={np.max(atol):g})")
    return ""
