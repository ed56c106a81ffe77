"""Small integer analyses of loop-IR index expressions used by the source emitter:
value ranges (to emit plain C `/` and `%` where floor semantics agree), the
coefficient of one loop variable (contiguous vector accesses), and divisibility
(aligned vector accesses)."""
from __future__ import annotations

import math

from tunekit import ir


def _is_int(e: ir.Expr) -> bool:
    return e.dtype.startswith(("int", "uint"))


def value_range(e: ir.Expr, ranges: dict) -> tuple[int, int] | None:
    """(min, max) of integer expression `e` when each var v lies in ranges[v]; None if unknown."""
    if isinstance(e, ir.Const):
        return (int(e.value), int(e.value)) if _is_int(e) or e.dtype == "bool" else None
    if isinstance(e, ir.Var):
        return ranges.get(e)
    if isinstance(e, ir.Cast):
        return value_range(e.a, ranges) if _is_int(e) else None
    if isinstance(e, ir.Select):
        t, f = value_range(e.t, ranges), value_range(e.f, ranges)
        return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
    if not isinstance(e, ir.BinOp) or not _is_int(e):
        return None
    a, b = value_range(e.a, ranges), value_range(e.b, ranges)
    if a is None or b is None:
        return None
    op = e.op
    if op == "+":
        return a[0] + b[0], a[1] + b[1]
    if op == "-":
        return a[0] - b[1], a[1] - b[0]
    if op == "*":
        v = [x * y for x in a for y in b]
        return min(v), max(v)
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if op in ("//", "%") and b[0] > 0:
        if op == "//":   # monotone in each argument for positive divisors: extremes at the corners
            v = [x // y for x in a for y in b]
            return min(v), max(v)
        return (a[0], a[1]) if a[0] >= 0 and a[1] < b[0] else (0, b[1] - 1)
    return None


def coefficient(e: ir.Expr, v: ir.Var) -> int | None:
    """The integer c with e == c * v + (terms free of v); None when `v` occurs non-linearly."""
    if v not in ir.free_vars(e):
        return 0
    if e is v:
        return 1
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        a, b = coefficient(e.a, v), coefficient(e.b, v)
        return None if a is None or b is None else a + b if e.op == "+" else a - b
    if isinstance(e, ir.BinOp) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, ir.Const):
                c = coefficient(x, v)
                return None if c is None else c * int(y.value)
    return None


def divisible(e: ir.Expr, n: int) -> bool:
    """Whether integer expression `e` is provably a multiple of `n` for every value of its vars."""
    if n == 1:
        return True
    if isinstance(e, ir.Const):
        return int(e.value) % n == 0
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        return divisible(e.a, n) and divisible(e.b, n)
    if isinstance(e, ir.BinOp) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):   # c * x is a multiple of n when x is one of n / gcd(c, n)
            if isinstance(y, ir.Const) and int(y.value) != 0 and divisible(x, n // math.gcd(int(y.value), n)):
                return True
        return divisible(e.a, n) or divisible(e.b, n)
    return False
