"""`tunekit worker`: serve one device to a runner's scheduler (the `dask` runner's farm)."""
from __future__ import annotations

import argparse
import json

from .cli import arg, command
from .errors import TunekitError


@command("worker", arg("--scheduler", required=True, help="scheduler address, e.g. tcp://HOST:8786"),
         arg("--device", required=True, help="name to advertise this device under (the runner's `device`)"),
         arg("--target", default="x86", help="target this device runs: x86, arm-cpu, cuda, opencl, mali "
             "(default x86)"),
         arg("--target-options", default="{}", help="the target's options as JSON, e.g. '{\"device\": 1}'"),
         arg("--emulate", action="store_true", help="arm-cpu on a non-ARM host: run kernels under qemu-aarch64 "
             "(checked answers, emulated timings)"),
         arg("--nthreads", type=int, default=1, help="threads of the worker process (default 1; one trial runs "
             "at a time on the device)"),
         arg("--runner", default="dask", help="the runner whose worker this is (default dask)"),
         arg("--tls-ca-file", default="", help="TLS: CA certificate"),
         arg("--tls-cert", default="", help="TLS: this worker's certificate"),
         arg("--tls-key", default="", help="TLS: this worker's private key"),
         help="serve this machine's device to a device farm (start `dask scheduler` first)")
def worker(args: argparse.Namespace) -> int:
    """Start a device worker: it joins the scheduler, advertises --device as a resource
    (one trial at a time), and checks and times the kernels the tuning hosts send it,
    each in an isolated process with a deadline. Runs until stopped (Ctrl-C)."""
    from ._registry import registry
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
    tls = {k: v for k, v in (("tls_ca_file", args.tls_ca_file), ("tls_cert", args.tls_cert),
                             ("tls_key", args.tls_key)) if v}
    registry().component("runner", args.runner).serve(args.scheduler, args.device, target, args.nthreads, tls)
    return 0
