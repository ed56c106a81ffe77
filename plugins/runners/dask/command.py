"""`tunekit worker`: serve this machine's device to a dask runner's farm (a subcommand
this plugin adds to the command line through the `tunekit_commands` hook)."""
from __future__ import annotations

import argparse
import json

from tunekit.commands import Command, arg
from tunekit.errors import TunekitError


def worker(args: argparse.Namespace) -> int:
    """Start a device worker: it joins the scheduler, advertises --device as a resource
    (one trial at a time), and checks and times the kernels the tuning hosts send it,
    each in an isolated process with a deadline. Runs until stopped (Ctrl-C)."""
    from tunekit import registry

    from . import DaskRunner, _missing, _security
    from . import worker as _worker
    try:
        options = json.loads(args.target_options)
    except json.JSONDecodeError as e:
        raise TunekitError(f"--target-options is not JSON ({e}); e.g. --target-options '{{\"mcpu\": "
                           "\"cortex-a72\"}'") from None
    if args.emulate:
        options["emulate"] = True
    cls = registry().component("target", args.target)
    try:
        target = cls(cls.Options(**options))
    except ValueError as e:
        raise TunekitError(f"--target {args.target}: bad options {options}: {e}") from None
    if why := target.available():
        raise TunekitError(f"this machine cannot run {args.target!r} kernels: {why}")
    if why := _missing():
        raise TunekitError(why)
    tls = DaskRunner.Options(tls_ca_file=args.tls_ca_file, tls_cert=args.tls_cert, tls_key=args.tls_key)
    _worker.serve(args.scheduler, args.device, target, args.nthreads, _security(tls, "worker"))
    return 0


WORKER = Command(
    "worker", worker, "serve this machine's device to a device farm (start `dask scheduler` first)",
    [arg("--scheduler", required=True, help="scheduler address, e.g. tcp://HOST:8786"),
     arg("--device", required=True, help="name to advertise this device under (the runner's `device`)"),
     arg("--target", default="x86", help="target this device runs: x86, arm-cpu, cuda, opencl, mali (default x86)"),
     arg("--target-options", default="{}", help="the target's options as JSON, e.g. '{\"device\": 1}'"),
     arg("--emulate", action="store_true", help="arm-cpu on a non-ARM host: run kernels under qemu-aarch64 "
         "(checked answers, emulated timings)"),
     arg("--nthreads", type=int, default=1, help="threads of the worker process (default 1; one trial runs at a "
         "time on the device)"),
     arg("--tls-ca-file", default="", help="TLS: CA certificate"),
     arg("--tls-cert", default="", help="TLS: this worker's certificate"),
     arg("--tls-key", default="", help="TLS: this worker's private key")])
