"""NullTarget: a test target that simulates a CPU instead of running code.

A TEST TOOL, never a real backend: its costs are computed from the structure of
the loop IR by a small, deterministic model of a CPU (vector lanes, cores, a
32 KiB cache, strided accesses, loop overhead), so that tuning, cost models and
explorers can be tested on any machine, quickly and reproducibly. With
`execute=True` it also runs the program in the reference interpreter so outputs
are real (small shapes only).

It exists only inside one process (the core measures it with an inline runner).
Register it, with its test template for `matmul`, through `null_plugin`.
"""
from __future__ import annotations

import hashlib
import math
import pickle
import random
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import Field

from tunekit import ir, te
from tunekit.component import Options as _Options
from tunekit.errors import BuildError
from tunekit.features import _dtype_bytes
from tunekit.hookspecs import hookimpl
from tunekit.ir import interp
from tunekit.ops.matmul import compute as matmul_compute
from tunekit.ops.op import Template
from tunekit.targets import Artifact, DeviceInfo, RunSettings, Target
from tunekit.te.bound import affine

_CLOCK_HZ = 2e9          # simulated cycles per second
_LINE = 64               # cache line bytes
_CACHE = 32 << 10        # the fake cache the innermost tiles should fit in
_MISS_CYCLES = 8.0       # per cache line loaded
_LOOP_CYCLES = 1.0       # per loop iteration (not for unrolled loops)
_FORK_CYCLES = 1000.0    # per entry into a parallel loop (fork/join)
_STRIDE_CYCLES = 2.0     # per innermost-loop access whose stride spans a cache line


class NullTarget(Target):
    """Simulated CPU for tests (name "null", family "cpu"); see the module docstring.

    `build` never fails unless asked to (`fail_build`), `run` returns the
    simulated cost of the program, repeated `settings.repeat` times.
    """

    name: ClassVar[str] = "null"
    family: ClassVar[str] = "cpu"

    class Options(_Options):
        execute: bool = Field(False, description="Run programs in the reference interpreter so outputs "
                                                 "are written (slow: small shapes only).")
        noise: float = Field(0.0, ge=0.0, lt=1.0, description="Relative spread of the simulated costs; "
                                                              "deterministic per program name and repeat.")
        vector_bits: int = Field(256, ge=32, description="Simulated SIMD width in bits.")
        cores: int = Field(2, ge=1, description="Simulated cores a parallel loop runs on.")
        fail_build: list[str] = Field(default_factory=list, description="Program names whose build "
                                                                        "raises BuildError (to test failures).")
        fail_run: list[str] = Field(default_factory=list, description="Program names whose run raises "
                                                                      "RuntimeError (to test failures).")

    def __init__(self, options: Options | None = None):
        super().__init__(options)
        o = self.options
        self._device = DeviceInfo(name="null", family="cpu", vector_bits=o.vector_bits, cores=o.cores)

    @property
    def produces_output(self) -> bool:
        """True when `execute` is on: only then does a run write the outputs."""
        return self.options.execute

    def device(self) -> DeviceInfo:
        """The simulated device: name "null", family "cpu", the Options' lanes and cores."""
        return self._device

    def build(self, program: ir.Program) -> Artifact:
        """Pickle `program` and attach its simulated cost (meta["simulated_cost"], seconds).

        Raises:
            BuildError: the program's name is in `Options.fail_build`.
        """
        if program.name in self.options.fail_build:
            raise BuildError(f"null target: build of {program.name!r} fails on purpose (Options.fail_build)")
        return Artifact(target=self.name, entry=program.name, data=pickle.dumps(program),
                        meta={"simulated_cost": self.simulated_cost(program)})

    def load(self, artifact: Artifact) -> Callable[..., None]:
        """Return a function running the program in the interpreter (`execute`),
        else one that does nothing (outputs are not written)."""
        if not self.options.execute:
            return lambda *arrays: None
        program = pickle.loads(artifact.data)
        return lambda *arrays: interp.run(program, *arrays)

    def run(self, artifact: Artifact, args: list[Any], settings: RunSettings) -> list[float]:
        """Return `settings.repeat` simulated costs in seconds (no timing happens).

        With `execute` the program runs once in the interpreter, writing `args`' outputs.
        Raises:
            RuntimeError: the program's name is in `Options.fail_run`.
        """
        if artifact.entry in self.options.fail_run:
            raise RuntimeError(f"null target: run of {artifact.entry!r} fails on purpose (Options.fail_run)")
        if self.options.execute:
            self.load(artifact)(*args)
        cost = float(artifact.meta["simulated_cost"])
        noise = self.options.noise
        if noise <= 0:
            return [cost] * settings.repeat
        rng = random.Random(int.from_bytes(hashlib.sha256(artifact.entry.encode()).digest()[:8], "little"))
        return [cost * (1.0 + noise * rng.uniform(-1.0, 1.0)) for _ in range(settings.repeat)]

    def simulated_cost(self, program: ir.Program) -> float:
        """Seconds one run of `program` would take on the simulated CPU (deterministic)."""
        sim = _Simulator(self.options.vector_bits, self.options.cores)
        sim.stmt(program.body, [])
        return sim.cycles / _CLOCK_HZ


class _Access:
    """One buffer access of a store: its buffer and affine index (None if not affine)."""

    def __init__(self, buffer: ir.Buffer, index: ir.Expr):
        self.buffer, self.form = buffer, affine(index)
        self.vars = set(self.form) - {None} if self.form is not None else ir.free_vars(index)
        self.bytes = _dtype_bytes(buffer.dtype)

    def coef(self, var: ir.Var) -> int | None:
        """Element stride of this access along `var` (None when not affine)."""
        return None if self.form is None else self.form.get(var, 0)

    def lines(self, loops: list[ir.For]) -> int:
        """Cache lines touched while `loops` (a nest, outermost first) run once."""
        inner = [(lp.extent, self.coef(lp.var)) for lp in loops if lp.var in self.vars]
        if not inner:
            return 1
        if self.form is None:
            return math.prod(e for e, _ in inner)
        inner = [(e, abs(c)) for e, c in inner if c]
        if not inner:
            return 1
        # the loop with the smallest stride walks contiguous memory; the others repeat that run
        e0, c0 = min(inner, key=lambda x: x[1])
        rest = math.prod(e for e, _ in inner) // e0
        run = min(e0, math.ceil(e0 * c0 * self.bytes / _LINE)) if c0 * self.bytes < _LINE else e0
        return max(1, run) * rest


class _Loads(ir.Visitor):
    def __init__(self):
        self.loads: list[ir.Load] = []
        self.ops = 0

    def visit_Load(self, node):
        self.loads.append(node)
        self.generic_visit(node)

    def visit_BinOp(self, node):
        self.ops += 1
        self.generic_visit(node)


class _Simulator:
    """Adds up the simulated cycles of a loop nest, one Store at a time."""

    def __init__(self, vector_bits: int, cores: int):
        self.vector_bits, self.cores = vector_bits, cores
        self.cycles = 0.0

    def _par(self, loops: list[ir.For]) -> tuple[float, int]:
        """(speedup, index) of the outermost parallel loop of `loops` ((1, -1) if none)."""
        for i, lp in enumerate(loops):
            if lp.kind == ir.PARALLEL:
                return lp.extent / math.ceil(lp.extent / self.cores), i
        return 1.0, -1

    def stmt(self, s: ir.Stmt, loops: list[ir.For]) -> None:
        if isinstance(s, ir.For):
            self._loop(s, loops)
            self.stmt(s.body, loops + [s])
        elif isinstance(s, ir.Seq):
            for x in s.stmts:
                self.stmt(x, loops)
        elif isinstance(s, ir.Allocate):
            self.stmt(s.body, loops)
        elif isinstance(s, ir.IfThenElse):
            self.stmt(s.then, loops)
            if s.orelse is not None:
                self.stmt(s.orelse, loops)
        elif isinstance(s, ir.Store):
            self._store(s, loops)

    def _loop(self, lp: ir.For, outer: list[ir.For]) -> None:
        entries = math.prod(x.extent for x in outer)
        speedup, p = self._par(outer)
        if lp.kind == ir.PARALLEL and p < 0:
            self.cycles += _FORK_CYCLES * entries
        if lp.kind == ir.UNROLLED:
            return
        iters = math.ceil(lp.extent / max(1, self.vector_bits // 32)) if lp.kind == ir.VECTORIZED else lp.extent
        self.cycles += _LOOP_CYCLES * entries * iters / speedup

    def _store(self, s: ir.Store, loops: list[ir.For]) -> None:
        v = _Loads()
        v.visit(s.value)
        accesses = [_Access(s.buffer, s.index)] + [_Access(ld.buffer, ld.index) for ld in v.loads]
        execs = math.prod(lp.extent for lp in loops)
        per_exec = 1.0 + 0.5 * len(v.loads) + 0.5 * v.ops

        vec = next((lp for lp in reversed(loops) if lp.kind == ir.VECTORIZED), None)
        if vec is not None and all(a.coef(vec.var) in (0, 1) for a in accesses):
            lanes = max(1, self.vector_bits // (8 * max(a.bytes for a in accesses)))
            per_exec /= min(lanes, vec.extent)
        elif vec is not None:
            per_exec *= 1.5  # a gather: slower than scalar code

        if loops and loops[-1].kind != ir.VECTORIZED:
            inner = loops[-1]
            for a in accesses:
                c = a.coef(inner.var)
                if (c is None and inner.var in a.vars) or (c is not None and abs(c) * a.bytes >= _LINE):
                    per_exec += _STRIDE_CYCLES

        # reuse model: the outermost sub-nest whose data fits the cache loads it once
        # per iteration of the loops outside it
        unique = list({(a.buffer.name, repr(a.form) if a.form is not None else id(a)): a
                       for a in accesses}.values())
        t = len(loops)
        while t > 0 and sum(a.lines(loops[t - 1:]) for a in unique) * _LINE <= _CACHE:
            t -= 1
        outer = math.prod(lp.extent for lp in loops[:t])
        misses = outer * sum(a.lines(loops[t:]) for a in unique)

        speedup, _ = self._par(loops)
        self.cycles += (execs * per_exec + misses * _MISS_CYCLES) / speedup


# ---- the null plugin: NullTarget and a matmul template for it

def null_matmul_template(cfg, device: DeviceInfo, M: int, N: int, K: int, dtype: str = "float32"):
    """A small test template for matmul: tile i and j, optionally vectorize the
    inner j loop and parallelize the outer i loop (vectorizing a 1-wide loop is
    invalid, so the space has a constraint)."""
    A, B, C = matmul_compute(M, N, K, dtype)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    cfg.define_split("tile_i", i, num_outputs=2)
    cfg.define_split("tile_j", j, num_outputs=2)
    cfg.define_knob("annotate", ["none", "vec", "parallel", "vec+parallel"])
    cfg.constrain(lambda e: e["tile_j"][-1] > 1 or "vec" not in e["annotate"])
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, k, ii, ji)
    if "vec" in cfg["annotate"]:
        s[C].vectorize(ji)
    if "parallel" in cfg["annotate"]:
        s[C].parallel(io)
    return s, [A, B, C]


NULL_MATMUL = Template(op="matmul", name="null-matmul", targets=("null",), fn=null_matmul_template)


class _NullPlugin:
    """Contributes NullTarget and its matmul template. Register it for a test
    (`null_target_plugin` fixture, or `plugin_registered(null_plugin, "tunekit.testing")`)."""

    @hookimpl
    def tunekit_targets(self):
        return [NullTarget]

    @hookimpl
    def tunekit_templates(self):
        return [NULL_MATMUL]

    def __repr__(self) -> str:
        return "tunekit.testing.null_plugin"


null_plugin = _NullPlugin()
NULL_PLUGIN_NAME = "tunekit.testing"


def simulated_trials(task_space, indices, failed=()) -> list:
    """Measure configs of `task_space` on a NullTarget, without running anything.

    Args:
        task_space: a `TaskSpace` (its target is used when it is a NullTarget).
        indices: config indices to "measure".
        failed: indices that get a build error (empty costs) instead.
    Returns:
        `tunekit.records.Trial`s with `.candidate` set, in the order of `indices`.
    """
    from tunekit.records import BUILD_ERROR, Trial
    target = task_space.target if isinstance(task_space.target, NullTarget) else NullTarget()
    settings, failed = RunSettings(repeat=3), set(failed)
    out = []
    for cand in task_space.candidates(list(indices)):
        trial = Trial(index=cand.index, config=cand.config.to_json(), candidate=cand)
        if cand.index in failed:
            trial.error, trial.message = BUILD_ERROR, "simulated build failure"
        else:
            trial.costs = target.run(target.build(cand.program), [], settings)
        out.append(trial)
    return out
