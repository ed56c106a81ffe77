"""The `cuda` target: loop IR -> CUDA C (`tunekit_plugins.targets.csource`) -> PTX
with nvcc or NVRTC (no GPU needed to build); loaded and timed with pycuda (CUDA
events) in the runner. Device limits come from the driver when there is one,
else from the architecture in Options (sm_90 by default)."""
from __future__ import annotations

import atexit
import functools
import math
from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import Field

import tunekit
from tunekit import ir
from tunekit.errors import BuildError, TunekitError

from ..csource import emit
from . import compile as cc

#: multiprocessors of a typical part per architecture (used without a driver)
_SMS = {"sm_75": 40, "sm_80": 108, "sm_86": 84, "sm_87": 16, "sm_89": 128, "sm_90": 132, "sm_100": 148,
        "sm_120": 84}
_STATIC_SHARED = 48 << 10   # static __shared__ arrays are limited to 48 KiB per block


class KernelLoadError(TunekitError):
    """A kernel cannot be loaded or launched on this CUDA device."""


@functools.cache
def _driver() -> tuple[object, str | None]:
    """(pycuda.driver, None) when a CUDA device can be used, else (None, why not)."""
    try:
        import pycuda.driver as cuda
    except ImportError as e:
        return None, f"pycuda is not installed ({e}); install it with: pip install 'tunekit[cuda]'"
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return None, "no CUDA device"
    except Exception as e:  # pycuda raises its own RuntimeError subclasses without a driver
        return None, f"no CUDA device (the CUDA driver failed: {e})"
    return cuda, None


class CudaTarget(tunekit.Target):
    """NVIDIA GPUs: PTX from nvcc/NVRTC, run through pycuda."""

    name: ClassVar[str] = "cuda"
    family: ClassVar[str] = "gpu"

    class Options(tunekit.Options):
        device: int = Field(0, ge=0, description="CUDA device index to run on")
        arch: str = Field("", pattern=r"^(sm_\d+)?$", description="GPU architecture to compile for, e.g. "
                          "'sm_90'; empty = the device's compute capability, or sm_90 without a driver")
        compiler: Literal["auto", "nvcc", "nvrtc"] = Field("auto", description="CUDA C -> PTX compiler; "
                                                           "auto = nvcc when on PATH, else NVRTC")
        nvcc: str = Field("nvcc", description="nvcc executable (name on PATH or path)")
        flags: list[str] = Field(default_factory=list, description="extra compiler flags, e.g. "
                                                                   "['--use_fast_math']")

    @classmethod
    def available(cls) -> str | None:
        return _driver()[1]

    # -- device ------------------------------------------------------------------
    def _cuda_device(self):
        cuda = _driver()[0]
        if cuda is None:
            return None
        if self.options.device >= cuda.Device.count():
            return None
        return cuda.Device(self.options.device)

    def arch(self) -> str:
        if self.options.arch:
            return self.options.arch
        dev = self._cuda_device()
        return "sm_{}{}".format(*dev.compute_capability()) if dev is not None else "sm_90"

    def memory_bytes(self) -> int | None:
        dev = self._cuda_device()
        return int(dev.total_memory()) if dev is not None else None

    def device(self) -> tunekit.DeviceInfo:
        if "info" not in self._memo:
            dev, arch = self._cuda_device(), self.arch()
            if dev is None:
                info = tunekit.DeviceInfo(
                    name=f"CUDA {arch} (no driver)", family="gpu", vector_bits=128, cores=_SMS.get(arch, 80),
                    l1_bytes=128 << 10, l2_bytes=40 << 20, max_threads_per_block=1024,
                    max_shared_memory=_STATIC_SHARED, warp_size=32,
                    extra={"arch": arch, "local_memory": "local", "max_block": [1024, 1024, 64]})
            else:
                import pycuda.driver as cuda
                a = {k: v for k, v in dev.get_attributes().items()}
                at = cuda.device_attribute
                info = tunekit.DeviceInfo(
                    name=dev.name(), family="gpu", vector_bits=128, cores=a[at.MULTIPROCESSOR_COUNT],
                    l1_bytes=128 << 10, l2_bytes=a.get(at.L2_CACHE_SIZE, 0),
                    max_threads_per_block=a[at.MAX_THREADS_PER_BLOCK],
                    max_shared_memory=min(_STATIC_SHARED, a[at.MAX_SHARED_MEMORY_PER_BLOCK]),
                    warp_size=a[at.WARP_SIZE],
                    extra={"arch": arch, "local_memory": "local",
                           "max_block": [a[at.MAX_BLOCK_DIM_X], a[at.MAX_BLOCK_DIM_Y], a[at.MAX_BLOCK_DIM_Z]],
                           "max_grid": [a[at.MAX_GRID_DIM_X], a[at.MAX_GRID_DIM_Y], a[at.MAX_GRID_DIM_Z]]})
            self._memo["info"] = info
        return self._memo["info"]

    # -- Target ------------------------------------------------------------------
    def source(self, program: ir.Program):
        """The CUDA C Source of `program` (csource.Source)."""
        return emit(program, "cuda")

    def build(self, program: ir.Program) -> tunekit.Artifact:
        src = self.source(program)
        for k in src.kernels:
            if k.grid[1] > 65535 or k.grid[2] > 65535:
                raise BuildError(f"cuda: kernel {k.name} launches {k.grid} blocks; "
                                       "the y and z grid axes hold at most 65535")
        ptx, used = cc.to_ptx(src.code, src.kernels[0].name, self.arch(), self.options.compiler,
                              self.options.nvcc, tuple(self.options.flags))
        return tunekit.Artifact(target=self.name, entry=src.kernels[0].name, data=ptx,
                                meta={**src.meta(), "arch": self.arch(), "compiler": used})

    def _context(self):
        """Make the device's primary context current in this process (once)."""
        if "ctx" not in self._memo:
            why = _driver()[1]
            dev = self._cuda_device()
            if dev is None:
                raise KernelLoadError(f"cuda: cannot run here: {why or f'no CUDA device {self.options.device}'}")
            ctx = dev.retain_primary_context()
            ctx.push()
            atexit.register(ctx.pop)
            self._memo["ctx"] = ctx
        return self._memo["ctx"]

    def load(self, artifact: tunekit.Artifact) -> Callable[..., None]:
        """The kernel as a function of numpy arrays (or CUDA device arrays), its module
        loaded and launched once already (CUDA loads functions lazily at the first
        launch), so that its first call costs what later ones do."""
        if artifact.target != self.name:
            raise KernelLoadError(f"cuda: artifact {artifact.entry} was built for {artifact.target!r}")
        cache = self._memo.setdefault("launchers", {})
        key = (artifact.entry, artifact.data)
        if key not in cache:
            if len(cache) >= 8:
                cache.pop(next(iter(cache)))
            cache[key] = _Launcher(self, artifact)
        return cache[key]

    def run(self, artifact: tunekit.Artifact, args, settings: tunekit.RunSettings) -> list[float]:
        import pycuda.driver as cuda
        launch = self.load(artifact)
        ptrs = launch.upload(args)
        for _ in range(settings.warmup):
            launch.enqueue(ptrs)
        cuda.Context.synchronize()
        start, end = cuda.Event(), cuda.Event()
        number = settings.number
        if settings.min_repeat_ms > 0:
            start.record()
            launch.enqueue(ptrs)
            end.record()
            end.synchronize()
            one = max(start.time_till(end) * 1e-3, 1e-9)
            number = max(number, math.ceil(settings.min_repeat_ms / 1e3 / one))
        costs = []
        for _ in range(settings.repeat):
            start.record()
            for _ in range(number):
                launch.enqueue(ptrs)
            end.record()
            end.synchronize()
            costs.append(start.time_till(end) * 1e-3 / number)
        launch.download(ptrs, args)
        return costs


class _Launcher:
    """Runs an artifact's kernels on numpy arrays (copied in and out of device memory
    it keeps) or on device arrays (pycuda GPUArray / DeviceAllocation, or anything
    with `__cuda_array_interface__` such as CuPy and PyTorch tensors: used in place)."""

    def __init__(self, target: CudaTarget, artifact: tunekit.Artifact):
        import numpy as np
        import pycuda.driver as cuda
        target._context()
        self.cuda, m = cuda, artifact.meta
        try:
            self.module = mod = cuda.module_from_buffer((artifact.data + "\0").encode())   # NUL-terminated PTX
        except cuda.Error as e:
            raise KernelLoadError(f"cuda: the driver cannot load the PTX of {artifact.entry} "
                                  f"(built for {m.get('arch')}): {e}") from e
        self.kernels = []
        for k in m["kernels"]:
            fn = mod.get_function(k["name"])
            fn.prepare("P" * len(m["buffers"]))
            self.kernels.append((fn, tuple(k["grid"]), tuple(k["block"])))
        self.buffers, self.nparams = m["buffers"], m["num_params"]
        self.read, self.written = set(m["read"]), m["written"]
        self.entry = self.__name__ = artifact.entry
        self._np = np
        self.own = []   # device memory of every argument, zeroed, for host arrays and temporaries
        for _, shape, dtype in self.buffers:
            nbytes = max(1, math.prod(shape) * np.dtype(dtype).itemsize)
            buf = cuda.mem_alloc(nbytes)
            cuda.memset_d8(buf, 0, nbytes)
            self.own.append(buf)
        self.enqueue([int(b) for b in self.own])
        cuda.Context.synchronize()

    def upload(self, arrays) -> list[int]:
        """Device pointers for the kernel arguments, host inputs copied in."""
        np, cuda = self._np, self.cuda
        if len(arrays) != self.nparams:
            raise KernelLoadError(f"{self.entry} takes {self.nparams} arrays, got {len(arrays)}")
        ptrs = [int(b) for b in self.own]
        for k, a in enumerate(arrays):
            name, shape, dtype = self.buffers[k]
            if hasattr(a, "__cuda_array_interface__"):
                ptrs[k] = int(a.__cuda_array_interface__["data"][0])
                continue
            if isinstance(a, cuda.DeviceAllocation) or hasattr(a, "gpudata"):
                ptrs[k] = int(getattr(a, "gpudata", a))
                continue
            want = np.dtype(dtype)
            if not (isinstance(a, np.ndarray) and a.shape == tuple(shape) and a.dtype == want
                    and a.flags.c_contiguous):
                got = f"{a.dtype} array of shape {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise KernelLoadError(f"{self.entry}: argument {k} ({name}) must be a C-contiguous {want} array "
                                      f"of shape {tuple(shape)} (or a CUDA device array); got a {got}")
            if k in self.read and a.nbytes:
                cuda.memcpy_htod(self.own[k], a)
        return ptrs

    def enqueue(self, ptrs) -> None:
        for fn, grid, block in self.kernels:
            fn.prepared_call(grid, block, *ptrs)

    def download(self, ptrs, arrays) -> None:
        for k in self.written:
            if k < self.nparams and isinstance(arrays[k], self._np.ndarray):
                self.cuda.memcpy_dtoh(arrays[k], ptrs[k])
        self.cuda.Context.synchronize()

    def __call__(self, *arrays) -> None:
        ptrs = self.upload(arrays)
        self.enqueue(ptrs)
        self.download(ptrs, arrays)
