"""te lowerings of the ONNX nodes that move data without arithmetic: Transpose, Reshape,
Flatten, Squeeze, Unsqueeze, Concat, Split, Slice, Expand, Tile, Gather, Pad, Identity.

Each output element is a load of an input element at indices computed from the output's
(index arithmetic only, no copies beyond the output itself). Output shapes come from
shape inference (`cx.out_shapes`), which has already resolved Reshape's 0 and -1,
Squeeze's and Unsqueeze's axes, Split's sizes and Slice's ends; a lowering reads only what
says which element goes where (perm, axis, starts and steps, indices, pads). Also the
numpy broadcasting helpers `broadcast_shape` and `broadcast_index`.
"""
from __future__ import annotations

import math

import numpy as np

from tunekit import ir, te

from .context import NodeContext, ident


def broadcast_shape(*shapes) -> tuple:
    """The shape numpy broadcasts `shapes` to (right-aligned; a size-1 dim stretches).

    Raises:
        ValueError: two shapes differ in a dim where neither is 1.
    """
    n = max((len(s) for s in shapes), default=0)
    out = []
    for dims in zip(*((1,) * (n - len(s)) + tuple(s) for s in shapes)):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_index(t_shape, out_shape, idx) -> tuple:
    """The indices into a tensor of `t_shape` broadcast to `out_shape` of output element `idx`."""
    idx = tuple(idx)[len(out_shape) - len(t_shape):]
    return tuple(0 if d == 1 else i for d, i in zip(t_shape, idx))


def _axis(cx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise cx.fail(f"axis {axis} is out of range for an input of rank {rank}")
    return axis % rank


def _ints(cx: NodeContext, k: int, name: str) -> list[int] | None:
    """The integers `name`: an attribute in older opsets, constant input `k` in newer; None if absent."""
    if name in cx.attrs:
        return [int(v) for v in cx.attrs[name]]
    return [int(v) for v in cx.need_const(k, name).reshape(-1)] if cx.has(k) else None


def _ravel(idx, dims) -> ir.Expr:
    """The row-major flat index of `idx` in `dims`."""
    flat = ir.const(0)
    for i, d in zip(idx, dims):
        flat = flat * d + i
    return flat


def _unravel(flat, dims) -> list:
    """The indices in `dims` of row-major flat index `flat` (< their product)."""
    out, stride = [], math.prod(dims)
    for k, d in enumerate(dims):
        stride //= d
        out.append(flat // stride if k == 0 else flat // stride % d)
    return out


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


def reshape(cx: NodeContext) -> list[te.Tensor]:
    """Reshape, Flatten, Squeeze, Unsqueeze: the same elements in row-major order, read
    through div/mod only across dims that merge or split (none for size-1 dims)."""
    x, shape = cx.tensor(0), cx.out_shapes[0]

    def f(*i):
        idx = [0] * x.ndim
        for ro, ri in _runs(shape, x.shape):
            flat = _ravel([i[d] for d in ro], [shape[d] for d in ro])
            for d, v in zip(ri, _unravel(flat, [x.shape[d] for d in ri])):
                idx[d] = v
        return x[tuple(idx)]
    return [te.compute(shape, f, name=ident(cx.name))]


def transpose(cx: NodeContext) -> list[te.Tensor]:
    x = cx.tensor(0)
    perm = [int(p) for p in cx.attr("perm", range(x.ndim - 1, -1, -1))]
    if sorted(perm) != list(range(x.ndim)):
        raise cx.fail(f"perm {perm} is not a permutation of the {x.ndim} axes")
    inv = np.argsort(perm)
    return [te.compute(cx.out_shapes[0], lambda *i: x[tuple(i[d] for d in inv)], name=ident(cx.name))]


def concat(cx: NodeContext) -> list[te.Tensor]:
    """A chain of selects on the axis index, the last input innermost."""
    xs = [cx.tensor(k) for k in range(len(cx.values))]
    axis = _axis(cx, cx.attr("axis"), xs[0].ndim)
    xs = [x for x in xs if x.shape[axis]]   # empty inputs add nothing

    def f(*i):
        offset = sum(x.shape[axis] for x in xs)
        value = None
        for x in reversed(xs):
            offset -= x.shape[axis]
            load = x[i[:axis] + (i[axis] - offset,) + i[axis + 1:]]
            value = load if value is None else ir.select(i[axis] < offset + x.shape[axis], load, value)
        return value
    return [te.compute(cx.out_shapes[0], f, name=ident(cx.name))]


def split(cx: NodeContext) -> list[te.Tensor]:
    """One tensor per output, its sizes along the axis (from `split`, `num_outputs` or equal
    parts) as shape inference found them."""
    x = cx.tensor(0)
    axis = _axis(cx, cx.attr("axis", 0), x.ndim)
    outs, offset = [], 0
    for k, shape in enumerate(cx.out_shapes):
        outs.append(te.compute(shape, lambda *i, o=offset: x[i[:axis] + (i[axis] + o,) + i[axis + 1:]],
                               name=f"{ident(cx.name)}_{k}"))
        offset += shape[axis]
    return outs


def slice_(cx: NodeContext) -> list[te.Tensor]:
    """Output index i along a sliced axis reads start + i * step, start clamped as ONNX says."""
    x = cx.tensor(0)
    starts = _ints(cx, 1, "starts")
    axes = _ints(cx, 3, "axes") or range(len(starts))
    steps = _ints(cx, 4, "steps") or [1] * len(starts)
    first, step = [0] * x.ndim, [1] * x.ndim
    for a, s, st in zip(axes, starts, steps):
        a = _axis(cx, a, x.ndim)
        dim = x.shape[a]
        if st == 0:
            raise cx.fail(f"a step of 0 on axis {a}")
        s = s + dim if s < 0 else s
        first[a], step[a] = min(max(s, 0), dim if st > 0 else dim - 1), st
    return [te.compute(cx.out_shapes[0], lambda *i: x[tuple(f + s * v for f, s, v in zip(first, step, i))],
                       name=ident(cx.name))]


def expand(cx: NodeContext) -> list[te.Tensor]:
    x, shape = cx.tensor(0), cx.out_shapes[0]
    return [te.compute(shape, lambda *i: x[broadcast_index(x.shape, shape, i)], name=ident(cx.name))]


def tile(cx: NodeContext) -> list[te.Tensor]:
    x, shape = cx.tensor(0), cx.out_shapes[0]
    return [te.compute(shape, lambda *i: x[tuple(v if n == d else v % d for v, n, d in zip(i, shape, x.shape))],
                       name=ident(cx.name))]


def identity(cx: NodeContext) -> list[te.Tensor]:
    x = cx.tensor(0)
    return [te.compute(x.shape, lambda *i: x[i], name=ident(cx.name))]


def _even(ind: np.ndarray, dim: int) -> tuple[int, int] | None:
    """(first, step) if the flattened constant indices `ind` (normalized) step evenly, else None."""
    flat = ind.reshape(-1) % dim
    steps = np.diff(flat)
    return (int(flat[0]), int(steps[0]) if steps.size else 0) if flat.size and (steps == steps[:1]).all() else None


def gather(cx: NodeContext) -> list[te.Tensor]:
    """Constant indices that step evenly (a scalar, a range, a strided range) become index
    arithmetic; other indices, constant or data, are loaded and taken modulo the dim size:
    negative ones count from the end, and an index outside [-dim, dim), which ONNX calls
    an error, wraps instead of reading outside the tensor."""
    x = cx.tensor(0)
    axis = _axis(cx, cx.attr("axis", 0), x.ndim)
    dim, ind = x.shape[axis], cx.const(1)
    if ind is not None and ind.size and not (-dim <= ind.min() and ind.max() < dim):
        raise cx.fail(f"its indices hold values outside [{-dim}, {dim}) for axis {axis} of size {dim}")
    even = _even(ind, dim) if ind is not None else None
    if even is not None:
        def at(j):
            return even[0] + even[1] * _ravel(j, ind.shape)
    else:
        indices = cx.tensor(1)
        if indices.dtype not in ("int64", "int32"):
            raise cx.fail(f"its indices are {indices.dtype}; int64 and int32 are supported")

        def at(j):
            return ir.cast(indices[tuple(j)], ir.INDEX) % dim
    q = len(cx.shape(1))
    return [te.compute(cx.out_shapes[0], lambda *i: x[i[:axis] + (at(i[axis:axis + q]),) + i[axis + q:]],
                       name=ident(cx.name))]


def gather_nd(cx: NodeContext) -> list[te.Tensor]:
    """batch_dims 0: each index row [..., r] picks a slice of the data's first r dims. Constant
    rows that step evenly through the data (PyTorch's mask indexing: a range) become index
    arithmetic; others are loaded, each component modulo its dim, as in `gather`."""
    x = cx.tensor(0)
    if cx.attr("batch_dims", 0):
        raise cx.fail("only batch_dims 0 is supported")
    q, r = len(cx.shape(1)) - 1, cx.shape(1)[-1]
    dims, ind = x.shape[:r], cx.const(1)
    if ind is not None and ind.size and not all((-d <= ind[..., k]).all() and (ind[..., k] < d).all()
                                                for k, d in enumerate(dims)):
        raise cx.fail(f"its indices hold values outside the data's dims {list(dims)}")
    even = _even(np.ravel_multi_index(tuple(np.moveaxis(ind % np.array(dims), -1, 0)), dims),
                 math.prod(dims)) if ind is not None and ind.size else None
    if even is not None:
        def at(j):
            return _unravel(even[0] + even[1] * _ravel(j, ind.shape[:-1]), dims)
    else:
        indices = cx.tensor(1)

        def at(j):
            return [ir.cast(indices[(*j, k)], ir.INDEX) % d for k, d in enumerate(dims)]
    return [te.compute(cx.out_shapes[0], lambda *i: x[(*at(i[:q]), *i[q:])], name=ident(cx.name))]


def pad(cx: NodeContext) -> list[te.Tensor]:
    """Modes constant (a select on the padded index), edge (clamped), reflect and wrap."""
    x = cx.tensor(0)
    pads = _ints(cx, 1, "pads")
    axes = [_axis(cx, a, x.ndim) for a in _ints(cx, 3, "axes") or range(x.ndim)]
    mode = cx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise cx.fail(f"mode {mode!r}; constant, edge, reflect and wrap are supported")
    if len(pads) != 2 * len(axes):
        raise cx.fail(f"{len(pads)} pads for {len(axes)} axes (it takes a begin and an end per axis)")
    begin, end = [0] * x.ndim, [0] * x.ndim
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[k + len(axes)]
    if mode == "reflect" and any(max(b, e) >= d for b, e, d in zip(begin, end, x.shape)):
        raise cx.fail(f"reflect pads {pads} as large as the dims {list(x.shape)}; they must be smaller")
    value = cx.tensor(2)[(0,) * len(cx.shape(2))] if cx.has(2) else ir.cast(cx.attr("value", 0), x.dtype)

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
    return [te.compute(cx.out_shapes[0], f, name=ident(cx.name))]


LOWERINGS = {"Transpose": transpose, "Reshape": reshape, "Flatten": reshape, "Squeeze": reshape,
             "Unsqueeze": reshape, "Concat": concat, "Split": split, "Slice": slice_, "Expand": expand,
             "Tile": tile, "Gather": gather, "GatherND": gather_nd, "Pad": pad, "Identity": identity}
KINDS = {op: "injective" for op in LOWERINGS}
