"""Bound inference: the region of a producer that a consumer's loops touch.

Index expressions are put in affine form (constant + sum of coef * var); the
variables that vary inside the attach point widen the region, the ones fixed
outside it stay symbolic in its start. Non-affine indices fall back to the
whole dimension.
"""
from __future__ import annotations

from .. import ir


def affine(e: ir.Expr) -> dict | None:
    """Return {var: coef, None: const} for an affine integer expression, else None."""
    if isinstance(e, ir.Const):
        return {None: int(e.value)}
    if isinstance(e, ir.Var):
        return {e: 1, None: 0}
    if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*"):
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        if e.op == "*":
            if set(a) == {None}:
                a, b = b, a
            if set(b) != {None}:
                return None
            return {k: v * b[None] for k, v in a.items()}
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    return None


def expand(form: dict, lows: dict) -> dict:
    """Substitute `lows` (var -> affine form of its start) into `form` until no
    substitutable variable is left."""
    form = dict(form)
    changed = True
    while changed:
        changed = False
        for v in [k for k in form if k is not None and k in lows]:
            c = form.pop(v)
            for k, x in lows[v].items():
                form[k] = form.get(k, 0) + c * x
            changed = True
    return {k: v for k, v in form.items() if v != 0 or k is None}


def to_expr(form: dict) -> ir.Expr:
    out = None
    for k, c in form.items():
        if k is not None and c != 0:
            term = k * c if c != -1 else ir.const(0) - k
            out = term if out is None else (out - k * -c if c < 0 else out + term)
    c = form.get(None, 0)
    if out is None:
        return ir.const(c)
    return out + c if c >= 0 else out - (-c)


def access_range(index: ir.Expr, varying: dict, lows: dict) -> tuple[dict, int] | None:
    """Range of `index` when the `varying` vars (var -> extent) run over their
    loops: returns (affine start over fixed vars, extent), or None if not affine.
    `lows` maps a variable to the affine start it stands for (stage offsets)."""
    form = affine(index)
    if form is None:
        return None
    form = expand(form, lows)
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
    """Largest value of an affine form over vars in [0, extent); None if a var is unknown."""
    hi = form.get(None, 0)
    for v, c in form.items():
        if v is None:
            continue
        if v not in extents:
            return None
        hi += max(0, c * (extents[v] - 1))
    return hi
