"""A numpy interpreter of tensor expressions: the reference output of any te computation.

Each compute is evaluated over boxes of its iteration space: every axis is an
`arange` along its own dimension (reduction axes after the spatial ones), so a body
evaluates with broadcasting, and a reduction reduces its extra dimensions. Boxes are
cut from the outermost axes so that no temporary holds more than `LIMIT` elements.
Floating-point values are computed in float64 and cast to each output's dtype at the
end; integer `//` and `%` floor, as in Python and the loop IR.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from .. import ir
from ..errors import TunekitError
from ..ir.interp import bf16x2, dot2_bf16, dot4_u8s8
from .tensor import ComputeOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorLoad

#: the most elements a temporary array may hold (a box of an iteration space)
LIMIT = 2 ** 24

_BIN = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide,
        "%": np.mod, "min": np.minimum, "max": np.maximum, "<": np.less, "<=": np.less_equal,
        ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
        "and": np.logical_and, "or": np.logical_or}
_CALL = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "fabs": np.abs, "rint": np.rint,
         "fma": lambda a, b, c: a * b + c, "dot4_u8s8": dot4_u8s8, "bf16x2": bf16x2,
         "dot2_bf16": dot2_bf16}
_REDUCE: dict[str, Callable[..., np.ndarray]] = {"sum": np.sum, "max": np.max}


def _work_dtype(dtype: str):
    """What values of `dtype` are computed in: float64, int64 or bool."""
    return np.bool_ if dtype == "bool" else np.float64 if dtype.startswith("float") else np.int64


def evaluate(tensors, inputs) -> list[np.ndarray]:
    """Compute a te computation with numpy.

    Args:
        tensors: the computation's tensors in kernel parameter order: its placeholders
            take `inputs` in order; the compute tensors among them are the outputs.
        inputs: one array per placeholder of `tensors`, of its shape.
    Returns:
        the value of each compute tensor of `tensors`, in order, of its dtype.
    Raises:
        TunekitError: the inputs do not match the placeholders, a placeholder that is
            read is not among `tensors`, or a load outside a guard reads out of bounds.
    """
    tensors = list(tensors)
    holders = [t for t in tensors if isinstance(t.op, PlaceholderOp)]
    inputs = list(inputs)
    if len(inputs) != len(holders):
        raise TunekitError(f"evaluate: the computation has {len(holders)} inputs "
                           f"({', '.join(t.name for t in holders)}), got {len(inputs)} arrays")
    values: dict[Tensor, np.ndarray] = {}
    for t, a in zip(holders, inputs):
        a = np.asarray(a)
        if a.shape != t.shape:
            raise TunekitError(f"evaluate: input {t.name} has shape {list(t.shape)}, got an array of shape "
                               f"{list(a.shape)}")
        values[t] = a.astype(_work_dtype(t.dtype), copy=False)
    with np.errstate(all="ignore"):   # the side of a select not taken may overflow or divide by zero
        for t in _topo(tensors):
            if t not in values:
                if isinstance(t.op, PlaceholderOp):
                    raise TunekitError(f"evaluate: placeholder {t.name} is read but is not among the tensors given")
                values[t] = _compute(t, values)
    return [values[t].astype(t.dtype) for t in tensors if isinstance(t.op, ComputeOp)]


def _topo(tensors) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[Tensor] = set()

    def visit(t: Tensor) -> None:
        if t in seen:
            return
        seen.add(t)
        if isinstance(t.op, ComputeOp):
            for src in t.op.inputs:
                visit(src)
        order.append(t)
    for t in tensors:
        visit(t)
    return order


def _boxes(extents: list[int], limit: int):
    """Boxes ([(lo, hi)] per axis) covering range(extents), each of at most `limit` elements
    (or one element): the leading axes are taken one index at a time, the next in chunks."""
    if not extents:
        yield []
        return
    d = 0
    while d < len(extents) - 1 and math.prod(extents[d + 1:]) > limit:
        d += 1
    step = max(1, limit // math.prod(extents[d + 1:]))
    for head in itertools.product(*(range(e) for e in extents[:d])):
        for lo in range(0, extents[d], step):
            yield ([(h, h + 1) for h in head] + [(lo, min(lo + step, extents[d]))]
                   + [(0, e) for e in extents[d + 1:]])


def _compute(t: Tensor, values: dict) -> np.ndarray:
    op: ComputeOp = t.op
    red = op.body if isinstance(op.body, Reduce) else None
    raxes = list(red.axes) if red is not None else []
    spatial = [a.extent for a in op.axis]
    rsize = math.prod(a.extent for a in raxes)
    out = np.empty(t.shape, _work_dtype(t.dtype))
    for box in _boxes(spatial, max(1, LIMIT // rsize)):
        shape = tuple(hi - lo for lo, hi in box)
        if red is None:
            val = _Eval(values, op.axis, box).expr(op.body)
        else:
            val = None
            for rbox in _boxes([a.extent for a in raxes], max(1, LIMIT // math.prod(shape))):
                ev = _Eval(values, [*op.axis, *raxes], box + rbox)
                part = _REDUCE[red.combiner](np.broadcast_to(ev.expr(red.source), shape + tuple(
                    hi - lo for lo, hi in rbox)), axis=tuple(range(len(shape), len(shape) + len(raxes))))
                val = part if val is None else (val + part if red.combiner == "sum" else np.maximum(val, part))
        out[tuple(slice(lo, hi) for lo, hi in box)] = np.broadcast_to(val, shape)
    return out


class _Eval:
    """Evaluates expressions over one box: axis `k` of `axes` is an arange along dimension k."""

    def __init__(self, values: dict, axes: list[IterVar], box: list[tuple[int, int]]):
        self.values = values
        n = len(axes)
        self.env = {a: np.arange(lo, hi, dtype=np.int64).reshape([-1 if d == k else 1 for d in range(n)])
                    for k, (a, (lo, hi)) in enumerate(zip(axes, box))}

    def expr(self, e, guard=None):
        """The value of `e` (an array broadcastable to the box, or a scalar); `guard` is
        where the value is used (loads elsewhere may be out of bounds: they are clipped)."""
        if isinstance(e, ir.Var):
            if e not in self.env:
                raise TunekitError(f"evaluate: variable {e.name!r} is not an axis of the compute that reads it")
            return self.env[e]
        if isinstance(e, ir.Const):
            return np.asarray(e.value, _work_dtype(e.dtype))
        if isinstance(e, ir.BinOp):
            return _BIN[e.op](self.expr(e.a, guard), self.expr(e.b, guard))
        if isinstance(e, ir.Not):
            return np.logical_not(self.expr(e.a, guard))
        if isinstance(e, ir.Select):
            cond = self.expr(e.cond, guard)
            g = cond if guard is None else np.logical_and(guard, cond)
            ng = np.logical_not(cond) if guard is None else np.logical_and(guard, np.logical_not(cond))
            return np.where(cond, self.expr(e.t, g), self.expr(e.f, ng))
        if isinstance(e, ir.Cast):
            return _cast(self.expr(e.a, guard), e.dtype)
        if isinstance(e, ir.Call):
            if e.fn not in _CALL:
                raise TunekitError(f"evaluate: unknown intrinsic {e.fn!r} (known: {', '.join(_CALL)})")
            return _CALL[e.fn](*(self.expr(a, guard) for a in e.args))
        if isinstance(e, TensorLoad):
            return self._load(e, guard)
        if isinstance(e, Reduce):
            raise TunekitError("evaluate: a reduction (te.sum/te.max) must be the whole body of its compute; "
                               "compute it in a tensor of its own and read that")
        raise TunekitError(f"evaluate: cannot evaluate a {type(e).__name__} node in a tensor expression")

    def _load(self, e: TensorLoad, guard):
        src = self.values[e.tensor]
        idx = []
        for d, i in enumerate(e.indices):
            i = np.asarray(self.expr(i, guard), np.int64)
            bad = (i < 0) | (i >= src.shape[d])
            if bad.any():
                if guard is None or np.logical_and(bad, guard).any():
                    raise TunekitError(f"evaluate: {e.tensor.name}[...] reads index {int(i[bad].flat[0])} of "
                                       f"dimension {d} (extent {src.shape[d]}), out of bounds; guard the load "
                                       "with te.if_then_else")
                i = np.where(bad, 0, i)
            idx.append(i)
        return src[tuple(idx)]


def _cast(a, dtype: str):
    if dtype == "bool":
        return np.not_equal(a, 0)
    if dtype.startswith("float"):
        return np.asarray(a).astype(np.float64)
    if np.asarray(a).dtype.kind == "f":   # C conversion: toward zero
        a = np.trunc(a)
    # wrap to the narrower type as the kernel does, then compute on in int64
    return np.asarray(a).astype(dtype).astype(np.int64)
