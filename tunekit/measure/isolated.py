"""A spawned process that checks and times artifacts one at a time, so that a
kernel that crashes or hangs costs its own trial and never the caller."""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from contextlib import suppress

from tunekit.measure.spawn import init_worker, main_not_reimported, make_target, spawning
from tunekit.plugin.registry import task_of
from tunekit.records import DEVICE_LOST, RUN_ERROR, RUN_TIMEOUT, Outcome
from tunekit.runners import TimingPolicy
from tunekit.task import TaskSpec


class IsolatedProcess:
    """Runs `tunekit.timing.execute` in a child process with a deadline per request;
    the child is started on first use and again after it crashed or hung. Requests
    come from one thread; `close` may come from another."""

    #: seconds a new child may take to start (interpreter, imports) before its first request
    start_timeout_s = 120.0

    def __init__(self, warmup_s: float = 0.0):
        self.warmup_s = warmup_s
        self._proc = self._conn = None
        self._lock = threading.Lock()   # a request and `close` never write to the pipe at once
        self._closed = False
        #: whether the last request ended with the child killed (crash or hang)
        self.crashed = False

    def _child(self):
        """The connection to a child ready for a request; None if it did not start or once closed."""
        with self._lock:
            if self._closed:
                return None
            if self._proc is not None and self._proc.is_alive():
                return self._conn
            from tunekit.plugin.manager import plugins
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            self._proc = ctx.Process(target=_serve, args=(child, plugins().modules, self.warmup_s, os.getpid()),
                                     daemon=True, name="tunekit-runner")
            with main_not_reimported(), spawning():
                self._proc.start()
            child.close()
            self._conn, proc = parent, self._proc
        # it says when it is ready: its start (seconds on a busy machine) is no kernel's time
        try:
            if parent.poll(self.start_timeout_s) and parent.recv() == "ready":
                return parent
        except (EOFError, OSError):   # it died starting, or `close` came meanwhile
            pass
        self.kill(proc)
        return None

    def run(self, target_spec: tuple[str, str], task: TaskSpec, artifact, policy: TimingPolicy) -> Outcome:
        """Check and time `artifact` of `task` on the target rebuilt from `target_spec`."""
        conn, proc = self._child(), self._proc
        self.crashed = False
        with self._lock:
            if conn is None or self._closed:
                why = "the runner was closed before this kernel ran" if self._closed else "the runner did not start"
                return Outcome(error=RUN_ERROR, message=why)
            t0 = time.perf_counter()
            conn.send((target_spec, task, artifact, policy))
        # the first request of a task also draws inputs and computes the reference
        try:
            if conn.poll(policy.timeout_s):
                return conn.recv()
        except EOFError:
            proc.join(1)
            code = proc.exitcode
            self.kill(proc)
            return Outcome(error=RUN_ERROR, message=f"the kernel crashed the runner (exit code {code})",
                           seconds=time.perf_counter() - t0)
        except OSError:   # `close` came meanwhile
            return Outcome(error=RUN_ERROR, message="the runner was closed while this kernel ran")
        self.kill(proc)
        return Outcome(error=RUN_TIMEOUT, message=f"no result within {policy.timeout_s:g} s",
                       seconds=time.perf_counter() - t0)

    def kill(self, proc=None) -> None:
        """Kill the child (when `proc` is given: if the child is still that process)."""
        self.crashed = True
        with self._lock:
            if self._proc is None or proc not in (None, self._proc):
                return
            proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        proc.kill()
        proc.join(5)
        conn.close()

    def close(self) -> None:
        """Ask the child to exit, and kill it if it does not within 2 s; no child starts after."""
        with self._lock:
            self._closed = True
            proc, conn = self._proc, self._conn
            if conn is not None:
                with suppress(OSError):
                    conn.send(None)
        if proc is not None:
            proc.join(2)
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
    conn.send("ready")
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
