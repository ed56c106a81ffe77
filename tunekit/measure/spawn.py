"""Code that runs inside build workers (and sets up the isolated runner process).

Workers are spawned, never forked (a fork after xgboost/lightgbm ran OpenMP can
hang), so everything they need travels as (component name, Options JSON) specs.
"""
from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import replace

import numpy as np

from tunekit.records import BUILD_ERROR, Outcome
from tunekit.task import TaskSpec

_TARGETS: dict = {}
_SPACES: dict = {}


def make_target(spec: tuple[str, str]):
    """The Target for (name, options JSON), cached per process."""
    t = _TARGETS.get(spec)
    if t is None:
        from tunekit.plugin.registry import registry
        cls = registry().component("target", spec[0])
        t = _TARGETS[spec] = cls(cls.Options.model_validate_json(spec[1]))
    return t


def warm(target_spec) -> None:
    """Make the target and describe its device (its plugin and compiler imported), so that the
    builds that follow in this worker start at once."""
    make_target(target_spec).device()


def task_space(target_spec, task_spec: TaskSpec):
    key = (target_spec, task_spec)
    ts = _SPACES.get(key)
    if ts is None:
        from tunekit.plugin.registry import task_of
        ts = _SPACES[key] = task_of(task_spec).bind(make_target(target_spec))
    return ts


def init_worker(max_bytes: int | None, modules: dict[str, str], parent: int) -> None:
    """Set up a spawned worker: exit with the parent process `parent` however it
    dies, leave Ctrl-C to the parent (which stops the worker), register the
    parent's hand-registered plugin modules, and cap the address space so a
    runaway build fails alone."""
    import importlib

    from tunekit.plugin.manager import plugins
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})   # held off since the start (`spawning`)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="tunekit-parent-watch").start()
    p = plugins()
    for name, module in modules.items():
        if not p.pm.has_plugin(name):
            p.register(importlib.import_module(module), name)
    if max_bytes:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


def _watch_parent(parent: int, every_s: float = 0.25) -> None:
    """Exit this process once `parent` is gone (kill -9 of the tuner leaves no orphan)."""
    while True:
        time.sleep(every_s)
        if os.getppid() != parent:
            os._exit(0)


def build(target_spec, task_spec: TaskSpec, index: int, ts=None, entry: str | None = None) -> Outcome:
    """Lower config `index` and compile it (in a worker, or inline when `ts` is given), its
    kernel named `entry` (default: the program's own name)."""
    t0 = time.perf_counter()
    try:
        ts = ts or task_space(target_spec, task_spec)
        program = ts.program(index)
        art = ts.target.build(replace(program, name=entry) if entry else program)
        return Outcome(artifact=art, seconds=time.perf_counter() - t0)
    except Exception as e:
        return Outcome(error=BUILD_ERROR, message=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0)


def features(target_spec, task_spec: TaskSpec, indices: list[int], kind: str) -> list[np.ndarray]:
    """Feature vectors of kind `kind` of configs `indices` (in a worker)."""
    ts = task_space(target_spec, task_spec)
    return [ts.features(i, kind) for i in indices]


def spawnable(component) -> bool:
    """Whether a spawned process can rebuild `component` from its spec (its plugin is importable there)."""
    from tunekit.plugin.manager import plugins
    from tunekit.plugin.registry import entry_of
    entry = entry_of(component)
    return entry is not None and plugins().importable(entry.plugin)


@contextmanager
def spawning():
    """Start child processes with Ctrl-C held off. A child starts with SIGINT blocked (the
    mask is inherited through exec) until `init_worker` ignores it: a Ctrl-C that reaches
    the process group while the child imports is dropped instead of printing its traceback.
    In the main thread a Ctrl-C that comes while a child is being started is raised once it
    is started: a start cut short leaves a child waiting for its instructions, which prints a
    traceback when this process exits. No Ctrl-C is lost."""
    from multiprocessing import resource_tracker
    held: list = []
    old = None
    if threading.current_thread() is threading.main_thread() and callable(signal.getsignal(signal.SIGINT)):
        old = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        resource_tracker.ensure_running()   # first: starting it unblocks SIGINT in this thread
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)   # runs a Ctrl-C still pending first (it lands in `held`)
            if held:
                old(signal.SIGINT, held[0])


@contextmanager
def main_not_reimported():
    """Spawned workers need nothing from the caller's script; without this, spawning
    re-runs a script that lacks an `if __name__ == "__main__"` guard in every worker."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    for k in saved:
        setattr(main, k, None) if k == "__spec__" else delattr(main, k)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)
