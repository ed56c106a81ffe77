"""Code that runs inside build workers and the isolated runner process.

Workers are spawned, never forked (a fork after xgboost/lightgbm ran OpenMP can
hang), so everything they need travels as (component name, Options JSON) specs.
"""
from __future__ import annotations

import fcntl
import os
import resource
import tempfile
import time
import traceback
from contextlib import contextmanager

import numpy as np

from .measure import BUILD_ERROR, RUN_ERROR, WRONG_ANSWER, CheckSettings, Outcome, TaskSpec
from .memory import arena
from .targets import RunSettings

_TARGETS: dict = {}
_SPACES: dict = {}
_DATA: dict = {}
_TASKS: dict = {}
_RUNNER_WARMUP_S = 0.5   # the isolated runner's warm-up of the first kernel timed on new data


def make_target(spec: tuple[str, str]):
    """The Target for (name, options JSON), cached per process."""
    t = _TARGETS.get(spec)
    if t is None:
        from ._registry import registry
        cls = registry().component("target", spec[0])
        t = _TARGETS[spec] = cls(cls.Options.model_validate_json(spec[1]))
    return t


def task_space(target_spec, task_spec: TaskSpec):
    key = (target_spec, task_spec)
    ts = _SPACES.get(key)
    if ts is None:
        ts = _SPACES[key] = task_spec.task().bind(make_target(target_spec))
    return ts


def init_worker(max_bytes: int | None, modules: dict[str, str]) -> None:
    """Set up a spawned worker: register the parent's hand-registered plugin
    modules, and cap the address space so a runaway build fails alone."""
    import importlib

    from ._plugins import plugins
    p = plugins()
    for name, module in modules.items():
        if not p.pm.has_plugin(name):
            p.register(importlib.import_module(module), name)
    if max_bytes:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
        except (ValueError, OSError):
            pass


def build(target_spec, task_spec: TaskSpec, index: int, ts=None) -> Outcome:
    """Lower config `index` and compile it (in a worker, or inline when `ts` is given)."""
    t0 = time.perf_counter()
    try:
        ts = ts or task_space(target_spec, task_spec)
        art = ts.target.build(ts.program(index))
        return Outcome(artifact=art, seconds=time.perf_counter() - t0)
    except Exception as e:
        return Outcome(error=BUILD_ERROR, message=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0)


def features(target_spec, task_spec: TaskSpec, indices: list[int], kind: str) -> list[np.ndarray]:
    """Feature vectors of kind `kind` of configs `indices` (in a worker)."""
    ts = task_space(target_spec, task_spec)
    return [ts.features(i, kind) for i in indices]


@contextmanager
def timing_lock():
    """Machine-wide: one tunekit process times kernels at a time."""
    path = os.path.join(tempfile.gettempdir(), "tunekit-timing.lock")
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _data(task, check: CheckSettings):
    """The kernel's arrays (inputs drawn from the seed, then outputs) in one aligned
    arena, its outputs among them, and the numpy reference outputs; cached per task.
    Returns (arrays, outputs, reference, whether they were made just now)."""
    key = (task.key, check.seed)
    d = _DATA.get(key)
    if d is not None:
        return (*d, False)
    if len(_DATA) > 4:
        _DATA.clear()
    rng = np.random.default_rng([check.seed, int(task.key, 16) % (1 << 32)])
    inputs = task.op.random_inputs(task.args, rng)
    ref = task.op.reference(*inputs, **task.args)
    arrays = arena(inputs + [np.empty(shape, dtype) for shape, dtype in task.op.output_shapes(task.args)])
    d = _DATA[key] = (arrays, arrays[len(inputs):], ref)
    return (*d, True)


def execute(target, task, artifact, settings, check: CheckSettings, warmup_s: float = 0.0) -> Outcome:
    """Check one artifact's output against the reference, then time it (after running
    it for `warmup_s` seconds when it is the first kernel timed on new data)."""
    t0 = time.perf_counter()
    try:
        arrays, outs, ref, fresh = _data(task, check)
        for o in outs:   # NaN marks what the kernel never writes
            o[...] = np.nan if o.dtype.kind in "fc" else 0
        with timing_lock():
            if check.check and getattr(target, "produces_output", True):
                target.load(artifact)(*arrays)
                bad = _mismatch(task, outs, ref, check)
                if bad:
                    return Outcome(error=WRONG_ANSWER, message=bad, seconds=time.perf_counter() - t0)
            if check.cutoff_s:
                # one run timed the target's way (device events on GPUs, not host time with copies)
                first = target.run(artifact, arrays, RunSettings(number=1, repeat=1, min_repeat_ms=0, warmup=0))[0]
                if first > check.cutoff_s:
                    return Outcome(costs=[float(first)], message=f"timed by one run: slower than the cutoff "
                                   f"{check.cutoff_s:.3g} s", seconds=time.perf_counter() - t0)
            if fresh and warmup_s:
                # the BLAS threads that computed the reference slowed kernels timed up to 0.5 s
                # later (the scheduler still balances against their recent load), and so did
                # idle cores' clocks: run the kernel until that has passed
                fn, until = target.load(artifact), time.monotonic() + warmup_s
                while time.monotonic() < until:
                    fn(*arrays)
            costs = target.run(artifact, arrays, settings)
            # a noisy machine: re-time while the repeats disagree, keep the tightest set
            for _ in range(check.retries if len(costs) > 1 else 0):
                if spread(costs) <= check.max_spread:
                    break
                again = target.run(artifact, arrays, settings)
                costs = min(costs, again, key=spread)
        return Outcome(costs=[float(c) for c in costs], seconds=time.perf_counter() - t0)
    except Exception as e:
        tb = traceback.format_exc(limit=-2)
        return Outcome(error=RUN_ERROR, message=f"{type(e).__name__}: {e}\n{tb}", seconds=time.perf_counter() - t0)


def spread(costs) -> float:
    """(max - min) / median of a config's repeated timings."""
    med = float(np.median(costs))
    return (max(costs) - min(costs)) / med if med > 0 else 0.0


def _mismatch(task, outs, ref, check: CheckSettings) -> str:
    rtol, atol = task.op.tolerance(task.args)
    rtol = check.rtol if check.rtol is not None else rtol
    atol = check.atol if check.atol is not None else atol
    for k, (o, r) in enumerate(zip(outs, ref)):
        if o.dtype.kind in "iub":
            ok = np.array_equal(o, r)
        else:
            ok = np.allclose(o, r, rtol=rtol, atol=atol)
        if not ok:
            diff = np.abs(o.astype(np.float64) - r)
            n_bad = int(np.sum(~(diff <= atol + rtol * np.abs(r))))
            return (f"output {k}: {n_bad} of {o.size} elements differ from the reference "
                    f"(max abs error {np.nanmax(diff) if np.isfinite(diff).any() else 'nan'}, "
                    f"{int(np.isnan(o).sum())} never written; rtol={rtol:g}, atol={atol:g})")
    return ""


def runner_main(conn, modules: dict[str, str]) -> None:
    """The isolated runner: serve ("run", target_spec, task_spec, artifact, settings, check) requests."""
    init_worker(None, modules)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        _, target_spec, task_spec, artifact, settings, check = msg
        try:
            task = _TASKS.get(task_spec) or _TASKS.setdefault(task_spec, task_spec.task())
            out = execute(make_target(target_spec), task, artifact, settings, check, _RUNNER_WARMUP_S)
        except Exception as e:
            out = Outcome(error=RUN_ERROR, message=f"{type(e).__name__}: {e}")
        conn.send(out)
