"""Symbolic sizes: a dimension named in the model ("batch", "sequence") that stays a name
through te, the loop IR and the code generator, where it is a kernel argument.

A `SizeVar` carries its bounds (`lo` <= value <= `hi`): lowering sizes temporaries and
proves index ranges with `hi`, and a call checks the value against both. A loop extent
or a parameter's dimension is an int or an index expression over SizeVars; a parameter's
dimension is a constant times a product of sizes (`seq`, `12*batch*seq`), so that a call
can read each size from the arrays it is given (`bind`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from .nodes import INDEX, BinOp, Const, Expr, Stmt, Var
from .visitor import Visitor


class SizeError(ArgumentError):
    """A symbolic size is unbounded, out of its range, or disagrees between arrays."""


@dataclass(eq=False, repr=False)
class SizeVar(Var):
    """A named size of a kernel, `lo <= value <= hi`: a kernel argument (int64) after its buffers."""
    lo: int = 1
    hi: int = 1


class SymInt(int):
    """An int that also is an expression of sizes: its value at the representative sizes a
    template schedules for, `expr` what it is at every size. Arithmetic with ints keeps both;
    comparisons, `range` and formatting see the value; te and the IR see `expr`."""

    def __new__(cls, value: int, expr: Expr):
        if isinstance(expr, Const):
            return int(value)
        out = super().__new__(cls, value)
        out.expr = expr
        return out

    def __reduce__(self):
        return SymInt, (int(self), self.expr)

    def _op(self, other, fn, swap=False):
        if isinstance(other, bool) or not isinstance(other, int):
            return fn(other, int(self)) if swap else fn(int(self), other)
        b = other.expr if isinstance(other, SymInt) else Const(int(other), INDEX)
        pair = ((int(other), int(self)), (b, self.expr)) if swap else ((int(self), int(other)), (self.expr, b))
        return SymInt(fn(*pair[0]), fn(*pair[1]))

    def __add__(self, o): return self._op(o, lambda a, b: a + b)
    def __radd__(self, o): return self._op(o, lambda a, b: a + b, True)
    def __sub__(self, o): return self._op(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._op(o, lambda a, b: a - b, True)
    def __mul__(self, o): return self._op(o, lambda a, b: a * b)
    def __rmul__(self, o): return self._op(o, lambda a, b: a * b, True)
    def __floordiv__(self, o): return self._op(o, lambda a, b: a // b)
    def __rfloordiv__(self, o): return self._op(o, lambda a, b: a // b, True)
    def __mod__(self, o): return self._op(o, lambda a, b: a % b)
    def __neg__(self): return SymInt(-int(self), Const(0, INDEX) - self.expr)
    __hash__ = int.__hash__

    def __repr__(self) -> str:
        return f"{int(self)}~{self.expr!r}"


def size_var(name: str, lo: int, hi: int) -> SizeVar:
    """Declare the size `name`, any value in `lo..hi` (both included, lo >= 0)."""
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
        raise SizeError(f"size {name!r}: bounds ({lo}, {hi}) must be integers with 0 <= lo <= hi")
    return SizeVar(name, INDEX, lo, hi)


def is_symbolic(e) -> bool:
    """Whether extent `e` is an expression of sizes (or an int that is one, a SymInt)."""
    return isinstance(e, SymInt) or isinstance(e, Expr) and not isinstance(e, Const)


def expr_of(e):
    """Extent `e` as the loop IR takes it: an int, or an expression of sizes."""
    return e.expr if isinstance(e, SymInt) else int(e.value) if isinstance(e, Const) else e


def sizes_of(*exprs) -> list[SizeVar]:
    """The SizeVars the expressions or statements (or shapes: tuples of them) read, in first-use order."""
    found: dict[SizeVar, None] = {}

    class V(Visitor):
        def visit_Var(self, node):
            if isinstance(node, SizeVar):
                found.setdefault(node)
    for e in exprs:
        for x in (e if isinstance(e, (tuple, list)) else (e,)):
            if isinstance(x, (Expr, Stmt)):
                V().visit(x)
    return list(found)


def interval(e) -> tuple[int, int]:
    """(least, largest) value of an index expression of sizes and constants."""
    if isinstance(e, SymInt):
        return interval(e.expr)
    if isinstance(e, int):
        return e, e
    if isinstance(e, Const):
        return int(e.value), int(e.value)
    if isinstance(e, SizeVar):
        return e.lo, e.hi
    if isinstance(e, BinOp) and e.op in ("+", "-", "*", "//", "min", "max"):
        (a0, a1), (b0, b1) = interval(e.a), interval(e.b)
        if e.op == "+":
            return a0 + b0, a1 + b1
        if e.op == "-":
            return a0 - b1, a1 - b0
        if e.op == "min":
            return min(a0, b0), min(a1, b1)
        if e.op == "max":
            return max(a0, b0), max(a1, b1)
        if e.op == "//" and b0 > 0:
            return min(a0 // b0, a0 // b1), max(a1 // b0, a1 // b1)
        if e.op == "*":
            v = [x * y for x in (a0, a1) for y in (b0, b1)]
            return min(v), max(v)
    raise SizeError(f"cannot bound the size expression {e!r}: use +, -, *, // by a positive size, min, max")


def upper(e) -> int:
    """The largest value of an extent (an int, or an expression of sizes)."""
    return interval(e)[1]


def monomial(d) -> tuple[int, list[str]] | None:
    """(constant, names of sizes) when `d` is a constant times a product of sizes, else None."""
    if isinstance(d, (int, Const)):
        return int(d.value if isinstance(d, Const) else d), []
    if isinstance(d, SizeVar):
        return 1, [d.name]
    if isinstance(d, BinOp) and d.op == "*":
        a, b = monomial(d.a), monomial(d.b)
        if a is not None and b is not None:
            return a[0] * b[0], a[1] + b[1]
    return None


def dim_data(d) -> int | str:
    """A parameter's dimension as data: an int, or a sum of constants times products of sizes as
    `tunekit.runtime.dims` reads it ("12*batch*seq", "past+seq")."""
    terms = _terms(d)
    if terms is None:
        raise SizeError(f"a kernel parameter's dimension {d!r} must be a sum of constants times products of sizes")
    if all(not names for _, names in terms):
        return sum(c for c, _ in terms)
    text = "+".join("*".join(([str(c)] if c != 1 or not names else []) + names) for c, names in terms if c)
    return text.replace("+-", "-")


def _terms(d) -> list[tuple[int, list[str]]] | None:
    if isinstance(d, BinOp) and d.op in ("+", "-"):
        a, b = _terms(d.a), _terms(d.b)
        if a is not None and b is not None:
            return a + (b if d.op == "+" else [(-c, names) for c, names in b])
        return None
    m = monomial(d)
    return None if m is None else [m]


def bind(entry: str, shapes: list, arrays: list, bounds: dict) -> dict:
    """Read the sizes from the arrays a kernel is called with, check them, return name -> value.

    Args:
        entry: the kernel's name, for errors.
        shapes: each parameter's dimensions, `dim_data`'s form.
        arrays: the arrays' shapes, in parameter order.
        bounds: size name -> (lo, hi), in the kernel's argument order.
    """
    sizes: dict[str, int] = {}
    for shape, got in zip(shapes, arrays):
        for d, v in zip(shape, got):
            if isinstance(d, str) and d in bounds:
                if sizes.setdefault(d, v) != v:
                    raise SizeError(f"{entry}: size {d!r} is {sizes[d]} in one array and {v} in another")
    for name, (lo, hi) in bounds.items():
        if name not in sizes:
            raise SizeError(f"{entry}: size {name!r} is no array's dimension (its values read it); give the sizes "
                            "(`bind(..., sizes=[...])`, in the kernel's order)")
        if not lo <= sizes[name] <= hi:
            raise SizeError(f"{entry}: size {name!r} = {sizes[name]} is out of its range {lo}..{hi}")
    return sizes
