"""A spawned process that checks and times artifacts one at a time, so that a
kernel that crashes or hangs costs its own trial and never the caller."""
from __future__ import annotations

import multiprocessing as mp
import os
import time

from tunekit.measure.spawn import init_worker, main_not_reimported, make_target
from tunekit.plugin.registry import task_of
from tunekit.records import DEVICE_LOST, RUN_ERROR, RUN_TIMEOUT, Outcome
from tunekit.runners import TimingPolicy
from tunekit.task import TaskSpec


class IsolatedProcess:
    """Runs `tunekit.timing.execute` in a child process with a deadline per request;
    the child is started on first use and again after it crashed or hung."""

    def __init__(self, warmup_s: float = 0.0):
        self.warmup_s = warmup_s
        self._proc = self._conn = None
        #: whether the last request ended with the child killed (crash or hang)
        self.crashed = False

    def _child(self):
        if self._proc is None or not self._proc.is_alive():
            from tunekit.plugin.manager import plugins
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            self._proc = ctx.Process(target=_serve, args=(child, plugins().modules, self.warmup_s, os.getpid()),
                                     daemon=True, name="tunekit-runner")
            with main_not_reimported():
                self._proc.start()
            child.close()
            self._conn = parent
        return self._conn

    def run(self, target_spec: tuple[str, str], task: TaskSpec, artifact, policy: TimingPolicy) -> Outcome:
        """Check and time `artifact` of `task` on the target rebuilt from `target_spec`."""
        conn, proc = self._child(), self._proc
        self.crashed = False
        t0 = time.perf_counter()
        conn.send((target_spec, task, artifact, policy))
        # the first request of a task also draws inputs and computes the reference
        if conn.poll(policy.timeout_s):
            try:
                return conn.recv()
            except EOFError:
                pass
            proc.join(1)
            code = proc.exitcode
            self.kill()
            return Outcome(error=RUN_ERROR, message=f"the kernel crashed the runner (exit code {code})",
                           seconds=time.perf_counter() - t0)
        self.kill()
        return Outcome(error=RUN_TIMEOUT, message=f"no result within {policy.timeout_s:g} s",
                       seconds=time.perf_counter() - t0)

    def kill(self) -> None:
        self.crashed = True
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
            self._conn.close()
            self._proc = self._conn = None

    def close(self) -> None:
        """Ask the child to exit, and kill it if it does not within 2 s."""
        if self._proc is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
            self._proc.join(2)
            self.kill()
            self.crashed = False


def device_lost(out: Outcome, crashed: bool, target) -> Outcome:
    """`out`, or a "device lost" when the kernel took its runner down (`crashed`) and the
    device went with it: a crash alone is the kernel's own fault."""
    if out.error in (RUN_ERROR, RUN_TIMEOUT) and crashed and (why := target.available()):
        return Outcome(error=DEVICE_LOST, message=f"{why} (after: {out.message})", seconds=out.seconds)
    return out


def _serve(conn, modules: dict[str, str], warmup_s: float, parent: int) -> None:
    """The child: serve (target spec, task spec, artifact, policy) requests until None or EOF."""
    from tunekit.measure.timing import execute
    init_worker(None, modules, parent)
    tasks: dict = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        target_spec, task_spec, artifact, policy = msg
        try:
            task = tasks.get(task_spec) or tasks.setdefault(task_spec, task_of(task_spec))
            out = execute(make_target(target_spec), task, artifact, policy, warmup_s)
        except Exception as e:
            out = Outcome(error=RUN_ERROR, message=f"{type(e).__name__}: {e}")
        conn.send(out)
