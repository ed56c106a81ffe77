"""The Runner contract: where built kernels are checked and timed.

The tuner builds a batch of configs on this machine (build workers), then hands
the artifacts to its runner and records each outcome as its future completes.
`local` (the default) times them one at a time in an isolated process on this
machine; a runner may instead time several at once on different devices (a
device farm), returning futures that complete in any order.

Order of calls, per tuning run: `start(target)` once, then `submit(...)` once per
batch (the tuner waits for every future of a batch before the next), then
`close()` (also after an error or Ctrl-C).
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tunekit.component import Component
from tunekit.targets import RunSettings

if TYPE_CHECKING:
    from tunekit.records import Outcome
    from tunekit.targets import Artifact, Target
    from tunekit.task import Task


@dataclass(frozen=True)
class TimingPolicy:
    """How one batch is checked and timed; passed with every `submit`.

    Attributes:
        settings: how the target times a kernel (number, repeat, min_repeat_ms, warmup, flush_cache).
        timeout_s: seconds one artifact may take (check and timing) before it is a run timeout.
        check: compare the first run's output with the op's numpy reference.
        rtol, atol: tolerances of the check (None: the op's, scaled with the reduction length).
        seed: the seed the task's inputs are drawn from (same inputs in every process).
        cutoff_s: a kernel whose first run is slower than this is timed by that run alone
            (it is far from the best, and full timing would cost seconds); None: time fully.
        max_spread: re-time while (max - min) / median of the repeats exceeds this.
        retries: at most this many re-timings; the tightest set of repeats is kept.
    """
    settings: RunSettings = field(default_factory=RunSettings)
    timeout_s: float = 10.0
    check: bool = True
    rtol: float | None = None
    atol: float | None = None
    seed: int = 0
    cutoff_s: float | None = None
    max_spread: float = 0.05
    retries: int = 2


class Runner(Component):
    """Checks and times built artifacts somewhere: this machine, or devices elsewhere.

    A runner never builds (artifacts come built, picklable, as plain data) and
    never records: it returns outcomes, and the core stores them. To check and
    time one artifact in a process, call `tunekit.timing.execute`; it draws the
    task's inputs from `policy.seed`, poisons the outputs, compares with the
    reference and times the kernel with `policy.settings`. To run it in an isolated
    child with the policy's deadline, as `local` does, use
    `tunekit.isolated.IsolatedProcess` (and `tunekit.isolated.device_lost`).
    """

    def start(self, target: Target) -> None:
        """Prepare to time kernels of `target` (called once, before any `submit`).

        Args:
            target: the tuning run's target; rebuild it elsewhere from `target.spec()`.
        Raises:
            tunekit.errors.TunekitError: the runner cannot reach any device (say why and what to do);
                the tuning run stops before measuring anything.
        """
        self.target = target

    def submit(self, task: Task, artifacts: list[Artifact], policy: TimingPolicy) -> list[Future[Outcome]]:
        """Start checking and timing `artifacts` of `task`; return at once.

        Args:
            task: the task the artifacts were built for (rebuild it elsewhere from
                `task.spec()`).
            artifacts: built kernels, in the batch's order.
            policy: how to check and time them.
        Returns:
            one `concurrent.futures.Future` per artifact, in the same order, each
            resolving to a `tunekit.records.Outcome`: costs, or an error kind
            (run error, run timeout, wrong answer; "device lost" when the device
            went away, which the core does not count against the config). A future
            that raises is recorded as a run error naming the runner.
        """
        raise NotImplementedError

    def fingerprint(self) -> str | None:
        """Return the fingerprint of the devices this runner times on, when they are not
        the tuning host's (records are keyed by it, so records of different boards never
        mix); None (the default): the target's own, on this machine. Called after `start`."""
        return None

    def close(self) -> None:
        """Release processes, connections and devices; pending futures may be cancelled."""
