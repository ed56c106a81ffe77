"""The build pool: spawned worker processes that lower and compile configs, and
lower them for program features while the tuner scores candidates."""
from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, wait

from ._workers import build, features, init_worker, main_not_reimported, spawnable
from .records import BUILD_ERROR, BUILD_TIMEOUT, Outcome

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
            from ._plugins import plugins
            with main_not_reimported():
                self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                                 initializer=init_worker, initargs=(_WORKER_MEMORY, plugins().modules))
        return self._pool

    def _kill(self) -> None:
        if self._pool is not None:
            procs = list(getattr(self._pool, "_processes", {}).values())  # no public API kills a hung build
            self._pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                p.kill()
            self._pool = None

    def build(self, ts, indices: list[int]) -> list[Outcome]:
        """Lower and compile configs `indices` of task space `ts`: one Outcome each
        (the artifact, or a build error or timeout), in order."""
        if self.inline:
            return [build(self.spec, None, i, ts=ts) for i in indices]
        spec = ts.task.spec()
        with main_not_reimported():
            pool = self._get_pool()
            futs = [pool.submit(build, self.spec, spec, i) for i in indices]
        rounds = -(-len(indices) // self.workers)
        done, _ = wait(futs, timeout=self.timeout_s * rounds)
        out = []
        for f in futs:
            if f in done and f.exception() is None:
                out.append(f.result())
            elif f in done:
                out.append(Outcome(error=BUILD_ERROR, message=f"build worker died: {f.exception()}"))
            else:
                out.append(Outcome(error=BUILD_TIMEOUT, message=f"no build within {self.timeout_s:g} s"))
        if len(done) < len(futs) or any(f.exception() for f in done):
            self._kill()
        return out

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
            with main_not_reimported():
                pool = self._get_pool()
                futs = [pool.submit(features, self.spec, spec, c, kind) for c in chunks]
            return [f for fut in futs for f in fut.result()]
        except Exception:   # a broken pool or a config that fails to lower: the error shows here
            self._kill()
            return [ts.features(i, kind) for i in indices]

    def close(self) -> None:
        self._closed = True
        self._kill()
