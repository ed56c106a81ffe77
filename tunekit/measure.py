"""Measurement: build configs in worker processes, time them one at a time in an
isolated runner, check every result against the op's numpy reference."""
from __future__ import annotations

import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

BUILD_ERROR, BUILD_TIMEOUT = "build error", "build timeout"
RUN_ERROR, RUN_TIMEOUT = "run error", "run timeout"
WRONG_ANSWER, DEVICE_LOST = "wrong answer", "device lost"
ERROR_KINDS = (BUILD_ERROR, BUILD_TIMEOUT, RUN_ERROR, RUN_TIMEOUT, WRONG_ANSWER, DEVICE_LOST)


@dataclass
class Trial:
    """One measured config: its costs (seconds per run, one per repeat) or its error."""
    index: int
    config: dict
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = field(default_factory=time.time)
    candidate: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def cost(self) -> float:
        """Median seconds per run (inf when the trial failed)."""
        return statistics.median(self.costs) if self.ok else float("inf")

    def gflops(self, flops: int) -> float:
        return flops / self.cost / 1e9 if self.ok else 0.0


@dataclass
class Outcome:
    """What building or running one config gave."""
    artifact: Any = None
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class TaskSpec:
    """Enough to rebuild a TaskSpace in another process."""
    op: str
    args: tuple
    template: str | None

    @classmethod
    def of(cls, task) -> TaskSpec:
        return cls(task.op.name, tuple(sorted(task.args.items())), task.template_name)

    def task(self):
        from .task import Task
        return Task(self.op, dict(self.args), template=self.template)


@dataclass
class CheckSettings:
    """How outputs are compared with the reference (None = the op's default), and
    `cutoff_s`: a kernel whose first (checked) run is slower than this is timed by
    that run alone — it is far from the best, and full timing would cost seconds.
    Timings whose repeats spread more than `max_spread` are redone up to `retries`
    times, keeping the tightest set."""
    check: bool = True
    rtol: float | None = None
    atol: float | None = None
    seed: int = 0
    cutoff_s: float | None = None
    max_spread: float = 0.05   #: re-time while (max - min) / median of the repeats exceeds this
    retries: int = 2


class Measurer:
    """Builds batches of configs in parallel, then times them one at a time.

    Components registered only in this process (test fixtures, NullTarget) cannot
    be rebuilt in a worker; they are built and run inline, without isolation.
    """

    def __init__(self, target, options, seed: int = 0):
        self.target, self.opt = target, options
        self.settings = options.run_settings()
        self.check = CheckSettings(options.check, options.rtol, options.atol, seed,
                                   max_spread=options.max_spread, retries=options.retries)
        self.spec = target.spec()
        self.inline = not _spawnable(target)
        self._pool = None
        self._runner = None
        self._closed = False

    # -- building -------------------------------------------------------------
    def _workers(self) -> int:
        import os
        return self.opt.build_workers or os.cpu_count() or 1

    def _get_pool(self):
        if self._pool is None:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            from ._plugins import plugins
            from ._workers import init_worker
            self._pool = ProcessPoolExecutor(self._workers(), mp_context=mp.get_context("spawn"),
                                             initializer=init_worker, initargs=(8 << 30, plugins().modules))
        return self._pool

    def _kill_pool(self) -> None:
        if self._pool is not None:
            procs = list(getattr(self._pool, "_processes", {}).values())  # no public API kills a hung build
            self._pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                p.kill()
            self._pool = None

    def build(self, ts, indices: list[int]) -> list[Outcome]:
        from ._workers import build
        if self.inline:
            return [build(self.spec, None, i, ts=ts) for i in indices]
        from concurrent.futures import wait
        spec = TaskSpec.of(ts.task)
        with _main_not_reimported():
            pool = self._get_pool()
            futs = [pool.submit(build, self.spec, spec, i) for i in indices]
        rounds = -(-len(indices) // self._workers())
        done, _ = wait(futs, timeout=self.opt.build_timeout_s * rounds)
        out = []
        for f in futs:
            if f in done and f.exception() is None:
                out.append(f.result())
            elif f in done:
                out.append(Outcome(error=BUILD_ERROR, message=f"build worker died: {f.exception()}"))
            else:
                out.append(Outcome(error=BUILD_TIMEOUT, message=f"no build within {self.opt.build_timeout_s:g} s"))
        if len(done) < len(futs) or any(f.exception() for f in done):
            self._kill_pool()
        return out

    def extract(self, ts, indices: list[int], kind: str) -> list:
        """Feature vectors of kind `kind` of configs `indices`, extracted by the build
        workers in parallel (lowering dominates); in this process if a worker fails
        or the measurer is closed."""
        from ._workers import features
        if self.inline or self._closed:
            return [ts.features(i, kind) for i in indices]
        spec = TaskSpec.of(ts.task)
        n = -(-len(indices) // self._workers())
        chunks = [indices[k:k + n] for k in range(0, len(indices), n)]
        try:
            with _main_not_reimported():
                pool = self._get_pool()
                futs = [pool.submit(features, self.spec, spec, c, kind) for c in chunks]
            return [f for fut in futs for f in fut.result()]
        except Exception:   # a broken pool or a config that fails to lower: the error shows here
            self._kill_pool()
            return [ts.features(i, kind) for i in indices]

    # -- running --------------------------------------------------------------
    def _get_runner(self):
        if self._runner is None or not self._runner[0].is_alive():
            import multiprocessing as mp

            from ._plugins import plugins
            from ._workers import runner_main
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=runner_main, args=(child, plugins().modules), daemon=True,
                               name="tunekit-runner")
            with _main_not_reimported():
                proc.start()
            child.close()
            self._runner = (proc, parent)
        return self._runner

    def _kill_runner(self) -> None:
        if self._runner is not None:
            proc, conn = self._runner
            proc.kill()
            proc.join(5)
            conn.close()
            self._runner = None

    def run(self, ts, artifact) -> Outcome:
        from ._workers import execute
        if self.inline:
            return execute(self.target, ts.task, artifact, self.settings, self.check)
        proc, conn = self._get_runner()
        t0 = time.perf_counter()
        conn.send(("run", self.spec, TaskSpec.of(ts.task), artifact, self.settings, self.check))
        # the first request of a task also draws inputs and computes the reference
        if conn.poll(self.opt.timeout_s):
            try:
                return conn.recv()
            except EOFError:
                pass
            proc.join(1)
            code = proc.exitcode
            self._kill_runner()
            return Outcome(error=RUN_ERROR, message=f"the kernel crashed the runner (exit code {code})",
                           seconds=time.perf_counter() - t0)
        self._kill_runner()
        return Outcome(error=RUN_TIMEOUT, message=f"no result within {self.opt.timeout_s:g} s",
                       seconds=time.perf_counter() - t0)

    def measure(self, ts, indices: list[int], on_trial=None) -> list[Trial]:
        """Build `indices` of task space `ts` in parallel, then time each alone;
        `on_trial(trial)` is called as each one is measured (to record it at once)."""
        built = self.build(ts, indices)
        trials = []
        for i, b in zip(indices, built):
            trial = Trial(i, ts.space.get(i).to_json(), build_s=b.seconds)
            if b.error:
                trial.error, trial.message = b.error, b.message
            else:
                r = self.run(ts, b.artifact)
                trial.costs, trial.error, trial.message, trial.run_s = r.costs, r.error, r.message, r.seconds
            trials.append(trial)
            if on_trial is not None:
                on_trial(trial)
        return trials

    def close(self) -> None:
        self._closed = True
        self._kill_pool()
        if self._runner is not None:
            proc, conn = self._runner
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(2)
            self._kill_runner()


@contextmanager
def _main_not_reimported():
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


def _spawnable(component) -> bool:
    """Whether a spawned worker can rebuild `component` from its spec."""
    from ._plugins import plugins
    from ._registry import KINDS, registry
    reg = registry()
    for kind in KINDS:
        entry = reg.components[kind].get(component.name)
        if entry is not None and entry.obj is type(component):
            return plugins().importable(entry.plugin)
    return False
