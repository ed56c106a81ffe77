"""Compiling a model with symbolic dimensions (`compile_model(..., dims=...)`) into one model
for every size in their ranges.

The frontend and the passes work on static shapes, so the model is planned at a few sizes
(probes): a grid around the representative sizes (`at`: what the kernels are scheduled and
their records read for) and the largest sizes. The plans must agree on everything but their
integers; each integer that varies (a kernel's extent, an index's stride, a tensor's shape,
a view's offset) is fitted exactly as a polynomial of the dimensions (of degree up to two in
each), checked at the largest sizes. The kernels are then built once, from the representative
plan's tasks and configs with those integers symbolic (`tunekit.ir.sizes.SymInt`: te, the loop
IR and the code generator carry them as kernel arguments); the buffers are the largest plan's.

A constant that depends on the sizes (position ids, their embeddings) must be the leading
part of its value at the largest sizes, read in place (`is_prefix`); others are refused.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math
from fractions import Fraction

import numpy as np

from tunekit import ir
from tunekit.errors import ArgumentError
from tunekit.ir.sizes import SymInt, size_var
from tunekit.ops.computed import ComputedOp

#: the largest degree of a fitted polynomial in one dimension (attention's scores: sequence squared)
DEGREE = 2


def ranges(dims: dict, at: dict | None) -> tuple[dict[str, tuple[int, int]], list[dict[str, int]]]:
    """Check `dims` (name -> (lo, hi)) and `at` (name -> representative size, or a list of them;
    default: the largest); returns the ranges and every combination of the representative sizes.

    Raises:
        ArgumentError: a bad range or representative size, naming the dimension and the fix.
    """
    out = {}
    for name, r in dims.items():
        if not (isinstance(r, (tuple, list)) and len(r) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                     for v in r) and 0 <= r[0] <= r[1] and r[1] >= 1):
            raise ArgumentError(f"dims[{name!r}] = {r!r}: give a range (lo, hi) of sizes, 0 <= lo <= hi, 1 <= hi, "
                                f"e.g. dims={{{name!r}: (1, 512)}} (lo 0: a cache that may be empty)")
        out[name] = (r[0], r[1])
    at = dict(at or {})
    if unknown := sorted(set(at) - set(out)):
        raise ArgumentError(f"at: {unknown} are not dimensions of dims ({', '.join(out)})")
    choices = {}
    for name, (lo, hi) in out.items():
        choices[name] = list(dict.fromkeys(at[name] if isinstance(at.get(name), (list, tuple)) else [at.get(name, hi)]))
        for v in choices[name]:
            if not (isinstance(v, int) and lo <= v <= hi):
                raise ArgumentError(f"at[{name!r}] = {v!r} is outside dims[{name!r}] = ({lo}, {hi})")
            if v < 2 <= hi:   # planned at 1, a dimension broadcasts (and its plan is not the others')
                raise ArgumentError(f"at[{name!r}] = 1: a model's plan at a size of 1 is not its plan at other sizes "
                                    "(a dimension of 1 broadcasts); schedule it at 2 or more")
    return out, [dict(zip(out, p)) for p in itertools.product(*choices.values())]


def probes(bounds: dict[str, tuple[int, int]], rep: dict[str, int]) -> list[dict]:
    """The grid of sizes around `rep`: up to DEGREE + 1 values of each dimension, within its range
    and not 1 (where the range allows), `rep` first."""
    levels = []
    for name, (lo, hi) in bounds.items():
        vals = [v for v in range(rep[name], rep[name] + DEGREE + 1) if v <= hi]
        vals += [v for v in range(rep[name] - 1, max(lo, 2) - 1, -1)][:DEGREE + 1 - len(vals)]   # 1 broadcasts
        levels.append(vals)
    return [dict(zip(bounds, p)) for p in itertools.product(*levels)]


class Poly:
    """An integer polynomial of the dimensions: {exponents: coefficient}."""

    def __init__(self, terms: dict[tuple, int], names: list[str]):
        self.terms, self.names = {e: c for e, c in terms.items() if c}, names

    def at(self, point: dict) -> int:
        return sum(c * math.prod(point[n] ** k for n, k in zip(self.names, e)) for e, c in self.terms.items())

    def text(self) -> str | int:
        """The runtime's form (`tunekit.runtime.dims`): an int, or "64*batch*sequence+64"."""
        if set(self.terms) <= {(0,) * len(self.names)}:
            return self.terms.get((0,) * len(self.names), 0)
        out = []
        for e, c in sorted(self.terms.items(), reverse=True):
            names = [n for n, k in zip(self.names, e) for _ in range(k)]
            out.append("*".join(([str(c)] if c != 1 or not names else []) + names))
        return "+".join(out).replace("+-", "-")

    def expr(self, sizes: dict[str, ir.SizeVar]) -> ir.Expr:
        total = ir.const(0)
        for e, c in self.terms.items():
            term = ir.const(c)
            for n, k in zip(self.names, e):
                for _ in range(k):
                    term = term * sizes[n]
            total = total + term
        return total


def fit(values: list[int], points: list[dict], names: list[str]) -> Poly:
    """The polynomial through (points[i], values[i]), exact, of the degrees the points allow; None
    where no integer polynomial of those degrees is."""
    degs = [min(DEGREE, len({p[n] for p in points}) - 1) for n in names]
    exps = list(itertools.product(*[range(d + 1) for d in degs]))
    rows = [[Fraction(math.prod(p[n] ** k for n, k in zip(names, e))) for e in exps] + [Fraction(v)]
            for p, v in zip(points, values)]
    coef = _solve(rows, len(exps))
    if coef is None or any(c.denominator != 1 for c in coef):
        return None
    poly = Poly({e: int(c) for e, c in zip(exps, coef)}, names)
    return poly if all(poly.at(p) == v for p, v in zip(points, values)) else None


def _solve(rows: list[list[Fraction]], n: int) -> list[Fraction] | None:
    """Gaussian elimination on the first rows that determine the n unknowns (the rest are checked by the caller)."""
    rows = [r[:] for r in rows]
    pivots = []
    for col in range(n):
        piv = next((i for i in range(len(pivots), len(rows)) if rows[i][col] != 0), None)
        if piv is None:
            return None
        k = len(pivots)
        rows[k], rows[piv] = rows[piv], rows[k]
        rows[k] = [x / rows[k][col] for x in rows[k]]
        for i in range(len(rows)):
            if i != k and rows[i][col] != 0:
                f = rows[i][col]
                rows[i] = [a - f * b for a, b in zip(rows[i], rows[k])]
        pivots.append(col)
    return [rows[k][n] for k in range(n)]


class Mismatch(Exception):
    """Plans at two sizes that differ other than in their integers."""


def generalize(samples: list, points: list[dict], names: list[str], path: str = ""):
    """`samples` (one JSON-like value per point, alike but for their integers) as one value whose
    integers that vary are `Poly`s.

    Raises:
        Mismatch: the samples differ in anything else (naming where), or an integer is no polynomial.
    """
    first = samples[0]
    if isinstance(first, dict):
        if any(not isinstance(s, dict) or s.keys() != first.keys() for s in samples):
            raise Mismatch(f"{path}: different keys")
        return {k: generalize([s[k] for s in samples], points, names, f"{path}.{k}") for k in first}
    if isinstance(first, (list, tuple)):
        if any(not isinstance(s, (list, tuple)) or len(s) != len(first) for s in samples):
            raise Mismatch(f"{path}: different lengths {[len(s) for s in samples]}")
        return type(first)(generalize([s[k] for s in samples], points, names, f"{path}[{k}]")
                           for k in range(len(first)))
    if isinstance(first, int) and not isinstance(first, bool) and all(type(s) is type(first) for s in samples):
        if all(s == first for s in samples):
            return first
        poly = fit(samples, points, names)
        if poly is None:
            raise Mismatch(f"{path}: {samples} at {points} is no polynomial of the dimensions")
        return poly
    if any(s != first for s in samples):
        other = next(s for s in samples if s != first)
        raise Mismatch(f"{path}: {first!r} at {points[0]} but {other!r} elsewhere")
    return first


def _map(x, fn):
    """`x` (JSON-like) with each Poly `fn` of it."""
    if isinstance(x, Poly):
        return fn(x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, fn) for v in x)
    return x


def texts(x):
    """`x` with each Poly in its runtime form."""
    return _map(x, Poly.text)


def symbolic(x, rep: dict, sizes: dict[str, ir.SizeVar]):
    """`x` with each Poly a SymInt: its value at `rep` and its expression of `sizes`."""
    return _map(x, lambda p: SymInt(p.at(rep), p.expr(sizes)))


def size_vars(bounds: dict[str, tuple[int, int]]) -> dict[str, ir.SizeVar]:
    return {name: size_var(name, lo, hi) for name, (lo, hi) in bounds.items()}


def payload(task) -> dict:
    """What of a task's kernel varies with the sizes: its computation (te data) or its args."""
    if isinstance(task.op, ComputedOp):
        return {"computation": task.op.facts(task.args).data}
    return {"args": task.args}


def symbolic_space(ts, general: dict, rep: dict, sizes: dict):
    """A copy of task space `ts` (its template and config space, made at `rep`) whose task builds
    the kernel for every size: its args, or its computation, with the fitted integers symbolic."""
    _ = ts.space   # the config space stays the representative's
    task = copy.copy(ts.task)
    if "computation" in general:
        task.op = ComputedOp.from_data(symbolic(general["computation"], rep, sizes), ts.task.op.name,
                                       ts.task.op.num_outputs)
    else:
        task.args = symbolic(general["args"], rep, sizes)
    out = copy.copy(ts)
    out.task, out._programs, out._features = task, {}, {}
    fn = ts.template.fn
    if isinstance(fn, functools.partial) and fn.args and fn.args[0] is ts.task.op:   # a generic template's op
        out.template = dataclasses.replace(ts.template, fn=functools.partial(fn.func, task.op, *fn.args[1:],
                                                                              **fn.keywords))
    return out


def is_prefix(hi: np.ndarray, probe: np.ndarray) -> bool:
    """Whether constant `probe` (at some sizes) is the leading part of `hi` (at the largest), contiguous
    (so read in place): equal, or varying in one dimension with only 1s before it."""
    if hi.shape == probe.shape:
        return np.array_equal(hi, probe)
    varying = [k for k, (a, b) in enumerate(zip(hi.shape, probe.shape)) if a != b]
    return (hi.ndim == probe.ndim and len(varying) == 1 and all(d == 1 for d in hi.shape[:varying[0]])
            and np.array_equal(hi[tuple(slice(0, d) for d in probe.shape)], probe))
