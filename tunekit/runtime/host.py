"""What running a saved model needs of this machine: its architecture and CPU features
(read from Linux, as LLVM names them), the kernels' shared library opened from memory,
and the AMX tile state where kernels use it. Standard library and numpy only."""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import tempfile
from collections.abc import Callable

import numpy as np

#: LLVM's feature names whose /proc/cpuinfo flag is spelled otherwise (x86 "flags", aarch64 "Features")
_CPUINFO = {"sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "lzcnt": "abm", "bmi": "bmi1",
            "avxvnni": "avx_vnni", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
            "avx512fp16": "avx512_fp16", "avx512vbmi2": "avx512_vbmi2", "avx512bitalg": "avx512_bitalg",
            "avx512vpopcntdq": "avx512_vpopcntdq", "amx-tile": "amx_tile", "amx-int8": "amx_int8",
            "amx-bf16": "amx_bf16", "neon": "asimd", "fullfp16": "asimdhp", "dotprod": "asimddp"}


def machine() -> str:
    """This machine's architecture, as the saved files name it ("x86_64", "aarch64")."""
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


@functools.cache
def cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo (None: not readable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return None


def missing_features(features) -> list[str]:
    """The features (LLVM's names) of `features` this CPU lacks; [] where Linux does not say."""
    flags = cpu_flags()
    if flags is None:
        return []
    return [f for f in features if _CPUINFO.get(f, f.replace(".", "_").replace("-", "_")) not in flags]


def open_library(data: bytes, name: str) -> ctypes.CDLL:
    """Open the shared library `data` with the system's dynamic loader, from memory where Linux
    allows (memfd), else from a temporary file removed once opened."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, 0)
        _write_all(fd, data)
        # the loader knows a library by its path: the descriptor stays open (ctypes never unloads a
        # library), so that no later library gets this /proc/self/fd path and is taken for this one
        _OPEN.append(fd)
        return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=ctypes.RTLD_LOCAL)
    with tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".so") as f:
        f.write(data)
        f.flush()
        return ctypes.CDLL(f.name, mode=ctypes.RTLD_LOCAL)


_OPEN: list[int] = []


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@functools.cache
def amx_permission() -> str | None:
    """Ask Linux for the AMX tile state, which it gives a process only on request (once);
    returns why not, or None."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(158, 0x1023, 18) != 0:      # SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
        return f"Linux refused this process the AMX tile state (errno {ctypes.get_errno()})"
    return None


def bound(cfunc, arrays, sizes=()) -> Callable[[], None]:
    """A call of the C function `cfunc` on the data addresses of `arrays` (checked by the caller)
    and the int64 `sizes`, which keeps the arrays alive as long as it lives."""
    data = data_pointer()
    call = functools.partial(cfunc, *(ctypes.c_void_p(data(a)) for a in arrays), *map(ctypes.c_int64, sizes))
    call.arrays = arrays
    return call


def resized(call, sizes, addresses=None) -> Callable[[], None]:
    """`call` (made by `bound`) with other int64 `sizes`, on the same addresses or on `addresses`:
    for arrays of the shapes those sizes give there (which the caller has checked)."""
    pointers = call.args[:len(call.arrays)] if addresses is None else map(ctypes.c_void_p, addresses)
    out = functools.partial(call.func, *pointers, *map(ctypes.c_int64, sizes))
    out.arrays = call.arrays
    return out


@functools.cache
def data_pointer() -> Callable[[np.ndarray], int]:
    """The fastest way to an array's data address: read PyArrayObject.data (right after
    the object header) when that reads what numpy reports, else `a.ctypes.data`."""
    probe = np.arange(3.0)
    offset = object.__basicsize__   # PyArrayObject: PyObject_HEAD, then char *data
    read = ctypes.c_void_p.from_address
    try:
        if platform.python_implementation() == "CPython" and read(id(probe) + offset).value == probe.ctypes.data:
            return lambda a: read(id(a) + offset).value
    except (ValueError, OSError):
        pass
    return lambda a: a.ctypes.data
