"""Tensor expressions: what an operator computes, independent of how.

`placeholder` declares an input, `compute` an output defined element-wise by a
Python function of its axes, `reduce_axis` + `sum`/`max` a reduction, and
`if_then_else` a guarded value (padding), `exp`, `log`, `sqrt`, `tanh`, `fabs`,
`fma` the intrinsics of the loop IR. Expressions are loop-IR expressions
(`tunekit.ir`) plus the two nodes here, which lowering turns into loads.

A reduction inside a larger body (`te.sum(...) * scale`) is computed by a compute of its
own, `<name>.red` (over the axes it reads), that the body reads: every stage is a reduction
or has none. A reduction inside another, or a reduction axis used outside it, is refused.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import numpy as np

from .. import ir
from ..errors import ArgumentError

SPATIAL, REDUCE = "spatial", "reduce"


@dataclass(eq=False, repr=False)
class IterVar(ir.Var):
    """An axis of a compute: a loop variable with an extent. Schedules split,
    fuse and reorder these; the original ones are an op's `axis`/`reduce_axis`."""
    extent: object = 1     # int, SymInt, or an index expression of sizes (`tunekit.ir.sizes`)
    kind: str = SPATIAL


def _dim(d):
    """A dimension as te keeps it: an int, an int of sizes (`ir.sizes.SymInt`: templates read its
    representative value, lowering its expression), or an index expression of sizes."""
    if isinstance(d, ir.sizes.SymInt):
        return d
    if isinstance(d, ir.Expr):
        if isinstance(d, ir.Const):
            return int(d.value)
        if not all(isinstance(v, ir.SizeVar) for v in ir.free_vars(d)):
            raise ArgumentError(f"a dimension must be an int or an expression of sizes (ir.size_var), got {d!r}")
        return d
    return int(d)


@dataclass(eq=False, repr=False)
class TensorLoad(ir.Expr):
    """`tensor[indices]` inside a compute body."""
    tensor: Tensor
    indices: tuple

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


@dataclass(eq=False, repr=False)
class Reduce(ir.Expr):
    """A reduction of `source` over `axes` with `combiner` ("sum" or "max")."""
    combiner: str
    source: ir.Expr
    axes: tuple
    dtype: str


class Tensor:
    """The output of an op. Index it (`T[i, j]`) inside a compute body."""

    def __init__(self, op, shape: tuple, dtype: str, name: str):
        self.op, self.shape, self.dtype, self.name = op, tuple(_dim(d) for d in shape), dtype, name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, idx) -> TensorLoad:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != self.ndim:
            raise IndexError(f"{self.name} has {self.ndim} dimensions, indexed with {len(idx)}")
        return TensorLoad(self, tuple(ir.as_expr(i) for i in idx))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


class PlaceholderOp:
    def __init__(self, name: str):
        self.name = name
        self.inputs: list[Tensor] = []


class ComputeOp:
    """`out[axis] = body` where body may be a `Reduce` over `reduce_axis`."""

    def __init__(self, name: str, axis: list[IterVar], body: ir.Expr, tag: str = ""):
        self.name, self.axis, self.body, self.tag = name, axis, body, tag
        self.reduce_axis = list(body.axes) if isinstance(body, Reduce) else []

    @property
    def inputs(self) -> list[Tensor]:
        return input_tensors(self.body)


def input_tensors(expr) -> list[Tensor]:
    """Return the tensors an expression reads, in first-use order."""
    seen: dict[Tensor, None] = {}

    class V(ir.Visitor):
        def visit_TensorLoad(self, node):
            seen.setdefault(node.tensor, None)
            self.generic_visit(node)
    V().visit(expr)
    return list(seen)


def placeholder(shape, name: str = "placeholder", dtype: str = "float32") -> Tensor:
    """Declare an input tensor."""
    return Tensor(PlaceholderOp(name), shape, dtype, name)


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    """Declare a reduction axis over range(extent) (an int or an expression of sizes)."""
    return IterVar(name, ir.INDEX, _dim(extent), REDUCE)


def compute(shape, fcompute, name: str = "compute", tag: str = "") -> Tensor:
    """Define a tensor of `shape` by `fcompute(*axes) -> expression`."""
    shape = tuple(_dim(d) for d in shape)
    sig = inspect.signature(fcompute).parameters
    params = [p for p, v in sig.items() if v.kind != inspect.Parameter.VAR_POSITIONAL]
    if len(params) != len(shape):
        if len(params) < len(shape) and len(params) < len(sig):   # `*rest` takes the remaining axes
            params += [f"i{d}" for d in range(len(params), len(shape))]
        else:
            raise ValueError(f"compute {name!r}: fcompute takes {len(params)} axes, shape has {len(shape)}")
    axis = [IterVar(p, ir.INDEX, d, SPATIAL) for p, d in zip(params, shape)]
    return _make(name, axis, ir.as_expr(fcompute(*axis)), tag)


def _make(name: str, axis: list[IterVar], body: ir.Expr, tag: str = "") -> Tensor:
    op = ComputeOp(name, axis, _split(name, axis, body), tag)
    t = Tensor(op, tuple(a.extent for a in axis), op.body.dtype, name)
    op.output = t
    return t


def _split(name: str, axis: list[IterVar], body: ir.Expr) -> ir.Expr:
    """`body` with each reduction in it (unless it is all of it) read from a compute of its own."""
    tops = [body] if isinstance(body, Reduce) else _reductions(body)
    if any(_reductions(r.source) for r in tops):
        raise ArgumentError(f"compute {name!r}: a reduction inside another's expression; compute the inner one in "
                            "a te.compute of its own and read that tensor in the outer one")
    if isinstance(body, Reduce) or not tops:
        return body
    cuts: dict[Reduce, Tensor] = {}   # one reduction read twice (`x` in `select(x > 0, x, 0.1 * x)`) is one stage

    class Cut(ir.Mutator):
        def visit_Reduce(self, r):
            used = [a for a in axis if a in ir.free_vars(r.source)] or axis   # not recomputed along other axes
            if r not in cuts:
                fresh = {a: IterVar(a.name, ir.INDEX, a.extent, a.kind) for a in [*used, *r.axes]}
                cuts[r] = _make(f"{name}.red{len(cuts) or ''}", [fresh[a] for a in used], ir.substitute(r, fresh))
            return cuts[r][tuple(used)]
    out = Cut().visit(body)
    own = {a for r in tops for a in r.axes}
    if bad := own & set().union(ir.free_vars(out), *(ir.free_vars(c.op.body) for c in cuts.values())):
        raise ArgumentError(f"compute {name!r}: reduction axis {min(a.name for a in bad)!r} is used outside the "
                            "te.sum/te.max over it; give each reduction its own te.reduce_axis, used only inside it")
    return out


def identity(combiner: str, dtype: str) -> ir.Const:
    """The value a reduction by `combiner` ("sum" or "max") starts from."""
    if combiner == "sum":
        return ir.const(0 if "int" in dtype else 0.0, dtype)
    return ir.const(int(np.iinfo(dtype).min) if "int" in dtype else float("-inf"), dtype)


def _reductions(expr) -> list[Reduce]:
    """The outermost reductions in `expr`."""
    return [expr] if isinstance(expr, Reduce) else [r for c in ir.children(expr) for r in _reductions(c)]


def _reduce(combiner: str, expr, axis) -> Reduce:
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    expr = ir.as_expr(expr)
    return Reduce(combiner, expr, axes, expr.dtype)


def sum(expr, axis) -> Reduce:
    """Sum `expr` over reduction axis (or axes) `axis`."""
    return _reduce("sum", expr, axis)


def max(expr, axis) -> Reduce:
    """Maximum of `expr` over reduction axis (or axes) `axis`."""
    return _reduce("max", expr, axis)


def if_then_else(cond, t, f) -> ir.Expr:
    """`t` where `cond` holds, else `f`; `t` is only read where `cond` holds."""
    return ir.select(cond, t, f)


def _intrinsic(fn: str, nargs: int = 1):
    def call(*args) -> ir.Expr:
        if len(args) != nargs:
            raise TypeError(f"te.{fn} takes {nargs} argument(s), got {len(args)}")
        first = next((a for a in args if isinstance(a, ir.Expr)), None)
        dtype = first.dtype if first is not None else "float32"
        return ir.Call(fn, tuple(ir.as_expr(a, dtype) for a in args), dtype)
    call.__name__ = fn
    call.__doc__ = f"The intrinsic `{fn}` of {'a float expression' if nargs == 1 else 'float expressions (a * b + c)'}."
    return call


exp, log, sqrt, tanh, fabs, rint = (_intrinsic(f) for f in ("exp", "log", "sqrt", "tanh", "fabs", "rint"))
fma = _intrinsic("fma", 3)


def dot4_u8s8(a, b) -> ir.Expr:
    """The int32 sum of the four byte products of int32 `a` and `b`, each four packed bytes, a's
    unsigned and b's signed (`ir.Call`): read uint8 data and int8 weights as int32 to use it."""
    a, b = ir.as_expr(a, "int32"), ir.as_expr(b, "int32")
    if a.dtype != "int32" or b.dtype != "int32":
        raise TypeError(f"te.dot4_u8s8 takes int32 expressions (four packed bytes each), got {a.dtype} and {b.dtype}")
    return ir.Call("dot4_u8s8", (a, b), "int32")


def bf16x2(lo, hi) -> ir.Expr:
    """The int32 holding float32 `lo` and `hi` rounded to bfloat16 (to nearest, ties to even), `lo` in
    its low 16 bits (`ir.Call`): what `dot2_bf16` reads, two k of a row or a column."""
    lo, hi = ir.as_expr(lo, "float32"), ir.as_expr(hi, "float32")
    if lo.dtype != "float32" or hi.dtype != "float32":
        raise TypeError(f"te.bf16x2 takes float32 expressions, got {lo.dtype} and {hi.dtype}")
    return ir.Call("bf16x2", (lo, hi), "int32")


def dot2_bf16(a, b) -> ir.Expr:
    """The float32 sum of the two products of the bfloat16 pairs `a` and `b` (int32 each, as `bf16x2`
    makes them): low times low plus high times high (`ir.Call`)."""
    a, b = ir.as_expr(a, "int32"), ir.as_expr(b, "int32")
    if a.dtype != "int32" or b.dtype != "int32":
        raise TypeError(f"te.dot2_bf16 takes int32 expressions (two bfloat16 each), got {a.dtype} and {b.dtype}")
    return ir.Call("dot2_bf16", (a, b), "float32")


def all_(*conds) -> ir.Expr:
    return functools.reduce(ir.and_, conds, ir.const(True))
