"""The Target contract: code generation and execution for one kind of hardware."""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from tunekit.component import Component
from tunekit.errors import BuildError
from tunekit.ir import Program
from tunekit.ops.op import DTYPES


@dataclass
class DeviceInfo:
    """Facts about the device that templates read to shape their spaces."""
    name: str
    family: str                        #: "cpu" or "gpu"
    vector_bits: int = 128             #: SIMD width (CPU) or preferred vector width (GPU)
    cores: int = 1                     #: cores (CPU) or multiprocessors (GPU)
    l1_bytes: int = 32 << 10
    l2_bytes: int = 1 << 20
    max_threads_per_block: int = 0
    max_shared_memory: int = 0
    warp_size: int = 0
    extra: dict = field(default_factory=dict)

    def fingerprint(self) -> str:
        """A stable hash of these facts: history is only shared between equal devices."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def vector_registers(self) -> int:
        """SIMD registers of a CPU: 32 with AVX-512 and on AArch64 (NEON), 16 with AVX2/SSE."""
        x86 = self.extra.get("triple", "x86").startswith(("x86", "i386", "i686"))
        return 16 if x86 and self.vector_bits < 512 else 32

    def shared_on_chip(self) -> bool:
        """Whether a GPU's shared (OpenCL local) memory is on chip, so worth tiling into; CPU
        OpenCL devices (PoCL) and Mali emulate it in global memory (`extra["local_memory"]`)."""
        return self.max_shared_memory > 0 and self.extra.get("local_memory", "local") != "global"

    def lanes(self, dtype: str = "float32") -> int:
        """Vector lanes of `dtype` in one SIMD register."""
        bits = int("".join(c for c in dtype if c.isdigit()) or 32)
        return max(1, self.vector_bits // bits)


@dataclass
class Artifact:
    """A compiled kernel; picklable so it travels from a build worker to a runner.
    `data` is what the target needs to load it (object code, PTX, source)."""
    target: str
    entry: str
    data: bytes | str
    meta: dict = field(default_factory=dict)


@dataclass
class Library:
    """Kernels linked into one shared library that `tunekit.runtime` loads (`Target.link`)."""
    data: bytes                      #: the shared object (ELF), its kernels exported by their `entry` names
    machine: str                     #: the architecture it runs on, as `platform.machine()` names it
    features: tuple[str, ...] = ()   #: CPU features (LLVM's names) its code may use; a CPU without one is refused


@dataclass(frozen=True)
class NetworkChoices:
    """What a target declares about running whole networks (`Target.network_choices`);
    the core's graph passes read it and decide nothing about the hardware themselves."""
    #: the channel block of activations in blocked layouts ("NCHW{b}c"); 0: plain NCHW
    channel_block: int = 0
    #: the ops run in blocked layouts (of conv2d, depthwise_conv2d and the 2-D pools)
    blocked_ops: frozenset[str] = frozenset()
    #: the column panel width that constant matmul weights are packed in; 0: as they are
    panel_width: int = 0
    #: the Winograd output tiles a blocked 3x3 stride-1 conv2d may run (`conv2d_winograd`)
    winograd_tiles: tuple[int, ...] = ()
    #: whether an inverted-residual chain may run as one `mbconv` kernel
    mbconv: bool = False
    #: products of constant weights with fewer rows than this run as `dense`, the others as `matmul`
    dense_rows: int = 16
    #: the instruction bfloat16 products run on (`precision="bf16"`); "": none, the pairs are decoded
    bf16_dot: str = ""


@dataclass
class RunSettings:
    """How to time a kernel (from the recipe's [measure] section)."""
    number: int = 4            #: runs per timed repeat (their mean is one cost)
    repeat: int = 3            #: timed repeats (one cost each)
    min_repeat_ms: float = 50  #: raise `number` until one repeat lasts this long
    warmup: int = 1            #: untimed runs first
    flush_cache: bool = False  #: evict caches before each repeat


class Target(Component):
    """A hardware backend: turns a loop-IR Program into a kernel and runs it.

    Orchestration (processes, timeouts, correctness checks) belongs to the core;
    a target only compiles, loads and times.

    Where each method runs: `build` in a build worker (a spawned process that
    rebuilds the target from `spec()`; it must not need the device), `load` and
    `run` in the runner's isolated process on the device, `device` and
    `available` wherever the core needs them. An exception from `build` records
    a "build error" for that config (a build past `[measure] build_timeout_s`, a
    "build timeout"); from `load` or `run`, a "run error"; a crash or a hang of
    the runner process costs that config a run error or run timeout. None of
    these stops the tuning run.
    """

    #: "cpu" or "gpu": which family of templates serves this target.
    family: ClassVar[str]
    #: Whether running a kernel writes real outputs the core can check (only
    #: simulated test targets say no).
    produces_output: ClassVar[bool] = True
    #: The element types this target compiles (a subset of `tunekit.ops.op.DTYPES`);
    #: tasks of other dtypes are refused when a recipe is validated.
    dtypes: ClassVar[tuple[str, ...]] = DTYPES

    def __init__(self, options=None):
        super().__init__(options)
        #: per-process state (loaded kernels, device handles): never pickled
        self._memo: dict = {}

    def __getstate__(self):
        return {"options": self.options}

    def __setstate__(self, state):
        self.options, self._memo = state["options"], {}

    def device(self) -> DeviceInfo:
        """Describe the device this target compiles for (may be called often: cache it)."""
        raise NotImplementedError

    def memory_bytes(self) -> int | None:
        """Return the bytes of memory a kernel's arrays must fit in (None: unknown).

        Tasks whose arrays need more are refused before anything is measured. The
        default is the host's physical memory for CPU targets, None for others.
        """
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if self.family == "cpu" else None
        except (ValueError, OSError):
            return None

    def check_task(self, task) -> str:
        """Return why this target cannot run `task` (dtype, memory), or "" when it can."""
        if (dtype := task.args.get("dtype")) is not None and dtype not in self.dtypes:
            return f"dtype {dtype!r} is not supported by target {self.name!r} (supported: {', '.join(self.dtypes)})"
        mem, need = self.memory_bytes(), task.op.buffer_bytes(task.args)
        if mem and need > mem:
            return (f"the arrays of {task.name} need {need / 2**30:.1f} GiB, more than the {mem / 2**30:.1f} GiB "
                    f"of memory of target {self.name!r}; use smaller sizes")
        return ""

    def network_choices(self) -> NetworkChoices:
        """Return the choices a network compiled for this target takes (layouts, packed
        weights, the algorithms its layers may run); the default takes none of them."""
        return NetworkChoices()

    def code_version(self) -> str:
        """Return what identifies the code this target generates for a program: it changes when the same
        program may compile to other code (the code generator's source, the compiler's version).

        Records measured under another code version are not taken as today's (the core adds the template's
        own source). The default hashes the Python files beside the module that defines the class (its
        package, not subpackages such as templates); override it to add the compiler's version.
        """
        try:
            return source_hash(os.path.dirname(inspect.getfile(type(self))))
        except TypeError:   # defined where no file is kept (a REPL, exec'd code)
            return f"{type(self).__module__}.{type(self).__qualname__}"

    def build(self, program: Program) -> Artifact:
        """Generate code for `program` and compile it.

        Runs in a build worker process; must not need the device.
        Raises:
            tunekit.errors.BuildError: the program cannot be compiled (say why).
        """
        raise NotImplementedError

    def load(self, artifact: Artifact) -> Callable[..., None]:
        """Load `artifact` and return a function taking the kernel's arrays (the
        program's params, in order) that runs it once, writing outputs in place.

        The function may also have `bind(*arrays) -> Callable[[], None]`: check the
        arrays once and return a call that runs the kernel on them with no check
        (what a compiled model's plan calls; without it, the plan calls the function).
        """
        raise NotImplementedError

    def link(self, artifacts: list[Artifact]) -> Library:
        """Link `artifacts` (kernels of distinct `entry` names) into one shared library for
        `tunekit.runtime`, which calls each as `void entry(void *array, ...)` (what a saved
        `CompiledModel` holds). Runs where the model is compiled; must not need the device.

        Raises:
            tunekit.errors.BuildError: the kernels cannot be linked (the default: this target's
                kernels do not run in `tunekit.runtime`).
        """
        raise BuildError(f"target {self.name!r} cannot link its kernels for tunekit.runtime (a saved model runs CPU "
                         "kernels: compile for x86 or arm-cpu)")

    def run(self, artifact: Artifact, args: list[Any], settings: RunSettings) -> list[float]:
        """Time `artifact` on `args` (the kernel's arrays, outputs written in place).

        Returns:
            `settings.repeat` costs, each the mean seconds of one run in a repeat.
        The default times the function from `load` with the host clock; GPU targets
        override it with device events.
        """
        fn = self.load(artifact)
        for _ in range(settings.warmup):
            fn(*args)
        number = settings.number
        if settings.min_repeat_ms > 0:
            t0 = time.perf_counter()
            fn(*args)
            one = max(time.perf_counter() - t0, 1e-7)
            number = max(number, int(np.ceil(settings.min_repeat_ms / 1e3 / one)))
        costs = []
        for _ in range(settings.repeat):
            if settings.flush_cache:
                flush_cpu_cache()
            t0 = time.perf_counter()
            for _ in range(number):
                fn(*args)
            costs.append((time.perf_counter() - t0) / number)
        return costs


@functools.cache
def source_hash(folder: str) -> str:
    """A hash of the Python files in `folder` (not its subfolders): the code a target or template is made of."""
    h = hashlib.sha256()
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".py")):
        with open(os.path.join(folder, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


_FLUSH: np.ndarray | None = None


def flush_cpu_cache(nbytes: int = 64 << 20) -> None:
    """Evict the CPU caches by writing a buffer larger than them."""
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = np.empty(nbytes // 8, np.float64)
    _FLUSH += 1.0
