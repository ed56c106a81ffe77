"""Reference interpreter: runs a Program on numpy arrays, slowly and plainly.

The program is printed as Python source (loops stay loops, float math in
float64) and executed; it exists to check that every schedule computes the
right answer, not to be fast. GPU threads run as Python generators, switched at
barriers, so that every thread reaches a barrier before any passes it.
"""
from __future__ import annotations

import math

import numpy as np

from . import nodes as n
from . import sizes as sizes_mod
from .printer import Printer
from .visitor import Visitor


class _PyPrinter(Printer):
    """Python source for a Program; a nest of threadIdx loops becomes a generator
    per thread (a barrier is a `yield`) run round-robin, so that every thread
    reaches a barrier before any passes it. Shared buffers are allocated once per
    block, outside the threads; local ones inside, once per thread."""

    def __init__(self):
        super().__init__(python=True)
        self.in_threads = False

    def stmt(self, s, ind, out):
        if isinstance(s, n.For) and s.kind == n.THREAD and (s.tag or "").startswith("threadIdx") \
                and not self.in_threads:
            return self._threads(s, ind, out)
        if isinstance(s, n.Allocate) and s.buffer.scope == "shared" and self.in_threads:
            return self.stmt(s.body, ind, out)      # allocated per block, before the threads
        if isinstance(s, n.For) and isinstance(s.extent, int) and s.extent == 1 and s.kind != n.THREAD:
            # no block for a one-iteration loop: Python allows only 20 nested blocks
            out.append(f"{'  ' * ind}{self.name(s.var)} = 0")
            return self.stmt(s.body, ind, out)
        if isinstance(s, n.Barrier) and self.in_threads:
            out.append(f"{'  ' * ind}yield")
            return None
        return super().stmt(s, ind, out)

    def _threads(self, s: n.For, ind: int, out: list[str]) -> None:
        pad = "  " * ind
        loops, body = [], s
        while isinstance(body, n.For) and body.kind == n.THREAD and (body.tag or "").startswith("threadIdx"):
            loops.append(body)
            body = body.body
        out += [f"{pad}{self.name(b)} = [0] * {self.extent(b.size)}" for b in _shared_buffers(body)]
        fn = f"_thread{len(out)}"
        args = ", ".join(self.name(lp.var) for lp in loops)
        out.append(f"{pad}def {fn}({args}):")
        self.in_threads = True
        self.stmt(body, ind + 1, out)
        self.in_threads = False
        out.append(f"{pad}  yield")
        ranges = " ".join(f"for {self.name(lp.var)} in range({self.extent(lp.extent)})" for lp in loops)
        out.append(f"{pad}_run_threads([{fn}({args}) {ranges}])")


def _shared_buffers(s) -> list:
    found = []

    class V(Visitor):
        def visit_Allocate(self, node):
            if node.buffer.scope == "shared":
                found.append(node.buffer)
            self.generic_visit(node)
    V().visit(s)
    return found


def _run_threads(threads) -> None:
    while threads:
        threads = [t for t in threads if next(t, StopIteration) is not StopIteration]


def _fma(a, b, c):
    return a * b + c


def bf16x2(lo, hi):
    """int32 (numpy): float32 `lo` and `hi` rounded to bfloat16, to nearest with ties to even, `lo` low."""
    def bits(x):
        u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return (bits(lo) | (bits(hi) << 16)).astype(np.uint32).view(np.int32)


def bf16_halves(v):
    """(low, high) float32 (numpy): the two bfloat16 values of the pairs `v` (int32)."""
    u = np.asarray(v, np.int64).astype(np.uint32)
    return (u << 16).view(np.float32), (u & 0xFFFF0000).astype(np.uint32).view(np.float32)


def dot2_bf16(a, b):
    """float32 (numpy): low times low plus high times high of the bfloat16 pairs `a` and `b` (int32)."""
    (al, ah), (bl, bh) = bf16_halves(a), bf16_halves(b)
    return (al * bl + ah * bh).astype(np.float32)


def dot4_u8s8(a, b):
    """The sum of the four products of the bytes of `a` (unsigned) and `b` (signed), numpy or Python
    integers holding int32 values."""
    total = 0
    for shift in (0, 8, 16, 24):
        x, y = (a >> shift) & 255, (b >> shift) & 255
        total = total + x * (y - ((y >> 7) << 8))   # y - 256 where its sign bit is set
    return total


def compile_python(program: n.Program) -> str:
    """Return the Python source the interpreter runs for `program`."""
    pr = _PyPrinter()
    args = ", ".join([pr.name(b) for b in program.params] + [pr.name(v) for v in program.sizes])
    lines: list[str] = []
    pr.stmt(program.body, 1, lines)
    return f"def kernel({args}):\n" + ("\n".join(lines) or "  pass") + "\n"


def run(program: n.Program, *arrays: np.ndarray) -> None:
    """Execute `program` on numpy arrays (params order), writing outputs in place; its sizes are
    read from the arrays' shapes."""
    if len(arrays) != len(program.params):
        raise ValueError(f"{program.name} takes {len(program.params)} arrays, got {len(arrays)}")
    sizes = sizes_mod.bind(program.name, [[sizes_mod.dim_data(d) for d in b.shape] for b in program.params],
                           [a.shape for a in arrays], {v.name: (v.lo, v.hi) for v in program.sizes})
    ns = {"math": math, "_fma": _fma, "_rint": lambda x: float(round(x)), "_dot4_u8s8": dot4_u8s8, "_bf16x2": bf16x2,
          "_dot2_bf16": dot2_bf16, "inf": math.inf, "nan": math.nan, "_run_threads": _run_threads}
    exec(compile(compile_python(program), f"<tunekit.ir.interp {program.name}>", "exec"), ns)
    lists = [np.ravel(a).tolist() for a in arrays]
    ns["kernel"](*lists, *(sizes[v.name] for v in program.sizes))
    for a, vals in zip(arrays, lists):
        a[...] = np.asarray(vals, dtype=a.dtype).reshape(a.shape)
