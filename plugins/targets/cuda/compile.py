"""CUDA C -> PTX without a GPU: nvcc (`-ptx`) or NVRTC (libnvrtc through ctypes).

NVRTC is found as `libnvrtc.so*` from the `nvidia-cuda-nvrtc` wheels, the CUDA
toolkit (CUDA_HOME, /usr/local/cuda) or the loader path; nvcc on PATH or in
CUDA_HOME/bin.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from tunekit.errors import BuildError


@functools.cache
def nvcc_path(name: str = "nvcc") -> str | None:
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    found = shutil.which(name)
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    return found or (os.path.join(home, "bin", name) if os.access(os.path.join(home, "bin", name), os.X_OK) else None)


@functools.cache
def nvrtc_library():
    """The loaded libnvrtc (ctypes.CDLL), or None."""
    cands = []
    for root in sys.path:
        cands += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libnvrtc.so*")), reverse=True)
        cands += sorted(glob.glob(os.path.join(root, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")), reverse=True)
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cands += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")), reverse=True)
    cands.append(ctypes.util.find_library("nvrtc"))
    for path in cands:
        if path and "builtins" not in path and ".alt." not in path:
            # NVRTC dlopens libnvrtc-builtins by name: load the one beside it first
            for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*")):
                if ".alt." not in b:
                    try:
                        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                    except OSError:
                        pass
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def compiler(choice: str, nvcc: str = "nvcc") -> str | None:
    """"nvcc" or "nvrtc" for `choice` ("auto" prefers nvcc), or None when it is missing."""
    have = {"nvcc": nvcc_path(nvcc) is not None, "nvrtc": nvrtc_library() is not None}
    if choice != "auto":
        return choice if have[choice] else None
    return next((c for c in ("nvcc", "nvrtc") if have[c]), None)


def to_ptx(source: str, name: str, arch: str, choice: str = "auto", nvcc: str = "nvcc",
           flags: tuple[str, ...] = (), timeout_s: float = 120) -> tuple[str, str]:
    """Compile CUDA C `source` for `arch` ("sm_90"); returns (PTX text, compiler used)."""
    which = compiler(choice, nvcc)
    if which is None:
        wanted = "nvcc or NVRTC" if choice == "auto" else choice
        raise BuildError(f"cuda: cannot compile {name}: no {wanted} found (install the CUDA toolkit, put nvcc on "
                         "PATH or set CUDA_HOME, or pip install nvidia-cuda-nvrtc)")
    return (_nvcc if which == "nvcc" else _nvrtc)(source, name, arch, nvcc, flags, timeout_s), which


def _nvcc(source, name, arch, nvcc, flags, timeout_s) -> str:
    with tempfile.TemporaryDirectory(prefix="tunekit-cuda-") as d:
        cu, ptx = os.path.join(d, "kernel.cu"), os.path.join(d, "kernel.ptx")
        with open(cu, "w") as f:
            f.write(source)
        cmd = [nvcc_path(nvcc), "-ptx", f"-arch={arch}", "-O3", *flags, "-o", ptx, cu]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise BuildError(f"cuda: nvcc did not compile {name} within {timeout_s:g} s") from None
        if r.returncode:
            raise BuildError(f"cuda: nvcc rejected {name} (exit {r.returncode}):\n{(r.stderr or r.stdout)[-4000:]}")
        with open(ptx) as f:
            return f.read()


def _nvrtc(source, name, arch, nvcc, flags, timeout_s) -> str:
    lib = nvrtc_library()
    prog = ctypes.c_void_p()

    def check(code, what):
        if code:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise BuildError(f"cuda: NVRTC {what} failed for {name}: {lib.nvrtcGetErrorString(code).decode()}")
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None),
          "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture=compute_{arch.split('_', 1)[1]}", *flags]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        code = lib.nvrtcCompileProgram(prog, len(opts), arr)
        if code:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise BuildError(f"cuda: NVRTC rejected {name}:\n{log.value.decode(errors='replace')[-4000:]}")
        size = ctypes.c_size_t()
        check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        return buf.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
