"""The `opencl` target (any OpenCL device through pyopencl) and `mali` (the same
target with an ARM Mali device profile, so templates and constraints fit the phone
GPU; it runs on whatever OpenCL device the machine has).

build() emits OpenCL C (`tunekit_plugins.targets.csource`) and, when a device is
present, compiles it once to turn compile errors into build errors (OpenCL
compiles at load time); Artifact.data is the source. load()/run() compile (PoCL
and most drivers cache binaries), copy numpy arrays to device buffers and back,
and time with OpenCL profiling events.
"""
from __future__ import annotations

import functools
import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import Field

import tunekit
from tunekit import ir
from tunekit.errors import BuildError, TunekitError

from ..csource import emit


class KernelLoadError(TunekitError):
    """A kernel cannot be loaded or launched on this OpenCL device."""


def _missing() -> str | None:
    try:
        import pyopencl  # noqa: F401
    except ImportError as e:
        return f"pyopencl is not installed ({e}); install it with: pip install 'tunekit[opencl]'"
    return None


@functools.cache
def _devices() -> list:
    """[(platform, device)] of every OpenCL device, GPUs first ([] without a driver)."""
    import pyopencl as cl
    try:
        found = [(p, d) for p in cl.get_platforms() for d in p.get_devices()]
    except (cl.Error, RuntimeError):
        return []
    return sorted(found, key=lambda pd: not pd[1].type & cl.device_type.GPU)


def _pick(items: list, sel: str, key) -> list:
    if not sel:
        return items
    if sel.isdigit():
        return items[int(sel):int(sel) + 1]
    return [x for x in items if sel.lower() in key(x).lower()]


def find_device(platform: str = "", device: str = ""):
    """(platform, device) chosen by selectors: "" = any (GPUs first), digits = index,
    else a case-insensitive substring of the name; None when nothing matches."""
    if _missing():
        return None
    pairs = _devices()
    plats = list(dict.fromkeys(p for p, _ in pairs))
    plats = _pick(plats, platform, lambda p: p.name)
    devs = _pick([pd for pd in pairs if pd[0] in plats], device, lambda pd: pd[1].name)
    return devs[0] if devs else None


def _device_info(platform, dev) -> tunekit.DeviceInfo:
    import pyopencl as cl
    ctx = cl.Context([dev])
    probe = cl.Program(ctx, "__kernel void probe(__global float* a) { a[get_global_id(0)] = 0.0f; }").build()
    warp = probe.probe.get_work_group_info(cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, dev)
    return tunekit.DeviceInfo(
        name=dev.name.strip(), family="gpu", vector_bits=32 * max(1, dev.preferred_vector_width_float),
        cores=dev.max_compute_units, l1_bytes=dev.global_mem_cache_size or 0, l2_bytes=0,
        max_threads_per_block=dev.max_work_group_size, max_shared_memory=dev.local_mem_size,
        warp_size=int(warp),
        extra={"platform": platform.name.strip(), "driver": dev.driver_version.strip(),
               "device_type": cl.device_type.to_string(dev.type),
               "local_memory": "global" if dev.local_mem_type == cl.device_local_mem_type.GLOBAL else "local",
               "max_block": [int(x) for x in dev.max_work_item_sizes[:3]]})


class OpenCLTarget(tunekit.Target):
    """Any OpenCL 1.2+ device through pyopencl (GPUs, and CPUs through PoCL)."""

    name: ClassVar[str] = "opencl"
    family: ClassVar[str] = "gpu"

    class Options(tunekit.Options):
        platform: str = Field("", description="OpenCL platform: index or case-insensitive name substring; "
                                              "empty = any")
        device: str = Field("", description="OpenCL device of that platform: index or case-insensitive name "
                                            "substring; empty = the first GPU, else the first device")
        build_options: str = Field("", description="OpenCL compiler options, e.g. '-cl-fast-relaxed-math'")
        compile_check: bool = Field(True, description="compile each kernel at build time when a device is "
                                                      "present (OpenCL compiles at load time; this reports compile "
                                                      "errors as build errors)")

    @classmethod
    def available(cls) -> str | None:
        missing = _missing()
        if missing:
            return missing
        if not _devices():
            return "no OpenCL device (install an OpenCL driver, e.g. Debian's pocl-opencl-icd for the CPU)"
        return None

    # -- device ------------------------------------------------------------------
    def cl_device(self):
        """(platform, device) this target runs on, or None."""
        if "dev" not in self._memo:
            self._memo["dev"] = find_device(self.options.platform, self.options.device)
        return self._memo["dev"]

    def _need_device(self):
        found = self.cl_device()
        if found is None:
            why = self.available() or (f"no OpenCL device matches platform={self.options.platform!r} "
                                       f"device={self.options.device!r}")
            raise KernelLoadError(f"{self.name}: cannot run here: {why}")
        return found

    def memory_bytes(self) -> int | None:
        pd = self.cl_device()
        return int(pd[1].global_mem_size) if pd is not None else None

    def device(self) -> tunekit.DeviceInfo:
        if "info" not in self._memo:
            found = self.cl_device()
            self._memo["info"] = _device_info(*found) if found else tunekit.DeviceInfo(
                name="OpenCL GPU (no device found)", family="gpu", vector_bits=128, cores=1,
                max_threads_per_block=256, max_shared_memory=32 << 10, warp_size=32,
                extra={"local_memory": "local", "max_block": [256, 256, 64]})
        return self._memo["info"]

    def _queue(self):
        if "queue" not in self._memo:
            import pyopencl as cl
            ctx = cl.Context([self._need_device()[1]])
            self._memo["queue"] = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        return self._memo["queue"]

    def _compile(self, source: str, entry: str):
        """The built cl.Program of `source` (cached); BuildError with the compiler's log."""
        import pyopencl as cl
        cache = self._memo.setdefault("programs", OrderedDict())
        key = hashlib.blake2b(source.encode(), digest_size=16).digest()
        if key not in cache:
            ctx = self._queue().context
            try:
                cache[key] = cl.Program(ctx, source).build(options=self.options.build_options)
            except cl.Error as e:
                raise BuildError(f"{self.name}: the OpenCL compiler rejected kernel {entry}: {e}") from e
            while len(cache) > 64:
                cache.popitem(last=False)
        return cache[key]

    # -- Target ------------------------------------------------------------------
    def build(self, program: ir.Program) -> tunekit.Artifact:
        src = emit(program, "opencl")
        if self.options.compile_check and self.cl_device() is not None:
            self._compile(src.code, src.kernels[0].name)
        return tunekit.Artifact(target=self.name, entry=src.kernels[0].name, data=src.code, meta=src.meta())

    def load(self, artifact: tunekit.Artifact) -> Callable[..., None]:
        """The kernel as a function of numpy arrays (or OpenCL buffers), compiled and
        launched once already (drivers like PoCL finish compiling at the first launch),
        so that its first call costs what later ones do."""
        if artifact.target != self.name:
            raise KernelLoadError(f"{self.name}: artifact {artifact.entry} was built for {artifact.target!r}")
        cache = self._memo.setdefault("launchers", OrderedDict())
        key = (artifact.entry, hashlib.blake2b(artifact.data.encode(), digest_size=16).digest())
        if key not in cache:
            cache[key] = _Launcher(self, artifact)
            while len(cache) > 8:
                cache.popitem(last=False)
        return cache[key]

    def run(self, artifact: tunekit.Artifact, args, settings: tunekit.RunSettings) -> list[float]:
        launch = self.load(artifact)
        bufs = launch.upload(args)
        for _ in range(settings.warmup):
            launch.enqueue(bufs)
        self._queue().finish()
        number = settings.number
        if settings.min_repeat_ms > 0:
            first, last = launch.enqueue(bufs)
            last.wait()
            one = max((last.profile.end - first.profile.start) * 1e-9, 1e-9)
            number = max(number, math.ceil(settings.min_repeat_ms / 1e3 / one))
        costs = []
        for _ in range(settings.repeat):
            first, last = launch.enqueue(bufs)
            for _ in range(number - 1):
                _, last = launch.enqueue(bufs)
            last.wait()
            costs.append((last.profile.end - first.profile.start) * 1e-9 / number)
        launch.download(bufs, args)
        return costs


class _Launcher:
    """Runs an artifact's kernels on numpy arrays (copied in and out of device buffers
    it keeps) or on device buffers (cl.Buffer, pyopencl.array.Array: used in place)."""

    def __init__(self, target: OpenCLTarget, artifact: tunekit.Artifact):
        import numpy as np
        import pyopencl as cl
        self.cl, self.queue = cl, target._queue()
        m = artifact.meta
        prg = target._compile(artifact.data, artifact.entry)
        self.kernels = [(cl.Kernel(prg, k["name"]), tuple(g * b for g, b in zip(k["grid"], k["block"])),
                         tuple(k["block"])) for k in m["kernels"]]
        self.buffers, self.nparams = m["buffers"], m["num_params"]
        self.read, self.written = set(m["read"]), m["written"]
        self.entry = self.__name__ = artifact.entry
        self.dtypes = [np.dtype("uint8" if d == "bool" else d) for _, _, d in self.buffers]
        ctx = self.queue.context
        self.own = []   # device buffers of every argument, zero-filled, for host arrays and temporaries
        for (_, shape, _), dt in zip(self.buffers, self.dtypes):
            nbytes = max(1, math.prod(shape) * dt.itemsize)
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
            cl.enqueue_fill_buffer(self.queue, buf, np.uint8(0), 0, nbytes)
            self.own.append(buf)
        self.enqueue(self.own)
        self.queue.finish()

    def _check(self, k: int, a):
        import numpy as np
        name, shape, _ = self.buffers[k]
        want = self.dtypes[k]
        if not (isinstance(a, np.ndarray) and a.shape == tuple(shape) and a.dtype == want and a.flags.c_contiguous):
            got = f"{a.dtype} array of shape {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise KernelLoadError(f"{self.entry}: argument {k} ({name}) must be a C-contiguous {want} array of "
                                  f"shape {tuple(shape)} (or an OpenCL buffer); got a {got}")

    def upload(self, arrays) -> list:
        """Device buffers for the kernel arguments, host inputs copied in."""
        cl = self.cl
        if len(arrays) != self.nparams:
            raise KernelLoadError(f"{self.entry} takes {self.nparams} arrays, got {len(arrays)}")
        out = list(self.own)
        for k, a in enumerate(arrays):
            dev = a if isinstance(a, cl.MemoryObjectHolder) else \
                getattr(a, "data", None) if type(a).__module__.startswith("pyopencl") else None
            if isinstance(dev, cl.MemoryObjectHolder):   # a device buffer: used in place
                out[k] = dev
                continue
            self._check(k, a)
            if k in self.read and a.nbytes:
                cl.enqueue_copy(self.queue, out[k], a, is_blocking=False)
        return out

    def enqueue(self, bufs):
        """Launch every kernel once; returns (first event, last event)."""
        first = last = None
        for kern, gsize, lsize in self.kernels:
            kern.set_args(*bufs)
            last = self.cl.enqueue_nd_range_kernel(self.queue, kern, gsize, lsize)
            first = first or last
        return first, last

    def download(self, bufs, arrays) -> None:
        for k in self.written:
            if k < self.nparams and hasattr(arrays[k], "__array_interface__"):
                self.cl.enqueue_copy(self.queue, arrays[k], bufs[k])
        self.queue.finish()

    def __call__(self, *arrays) -> None:
        bufs = self.upload(arrays)
        self.enqueue(bufs)
        self.download(bufs, arrays)


class MaliTarget(OpenCLTarget):
    """ARM Mali GPUs (Midgard, Bifrost) through OpenCL: the device profile fixes the
    facts templates read (128-bit vectors, work-group limit by architecture, local
    memory that lives in global memory, so templates tile in registers instead).
    Runs on whatever OpenCL device the machine has (for correctness off a phone)."""

    name: ClassVar[str] = "mali"
    _MAX_WG: ClassVar[dict] = {"midgard": 256, "bifrost": 384}
    _WARP: ClassVar[dict] = {"midgard": 1, "bifrost": 4}

    class Options(OpenCLTarget.Options):
        arch: Literal["midgard", "bifrost"] = Field("bifrost", description="Mali architecture: 'midgard' "
                                                    "(T6xx-T8xx, work groups up to 256) or 'bifrost' (G31-G76, 384)")
        cores: int = Field(4, ge=1, description="shader cores of the Mali GPU (e.g. 4 for Mali-T860 MP4)")

    def device(self) -> tunekit.DeviceInfo:
        if "info" not in self._memo:
            found, arch = self.cl_device(), self.options.arch
            wg = self._MAX_WG[arch]
            self._memo["info"] = tunekit.DeviceInfo(
                name=f"Mali {arch}", family="gpu", vector_bits=128, cores=self.options.cores,
                l1_bytes=16 << 10, l2_bytes=512 << 10, max_threads_per_block=wg, max_shared_memory=32 << 10,
                warp_size=self._WARP[arch],
                extra={"local_memory": "global", "max_block": [wg, wg, wg],
                       "runs_on": found[1].name.strip() if found else "none"})
        return self._memo["info"]
