"""GPU kernel source from the loop IR, in two dialects: CUDA C and OpenCL C.

`emit(program, "cuda" | "opencl") -> Source`. What becomes what:

- The program body (below its root "global" temporaries) is a sequence of stage
  nests; each becomes one kernel, launched in order. The launch grid and block
  come from the extents of the loops bound to blockIdx.* / threadIdx.* (the
  largest one per axis; a smaller loop bound to the same axis is guarded). A nest
  with no bound loop runs as a single thread.
- Bound loops become `blockIdx`/`threadIdx` (CUDA) or `get_group_id`/
  `get_local_id` (OpenCL); "vthread" loops become plain unrolled loops.
- "shared" buffers become `__shared__` / `__local` arrays at kernel scope
  (16-byte aligned); "local" buffers become private arrays (registers).
- Barrier -> `__syncthreads()` / `barrier(CLK_LOCAL_MEM_FENCE)`; a barrier under
  a thread-dependent condition is a BuildError (not every thread would reach it).
- Unrolled (and vthread) loops get `#pragma unroll`, except loops containing a
  barrier (PoCL miscompiles those). A vectorized loop of extent 2/4 (OpenCL also
  8/16) whose body is one store uses vector loads and stores for the accesses
  that are contiguous in the loop variable (CUDA: float4/int4 casts, only on
  global/shared buffers at provably aligned indices; OpenCL: vloadN / vstoreN,
  with native vector arithmetic when the whole value vectorizes); other accesses
  are per lane; other vectorized loops are unrolled scalar loops. Loads under a
  Select branch stay lazy (`?:`). In OpenCL, a "local" buffer accessed only as
  aligned n-wide vectors is declared as an array of floatN (kept in vector
  registers).
- Integer `//` and `%` have floor semantics; they are emitted as C `/` and `%`
  where value ranges prove both sides non-negative, else with a sign adjustment.
- Index arithmetic (dtype int64 in the IR) is 32-bit when every buffer has
  fewer than 2**31 elements.
- Kernel parameters: every program parameter, then every root temporary, as
  `float* __restrict__` / `__global float* restrict` (`const` when only read).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from tunekit import ir
from tunekit.errors import BuildError
from tunekit.ir.printer import Names

from .dialects import DIALECTS, RESERVED
from .emit import KernelWriter, launch_extents, vector_registers

__all__ = ["KernelInfo", "Source", "emit"]


@dataclass
class KernelInfo:
    """One kernel of a Source and its launch: grid = blocks per axis, block = threads per axis."""
    name: str
    grid: tuple
    block: tuple

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass
class Source:
    """Kernel source and what a runtime needs to launch it."""
    code: str
    dialect: str
    kernels: list            #: KernelInfo, launched in this order
    buffers: list            #: (name, shape, dtype) of every kernel argument: params, then temporaries
    num_params: int          #: how many of `buffers` are the program's params
    read: list               #: indices of buffers some kernel reads
    written: list            #: indices of buffers some kernel writes

    def meta(self) -> dict:
        """A picklable, JSON-friendly description (for Artifact.meta)."""
        return {"source": self.code, "dialect": self.dialect,
                "kernels": [asdict(k) for k in self.kernels],
                "buffers": [(n, list(s), d) for n, s, d in self.buffers], "num_params": self.num_params,
                "read": self.read, "written": self.written}


def _access(node) -> tuple[set, set]:
    read, written = set(), set()

    class V(ir.Visitor):
        def visit_Load(self, n):
            read.add(n.buffer)
            self.generic_visit(n)

        def visit_Store(self, n):
            written.add(n.buffer)
            self.generic_visit(n)
    V().visit(node)
    return read, written


def emit(program: ir.Program, dialect: str) -> Source:
    """Write `program` as CUDA C (`dialect="cuda"`) or OpenCL C (`"opencl"`)."""
    d = DIALECTS[dialect]
    if program.sizes:   # grids are sized at build time here
        raise BuildError(f"{program.name}: symbolic sizes ({', '.join(v.name for v in program.sizes)}) are built by "
                         f"the llvm targets only; {dialect} kernels need static shapes")
    body, temps = program.body, []
    while isinstance(body, ir.Allocate) and body.buffer.scope == "global":
        temps.append(body.buffer)
        body = body.body
    buffers = list(program.params) + temps
    names = Names()
    names.used |= RESERVED
    for b in buffers:
        names(b)
    idx_t = "int" if all(b.size < 2 ** 31 for b in buffers) else d.scalar("int64")
    read, written = _access(body)
    base = re.sub(r"\W", "_", program.name) or "fn"
    base = base + "_fn" if base in RESERVED or base[0].isdigit() else base
    parts = body.stmts if isinstance(body, ir.Seq) else [body]
    kernels, chunks, dtypes = [], [], {b.dtype for b in buffers}
    for k, part in enumerate(parts):
        launch = launch_extents(part)
        grid = tuple(launch.get(f"blockIdx.{a}", 1) for a in "xyz")
        block = tuple(launch.get(f"threadIdx.{a}", 1) for a in "xyz")
        name = base if len(parts) == 1 else f"{base}_k{k}"
        w = KernelWriter(d, names, launch, idx_t)
        if dialect == "opencl":
            w.vec_regs = vector_registers(part, d.vector_widths)
        w.stmt(part, 1)
        dtypes |= w.dtypes
        params = [d.param(d.scalar(b.dtype), names(b), b not in written) for b in buffers]
        chunks.append("\n".join([d.head(name, params, block) + " {", *("  " + s for s in w.shared.values()),
                                 *w.lines, "}"]))
        kernels.append(KernelInfo(name, grid, block))
    if not parts:
        raise BuildError(f"{program.name}: the program has no statements")
    code = "\n".join(d.extensions(dtypes)) + "\n\n" + "\n\n".join(chunks) + "\n"
    return Source(code.lstrip("\n"), dialect, kernels,
                  [(names(b), tuple(b.shape), b.dtype) for b in buffers], len(program.params),
                  [i for i, b in enumerate(buffers) if b in read],
                  [i for i, b in enumerate(buffers) if b in written])
