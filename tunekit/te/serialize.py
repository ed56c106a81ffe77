"""Tensor expressions as plain data: a canonical, JSON-able description of a whole
te computation, and its structural hash.

`to_data(tensors)` describes every tensor reachable from `tensors` (placeholders with
shape, dtype and name; compute ops with their axes, body, reduction axes, combiners
and tag), in a fixed order: inputs before the tensors that read them, each graph walked
from `tensors` in order. Axes are numbered in first-use order, so the description does
not depend on Python object identity. `from_data` rebuilds equal tensors (a round trip
lowers to the same program), and `structural_hash` hashes the description with every
tensor and axis name left out: equal computations named differently share a hash.

Expressions are JSON lists whose first item says the node:
`["var", n]`, `["const", value, dtype]` (non-finite floats as "inf", "-inf", "nan"),
`["bin", op, a, b, dtype]`, `["not", a]`, `["select", cond, t, f, dtype]`,
`["cast", a, dtype]`, `["call", fn, [args], dtype]`, `["load", tensor, [indices]]`,
`["reduce", combiner, source, [axes], dtype]`.
"""
from __future__ import annotations

import hashlib
import json
import math

from .. import ir
from ..errors import TunekitError
from .tensor import ComputeOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorLoad, _dim

#: bumped when the description changes (a new version changes every hash, and records with it)
FORMAT = 1
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class _Encoder:
    def __init__(self, names: bool):
        self.names = names
        self.tensors: dict[Tensor, int] = {}
        self.vars: dict[IterVar, int] = {}
        self.out: list[dict] = []
        self.axes: list[dict] = []

    def tensor(self, t: Tensor) -> int:
        k = self.tensors.get(t)
        if k is not None:
            return k
        if not isinstance(t, Tensor):
            raise TunekitError(f"to_data: expected te tensors, got {t!r} ({type(t).__name__})")
        entry: dict = {"shape": list(t.shape), "dtype": t.dtype}
        if isinstance(t.op, PlaceholderOp):
            entry["kind"] = "placeholder"
        elif isinstance(t.op, ComputeOp):
            for src in t.op.inputs:   # inputs first: from_data builds in list order
                self.tensor(src)
            entry.update(kind="compute", tag=t.op.tag, axes=[self.var(a) for a in t.op.axis], body=self.expr(t.op.body))
        else:
            raise TunekitError(f"to_data: tensor {t.name!r} is made by a {type(t.op).__name__}, which is neither "
                               "a placeholder nor a compute")
        if self.names:
            entry["name"] = t.name
        k = self.tensors[t] = len(self.out)
        self.out.append(entry)
        return k

    def var(self, v) -> int:
        k = self.vars.get(v)
        if k is None:
            if not isinstance(v, IterVar):
                raise TunekitError(f"to_data: variable {v.name!r} is not an axis of any compute (te.compute axes "
                                   "and te.reduce_axis are the only variables a computation may use)")
            k = self.vars[v] = len(self.axes)
            self.axes.append({"extent": v.extent, "kind": v.kind, **({"name": v.name} if self.names else {})})
        return k

    def expr(self, e) -> list:
        if isinstance(e, ir.Var):
            return ["var", self.var(e)]
        if isinstance(e, ir.Const):
            v = e.value.item() if hasattr(e.value, "item") else e.value
            if not self.names and e.dtype != "bool":   # 2 and 2.0 of one dtype are one constant
                v = float(v) if e.dtype.startswith("float") else int(v)
            if isinstance(v, float) and not math.isfinite(v):
                v = repr(v)
            return ["const", v, e.dtype]
        if isinstance(e, ir.BinOp):
            return ["bin", e.op, self.expr(e.a), self.expr(e.b), e.dtype]
        if isinstance(e, ir.Not):
            return ["not", self.expr(e.a)]
        if isinstance(e, ir.Select):
            return ["select", self.expr(e.cond), self.expr(e.t), self.expr(e.f), e.dtype]
        if isinstance(e, ir.Cast):
            return ["cast", self.expr(e.a), e.dtype]
        if isinstance(e, ir.Call):
            return ["call", e.fn, [self.expr(a) for a in e.args], e.dtype]
        if isinstance(e, TensorLoad):
            return ["load", self.tensor(e.tensor), [self.expr(i) for i in e.indices]]
        if isinstance(e, Reduce):
            return ["reduce", e.combiner, self.expr(e.source), [self.var(a) for a in e.axes], e.dtype]
        raise TunekitError(f"to_data: a {type(e).__name__} node ({e!r}) cannot appear in a tensor expression")


def _encode(tensors, names: bool) -> dict:
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    enc = _Encoder(names)
    params = [enc.tensor(t) for t in tensors]
    return {"format": FORMAT, "tensors": enc.out, "axes": enc.axes, "params": params}


def to_data(tensors) -> dict:
    """Describe a te computation as canonical, JSON-able data.

    Args:
        tensors: the computation's tensors in kernel parameter order (inputs, then
            outputs); every tensor they read is described too.
    Returns:
        a dict of "format", "tensors" (inputs first), "axes" (first-use order) and
        "params" (the positions of `tensors` in "tensors").
    Raises:
        TunekitError: something in it is not a te tensor or expression node.
    """
    return _encode(tensors, names=True)


def from_data(data: dict) -> list[Tensor]:
    """Rebuild the tensors `to_data` described: equal ones, in parameter order.

    Raises:
        TunekitError: `data` is not such a description (or of another format version).
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise TunekitError(f"from_data: not a tensor-expression description of format {FORMAT} (got {got!r}); "
                           "make it with tunekit.te.serialize.to_data")
    try:
        axes = [IterVar(a.get("name", f"v{k}"), ir.INDEX, _dim(a["extent"]), a["kind"])
                for k, a in enumerate(data["axes"])]
        tensors: list[Tensor] = []
        for k, entry in enumerate(data["tensors"]):
            name = entry.get("name", f"t{k}")
            if entry["kind"] == "placeholder":
                t = Tensor(PlaceholderOp(name), entry["shape"], entry["dtype"], name)
            else:
                body = _decode(entry["body"], axes, tensors)
                op = ComputeOp(name, [axes[a] for a in entry["axes"]], body, entry["tag"])
                t = Tensor(op, entry["shape"], entry["dtype"], name)
                op.output = t  # type: ignore[attr-defined]   # as te.compute sets it
            tensors.append(t)
        return [tensors[k] for k in data["params"]]
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise TunekitError(f"from_data: malformed tensor-expression description ({type(e).__name__}: {e})") from None


def _decode(e: list, axes: list, tensors: list):
    def d(x):
        return _decode(x, axes, tensors)
    kind = e[0]
    if kind == "var":
        return axes[e[1]]
    if kind == "const":
        v = _NONFINITE.get(e[1], e[1]) if isinstance(e[1], str) else e[1]
        return v.expr if isinstance(v, ir.sizes.SymInt) and e[2] == ir.INDEX else ir.Const(v, e[2])
    if kind == "bin":
        return ir.BinOp(e[1], d(e[2]), d(e[3]), e[4])
    if kind == "not":
        return ir.Not(d(e[1]))
    if kind == "select":
        return ir.Select(d(e[1]), d(e[2]), d(e[3]), e[4])
    if kind == "cast":
        return ir.Cast(d(e[1]), e[2])
    if kind == "call":
        return ir.Call(e[1], tuple(d(a) for a in e[2]), e[3])
    if kind == "load":
        return TensorLoad(tensors[e[1]], tuple(d(i) for i in e[2]))
    if kind == "reduce":
        return Reduce(e[1], d(e[2]), tuple(axes[a] for a in e[3]), e[4])
    raise ValueError(f"unknown expression node {kind!r}")


def canonical_json(data: dict) -> str:
    """Return the canonical JSON text of a description (sorted keys, no spaces)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def structural_hash(tensors) -> str:
    """Hash what `tensors` compute, names left out (sha256 hex, 16 digits).

    Two computations that differ only in the names of their tensors and axes share
    it; any change of shape, dtype, index expression, constant, operation, combiner,
    tag or parameter order changes it.
    """
    blob = canonical_json(_encode(tensors, names=False))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
