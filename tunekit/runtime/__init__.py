"""Run saved models (`tunekit compile`, `CompiledModel.save`) with numpy and the standard
library alone: no compiler, ONNX, pydantic, pluggy or database on the machine that runs them.

    import tunekit.runtime
    net = tunekit.runtime.load("model.tk")
    outputs = net(x)            # or net(input_name=x); net.profile() times each layer

The bottom layer of tunekit: it imports nothing of tunekit but `errors` and `memory`.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from tunekit.runtime import artifact, dims, host
from tunekit.runtime.artifact import ArtifactError
from tunekit.runtime.model import Model, PlanError

__all__ = ["ArtifactError", "Model", "PlanError", "load"]


def load(path: str | os.PathLike) -> Model:
    """Load the saved model at `path`: its weights mapped from the file, its kernels' library
    opened, its plan bound.

    Returns:
        a Model: `outputs = net(x)`, as the `CompiledModel` it was saved from.
    Raises:
        ArtifactError: the file is not a saved model, is corrupt or truncated, or was compiled
            for another architecture or for CPU features this machine lacks (naming them).
    """
    path = os.fspath(path)
    header, library, weights = artifact.read(path)
    built = f"{path} was compiled for {header['machine']} (target {header['target']}, CPU {header['cpu'] or 'named'})"
    if header["machine"] != host.machine():
        raise ArtifactError(f"{built}; this machine is {host.machine()}: compile the model for it (tunekit compile "
                            "--target ...)")
    if missing := host.missing_features(header["features"]):
        raise ArtifactError(f"{built}; its kernels use CPU features this CPU lacks: {', '.join(missing)}: compile the "
                            "model on this machine, or for a CPU without them (the x86 target's option mcpu)")
    if any(f.startswith("amx") for f in header["features"]) and (why := host.amx_permission()):
        raise ArtifactError(f"{path}: its kernels use AMX tiles, but {why}")
    try:
        lib = host.open_library(library, os.path.basename(path))
    except OSError as e:
        raise ArtifactError(f"{path}: the system cannot load its kernels' library: {e} (parallel kernels need "
                            "libgomp: Debian's libgomp1)") from None
    try:
        plan = header["plan"]
        kernels = [k for s in plan.get("variants") or [{"kernels": plan["kernels"]}] for k in s["kernels"]]
        model = Model(plan, weights, [_binder(lib, k, path) for k in kernels])
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{path}: corrupt plan: {type(e).__name__}: {e}; save the model again") from None
    model.header, model._library = header, lib
    return model


def _binder(lib: ctypes.CDLL, kernel: dict, path: str):
    """`bind(*arrays) -> call` of the library's kernel `kernel` (an entry of the plan's kernels)."""
    try:
        address = ctypes.cast(getattr(lib, kernel["symbol"]), ctypes.c_void_p).value
    except AttributeError:
        raise ArtifactError(f"{path}: corrupt: its library has no kernel {kernel['symbol']!r}") from None
    params = [(tuple(shape), np.dtype(dtype)) for _, shape, dtype in kernel["params"]]
    names = kernel.get("sizes", [])
    cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(params), *[ctypes.c_int64] * len(names))(address)

    def bind(*arrays: np.ndarray, sizes=()):
        at = dict(zip(names, sizes))
        expected = [(dims.shape(s, at), d) for s, d in params]
        if (len(sizes) != len(names) or [(a.shape, a.dtype) for a in arrays] != expected
                or not all(a.flags.c_contiguous for a in arrays)):
            raise PlanError(f"{path}: the plan calls {kernel['symbol']} with arrays "
                            f"{[(list(a.shape), str(a.dtype)) for a in arrays]} and sizes {at}, not its parameters "
                            f"{kernel['params']}")
        return host.bound(cfunc, arrays, sizes)
    return bind
