"""ONNX reductions as te computes: ReduceSum, ReduceMean, ReduceMax and ReduceMin over
constant axes, Softmax and LogSoftmax along one axis (opset 13 semantics), and
LayerNormalization over the trailing axes.

As in examples/computations.py, each statistic (a max, a sum, a mean, a variance) is a
te.compute of its own whose whole body is the reduction, so that the generated schedules
recognise it; the elementwise steps between them are computes the fusion pass inlines.
te reduces by sum and max only: a minimum is the negated maximum of the negated values.
"""
from __future__ import annotations

import math

from tunekit import te

from .context import NodeContext
from .lower_elementwise import broadcast_load, name_of


def _axis(cx: NodeContext, a: int, rank: int) -> int:
    """Axis `a` (negative: from the end) of a tensor of `rank` dimensions, checked."""
    if not -rank <= a < rank:
        raise cx.fail(f"axis {a} is out of range for its input of {rank} dimensions")
    return a % rank


def _reduce_axes(cx: NodeContext, rank: int) -> list[int] | None:
    """The axes to reduce: input 1 (opset 13+ for ReduceSum, 18+ for the others) or the
    `axes` attribute; none given: all of them, or None (the node is a no-op) when
    noop_with_empty_axes is set."""
    axes = cx.need_const(1, "axes").reshape(-1).tolist() if cx.has(1) else list(cx.attr("axes", []))
    if not axes:
        return None if cx.attr("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({_axis(cx, int(a), rank) for a in axes})


def _reduced(x: te.Tensor, axes: list[int], keep: bool, name: str, reduce) -> te.Tensor:
    """x reduced over `axes` (kept as dimensions of 1 if `keep`) by `reduce(value, axes)`."""
    r = [te.reduce_axis(x.shape[a], f"k{a}") for a in axes]
    shape = tuple(1 if a in axes else d for a, d in enumerate(x.shape) if keep or a not in axes)

    def body(*i):
        spatial = iter(v for a, v in enumerate(i) if not (keep and a in axes))
        k = iter(r)
        return reduce(x[tuple(next(k) if a in axes else next(spatial) for a in range(x.ndim))], r)
    return te.compute(shape, body, name=name)


def _reduction(kind: str):
    """The lowering of Reduce<kind>: Sum, Mean, Max or Min."""
    def lower(cx: NodeContext) -> list[te.Tensor]:
        x = cx.tensor(0)
        axes = _reduce_axes(cx, x.ndim)
        if axes is None:
            return [x]
        keep, name = bool(cx.attr("keepdims", 1)), name_of(cx)
        if kind == "Sum":
            return [_reduced(x, axes, keep, name, lambda v, r: te.sum(v, axis=r))]
        if kind == "Max":
            return [_reduced(x, axes, keep, name, lambda v, r: te.max(v, axis=r))]
        if kind == "Mean":
            if not x.dtype.startswith("float"):
                raise cx.fail(f"it averages a tensor of {x.dtype}; only float tensors are supported")
            n = math.prod(x.shape[a] for a in axes)
            return [_reduced(x, axes, keep, name, lambda v, r: te.sum(v * (1.0 / n), axis=r))]
        top = _reduced(x, axes, keep, name_of(cx, "_negmax"), lambda v, r: te.max(-v, axis=r))
        return [te.compute(top.shape, lambda *i: -top[i], name=name)]
    return lower


def _softmax(log: bool):
    """The lowering of Softmax (LogSoftmax if `log`) along attribute `axis` (default -1):
    the max, the exponentials less it, their sum, then the quotient (log: x - max - log sum)."""
    def lower(cx: NodeContext) -> list[te.Tensor]:
        x, name = cx.tensor(0), name_of(cx)
        a = _axis(cx, cx.attr("axis", -1), x.ndim)
        rest = x.shape[:a] + x.shape[a + 1:]
        k, k2 = te.reduce_axis(x.shape[a], "k"), te.reduce_axis(x.shape[a], "k2")
        at = lambda i, j: (*i[:a], j, *i[a:])    # the index of x: `i` of `rest` with j along the axis
        row = lambda i: i[:a] + i[a + 1:]        # the index of `rest` of an index of x
        top = te.compute(rest, lambda *i: te.max(x[at(i, k)], axis=k), name=f"{name}_max")
        e = te.compute(x.shape, lambda *i: te.exp(x[i] - top[row(i)]), name=f"{name}_exp")
        total = te.compute(rest, lambda *i: te.sum(e[at(i, k2)], axis=k2), name=f"{name}_sum")
        if log:
            return [te.compute(x.shape, lambda *i: x[i] - top[row(i)] - te.log(total[row(i)]), name=name)]
        return [te.compute(x.shape, lambda *i: e[i] / total[row(i)], name=name)]
    return lower


def _layer_norm(cx: NodeContext) -> list[te.Tensor]:
    """(x - mean) / sqrt(var + epsilon) * Scale + B over the axes from attribute `axis` on."""
    if len(cx.out_shapes) > 1:
        raise cx.fail("its outputs Mean and InvStdDev are used; only output Y is supported")
    x, scale, name = cx.tensor(0), cx.tensor(1), name_of(cx)
    bias = cx.tensor(2) if cx.has(2) else None
    a = _axis(cx, cx.attr("axis", -1), x.ndim)
    eps, n = float(cx.attr("epsilon", 1e-5)), math.prod(x.shape[a:])
    r, r2 = ([te.reduce_axis(d, f"{k}{j}") for j, d in enumerate(x.shape[a:])] for k in ("k", "q"))
    mean = te.compute(x.shape[:a], lambda *i: te.sum(x[(*i, *r)] * (1.0 / n), axis=r), name=f"{name}_mean")
    d = te.compute(x.shape, lambda *i: x[i] - mean[i[:a]], name=f"{name}_centred")
    var = te.compute(x.shape[:a], lambda *i: te.sum(d[(*i, *r2)] * d[(*i, *r2)] * (1.0 / n), axis=r2),
                     name=f"{name}_var")

    def y(*i):
        v = d[i] / te.sqrt(var[i[:a]] + eps) * broadcast_load(scale, x.shape, i)
        return v if bias is None else v + broadcast_load(bias, x.shape, i)
    return [te.compute(x.shape, y, name=name)]


LOWERINGS = {
    **{f"Reduce{kind}": _reduction(kind) for kind in ("Sum", "Mean", "Max", "Min")},
    "Softmax": _softmax(log=False), "LogSoftmax": _softmax(log=True), "LayerNormalization": _layer_norm,
}

KINDS = {op: "reduction" for op in LOWERINGS}
