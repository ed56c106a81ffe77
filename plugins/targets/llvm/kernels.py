"""Calling a compiled CPU kernel from Python: its parameters, the checks on the arrays
it is given (a wrong call would write out of bounds), and the ctypes call itself.
Shared by MCJIT-loaded kernels (cpu.py) and emulated ones (qemu.py)."""
from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

import tunekit
from tunekit.errors import TunekitError
from tunekit.ir.sizes import SizeError, bind
from tunekit.runtime.dims import value as dim_value
from tunekit.runtime.host import bound, data_pointer


class KernelArgumentError(TunekitError, ValueError):
    """A compiled kernel was called with arrays that do not match its parameters."""


class KernelLoadError(TunekitError):
    """A compiled kernel cannot be loaded or run on this machine."""


def kernel_params(artifact: tunekit.Artifact) -> list[tuple[str, tuple, np.dtype]]:
    """Return the kernel's parameters as (name, shape, numpy dtype), in call order; a symbolic
    dimension is a string (`tunekit.ir.sizes.dim_data`)."""
    return [(name, tuple(shape), np.dtype(dtype if dtype != "bool" else np.bool_))
            for name, shape, dtype in artifact.meta["params"]]


def kernel_sizes(artifact: tunekit.Artifact) -> dict[str, tuple[int, int]]:
    """Return the kernel's symbolic sizes, name -> (lo, hi), in argument order."""
    return {name: (lo, hi) for name, lo, hi in artifact.meta.get("sizes", ())}


def check_arguments(entry: str, params: list, arrays: tuple, sizes: dict | None = None, given=None) -> list[int]:
    """Raise KernelArgumentError unless `arrays` are the kernel's: count, dtype, shape, C-contiguous,
    aligned. Returns the values of its `sizes` (name -> (lo, hi)): `given` (in their order), else
    read from the arrays' shapes."""
    if len(arrays) != len(params):
        raise KernelArgumentError(f"{entry} takes {len(params)} arrays ({', '.join(p[0] for p in params)}), "
                                  f"got {len(arrays)}")
    values = {}
    if sizes and given is not None:
        values = dict(zip(sizes, given))
        if len(given) != len(sizes) or any(not lo <= values[n] <= hi for n, (lo, hi) in sizes.items()):
            raise SizeError(f"{entry}: sizes {list(given)} are not its sizes' ranges {sizes}")
    elif sizes:
        values = bind(entry, [p[1] for p in params], [getattr(a, "shape", ()) for a in arrays], sizes)
    if sizes:
        params = [(name, tuple(dim_value(d, values) for d in shape), dt) for name, shape, dt in params]
    for k, (a, (name, shape, dt)) in enumerate(zip(arrays, params)):
        if not (isinstance(a, np.ndarray) and a.dtype == dt and a.shape == shape
                and a.flags.c_contiguous and a.flags.aligned):
            got = (f"{a.dtype} array of shape {a.shape}" + ("" if a.flags.c_contiguous else ", not C-contiguous")
                   + ("" if a.flags.aligned else ", not aligned") if isinstance(a, np.ndarray)
                   else type(a).__name__)
            raise KernelArgumentError(f"{entry}: argument {k} ({name}) must be a C-contiguous, aligned {dt} "
                                      f"numpy array of shape {shape}; got a {got}")
    return [values[n] for n in sizes or ()]


def call_kernel(artifact: tunekit.Artifact, engine, addr: int) -> Callable[..., None]:
    """Return `kernel(*arrays)`: call the loaded code at `addr` (kept alive by `engine`) on numpy arrays."""
    entry, ps, names, data = artifact.entry, kernel_params(artifact), kernel_sizes(artifact), data_pointer()
    cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(ps), *[ctypes.c_int64] * len(names))(addr)
    n, expected = len(ps), [(dt, shape) for _, shape, dt in ps]

    def symbolic(*arrays: np.ndarray) -> None:
        cfunc(*map(data, arrays), *check_arguments(entry, ps, arrays, names))

    def kernel(*arrays: np.ndarray) -> None:
        # the fast check inline (kernels are timed through this call); check_arguments says what is wrong
        if len(arrays) != n:
            check_arguments(entry, ps, arrays)
        for k, a in enumerate(arrays):
            dt, shape = expected[k]
            if not (isinstance(a, np.ndarray) and a.dtype == dt and a.shape == shape
                    and (f := a.flags).c_contiguous and f.aligned):
                check_arguments(entry, ps, arrays)
        cfunc(*map(data, arrays))

    def bind(*arrays: np.ndarray, sizes=None) -> Callable[[], None]:
        return bound(cfunc, arrays, check_arguments(entry, ps, arrays, names, sizes))

    kernel = symbolic if names else kernel
    kernel.bind = bind
    kernel.engine = engine   # the code lives as long as the engine does
    kernel.__name__ = entry
    return kernel
