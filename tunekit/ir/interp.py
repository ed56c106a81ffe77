"""Reference interpreter: runs a Program on numpy arrays, slowly and plainly.

The program is printed as Python source (loops stay loops, float math in
float64) and executed; it exists to check that every schedule computes the
right answer, not to be fast. GPU thread loops run one thread at a time, with
the body split at barriers so that every thread finishes one phase before any
thread starts the next; "local" buffers inside them are per thread.
"""
from __future__ import annotations

import math

import numpy as np

from . import nodes as n
from .printer import Printer
from .visitor import Visitor


class _Has(Visitor):
    def __init__(self, cls):
        self.cls, self.found = cls, False

    def generic_visit(self, node):
        if isinstance(node, self.cls):
            self.found = True
        elif not self.found:
            super().generic_visit(node)


def _contains(s, cls) -> bool:
    v = _Has(cls)
    v.visit(s)
    return v.found


def _phases(s: n.Stmt) -> list[n.Stmt]:
    """Split a thread loop body at its top-level barriers."""
    out, cur = [], []
    for x in s.stmts if isinstance(s, n.Seq) else [s]:
        if isinstance(x, n.Barrier):
            out.append(cur)
            cur = []
        else:
            cur.append(x)
    out.append(cur)
    return [n.seq(*c) for c in out if c]


class _PyPrinter(Printer):
    def __init__(self):
        super().__init__(python=True)

    def stmt(self, s, ind, out):
        if isinstance(s, n.For) and s.kind == n.THREAD and _contains(s.body, n.Barrier):
            return self._threaded(s, ind, out)
        return super().stmt(s, ind, out)

    def _threaded(self, s: n.For, ind: int, out: list[str]) -> None:
        pad, v = "  " * ind, self.name(s.var)
        body, locals_ = s.body, []
        while isinstance(body, n.Allocate):
            locals_.append(body.buffer)
            body = body.body
        for b in locals_:
            out.append(f"{pad}{self.name(b)}__t = [[0] * {b.size} for _ in range({s.extent})]")
        for phase in _phases(body):
            out.append(f"{pad}for {v} in range({s.extent}):")
            for b in locals_:
                out.append(f"{pad}  {self.name(b)} = {self.name(b)}__t[{v}]")
            self.stmt(phase, ind + 1, out)


def _fma(a, b, c):
    return a * b + c


def compile_python(program: n.Program) -> str:
    """Return the Python source the interpreter runs for `program`."""
    pr = _PyPrinter()
    args = ", ".join(pr.name(b) for b in program.params)
    lines: list[str] = []
    pr.stmt(program.body, 1, lines)
    return f"def kernel({args}):\n" + ("\n".join(lines) or "  pass") + "\n"


def run(program: n.Program, *arrays: np.ndarray) -> None:
    """Execute `program` on numpy arrays (params order), writing outputs in place."""
    if len(arrays) != len(program.params):
        raise ValueError(f"{program.name} takes {len(program.params)} arrays, got {len(arrays)}")
    ns = {"math": math, "_fma": _fma, "inf": math.inf, "nan": math.nan}
    exec(compile(compile_python(program), f"<tunekit.ir.interp {program.name}>", "exec"), ns)
    lists = [np.ravel(a).tolist() for a in arrays]
    ns["kernel"](*lists)
    for a, vals in zip(arrays, lists):
        a[...] = np.asarray(vals, dtype=a.dtype).reshape(a.shape)
