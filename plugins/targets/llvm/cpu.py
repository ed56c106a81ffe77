"""The `x86` and `arm-cpu` targets: loop IR -> LLVM IR (`codegen.py`) -> O3 object
code for the CPU's features; loaded in-process with MCJIT (`mcjit.py`) and called through ctypes.

llvmlite is imported lazily (tunekit core never imports it); `available()` says
when it is missing.
"""
from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from pydantic import Field

import tunekit
from tunekit import ir
from tunekit.errors import BuildError, TunekitError
from tunekit.ir.sizes import dim_data
from tunekit.runtime import host

from . import linker
from .kernels import KernelArgumentError, KernelLoadError  # noqa: F401  (the errors: for users)
from .mcjit import binding, load

_X86 = ("x86_64", "amd64")
#: the CPU features a nest tensorized as "amx" needs, by the product it computes
AMX = {"dot4_u8s8": frozenset({"amx-tile", "amx-int8"}), "dot2_bf16": frozenset({"amx-tile", "amx-bf16"})}
_ARM = ("aarch64", "arm64")


def _host_arch() -> str:
    return platform.machine().lower()


def _llvmlite_missing() -> str | None:
    try:
        import llvmlite.binding  # noqa: F401
    except ImportError as e:
        return f"llvmlite is not installed ({e}); install it with: pip install 'tunekit[llvm]'"
    return None


def _sys_caches() -> dict[str, int]:
    """L1 data / L2 sizes of cpu0 from sysfs ({} when not readable)."""
    out: dict[str, int] = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            level, kind = (d / "level").read_text().strip(), (d / "type").read_text().strip()
            size = (d / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        nbytes = int(size.rstrip("KMG") or 0) * mult
        if level == "1" and kind in ("Data", "Unified"):
            out["l1"] = nbytes
        elif level == "2" and kind in ("Data", "Unified"):
            out["l2"] = nbytes
    return out


class _CpuTarget(tunekit.Target):
    """What x86 and arm-cpu share: build with llvmlite, load with MCJIT."""

    family: ClassVar[str] = "cpu"
    run_arch: ClassVar[tuple[str, ...]] = ()
    _caches_default: ClassVar[tuple[int, int]] = (32 << 10, 1 << 20)

    # -- what subclasses say -----------------------------------------------------
    def triple(self) -> str:
        raise NotImplementedError

    def cpu_features(self) -> tuple[str, str]:
        """(LLVM cpu name, feature string) to compile for."""
        return self.options.mcpu, ""

    def vector_bits(self) -> int:
        return 128

    #: feature -> (a probe's body over `ptr %a, ptr %b`, what its code shows where the CPU has it)
    _PROBES: ClassVar[dict[str, tuple[str, str]]] = {}

    def features(self) -> frozenset:
        """The CPU features the code may use, by LLVM's names: those `cpu_features` enables, or for a
        CPU given by name alone, those of `_PROBES` its target machine is seen to select."""
        flags = self.cpu_features()[1]
        if flags or "probed" in self._memo:
            return self._memo.get("probed") or frozenset(f[1:] for f in flags.split(",") if f.startswith("+"))
        self._memo["probed"] = frozenset(f for f, (body, sign) in self._PROBES.items() if sign in self._probe(body))
        return self._memo["probed"]

    def _probe(self, body: str) -> str:
        """The assembly this target compiles `define void @probe(ptr %a, ptr %b) { body }` to."""
        mod = binding().parse_assembly(f"define void @probe(ptr %a, ptr %b) {{\n{body}\n  ret void\n}}\n")
        mod.triple = self.triple()
        return self.target_machine().emit_assembly(self._optimized(mod, 2))

    def _optimized(self, mod, level: int):
        """llvmlite module `mod` after LLVM's pipeline at speed `level` for this target machine."""
        pb = binding().create_pass_builder(self.target_machine(),
                                           binding().create_pipeline_tuning_options(speed_level=level))
        pb.getModulePassManager().run(mod, pb)
        return mod

    def threads(self) -> int:
        """Threads a parallel loop runs on."""
        return self.options.num_threads or os.cpu_count() or 1

    # -- Target ------------------------------------------------------------------
    def device(self) -> tunekit.DeviceInfo:
        if "device" not in self._memo:
            cpu, _ = self.cpu_features()
            l1, l2 = self._caches_default
            if _host_arch() in self.run_arch:
                found = _sys_caches()
                l1, l2 = found.get("l1", l1), found.get("l2", l2)
            self._memo["device"] = tunekit.DeviceInfo(
                name=cpu, family="cpu", vector_bits=self.vector_bits(), cores=self.threads(),
                l1_bytes=l1, l2_bytes=l2, extra=self._device_extra())
        return self._memo["device"]

    def _device_extra(self) -> dict:
        """What else the device fingerprint hashes."""
        extra = {"triple": self.triple()}
        # the tile products templates may tensorize as "amx" (`tiles.py`): "amx-bf16 amx-int8"
        have = {f for need in AMX.values() if need <= self.features() for f in need}
        if tiles := " ".join(sorted(have - {"amx-tile"})):
            extra["tiles"] = tiles
        return extra

    def target_machine(self):
        """The llvmlite TargetMachine this target compiles with (cached)."""
        if "tm" not in self._memo:
            llvm = binding()
            cpu, features = self.cpu_features()
            try:
                target = llvm.Target.from_triple(self.triple())
            except RuntimeError as e:
                raise BuildError(f"{self.name}: LLVM has no backend for {self.triple()}: {e}") from e
            # x86-64: the large code model, as MCJIT loads each section where its memory manager maps it;
            # a process that has loaded many kernels can get a kernel's code and constants more than 2 GB
            # apart, past the small model's 32-bit offsets (an assertion in RuntimeDyldELF, then abort)
            model = "large" if self.triple().startswith("x86_64") else "small"
            self._memo["tm"] = target.create_target_machine(
                cpu=cpu, features=features, opt=self.options.opt_level, reloc="pic", codemodel=model)
        return self._memo["tm"]

    def _compile(self, program: ir.Program):
        """Generate, verify and optimize: returns (generated IR text, optimized llvmlite module)."""
        from . import codegen
        llvm = binding()
        tm = self.target_machine()
        try:
            module = codegen.generate(program, self.threads(), self.features())
            module.triple, module.data_layout = tm.triple, str(tm.target_data)
            text = str(module)
        except TunekitError:
            raise
        except Exception as e:
            raise BuildError(f"{program.name}: llvm codegen failed for {self.name}: "
                             f"{type(e).__name__}: {e}") from e
        try:
            mod = llvm.parse_assembly(text)
            mod.verify()
        except RuntimeError as e:
            raise BuildError(f"{program.name}: generated LLVM IR is invalid ({e}); this is a codegen bug, "
                             "please report it with the program") from e
        return text, self._optimized(mod, self.options.opt_level)

    def network_choices(self) -> tunekit.NetworkChoices:
        """Activations in blocks of a float32 vector, matmul weights in panels of two, Winograd's
        F(2x2) and F(4x4) and fused inverted residuals: what this plugin's templates schedule."""
        lanes, feats = self.device().lanes("float32"), self.features()
        dot = "tdpbf16ps" if AMX["dot2_bf16"] <= feats else "vdpbf16ps" if "avx512bf16" in feats else ""
        return tunekit.NetworkChoices(channel_block=lanes, panel_width=2 * lanes, winograd_tiles=(2, 4), mbconv=True,
                                      blocked_ops=frozenset({"conv2d", "depthwise_conv2d", "max_pool2d",
                                                             "avg_pool2d", "global_avg_pool2d"}), bf16_dot=dot)

    def code_version(self) -> str:
        llvm = "none" if _llvmlite_missing() else ".".join(map(str, binding().llvm_version_info))
        return f"{super().code_version()}-llvm{llvm}"

    def build(self, program: ir.Program) -> tunekit.Artifact:
        text, mod = self._compile(program)
        tm = self.target_machine()
        cpu, features = self.cpu_features()
        obj = tm.emit_object(mod)
        meta = {"llvm_ir": text, "triple": self.triple(), "cpu": cpu, "features": features,
                "needs": linker.needed(self.triple(), self.features()),   # what running it needs of a CPU
                "params": [(b.name, tuple(map(dim_data, b.shape)), b.dtype) for b in program.params],
                "sizes": [(v.name, v.lo, v.hi) for v in program.sizes],
                "parallel": '@"GOMP_parallel"' in text, "amx": "llvm.x86.tdp" in text}
        return tunekit.Artifact(target=self.name, entry=program.name, data=bytes(obj), meta=meta)

    def link(self, artifacts: list[tunekit.Artifact]) -> tunekit.Library:
        for a in artifacts:
            if a.target != self.name or a.meta.get("triple") != self.triple():
                raise BuildError(f"{self.name}: kernel {a.entry} was built for {a.target} ({a.meta.get('triple')}), "
                                 f"not this target ({self.triple()})")
        return tunekit.Library(linker.link(artifacts, self.triple()), linker.machine(self.triple()),
                               linker.needed(self.triple(), self.features()))

    def assembly(self, program: ir.Program) -> str:
        """The optimized assembly of `program` for this target (for inspection and tests)."""
        return self.target_machine().emit_assembly(self._compile(program)[1])

    def _check_runnable(self, artifact: tunekit.Artifact) -> None:
        why = self.available()
        if why is not None:
            raise KernelLoadError(f"{self.name}: cannot run kernel {artifact.entry} here: {why}")
        if artifact.target != self.name:
            raise KernelLoadError(f"{self.name}: artifact {artifact.entry} was built for {artifact.target!r}")

    def load(self, artifact: tunekit.Artifact) -> Callable[..., None]:
        self._check_runnable(artifact)
        if missing := host.missing_features(artifact.meta.get("needs", ())):   # an error, not SIGILL
            raise KernelLoadError(f"{self.name}: cannot run kernel {artifact.entry}: built for {artifact.meta['cpu']} "
                                  f"with {', '.join(missing)}, which this CPU lacks; build for this CPU: mcpu = \"\"")
        return load(artifact)


def _adds(elem: str, n: int) -> str:
    """A probe's body (`_CpuTarget._probe`): the n-element vectors at %a and %b added into %a."""
    op, t = "fadd" if elem == "float" else "add", f"<{n} x {elem}>"
    return f"  %x = load {t}, ptr %a\n  %y = load {t}, ptr %b\n  %z = {op} {t} %x, %y\n  store {t} %z, ptr %a"


def _dots(x: str) -> str:
    """A probe's body: the 4-byte dot products of bytes (x: "zext" or "sext") by signed bytes."""
    return (f"  %x = load <16 x i8>, ptr %a\n  %y = load <16 x i8>, ptr %b\n  %u = {x} <16 x i8> %x to <16 x i32>\n"
            "  %v = sext <16 x i8> %y to <16 x i32>\n  %m = mul <16 x i32> %u, %v\n"
            "  %r = call <4 x i32> @llvm.vector.partial.reduce.add.v4i32.v16i32(<4 x i32> zeroinitializer, "
            "<16 x i32> %m)\n"
            "  store <4 x i32> %r, ptr %a")


class X86Target(_CpuTarget):
    """x86-64 CPUs (the host by default), vectorized up to AVX-512."""

    name: ClassVar[str] = "x86"
    run_arch = _X86
    # vpmaddwd's widths (the dot product without VNNI); VNNI itself is only known of the host
    _PROBES = {"sse2": (_adds("i32", 4), "xmm"), "avx2": (_adds("i32", 8), "ymm"),
               "avx512bw": (_adds("i16", 32), "zmm")}

    class Options(tunekit.Options):
        mcpu: str = Field("", description="LLVM CPU name to compile for (e.g. 'znver4', 'skylake-avx512'); "
                                          "empty = the host CPU with its exact features")
        num_threads: int = Field(0, ge=0, description="threads for parallel loops; 0 = all cores")
        opt_level: int = Field(3, ge=0, le=3, description="LLVM optimization level (0-3)")

    @classmethod
    def available(cls) -> str | None:
        missing = _llvmlite_missing()
        if missing:
            return missing
        if _host_arch() not in _X86:
            return f"the host is {platform.machine()}, not x86-64"
        return None

    def triple(self) -> str:
        return binding().get_process_triple() if _host_arch() in _X86 else "x86_64-unknown-linux-gnu"

    def cpu_features(self) -> tuple[str, str]:
        if self.options.mcpu:
            return self.options.mcpu, ""
        llvm = binding()
        return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()

    def vector_bits(self) -> int:
        if not self.options.mcpu:
            feats = binding().get_host_cpu_features()
            return 512 if feats.get("avx512f") else 256 if feats.get("avx2") else 128
        # a named CPU: ask its target machine which registers a 16-float add uses
        asm = self._probe(_adds("float", 16))
        return 512 if "zmm" in asm else 256 if "ymm" in asm else 128


class _per_options:
    """Make `available()` answer for the default Options when asked on the class (contract
    tests, `tunekit validate`) and for the instance's own Options when asked on an instance
    (the tuner, the runners): an option (arm-cpu's `emulate`) changes what can run here."""

    def __init__(self, fn):
        self.fn, self.__doc__ = fn, fn.__doc__

    def __get__(self, obj, cls):
        return functools.partial(self.fn, cls, cls.Options() if obj is None else obj.options)


class ArmCpuTarget(_CpuTarget):
    """64-bit ARM CPUs with NEON (cross-compiled anywhere; running needs an ARM device,
    or qemu-aarch64 with `emulate = true`)."""

    name: ClassVar[str] = "arm-cpu"
    run_arch = _ARM
    _PROBES = {"dotprod": (_dots("sext"), "sdot"), "i8mm": (_dots("zext"), "usdot")}
    _CACHES: ClassVar[dict[str, tuple[int, int]]] = {
        "cortex-a53": (32 << 10, 512 << 10), "cortex-a55": (32 << 10, 256 << 10),
        "cortex-a72": (32 << 10, 1 << 20), "cortex-a76": (64 << 10, 512 << 10),
        "neoverse-n1": (64 << 10, 1 << 20), "neoverse-v1": (64 << 10, 1 << 20)}

    class Options(tunekit.Options):
        mcpu: str = Field("cortex-a72", description="LLVM CPU name: cortex-a53, cortex-a72, cortex-a76, "
                                                    "neoverse-n1, apple-m1 ...")
        num_threads: int = Field(4, ge=0, description="threads for parallel loops; 0 = all cores of the host")
        opt_level: int = Field(3, ge=0, le=3, description="LLVM optimization level (0-3)")
        emulate: bool = Field(False, description="On a non-ARM host, run kernels under qemu-aarch64 (qemu-user, "
                              "gcc-aarch64-linux-gnu): correct answers but emulated timings, not a device's; "
                              "records made this way carry a distinct device fingerprint and never serve a "
                              "real board")

    @property
    def _caches_default(self) -> tuple[int, int]:
        return self._CACHES.get(self.options.mcpu, (32 << 10, 1 << 20))

    @_per_options
    def available(cls, options) -> str | None:
        """Return why kernels cannot run here with `options`, or None."""
        missing = _llvmlite_missing()
        if missing or _host_arch() in _ARM:
            return missing
        if options.emulate:
            from . import qemu
            return qemu.missing()
        return ("running needs an ARM device, or `emulate = true` with qemu-user and gcc-aarch64-linux-gnu "
                "installed; building works here")

    @property
    def emulated(self) -> bool:
        """Whether kernels run under qemu-aarch64 (`emulate` on a non-ARM host)."""
        return self.options.emulate and _host_arch() not in _ARM

    def _device_extra(self) -> dict:
        extra = super()._device_extra()
        if self.emulated:   # emulated timings are not a board's: their records must never serve one
            extra["emulated"] = True
        return extra

    def load(self, artifact: tunekit.Artifact) -> Callable[..., None]:
        if not self.emulated:
            return super().load(artifact)
        from . import qemu
        self._check_runnable(artifact)
        return qemu.load(artifact)

    def run(self, artifact: tunekit.Artifact, args: list, settings: tunekit.RunSettings) -> list[float]:
        """Time `artifact` on `args`; under emulation inside one qemu process (starting one per run would be
        most of what is timed)."""
        if not self.emulated:
            return super().run(artifact, args, settings)
        from . import qemu
        self._check_runnable(artifact)
        return qemu.time(artifact, args, settings)

    def triple(self) -> str:
        return "aarch64-unknown-linux-gnu"

    def vector_bits(self) -> int:
        return 128
