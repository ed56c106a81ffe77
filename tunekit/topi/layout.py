"""Data movement as te computes (reshape, transpose, concat, split, slices, expand, tile, an LSTM's
outputs, gather, pad) and numpy's broadcasting: each output element is a load of an input element at indices
computed from the output's (index arithmetic only, no copies beyond the output itself)."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from tunekit import ir, te
from tunekit.errors import ArgumentError


def broadcast_shape(*shapes) -> tuple:
    """Return the shape numpy broadcasts `shapes` to (right-aligned; a size-1 dim stretches);
    ValueError if two differ in a dim where neither is 1."""
    n = max((len(s) for s in shapes), default=0)
    sizes = [{d for d in dims if d != 1} for dims in zip(*((1,) * (n - len(s)) + tuple(s) for s in shapes))]
    if any(len(s) > 1 for s in sizes):
        raise ValueError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
    return tuple(max(s, default=1) for s in sizes)


def broadcast_index(t_shape, out_shape, idx) -> tuple:
    """Return the indices into a tensor of `t_shape` broadcast to `out_shape` of output element `idx`."""
    idx = tuple(idx)[len(out_shape) - len(t_shape):]
    return tuple(0 if d == 1 else i for d, i in zip(t_shape, idx))


def normalize_axis(axis: int, rank: int, of: str = "an input of rank {rank}") -> int:
    """Return `axis` (negative: from the end) of a tensor of `rank` dims in [0, rank); ArgumentError
    if it is outside [-rank, rank), saying it is out of range for `of` ("{rank}" filled in)."""
    if not -rank <= axis < rank:
        raise ArgumentError(f"axis {axis} is out of range for {of.format(rank=rank)}")
    return axis % rank


def _ravel(idx, dims) -> ir.Expr:
    """The row-major flat index of `idx` in `dims`."""
    flat = ir.const(0)
    for i, d in zip(idx, dims):
        flat = flat * d + i
    return flat


def _unravel(flat, dims) -> list:
    """The indices in `dims` of row-major flat index `flat` (< their product)."""
    strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]
    return [flat // s if k == 0 else flat // s % d for k, (s, d) in enumerate(zip(strides, dims))]


def _runs(out_shape, in_shape) -> list[tuple[list, list]]:
    """The dims of two shapes of equal size paired in the shortest runs of equal products,
    size-1 dims left out: (output dims, input dims) per run."""
    o = [d for d, n in enumerate(out_shape) if n != 1]
    i = [d for d, n in enumerate(in_shape) if n != 1]
    runs = []
    while o and i:
        ro, ri = [o.pop(0)], [i.pop(0)]
        po, pi = out_shape[ro[0]], in_shape[ri[0]]
        while po != pi:
            if po < pi:
                ro.append(o.pop(0))
                po *= out_shape[ro[-1]]
            else:
                ri.append(i.pop(0))
                pi *= in_shape[ri[-1]]
        runs.append((ro, ri))
    return runs


def reshape(x: te.Tensor, shape, name: str) -> te.Tensor:
    """Return `x`'s elements in row-major order in `shape` (of as many elements), read through
    div/mod only across dims that merge or split (none for size-1 dims)."""
    def f(*i):
        idx = [0] * x.ndim
        for ro, ri in _runs(shape, x.shape):
            flat = _ravel([i[d] for d in ro], [shape[d] for d in ro])
            for d, v in zip(ri, _unravel(flat, [x.shape[d] for d in ri])):
                idx[d] = v
        return x[tuple(idx)]
    return te.compute(shape, f, name=name)


def transpose(x: te.Tensor, perm, name: str) -> te.Tensor:
    """Return `x` with its axes permuted, output axis k input axis perm[k] (None: reversed;
    ArgumentError: `perm` is not a permutation of x's axes)."""
    perm = list(range(x.ndim - 1, -1, -1)) if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(x.ndim)):
        raise ArgumentError(f"perm {perm} is not a permutation of the {x.ndim} axes")
    inv = np.argsort(perm)
    return te.compute(tuple(x.shape[p] for p in perm), lambda *i: x[tuple(i[d] for d in inv)], name=name)


def concat(xs: list[te.Tensor], axis: int, name: str) -> te.Tensor:
    """Return `xs` joined along `axis`: a chain of selects on the axis index, the last innermost."""
    axis = normalize_axis(axis, xs[0].ndim)
    shape = (*xs[0].shape[:axis], sum(x.shape[axis] for x in xs), *xs[0].shape[axis + 1:])
    xs = [x for x in xs if x.shape[axis]]   # empty inputs add nothing

    def f(*i):
        offset = sum(x.shape[axis] for x in xs)
        value = None
        for x in reversed(xs):
            offset -= x.shape[axis]
            load = x[i[:axis] + (i[axis] - offset,) + i[axis + 1:]]
            value = load if value is None else ir.select(i[axis] < offset + x.shape[axis], load, value)
        return value
    return te.compute(shape, f, name=name)


def split(x: te.Tensor, axis: int, shapes, name: str) -> list[te.Tensor]:
    """Return `x` cut along `axis` into consecutive parts of `shapes` (x's but along the axis), named `{name}_{k}`."""
    axis = normalize_axis(axis, x.ndim)
    starts = itertools.accumulate((shape[axis] for shape in shapes), initial=0)
    return [te.compute(shape, lambda *i, o=o: x[i[:axis] + (i[axis] + o,) + i[axis + 1:]], name=f"{name}_{k}")
            for k, (shape, o) in enumerate(zip(shapes, starts))]


def strided_slice(x: te.Tensor, starts, shape, name: str, axes=None, steps=None) -> te.Tensor:
    """Return the `shape` elements of `x` from `starts` by `steps` (default 1) along `axes` (default:
    the first; negative start or axis: from the end; ArgumentError for a step of 0): output index i
    along a sliced axis reads start + i * step, the start clamped into the axis."""
    first, step = [0] * x.ndim, [1] * x.ndim
    for a, s, st in zip(axes or range(len(starts)), starts, steps or [1] * len(starts)):
        a = normalize_axis(a, x.ndim)
        dim = x.shape[a]
        if st == 0:
            raise ArgumentError(f"a step of 0 on axis {a}")
        s = s + dim if s < 0 else s
        first[a], step[a] = min(max(s, 0), dim if st > 0 else dim - 1), st
    return te.compute(shape, lambda *i: x[tuple(f + s * v for f, s, v in zip(first, step, i))], name=name)


def expand(x: te.Tensor, shape, name: str) -> te.Tensor:
    """Return `x` broadcast to `shape`."""
    return te.compute(shape, lambda *i: x[broadcast_index(x.shape, shape, i)], name=name)


def tile(x: te.Tensor, shape, name: str) -> te.Tensor:
    """Return `x` repeated to `shape` (a multiple of x's shape along each axis)."""
    return te.compute(shape, lambda *i: x[tuple(v if n == d else v % d for v, n, d in zip(i, shape, x.shape))],
                      name=name)


def copy(x: te.Tensor, name: str) -> te.Tensor:
    """Return a copy of `x`."""
    return te.compute(x.shape, lambda *i: x[i], name=name)


def columns(x: te.Tensor, start: int, width: int, name: str) -> te.Tensor:
    """Return columns [start, start + width) of `x`'s last axis."""
    return te.compute((*x.shape[:-1], width), lambda *i: x[(*i[:-1], i[-1] + start)], name=name)


def lstm_output(states: te.Tensor, k: int, name: str) -> te.Tensor:
    """Return output `k` of a one-direction LSTM read out of its steps' states `states` [T, 2, B, H] (h,
    then c; `tunekit.ops.lstm_step`): 0 Y [T, 1, B, H], every h; 1 Y_h and 2 Y_c [1, B, H], the last h, c."""
    T, _, B, H = states.shape
    if k == 0:
        return te.compute((T, 1, B, H), lambda t, d, bb, j: states[t, 0, bb, j], name=name)
    return te.compute((1, B, H), lambda d, bb, j: states[T - 1, k - 1, bb, j], name=name)


def _even(ind: np.ndarray, dim: int) -> tuple[int, int] | None:
    """(first, step) if the flattened constant indices `ind` (normalized) step evenly, else None."""
    flat = ind.reshape(-1) % dim
    steps = np.diff(flat)
    return (int(flat[0]), int(steps[0]) if steps.size else 0) if flat.size and (steps == steps[:1]).all() else None


def gather(x: te.Tensor, indices, axis: int, name: str, load: Callable[[], te.Tensor] | None = None) -> te.Tensor:
    """Return the slices of `x` along `axis` at `indices` (numpy's take): a te tensor of int64 or int32,
    or a numpy array of constant ones (within [-dim, dim)). Constant indices that step evenly (a scalar,
    a range, a strided range) become index arithmetic; others are loaded (constant ones from the te
    tensor `load()` makes) and taken modulo the dim: negative ones count from the end, and one outside
    [-dim, dim) wraps instead of reading outside x."""
    axis = normalize_axis(axis, x.ndim)
    dim, ind = x.shape[axis], indices if isinstance(indices, np.ndarray) else None
    if ind is not None and ind.size and not (-dim <= ind.min() and ind.max() < dim):
        raise ArgumentError(f"its indices hold values outside [{-dim}, {dim}) for axis {axis} of size {dim}")
    if (even := _even(ind, dim) if ind is not None else None) is not None:
        at = lambda j: even[0] + even[1] * _ravel(j, ind.shape)
    else:
        t = load() if ind is not None else indices
        if t.dtype not in ("int64", "int32"):
            raise ArgumentError(f"its indices are {t.dtype}; int64 and int32 are supported")
        at = lambda j: ir.cast(t[tuple(j)], ir.INDEX) % dim
    q, shape = len(indices.shape), (*x.shape[:axis], *indices.shape, *x.shape[axis + 1:])
    return te.compute(shape, lambda *i: x[i[:axis] + (at(i[axis:axis + q]),) + i[axis + q:]], name=name)


def gather_nd(x: te.Tensor, indices, name: str, load: Callable[[], te.Tensor] | None = None) -> te.Tensor:
    """Return the slices of `x` that the rows of `indices` ([..., r]) pick from its first r dims
    (`indices`, `load` as `gather`'s). Constant rows that step evenly through the data (a mask's
    indexing: a range) become index arithmetic; others are loaded, each component modulo its dim."""
    q, r = len(indices.shape) - 1, indices.shape[-1]
    dims, ind = x.shape[:r], indices if isinstance(indices, np.ndarray) else None
    if ind is not None and ind.size and not all((-d <= ind[..., k]).all() and (ind[..., k] < d).all()
                                                for k, d in enumerate(dims)):
        raise ArgumentError(f"its indices hold values outside the data's dims {list(dims)}")
    even = _even(np.ravel_multi_index(tuple(np.moveaxis(ind % np.array(dims), -1, 0)), dims),
                 math.prod(dims)) if ind is not None and ind.size else None
    if even is not None:
        at = lambda j: _unravel(even[0] + even[1] * _ravel(j, ind.shape[:-1]), dims)
    else:
        t = load() if ind is not None else indices
        at = lambda j: [ir.cast(t[(*j, k)], ir.INDEX) % d for k, d in enumerate(dims)]
    return te.compute((*indices.shape[:-1], *x.shape[r:]), lambda *i: x[(*at(i[:q]), *i[q:])], name=name)


def pad(x: te.Tensor, pads, mode: str, value, name: str, axes=None) -> te.Tensor:
    """Return `x` padded by `pads`: those at the beginnings of `axes` (default: all), then those at
    their ends (negative: cropped). `mode`: "constant" (a select on the padded index, `value`: a
    number or a te tensor of one element), "edge" (clamped), "reflect" (pads smaller than the
    dims) or "wrap"."""
    axes = [normalize_axis(a, x.ndim) for a in axes or range(x.ndim)]
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ArgumentError(f"mode {mode!r}; constant, edge, reflect and wrap are supported")
    if len(pads) != 2 * len(axes):
        raise ArgumentError(f"{len(pads)} pads for {len(axes)} axes (it takes a begin and an end per axis)")
    begin, end = [0] * x.ndim, [0] * x.ndim
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[k + len(axes)]
    if mode == "reflect" and any(max(b, e) >= d for b, e, d in zip(begin, end, x.shape)):
        raise ArgumentError(f"reflect pads {pads} as large as the dims {list(x.shape)}; they must be smaller")
    value = value[(0,) * value.ndim] if isinstance(value, te.Tensor) else ir.cast(value, x.dtype)

    def f(*i):
        idx, inside = [], []
        for v, b, e, d in zip(i, begin, end, x.shape):
            j = v - b   # negative pads crop: j stays inside on that side
            if (b > 0 or e > 0) and mode == "constant":
                inside += ([j >= 0] if b > 0 else []) + ([j < d] if e > 0 else [])
            elif b > 0 or e > 0:
                j = (ir.min_(ir.max_(j, 0), d - 1) if mode == "edge" else j % d if mode == "wrap" else
                     ir.select(j < 0, -j, ir.select(j >= d, 2 * d - 2 - j, j)))
            idx.append(j)
        return te.if_then_else(te.all_(*inside), x[tuple(idx)], value)
    return te.compute(tuple(d + b + e for d, b, e in zip(x.shape, begin, end)), f, name=name)
