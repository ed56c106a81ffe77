"""Readable, Python-like text of the loop IR (Figure 1 of the paper).

The same printer, in `python` mode, writes the source the reference
interpreter executes; variables and buffers get unique identifiers either way.
"""
from __future__ import annotations

import re

from . import nodes as n

PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
        "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6}
_PY_FN = {"exp": "math.exp", "log": "math.log", "sqrt": "math.sqrt", "tanh": "math.tanh",
          "fabs": "abs", "rint": "_rint", "fma": "_fma", "dot4_u8s8": "_dot4_u8s8",
          "bf16x2": "_bf16x2", "dot2_bf16": "_dot2_bf16"}


class Names:
    """Unique identifiers for variables and buffers, derived from their names."""

    def __init__(self):
        self.by_obj: dict[int, str] = {}
        self.used: set[str] = set()

    def __call__(self, obj) -> str:
        key = id(obj)
        if key not in self.by_obj:
            base = re.sub(r"\W", "_", obj.name) or "v"
            name, k = base, 1
            while name in self.used:
                name, k = f"{base}_{k}", k + 1
            self.used.add(name)
            self.by_obj[key] = name
        return self.by_obj[key]


class Printer:
    def __init__(self, names: Names | None = None, python: bool = False):
        self.name = names or Names()
        self.python = python

    def expr(self, e: n.Expr, prec: int = 0) -> str:
        if isinstance(e, n.Var):
            return self.name(e)
        if isinstance(e, n.Const):
            if e.dtype == "bool":
                return repr(bool(e.value))
            return repr(int(e.value)) if e.dtype.startswith(("int", "uint")) else repr(float(e.value))
        if isinstance(e, n.BinOp):
            if e.op in ("min", "max"):
                return f"{e.op}({self.expr(e.a)}, {self.expr(e.b)})"
            p = PREC[e.op]
            s = f"{self.expr(e.a, p)} {e.op} {self.expr(e.b, p + 1)}"
            return f"({s})" if p < prec else s
        if isinstance(e, n.Not):
            return f"(not {self.expr(e.a, 3)})"
        if isinstance(e, n.Select):
            return f"({self.expr(e.t, 1)} if {self.expr(e.cond, 1)} else {self.expr(e.f, 1)})"
        if isinstance(e, n.Cast):
            if self.python:
                conv = "int" if e.dtype.startswith(("int", "uint")) else "bool" if e.dtype == "bool" else "float"
                return f"{conv}({self.expr(e.a)})"
            return f"{e.dtype}({self.expr(e.a)})"
        if isinstance(e, n.Call):
            fn = _PY_FN[e.fn] if self.python else e.fn
            return f"{fn}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, n.Load):
            return f"{self.name(e.buffer)}[{self.expr(e.index)}]"
        raise TypeError(f"not an expression: {type(e).__name__}")

    def extent(self, e) -> str:
        return self.expr(e) if isinstance(e, n.Expr) else str(e)

    def stmt(self, s: n.Stmt, ind: int, out: list[str]) -> None:
        pad = "  " * ind
        if isinstance(s, n.Seq):
            for x in s.stmts:
                self.stmt(x, ind, out)
        elif isinstance(s, n.For):
            tag = ""
            if s.kind != n.SERIAL and not self.python:
                tag = f"  # {s.kind}" + (f" {s.tag}" if s.tag else "")
            out.append(f"{pad}for {self.name(s.var)} in range({self.extent(s.extent)}):{tag}")
            self.stmt(s.body, ind + 1, out)
        elif isinstance(s, n.Store):
            out.append(f"{pad}{self.name(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)}")
        elif isinstance(s, n.Allocate):
            b = s.buffer
            out.append(f"{pad}{self.name(b)} = " + (f"[0] * {self.extent(b.size)}" if self.python else
                                                    f"alloc({b.dtype}, {list(b.shape)}, scope={b.scope!r})"))
            self.stmt(s.body, ind, out)
        elif isinstance(s, n.IfThenElse):
            out.append(f"{pad}if {self.expr(s.cond)}:")
            self.stmt(s.then, ind + 1, out)
            if s.orelse is not None:
                out.append(f"{pad}else:")
                self.stmt(s.orelse, ind + 1, out)
        elif isinstance(s, n.Barrier):
            out.append(f"{pad}{'pass  # ' if self.python else ''}barrier({s.scope!r})")
        else:
            raise TypeError(f"not a statement: {type(s).__name__}")


def expr_str(e: n.Expr) -> str:
    return Printer().expr(e)


def stmt_str(s: n.Stmt, indent: int = 0) -> str:
    out: list[str] = []
    Printer().stmt(s, indent, out)
    return "\n".join(out)


def program_str(p: n.Program) -> str:
    pr = Printer()
    sig = ", ".join([f"{pr.name(b)}: {b.dtype}[{', '.join(map(pr.extent, b.shape))}]" for b in p.params]
                    + [f"{pr.name(v)}: {v.lo}..{v.hi}" for v in p.sizes])
    out: list[str] = []
    pr.stmt(p.body, 1, out)
    return f"def {p.name}({sig}):\n" + "\n".join(out)
