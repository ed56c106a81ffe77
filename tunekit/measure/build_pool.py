"""The build pool: spawned worker processes that lower and compile configs, and
lower them for program features while the tuner scores candidates."""
from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, TimeoutError, wait
from concurrent.futures.process import BrokenProcessPool

from tunekit.measure.spawn import build, features, init_worker, main_not_reimported, spawnable, spawning, warm
from tunekit.records import BUILD_ERROR, BUILD_TIMEOUT, Outcome

_WORKER_MEMORY = 8 << 30   # address-space cap of a build worker: a runaway build fails alone


class BuildPool:
    """Builds batches of configs of one target in parallel worker processes.

    Components registered only in this process (test fixtures, NullTarget) cannot
    be rebuilt in a worker; their configs are built here, without isolation.
    """

    def __init__(self, target, workers: int = 0, timeout_s: float = 60.0):
        self.target, self.timeout_s = target, timeout_s
        self.workers = workers or os.cpu_count() or 1
        self.spec = target.spec()
        self.inline = not spawnable(target)
        self._pool = None
        self._closed = False

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            from tunekit.plugin.manager import plugins
            with main_not_reimported():
                self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                                 initializer=init_worker,
                                                 initargs=(_WORKER_MEMORY, plugins().modules, os.getpid()))
        return self._pool

    def _kill(self) -> None:
        if self._pool is not None:
            procs = list(getattr(self._pool, "_processes", {}).values())  # no public API kills a hung build
            results = getattr(self._pool, "_result_queue", None)
            self._pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                p.kill()
                p.join(5)
            # a worker killed while writing a result leaves the executor's thread reading bytes that never
            # come, and interpreter exit joins that thread: with this process's copy of the write end closed
            # too, the read ends (EOF) and the thread exits
            if results is not None:
                results._writer.close()
            self._pool = None

    def _submit(self, calls: list[tuple]) -> list:
        """Submit `(fn, *args)` calls; a pool broken by a worker that died while idle is replaced."""
        for _ in range(2):
            try:
                with main_not_reimported(), spawning():   # submitting may start a worker
                    pool = self._get_pool()
                    return [pool.submit(*c) for c in calls]
            except BrokenProcessPool:
                self._kill()
        raise BrokenProcessPool("the build pool broke twice while starting")

    def warm(self) -> None:
        """Start the workers now, each making the target (they import while the caller works on)."""
        if not self.inline:
            self._submit([(warm, self.spec)] * self.workers)

    def build(self, ts, indices: list[int]) -> list[Outcome]:
        """Lower and compile configs `indices` of task space `ts`: one Outcome each
        (the artifact, or a build error or timeout), in order. When a worker dies,
        every config then in flight is built again alone, in a fresh worker: only
        the one that kills its worker gets the build error."""
        return self.build_jobs([(ts, i, None) for i in indices])

    def build_jobs(self, jobs: list[tuple]) -> list[Outcome]:
        """`build` of (task space, config index, entry name or None) jobs of any tasks."""
        if self.inline:
            return [build(self.spec, None, i, ts=ts, entry=e) for ts, i, e in jobs]
        calls = [(build, self.spec, ts.task.spec(), i, None, e) for ts, i, e in jobs]
        futs = self._submit(calls)
        done, _ = wait(futs, timeout=self.timeout_s * -(-len(jobs) // self.workers))
        out = [Outcome(error=BUILD_TIMEOUT, message=f"no build within {self.timeout_s:g} s") if f not in done
               else f.result() if f.exception() is None else None for f in futs]
        if len(done) < len(futs) or None in out:
            self._kill()
        return [self._build_alone(c) if o is None else o for c, o in zip(calls, out)]

    def _build_alone(self, call: tuple) -> Outcome:
        (fut,) = self._submit([call])
        try:
            return fut.result(timeout=self.timeout_s)
        except TimeoutError:
            self._kill()
            return Outcome(error=BUILD_TIMEOUT, message=f"no build within {self.timeout_s:g} s")
        except Exception as e:   # BrokenProcessPool: the config took its worker down; or its result did not pickle
            self._kill()
            what = "killed its worker process" if isinstance(e, BrokenProcessPool) else "failed in its worker"
            return Outcome(error=BUILD_ERROR, message=f"building this config {what}: {type(e).__name__}: {e}")

    def extract(self, ts, indices: list[int], kind: str) -> list:
        """Feature vectors of kind `kind` of configs `indices`, extracted by the workers
        in parallel (lowering dominates); in this process if a worker fails or the
        pool is closed."""
        if self.inline or self._closed:
            return [ts.features(i, kind) for i in indices]
        spec = ts.task.spec()
        n = -(-len(indices) // self.workers)
        chunks = [indices[k:k + n] for k in range(0, len(indices), n)]
        try:
            futs = self._submit([(features, self.spec, spec, c, kind) for c in chunks])
            return [f for fut in futs for f in fut.result()]
        except Exception:   # a broken pool or a config that fails to lower: the error shows here
            self._kill()
            return [ts.features(i, kind) for i in indices]

    def close(self) -> None:
        self._closed = True
        self._kill()
