"""The `local` runner (the default): kernels are checked and timed on this machine,
one at a time, in an isolated process (in this process for components that exist
only here, such as test fixtures). Registered by the core (`tunekit.builtin`), so it is always there."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from pydantic import Field

from tunekit.component import Options as _Options
from tunekit.errors import TunekitError
from tunekit.measure.isolated import IsolatedProcess, device_lost
from tunekit.measure.spawn import spawnable
from tunekit.measure.timing import execute
from tunekit.records import RUN_ERROR, Outcome
from tunekit.runners import Runner, TimingPolicy


class LocalRunner(Runner):
    """Times kernels on this machine, one at a time, in an isolated process."""
    name = "local"

    class Options(_Options):
        warmup_s: float = Field(0.5, ge=0, description="Run the first kernel timed on new inputs for this long "
                                "first: the threads that computed the reference slow kernels timed just after.")

    def start(self, target) -> None:
        if why := target.available():
            raise TunekitError(f"target {target.name!r} cannot run here: {why}")
        super().start(target)
        self._inline = not spawnable(target)
        self._process = IsolatedProcess(self.options.warmup_s)
        self._queue = ThreadPoolExecutor(1, thread_name_prefix="tunekit-local-runner")   # one at a time

    def submit(self, task, artifacts, policy: TimingPolicy) -> list[Future]:
        if self._inline:
            return [self._queue.submit(execute, self.target, task, a, policy) for a in artifacts]
        spec, task_spec = self.target.spec(), task.spec()
        return [self._queue.submit(self._isolated, spec, task_spec, a, policy) for a in artifacts]

    def _isolated(self, spec, task_spec, artifact, policy: TimingPolicy) -> Outcome:
        if getattr(self, "_closed", False):   # taken from the queue as it was shut down: start no new process
            return Outcome(error=RUN_ERROR, message="the runner was closed before this kernel ran")
        return device_lost(self._process.run(spec, task_spec, artifact, policy), self._process.crashed,
                           self.target)

    def close(self) -> None:
        if hasattr(self, "_queue"):
            self._closed = True
            self._queue.shutdown(wait=False, cancel_futures=True)
            self._process.close()   # a kernel still running is killed, which ends the queue's thread
            self._queue.shutdown(wait=True)
