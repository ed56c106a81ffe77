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
from .targets import RunSettings

_TARGETS: dict = {}
_SPACES: dict = {}
_DATA: dict = {}
_TASKS: dict = {}


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
    """Inputs drawn from the seed and the numpy reference, cached per task."""
    key = (task.key, check.seed)
    d = _DATA.get(key)
    if d is None:
        if len(_DATA) > 4:
            _DATA.clear()
        rng = np.random.default_rng([check.seed, int(task.key, 16) % (1 << 32)])
        inputs = task.op.random_inputs(task.args, rng)
        ref = task.op.reference(*inputs, **task.args)
        time.sleep(0.05)  # let BLAS worker threads go idle before anything is timed
        d = _DATA[key] = (inputs, ref)
    return d


_PROBE: dict = {"recent": []}   # the probe's operands; (when, seconds) of its recent runs
_PROBE_WINDOW_S = 60.0   # "best speed" is the best of the last minute: a lasting slowdown (a lower clock) is the norm


def machine_speed() -> float:
    """Speed of the machine now, as a fraction of its best in the last minute: best of 3
    runs of a fixed probe, a 384^3 float32 matmul on numpy's BLAS (every core)."""
    if "a" not in _PROBE:
        _PROBE["a"] = np.random.default_rng(0).random((384, 384), np.float32)
        _PROBE["c"] = _PROBE["a"] @ _PROBE["a"]
    a, c = _PROBE["a"], _PROBE["c"]
    t = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        np.matmul(a, a, out=c)
        t = min(t, time.perf_counter() - t0)
    now = time.monotonic()
    recent = [(w, s) for w, s in _PROBE["recent"] if now - w <= _PROBE_WINDOW_S] + [(now, t)]
    _PROBE["recent"] = recent
    return min(s for _, s in recent) / t


def _speed(check: CheckSettings) -> float:
    return machine_speed() if check.quiet_ratio else 1.0   # probing off: always quiet


def wait_until_quiet(check: CheckSettings, deadline: float) -> float:
    """Other load on a shared machine comes and goes (cloud VMs were seen running at
    60% speed for seconds at a time): probe until the machine runs at `quiet_ratio`
    of its best speed, or until `deadline` (monotonic). Returns the last speed seen."""
    speed = _speed(check)
    while speed < check.quiet_ratio and time.monotonic() < deadline:
        time.sleep(0.2)
        speed = _speed(check)
    return speed


def execute(target, task, artifact, settings, check: CheckSettings) -> Outcome:
    """Check one artifact's output against the reference, then time it."""
    t0 = time.perf_counter()
    try:
        inputs, ref = _data(task, check)
        outs = [np.full(shape, np.nan, dtype) for shape, dtype in task.op.output_shapes(task.args)]
        arrays = inputs + outs
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
            deadline = time.monotonic() + check.quiet_wait_s
            for _ in range(check.retries + 1):
                before = wait_until_quiet(check, deadline)
                costs = target.run(artifact, arrays, settings)
                quiet = min(before, _speed(check))
                if quiet >= check.quiet_ratio:   # quiet before and right after: kept
                    break
            busy = "" if quiet >= check.quiet_ratio else \
                f"timed on a busy machine (it ran at {quiet:.0%} of its best speed)"
            # a noisy machine: re-time while the repeats disagree, keep the tightest set
            for _ in range(check.retries if len(costs) > 1 else 0):
                if spread(costs) <= check.max_spread:
                    break
                again = target.run(artifact, arrays, settings)
                costs = min(costs, again, key=spread)
        return Outcome(costs=[float(c) for c in costs], message=busy, seconds=time.perf_counter() - t0)
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
            out = execute(make_target(target_spec), task, artifact, settings, check)
        except Exception as e:
            out = Outcome(error=RUN_ERROR, message=f"{type(e).__name__}: {e}")
        conn.send(out)
