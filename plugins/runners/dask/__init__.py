"""The `dask` runner: kernels are checked and timed on device workers of a Dask
distributed cluster (`tunekit worker`), several devices at once.

The tuning host builds (cross-compiling where the devices are other machines);
each artifact travels as bytes and plain data to a worker holding the device,
which measures it in an isolated child with a deadline. Dask does the transport,
the scheduling (one trial at a time per device, through a worker resource) and
worker loss: a trial whose worker died is run again on another (the scheduler's
`allowed-failures`; 1 retries once), after which it is a "device lost".
"""
from __future__ import annotations

import concurrent.futures as cf

from pydantic import Field

import tunekit
from tunekit.errors import TunekitError
from tunekit.records import DEVICE_LOST, RUN_ERROR, Outcome

from . import worker as _worker


def _missing() -> str | None:
    try:
        import distributed  # noqa: F401
    except ImportError as e:
        return f"the dask runner needs Dask distributed: pip install 'tunekit[distributed]' ({e})"
    return None


class DaskRunner(tunekit.Runner):
    """Times kernels on the Dask workers that hold one named device, one trial per device at a time."""
    name = "dask"

    class Options(tunekit.Options):
        scheduler: str = Field("tcp://127.0.0.1:8786", description="Address of the Dask scheduler "
                               "(`dask scheduler` prints it), e.g. \"tcp://10.0.0.5:8786\".")
        device: str = Field("", description="Name of the device to time on: the --device of the `tunekit "
                            "worker`s that hold it (required).")
        connect_timeout_s: float = Field(10.0, gt=0, description="Seconds to wait for the scheduler at start.")
        allow_emulated: bool = Field(False, description="Accept emulated workers (arm-cpu under qemu): their "
                                     "answers are checked for real, their timings are no device's.")
        tls_ca_file: str = Field("", description="TLS: CA certificate file (with tls:// addresses).")
        tls_cert: str = Field("", description="TLS: this client's certificate file.")
        tls_key: str = Field("", description="TLS: this client's private key file.")
        require_encryption: bool = Field(False, description="TLS: refuse unencrypted connections.")

    @classmethod
    def available(cls) -> str | None:
        return _missing()

    def start(self, target) -> None:
        super().start(target)
        if why := _missing():
            raise TunekitError(why)
        from distributed import Client
        o = self.options
        if not o.device:
            raise TunekitError("the dask runner needs a device: [measure] runner = { name = \"dask\", scheduler = "
                               "\"tcp://HOST:8786\", device = \"NAME\" } (the --device of its workers)")
        try:
            self.client = Client(o.scheduler, timeout=o.connect_timeout_s, security=_security(o, "client"),
                                 set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise TunekitError(f"cannot reach the Dask scheduler at {o.scheduler} within {o.connect_timeout_s:g} s "
                               f"({type(e).__name__}: {e}); start it with `dask scheduler` and workers with "
                               f"`tunekit worker --scheduler {o.scheduler} --device {o.device}`") from None
        try:
            self._fingerprint = self._check_devices()
        except BaseException:
            self.close()
            raise

    def _check_devices(self) -> str:
        """Every worker holding the device, checked: one target, one fingerprint, emulation allowed."""
        o, res = self.options, _worker.resource(self.options.device)
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        holding = [w for w, info in workers.items() if info.get("resources", {}).get(res)]
        if not holding:
            have = sorted({r.split(":", 1)[1] for info in workers.values() for r in info.get("resources", {})
                           if r.startswith("tunekit-device:")})
            raise TunekitError(f"no worker of the Dask scheduler at {o.scheduler} holds device {o.device!r} "
                               f"(devices there: {', '.join(have) or 'none'}); start one with `tunekit worker "
                               f"--scheduler {o.scheduler} --device {o.device} --target {self.target.name}`")
        facts = self.client.run(_worker.describe, self.target.spec(), workers=holding, on_error="return")
        bad = {w: f for w, f in facts.items() if isinstance(f, BaseException)}
        if bad:
            w, e = next(iter(bad.items()))
            raise TunekitError(f"device {o.device!r}: worker {w} cannot measure {self.target.name!r} kernels: {e}")
        emulated = [w for w, f in facts.items() if f["emulated"]]
        if emulated and not o.allow_emulated:
            raise TunekitError(f"device {o.device!r}: workers {', '.join(emulated)} are emulated (qemu): their "
                               "timings are no device's; set allow_emulated = true in the runner's options to "
                               "check kernels on them (their records get their own device fingerprint)")
        prints = {f["fingerprint"] for f in facts.values()}
        if len(prints) > 1:
            raise TunekitError(f"the workers of device {o.device!r} are different devices (fingerprints "
                               f"{', '.join(sorted(prints))}): give each kind of device its own name")
        self.workers = holding
        return prints.pop()

    def fingerprint(self) -> str | None:
        return self._fingerprint

    def submit(self, task, artifacts, policy) -> list[cf.Future]:
        spec, task_spec, res = self.target.spec(), task.spec(), {_worker.resource(self.options.device): 1}
        out = []
        for artifact in artifacts:
            remote = self.client.submit(_worker.measure, spec, task_spec, artifact, policy, resources=res, pure=False)
            local: cf.Future = cf.Future()
            remote.add_done_callback(lambda f, local=local: local.set_result(self._outcome(f)))
            out.append(local)
        return out

    def _outcome(self, remote) -> Outcome:
        """The worker's Outcome; a worker lost twice, or the scheduler lost, is a device lost."""
        from distributed import KilledWorker
        try:
            return remote.result()
        except KilledWorker as e:
            return Outcome(error=DEVICE_LOST, message=f"device {self.options.device!r}: the workers running this "
                           f"trial died ({e})")
        except (cf.CancelledError, OSError, TimeoutError) as e:
            return Outcome(error=DEVICE_LOST, message=f"lost the Dask scheduler at {self.options.scheduler} "
                           f"({type(e).__name__}: {e})")
        except Exception as e:
            return Outcome(error=RUN_ERROR, message=f"on the worker: {type(e).__name__}: {e}")

    def close(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.close(timeout=5)
            self.client = None


def _security(options, role: str):
    """A distributed.Security from TLS settings (None without them)."""
    if not (options.tls_ca_file or options.tls_cert or options.require_encryption):
        return None
    from distributed.security import Security
    return Security(tls_ca_file=options.tls_ca_file or None, require_encryption=options.require_encryption,
                    **{f"tls_{role}_cert": options.tls_cert or None, f"tls_{role}_key": options.tls_key or None})


@tunekit.hookimpl
def tunekit_runners():
    return [DaskRunner]


@tunekit.hookimpl
def tunekit_commands():
    from .command import WORKER
    return [WORKER]
