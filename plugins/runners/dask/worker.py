"""The device side of the `dask` runner: what a `tunekit worker` process runs.

One worker process holds one device, advertised as the Dask resource
`resource(device)` with one unit, so the scheduler sends it one trial at a time.
Each trial is checked and timed in an isolated child process with the policy's
deadline (Dask has no task timeout, and a crashing kernel must not take the
worker down); the child draws the task's inputs from the seed and caches them
and the numpy reference, as the local runner's child does.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading

from tunekit.errors import TunekitError
from tunekit.measure.isolated import IsolatedProcess, device_lost
from tunekit.records import RUN_ERROR, Outcome

#: the device this process serves (set by `serve`; functions the runner sends read it)
_SERVICE = None


def resource(device: str) -> str:
    """The Dask resource that stands for device `device`."""
    return f"tunekit-device:{device}"


class DeviceService:
    """A worker's device: its target (with the worker's own options, e.g. emulate) and
    the isolated process that measures on it."""

    def __init__(self, device: str, target):
        self.device, self.target = device, target
        self.process = IsolatedProcess()
        self.measured = 0
        self.lock = threading.Lock()   # one trial at a time, even if the worker has several threads
        self._resolved: dict = {}

    def resolve(self, host_spec: tuple[str, str]) -> tuple[tuple[str, str], object]:
        """The target to measure with, as (spec, instance): the tuning host's options overridden
        by this worker's own (made once per host spec)."""
        if host_spec not in self._resolved:
            name, options = host_spec
            if name != self.target.name:
                raise TunekitError(f"worker for device {self.device!r} measures {self.target.name!r} kernels, "
                                   f"not {name!r}")
            merged = {**json.loads(options), **self.target.options.model_dump(exclude_unset=True)}
            target = type(self.target)(type(self.target.options)(**merged))
            self._resolved[host_spec] = (target.spec(), target)
        return self._resolved[host_spec]


def describe(host_spec: tuple[str, str]) -> dict:
    """What this worker's device is, for the runner's start: its target, whether it is
    emulated, and the fingerprint its records are keyed by (with the host's options)."""
    svc = _service()
    _, target = svc.resolve(host_spec)
    return {"device": svc.device, "target": target.name, "emulated": bool(getattr(target, "emulated", False)),
            "fingerprint": target.device().fingerprint(), "measured": svc.measured, "pid": os.getpid()}


def measure(host_spec: tuple[str, str], task_spec, artifact, policy) -> Outcome:
    """Check and time one artifact on this worker's device (what the runner submits)."""
    svc = _service()
    try:
        spec, target = svc.resolve(host_spec)
    except TunekitError as e:
        return Outcome(error=RUN_ERROR, message=str(e))
    with svc.lock:
        out = device_lost(svc.process.run(spec, task_spec, artifact, policy), svc.process.crashed, target)
        svc.measured += 1
    return out


def _service() -> DeviceService:
    if _SERVICE is None:
        raise TunekitError("this Dask worker is not a tunekit device worker (start one with `tunekit worker`)")
    return _SERVICE


def serve(scheduler: str, device: str, target, nthreads: int = 1, security=None) -> None:
    """Run a Dask worker for `device` until it is stopped or loses its scheduler."""
    import asyncio

    from distributed import Worker
    global _SERVICE
    _SERVICE = DeviceService(device, target)
    # workers on one machine that hold different devices (other cores, another GPU) time at the same
    # time; the same device (name, target options, cores) is still timed by one process at a time
    held = json.dumps([device, target.spec(), sorted(os.sched_getaffinity(0))]).encode()
    os.environ["TUNEKIT_TIMING_LOCK"] = f"tunekit-timing-{hashlib.blake2b(held, digest_size=8).hexdigest()}.lock"

    import dask
    # the worker shares its core with the kernels it times: no sampling profiler (every 10 ms), GIL
    # monitor (1 ms) or frequent health checks competing with them
    dask.config.set({"distributed.worker.profile.enabled": False, "distributed.admin.system-monitor.gil.enabled":
                     False, "distributed.admin.system-monitor.interval": "5s",
                     "distributed.worker.memory.monitor-interval": "2s", "distributed.admin.tick.interval": "1s"})

    async def run() -> None:
        worker = Worker(scheduler, nthreads=nthreads, resources={resource(device): 1}, security=security,
                        name=f"tunekit-{device}-{os.getpid()}", death_timeout=30, validate=False)
        try:
            await worker
        except (OSError, TimeoutError) as e:
            raise TunekitError(f"cannot reach the Dask scheduler at {scheduler}: {e}; start one with "
                               "`dask scheduler` and give its address") from None
        print(f"tunekit worker: device {device!r} ({target.name}) at {worker.address}, scheduler {scheduler}",
              flush=True)
        await worker.finished()

    try:
        asyncio.run(run())
    finally:
        _SERVICE.process.close()
