"""Bound inference: the region of a producer that a consumer's loops touch.

Index expressions are put in affine form (constant + sum of coef * var); the
variables that vary inside the attach point widen the region, the ones fixed
outside it stay symbolic in its start. Non-affine indices fall back to the
whole dimension.
"""
from __future__ import annotations

from .. import ir


class Term:
    """A non-affine subexpression of fixed variables (e.g. `fused // 4` outside the
    loops that vary), treated as one unknown; equal when printed the same."""

    def __init__(self, expr: ir.Expr):
        self.expr, self.key = expr, ir.expr_str(expr)

    def __eq__(self, other):
        return isinstance(other, Term) and other.key == self.key

    def __hash__(self):
        return hash(self.key)


class _AllVars:
    """The `fixed` of `affine` that holds every variable (so none need collecting)."""


ALL = _AllVars()


def affine(e: ir.Expr, fixed: set | None = None) -> dict | None:
    """Return {var: coef, None: const} for an affine integer expression, else None.
    With `fixed`, a non-affine part reading only fixed vars becomes a `Term`
    (with `fixed=ALL`, every non-affine part does)."""
    if isinstance(e, ir.Const):
        return {None: int(e.value)}
    if isinstance(e, ir.Var):
        return {e: 1, None: 0}
    if fixed is not None and not (isinstance(e, ir.BinOp) and e.op in ("+", "-", "*")):
        return {Term(e): 1, None: 0} if fixed is ALL or ir.free_vars(e) <= fixed else None
    if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*"):
        a, b = affine(e.a, fixed), affine(e.b, fixed)
        if a is None or b is None:
            return None
        if e.op == "*":
            if set(a) == {None}:
                a, b = b, a
            if set(b) != {None}:
                return None
            return {k: v * b[None] for k, v in a.items()}
        sign = 1 if e.op == "+" else -1
        return {k: a.get(k, 0) + sign * b.get(k, 0) for k in {**a, **b}}
    return None


def to_expr(form: dict) -> ir.Expr:
    out = None
    for k, c in form.items():
        if k is not None and c != 0:
            k = k.expr if isinstance(k, Term) else k
            term = k * c if c != -1 else ir.const(0) - k
            out = term if out is None else (out - k * -c if c < 0 else out + term)
    c = form.get(None, 0)
    if out is None:
        return ir.const(c)
    return out + c if c >= 0 else out - (-c)


def access_range(index: ir.Expr, varying: dict, fixed: set) -> tuple[dict, int] | None:
    """Range of `index` when the `varying` vars (var -> extent) run over their
    loops: returns (affine start over `fixed` vars, extent), or None if not affine."""
    form = affine(index, fixed)
    if form is None:
        return None
    start = {None: form.get(None, 0)}
    span = 0
    for v, c in form.items():
        if v is None:
            continue
        if v in varying:
            span += abs(c) * (varying[v] - 1)
            if c < 0:
                start[None] += c * (varying[v] - 1)
        else:
            start[v] = c
    return start, span + 1


def max_value(form: dict, extents: dict) -> int | None:
    """Largest value of an affine form over vars in [0, extent); None if unknown."""
    return _extreme(form, extents, max)


def _extreme(form: dict, extents: dict, pick) -> int | None:
    """The `pick` (min or max) value of an affine form over vars in [0, extent); None if unknown."""
    out = form.get(None, 0)
    for v, c in form.items():
        if v is None:
            continue
        rng = _interval(v.expr, extents) if isinstance(v, Term) else (0, extents[v] - 1) if v in extents else None
        if rng is None:
            return None
        out += pick(c * rng[0], c * rng[1])
    return out


def _interval(e: ir.Expr, extents: dict) -> tuple[int, int] | None:
    """(min, max) of a non-negative index expression, or None if unknown."""
    if isinstance(e, ir.Const):
        return int(e.value), int(e.value)
    if isinstance(e, ir.Var):
        return (0, extents[e] - 1) if e in extents else None
    if not isinstance(e, ir.BinOp):
        return None
    a, b = _interval(e.a, extents), _interval(e.b, extents)
    if e.op == "%" and isinstance(e.b, ir.Const) and e.b.value > 0 and a is None:
        return 0, int(e.b.value) - 1   # floor modulo by a positive constant, whatever it divides
    if a is None or b is None:
        return None
    if e.op == "+":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "-":
        return a[0] - b[1], a[1] - b[0]
    if e.op == "*":
        v = [x * y for x in a for y in b]
        return min(v), max(v)
    if e.op == "//" and b[0] == b[1] and b[0] > 0:
        return a[0] // b[0], a[1] // b[0]
    if e.op == "%" and b[0] == b[1] and b[0] > 0:
        return (a[0], a[1]) if a[0] >= 0 and a[1] < b[0] else (0, b[0] - 1)
    return None


def simplify(e: ir.Expr, extents: dict) -> ir.Expr:
    """Rewrite `(c*q + r) // c` to `q` and `(c*q + r) % c` to `r` where the loop
    extents prove 0 <= r < c (packed layouts and fused loops index this way)."""
    return _DivMod(extents).visit(e) if _has_divmod(e) else e


def _has_divmod(e) -> bool:
    if isinstance(e, ir.BinOp):
        return e.op in ("//", "%") or _has_divmod(e.a) or _has_divmod(e.b)
    return not isinstance(e, (ir.Var, ir.Const))   # calls, selects, loads: look inside


class _DivMod(ir.Mutator):
    def __init__(self, extents: dict):
        self.extents = extents

    def visit_BinOp(self, node):
        node = self.generic_visit(node)
        if (not isinstance(node, ir.BinOp) or node.op not in ("//", "%")   # rebuilding may fold
                or not isinstance(node.b, ir.Const) or node.b.value <= 0):
            return node
        c = int(node.b.value)
        form = affine(node.a, ALL)
        if form is None:
            return node
        const = form.get(None, 0)
        q = {k: v // c for k, v in form.items() if k is not None and v % c == 0}
        r = {k: v for k, v in form.items() if k is not None and v % c != 0}
        q[None], r[None] = const // c, const % c
        lo, hi = _extreme(r, self.extents, min), max_value(r, self.extents)
        if lo is None or hi is None or lo < 0 or hi >= c:
            return node
        return to_expr(q) if node.op == "//" else to_expr(r)
