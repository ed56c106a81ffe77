"""Reductions as te computes: sum, mean, max and min over axes, softmax and log-softmax along one axis,
layer normalization over the trailing axes. Each statistic (a max, a sum, a mean, a variance) is a
te.compute whose whole body is the reduction, which generated schedules recognise; the elementwise steps
between are computes a fusion pass inlines. A minimum is the negated maximum of the negated values."""
from __future__ import annotations

import math

from tunekit import te
from tunekit.errors import ArgumentError

from .elementwise import broadcast_load
from .layout import normalize_axis

_OF = "its input of {rank} dimensions"   # what an axis out of range is out of


def _reduced(x: te.Tensor, axes: list[int], keep: bool, name: str, reduce) -> te.Tensor:
    """x reduced over `axes` (kept as dimensions of 1 if `keep`) by `reduce(value, axes)`."""
    r = [te.reduce_axis(x.shape[a], f"k{a}") for a in axes]
    shape = tuple(1 if a in axes else d for a, d in enumerate(x.shape) if keep or a not in axes)

    def body(*i):
        spatial = iter(v for a, v in enumerate(i) if not (keep and a in axes))
        k = iter(r)
        return reduce(x[tuple(next(k) if a in axes else next(spatial) for a in range(x.ndim))], r)
    return te.compute(shape, body, name=name)


def reduction(x: te.Tensor, kind: str, axes, keepdims: bool, name: str) -> te.Tensor:
    """Return `x` reduced by `kind` ("sum", "mean" of a float tensor, "max" or "min") over `axes`
    (negative: from the end; None: all), kept as dimensions of 1 if `keepdims`."""
    axes = list(range(x.ndim)) if axes is None else sorted({normalize_axis(int(a), x.ndim, _OF) for a in axes})
    if kind in ("sum", "max"):
        return _reduced(x, axes, keepdims, name, lambda v, r: (te.sum if kind == "sum" else te.max)(v, axis=r))
    if kind == "mean":
        if not x.dtype.startswith("float"):
            raise ArgumentError(f"it averages a tensor of {x.dtype}; only float tensors are supported")
        n = math.prod(x.shape[a] for a in axes)
        return _reduced(x, axes, keepdims, name, lambda v, r: te.sum(v * (1.0 / n), axis=r))
    top = _reduced(x, axes, keepdims, f"{name}_negmax", lambda v, r: te.max(-v, axis=r))
    return te.compute(top.shape, lambda *i: -top[i], name=name)


def softmax(x: te.Tensor, axis: int, name: str, log: bool = False) -> te.Tensor:
    """Return the softmax of `x` along `axis` (log-softmax if `log`): the max, the exponentials
    less it, their sum, then the quotient (log: x - max - log sum)."""
    a = normalize_axis(axis, x.ndim, _OF)
    rest = x.shape[:a] + x.shape[a + 1:]
    k, k2 = te.reduce_axis(x.shape[a], "k"), te.reduce_axis(x.shape[a], "k2")
    at = lambda i, j: (*i[:a], j, *i[a:])    # the index of x: `i` of `rest` with j along the axis
    row = lambda i: i[:a] + i[a + 1:]        # the index of `rest` of an index of x
    top = te.compute(rest, lambda *i: te.max(x[at(i, k)], axis=k), name=f"{name}_max")
    e = te.compute(x.shape, lambda *i: te.exp(x[i] - top[row(i)]), name=f"{name}_exp")
    total = te.compute(rest, lambda *i: te.sum(e[at(i, k2)], axis=k2), name=f"{name}_sum")
    if log:
        return te.compute(x.shape, lambda *i: x[i] - top[row(i)] - te.log(total[row(i)]), name=name)
    return te.compute(x.shape, lambda *i: e[i] / total[row(i)], name=name)


def layer_norm(x: te.Tensor, scale: te.Tensor, bias, axis: int, eps: float, name: str) -> te.Tensor:
    """Return (x - mean) / sqrt(var + eps) * scale + bias over the axes from `axis` on (scale
    and bias broadcast to x; bias None: none)."""
    a = normalize_axis(axis, x.ndim, _OF)
    n = math.prod(x.shape[a:])
    r, r2 = ([te.reduce_axis(d, f"{k}{j}") for j, d in enumerate(x.shape[a:])] for k in ("k", "q"))
    mean = te.compute(x.shape[:a], lambda *i: te.sum(x[(*i, *r)] * (1.0 / n), axis=r), name=f"{name}_mean")
    d = te.compute(x.shape, lambda *i: x[i] - mean[i[:a]], name=f"{name}_centred")
    var = te.compute(x.shape[:a], lambda *i: te.sum(d[(*i, *r2)] * d[(*i, *r2)] * (1.0 / n), axis=r2),
                     name=f"{name}_var")

    def y(*i):
        v = d[i] / te.sqrt(var[i[:a]] + eps) * broadcast_load(scale, x.shape, i)
        return v if bias is None else v + broadcast_load(bias, x.shape, i)
    return te.compute(x.shape, y, name=name)
