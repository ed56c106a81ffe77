"""Loading CPU object code into this process with MCJIT: llvmlite.binding initialized once,
libgomp's symbols made visible to the kernels' parallel loops, the AMX tile state asked of
Linux, and one engine per distinct kernel (the most recently used 64 kept)."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import tunekit

from .kernels import KernelLoadError, call_kernel


@functools.cache
def binding():
    """llvmlite.binding with every target initialized (never `llvm.initialize()`: it raises)."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm



_ENGINES: OrderedDict = OrderedDict()
_ENGINES_MAX = 64
_LOCK = threading.Lock()


@functools.cache
def _gomp() -> str | None:
    """Make libgomp's symbols visible to MCJIT; returns why not, or None."""
    llvm = binding()
    errors = []
    for name in ("libgomp.so.1", ctypes.util.find_library("gomp")):
        if not name:
            continue
        try:
            llvm.load_library_permanently(name)
            return None
        except RuntimeError as e:
            errors.append(str(e))
    return "libgomp (GNU OpenMP runtime) was not found: " + "; ".join(errors or ["find_library('gomp') is None"])


@functools.cache
def _amx_permission() -> None:
    """Ask Linux for the AMX tile state, which it gives a process only on request (once)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(158, 0x1023, 18) != 0:      # SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
        raise KernelLoadError(f"Linux refused this process the AMX tile state (errno {ctypes.get_errno()}), "
                              "which a kernel tensorized as 'amx' needs")


def load(artifact: tunekit.Artifact) -> Callable[..., None]:
    """The callable of `artifact`'s kernel, its object code loaded into this process once."""
    key = (artifact.entry, hashlib.blake2b(artifact.data, digest_size=16).digest())
    with _LOCK:
        hit = _ENGINES.get(key)
        if hit is None:
            why = _gomp()
            if why and artifact.meta.get("parallel"):
                raise KernelLoadError(f"cannot load {artifact.entry}: its parallel loops need {why}")
            if artifact.meta.get("amx"):
                _amx_permission()
            llvm = binding()
            # the engine owns (and frees) its target machine: give it its own
            tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine()
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
            engine.add_object_file(llvm.ObjectFileRef.from_data(artifact.data))
            engine.finalize_object()
            addr = engine.get_function_address(artifact.entry)
            if not addr:
                raise KernelLoadError(f"kernel {artifact.entry} not found in its object code")
            hit = _ENGINES[key] = (engine, addr)
            while len(_ENGINES) > _ENGINES_MAX:
                _ENGINES.popitem(last=False)
        else:
            _ENGINES.move_to_end(key)
    engine, addr = hit
    return call_kernel(artifact, engine, addr)


