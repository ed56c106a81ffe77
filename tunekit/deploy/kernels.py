"""Compiled kernels for downstream compilers: the best known config of an op, or a
default one when the database has none."""
from __future__ import annotations

import functools
import os
import threading
import warnings
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from tunekit.errors import ArgumentError, BuildError, TunekitError
from tunekit.measure.build_pool import BuildPool
from tunekit.measure.spawn import build as spawn_build
from tunekit.memory import ALIGN, misaligned
from tunekit.ops.epilogue import has_epilogue
from tunekit.plugin.registry import make_component, registry, task_of
from tunekit.plugin.registry import task as make_task
from tunekit.store.database import Database, TaskKey
from tunekit.task import Task, TaskSpace, TaskSpec

#: builds below this many run in this process (starting worker processes costs more)
_PARALLEL_MIN = 8

_local = threading.local()


@contextmanager
def apply_history_best(database: str):
    """Within this block, `tunekit.build` uses the best configs recorded in `database`
    (for a downstream compiler's own code; inside tunekit the database is an argument)."""
    stack = _local.__dict__.setdefault("stack", [])
    db = Database(database, readonly=True)
    stack.append(db)
    try:
        yield db
    finally:
        stack.pop()
        db.close()


class Kernel:
    """A compiled kernel: call it with the op's arrays (inputs, then outputs).
    Arrays from `tunekit.empty` (64-byte aligned) run at the speed that was tuned."""

    def __init__(self, fn, task: Task, config, tuned: bool, template: str = "", artifact=None):
        self.fn, self.task, self.config, self.tuned = fn, task, config, tuned
        self.template = template   #: the name of the template that scheduled it
        self.artifact = artifact   #: the `tunekit.Artifact` it was loaded from
        self.params = task.op.buffers(task.args)   #: (name, shape, dtype) of each array, in call order
        self._warned = False
        first_out = len(self.params) - task.op.num_outputs
        self._expected = [(shape, np.dtype(dtype), k >= first_out) for k, (_, shape, dtype) in enumerate(self.params)]

    def __call__(self, *arrays) -> None:
        # the fast test inline (a layer of a few microseconds is called through here); check says what is wrong
        if len(arrays) != len(self._expected) or not all(
                type(a) is np.ndarray and a.shape == shape and a.dtype == dt and (f := a.flags).c_contiguous
                and (f.writeable or not out) for a, (shape, dt, out) in zip(arrays, self._expected)):
            self.check(arrays)
        if not self._warned and (bad := misaligned(arrays)):
            self._warned = True
            warnings.warn(f"{self.task.name}: arguments {bad} are not {ALIGN}-byte aligned, and vector loads "
                          f"across cache lines can halve the kernel's speed; allocate them with tunekit.empty",
                          stacklevel=2)
        self.fn(*arrays)

    def bind(self, *arrays: np.ndarray) -> Callable[[], None]:
        """Check `arrays` once and return a call that runs the kernel on them (the target's own
        bind step where its kernels have one: `tunekit.Target.load`)."""
        self.check(arrays)
        bind = getattr(self.fn, "bind", None)
        return bind(*arrays) if bind else functools.partial(self.fn, *arrays)

    def check(self, arrays) -> None:
        """Raise ArgumentError for arrays that do not match the op's declared ones (a wrong call
        would write out of bounds), naming the argument, its expected shape and dtype, and the fix."""
        names = ", ".join(f"{n} {list(s)} {d}" for n, s, d in self.params)
        if len(arrays) != len(self.params):
            raise ArgumentError(f"{self.task.name}: the kernel takes {len(self.params)} arrays ({names}), "
                                f"got {len(arrays)}")
        for k, (a, (name, shape, dtype)) in enumerate(zip(arrays, self.params)):
            got_shape, got_dtype = tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", type(a).__name__))
            flags = getattr(a, "flags", None)
            layout_ok = flags is None or flags.c_contiguous
            if got_shape != shape or got_dtype != dtype or not layout_ok:
                got = f"{got_dtype} array of shape {list(got_shape)}" + ("" if layout_ok else ", not C-contiguous")
                raise ArgumentError(f"{self.task.name}: argument {k} ({name}) must be a C-contiguous {dtype} array "
                                    f"of shape {list(shape)}; got a {got} (np.ascontiguousarray(x, {dtype!r}) "
                                    "converts one)")
            if k >= len(self.params) - self.task.op.num_outputs and flags is not None and not flags.writeable:
                raise ArgumentError(f"{self.task.name}: argument {k} ({name}) is an output, but the array is "
                                    "read-only (numpy's writeable flag is off); pass a writeable array, e.g. "
                                    "tunekit.empty(shape) or x.copy()")

    def __repr__(self) -> str:
        how = "best known" if self.tuned else "default (no record)"
        return f"Kernel({self.task.name}, {how} config {self.config.index})"


def current_trials(db: Database, ts, key: TaskKey) -> list:
    """The trials of `key` as trials of task space `ts` today (re-indexed by their configs),
    those left out (records of an older version of the template whose configs are not in its
    space now) said once, as a warning."""
    trials = db.trials(key)
    now = [c for t in trials if (c := ts.current(t)) is not None]
    if len(now) < len(trials):
        warnings.warn(ts.stale_note(len(trials) - len(now)), stacklevel=3)
    return now


def _best_record(db: Database, ts) -> tuple[float, int] | None:
    """The cost and index of the best recorded config of task space `ts`: of its exact workload,
    else of the same op without its fused epilogue (the same space; the epilogue costs little)."""
    for task in [ts.task, ts.task.anchor()] if has_epilogue(ts.task.args) else [ts.task]:
        key = TaskKey(task.key, ts.target.name, ts.fingerprint, ts.template.name)
        if best := min((t for t in current_trials(db, ts, key) if t.ok), key=lambda t: t.cost, default=None):
            return best.cost, best.index
    return None


def best_record(db: Database, task: Task, target) -> tuple[float, int, object] | None:
    """The fastest recorded config of `task` on `target`: of the template the task names,
    else of any template that serves it. Returns (its cost in seconds, its index, its
    TaskSpace), or None."""
    found = [(*rec, ts) for ts in (v.bind(target) for v in task.variants(target)) if (rec := _best_record(db, ts))]
    return min(found, key=lambda f: f[0], default=None)


def best_config(db: Database, task: Task, target) -> tuple[object, int] | None:
    """`best_record`'s (TaskSpace, index), or None."""
    return (best[2], best[1]) if (best := best_record(db, task, target)) else None


def checked_best(db: Database, row: dict) -> dict:
    """A row of `Database.best` with its best config read against today's templates: the
    fastest record whose config is in its template's space now (a TaskSpace per template
    it was measured through, on the row's target and device). A row whose task cannot be
    made here (its plugin is not installed) is returned as it is, with `checked` False."""
    try:
        cls = registry().component("target", row["target"])
        target = cls(cls.Options(**row["target_options"]))
        found = []   # (trial, its task space) of every template
        for template in db.templates(row["workload"], row["target"], row["device"]):
            spec = TaskSpec(row["op"], tuple(sorted(row["args"].items())), template, db.computation(row["workload"]))
            ts = task_of(spec).bind(target)
            ts.fingerprint = row["device"]   # records of another machine's device are read as theirs
            key = TaskKey(row["workload"], row["target"], row["device"], template)
            found += [(t, ts) for t in current_trials(db, ts, key) if t.ok]
    except (TunekitError, ValueError):   # its plugin is gone, or its options are not valid today
        return {**row, "checked": False}
    if not found:
        return {**row, "template": None, "index": None, "config": None, "cost": None, "gflops": 0.0, "checked": True}
    trial, ts = min(found, key=lambda f: f[0].cost)
    return {**row, "template": ts.template.name, "index": trial.index, "config": trial.config, "cost": trial.cost,
            "gflops": ts.task.flops / trial.cost / 1e9, "checked": True}


def build(op: str | Task, args: dict | None = None, target="x86", template: str | None = None, *,
          database: Database | None = None) -> Kernel:
    """Compile `op(**args)` for `target` with the best config in `database` (default: the
    active `apply_history_best` one) of the template named, else of any that serves the
    op; with no record, the default template's default config (`ConfigSpace.default`).
    `op` may be a Task instead (`tunekit.Task(...)`, `tunekit.Task.from_compute(...)`),
    which holds its args: `build(task, target="x86")`.

    Raises:
        ArgumentError: a Task given with args.
    """
    tgt = make_component("target", target)
    if isinstance(op, Task):
        if args is not None:
            raise ArgumentError(f"tunekit.build({op.name}, ...): a Task holds its args; give the target by "
                                "keyword: tunekit.build(task, target=...)")
        task = op if template is None else Task(op.op, op.args, template=template, workload=op.workload,
                                                templates=op.templates)
    else:
        task = make_task(op, args, template=template)
    if database is None:
        stack = getattr(_local, "stack", [])
        database = stack[-1] if stack else None
    return kernel_of(task, tgt, best_record(database, task, tgt) if database is not None else None)


def choice(task: Task, target, best: tuple | None) -> tuple[TaskSpace, int]:
    """The task space and config index `task` runs on `target`: `best`'s (its `best_record`),
    or with no record its default template's default config."""
    if best is not None:
        return best[2], best[1]
    ts = task.bind(target)
    return ts, ts.space.default()


def loaded(target, ts: TaskSpace, index: int, artifact, tuned: bool) -> Kernel:
    """The Kernel of config `index` of `ts`, loaded from its built `artifact`; on a target that
    cannot run here (a cross-compiled one), a kernel that says so when it is run."""
    why = target.available()
    fn = target.load(artifact) if why is None else _Elsewhere(f"{target.name}: {artifact.entry} cannot run here: "
                                                               f"{why}; save the model and run it where it can")
    return Kernel(fn, ts.task, ts.space.get(index), tuned, ts.template.name, artifact)


class _Elsewhere:
    """A kernel built for a machine that is not this one: running it raises why."""

    def __init__(self, why: str):
        self.why = why

    def __call__(self, *arrays) -> None:
        raise TunekitError(self.why)

    def bind(self, *arrays) -> Callable[[], None]:
        return self


@contextmanager
def builders(target, n: int):
    """The build pool for about `n` builds on `target`, its workers started (None where building in
    this process is faster: few builds, or one core); closed after the block."""
    if n < _PARALLEL_MIN or (os.cpu_count() or 1) < 2:
        yield None
        return
    pool = BuildPool(target, timeout_s=600.0)
    pool.warm()
    try:
        yield pool
    finally:
        pool.close()


def build_all(target, jobs: list[tuple[TaskSpace, int, str]], pool: BuildPool | None = None) -> list:
    """Build each (task space, config index, entry name) job on `target`: the artifacts, in order,
    each kernel named as its job says; in `pool`'s worker processes, in parallel, when given
    (code generation is Python: one process compiles one kernel at a time).

    Raises:
        BuildError: a job failed to build (naming its task and config).
    """
    if pool is None:
        outcomes = [spawn_build(None, None, index, ts=ts, entry=entry) for ts, index, entry in jobs]
    else:
        outcomes = pool.build_jobs(jobs)
    for (ts, index, _), out in zip(jobs, outcomes):
        if out.error is not None:
            raise BuildError(f"{ts.task.name}: config {index} of template {ts.template.name!r} does not build on "
                             f"{target.name}: {out.message}")
    return [out.artifact for out in outcomes]


def kernel_of(task: Task, target, best: tuple | None) -> Kernel:
    """Compile `task` on `target` with `best` (its `best_record`), or with no record its
    default template's default config."""
    ts, index = choice(task, target, best)
    return loaded(target, ts, index, target.build(ts.program(index)), best is not None)
