"""Ops made from a function of te tensors (`tunekit.Task.from_compute`): a downstream
compiler's own computations, tuned without registering an op.

A `ComputedOp`'s compute is the user's function, its reference `te.evaluate`, its flops
counted from the tensor expressions, and its workload key the structural hash of the
computation (`te.structural_hash`), not its name: equal computations share records.
In another process it is rebuilt from plain data (`portable`, `from_portable`), never
from the function, which only the user's process has.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from .. import ir, te
from ..errors import ArgumentError, TunekitError
from ..te.tensor import ComputeOp, PlaceholderOp, Reduce, Tensor
from .op import DTYPES, Op

#: what a computation's name must look like (it names kernels: a C identifier)
NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_ARITH = {"+", "-", "*", "/", "//", "%", "min", "max"}


class ComputedArgs(BaseModel):
    """The args of a computed op: JSON scalars, passed to its function as keywords."""
    model_config = ConfigDict(extra="allow")


@dataclass
class _Facts:
    """What one computation (an op's function at some args) is: counted once per args."""
    data: dict
    key: str
    flops: int
    reduction_size: int


def check_name(name, fn=None) -> str:
    """Return `name` if it can name a computation, else raise ArgumentError saying how to fix it."""
    if not isinstance(name, str) or not NAME.match(name):
        whose = f" (of {_describe(fn)})" if fn is not None else ""
        raise ArgumentError(f"computation name {name!r}{whose} is not valid: use lower-case letters, digits and "
                            "underscores, starting with a letter, at most 64 characters (e.g. name=\"my_fused_op\")")
    return name


class ComputedOp(Op):
    """An op whose compute is `fn(**args) -> [inputs..., outputs...]` (te tensors).

    Args:
        fn: returns the computation's tensors in kernel parameter order: te.placeholder
            inputs, then its `outputs` computed (te.compute) tensors.
        name: the op's name (default: the function's); it names tasks and kernels only.
        outputs: how many tensors at the end of the list are outputs.
    Raises:
        ArgumentError: a bad name or number of outputs.
    """

    def __init__(self, fn: Callable[..., list], name: str | None = None, outputs: int = 1):
        if not callable(fn):
            raise ArgumentError(f"from_compute takes a function that returns te tensors, got {fn!r}")
        name = check_name(getattr(fn, "__name__", None) if name is None else name, fn)
        if not isinstance(outputs, int) or isinstance(outputs, bool) or outputs < 1:
            raise ArgumentError(f"computation {name!r}: outputs must be a positive int (how many tensors at the "
                                f"end of the list are outputs), got {outputs!r}")
        self.fn = fn
        self._facts: dict[str, _Facts] = {}
        # no pydantic schema for the args: `canonical` checks them
        super().__init__(name, ComputedArgs, self._compute, self._reference,  # type: ignore[arg-type]
                         self._flops, self._reduction_size, outputs)

    def __repr__(self) -> str:
        return f"ComputedOp({self.name!r}, {_describe(self.fn)})"

    @classmethod
    def from_portable(cls, text: str) -> ComputedOp:
        """Rebuild the op that `portable` described (its function rebuilds the described tensors).

        Raises:
            TunekitError: `text` is not such a description.
        """
        try:
            d = json.loads(text)
            return cls.from_data(d["computation"], d["name"], d["outputs"])
        except (ValueError, KeyError, TypeError) as e:
            raise TunekitError(f"not a description of a computed op ({type(e).__name__}: {e})") from None

    @classmethod
    def from_data(cls, data: dict, name: str | None, outputs: int = 1) -> ComputedOp:
        """Make the op whose function rebuilds the tensors `data` describes (`te.to_data`).

        Raises:
            ArgumentError: a bad name or number of outputs.
        """
        def rebuild(**_):
            return te.from_data(data)
        rebuild.__qualname__ = f"the computation {name!r} rebuilt from its description"
        return cls(rebuild, name, outputs)

    def anchor_args(self, args: dict) -> dict:
        return args   # its args are the user's: none of them is an epilogue field

    def fuses_epilogue(self, args: dict) -> bool:
        return False

    def portable(self, args: dict) -> str:
        """Return plain data (JSON text) that rebuilds this op at `args` in a process without its function."""
        facts = self.facts(args)
        return json.dumps({"name": self.name, "outputs": self.num_outputs, "computation": facts.data},
                          sort_keys=True, separators=(",", ":"))

    def canonical(self, args: dict) -> dict:
        """Return `args` checked: keyword names with JSON scalar values (numpy scalars made plain).

        Raises:
            ArgumentError: naming the bad field, or sizes too large to count.
        """
        if not isinstance(args, dict):
            raise ArgumentError(f"computation {self.name!r}: args must be a dict of keyword arguments of "
                                f"{_describe(self.fn)}, got {type(args).__name__}")
        canon = {}
        for k, v in args.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise ArgumentError(f"computation {self.name!r}: args: key {k!r} is not a Python identifier (args "
                                    f"are passed to {_describe(self.fn)} as keywords)")
            v = v.item() if isinstance(v, np.generic) else v
            if not (v is None or isinstance(v, (bool, int, str)) or isinstance(v, float) and math.isfinite(v)):
                raise ArgumentError(f"computation {self.name!r}: args.{k}: must be a JSON scalar (int, float, str, "
                                    f"bool or None), got {type(v).__name__} {v!r}")
            canon[k] = v
        if problem := self.too_large(canon):
            raise ArgumentError(f"computation {self.name!r}: args: {problem}")
        return canon

    def key(self, args: dict) -> str:
        """Workload key: the structural hash of the computation at `args` (names left out)."""
        return self.facts(self.canonical(args)).key

    def facts(self, args: dict) -> _Facts:
        """Return the description, key, flops and longest reduction of the computation at `args` (cached)."""
        k = json.dumps(args, sort_keys=True)
        f = self._facts.get(k)
        if f is None:
            tensors = self._compute(**args)
            flops, longest = count(tensors)
            f = self._facts[k] = _Facts(te.to_data(tensors), te.structural_hash(tensors), flops, longest)
        return f

    def _compute(self, **args) -> list[Tensor]:
        where = _describe(self.fn)
        try:
            out = self.fn(**args)
        except TunekitError:
            raise
        except Exception as e:   # the user's function: name it and the args it was called with
            raise TunekitError(f"computation {self.name!r}: {where} failed when called with {args}: "
                               f"{type(e).__name__}: {e}") from e
        return check_tensors(out, self.num_outputs, f"computation {self.name!r}: {where}")

    def _reference(self, *inputs, **args) -> list[np.ndarray]:
        return te.evaluate(self._compute(**args), inputs)

    def _flops(self, **args) -> int:
        return self.facts(args).flops

    def _reduction_size(self, **args) -> int:
        return self.facts(args).reduction_size


def _describe(fn) -> str:
    qual = getattr(fn, "__qualname__", None) or repr(fn)
    if qual.startswith("the computation"):
        return qual
    module = getattr(fn, "__module__", None)
    return f"function {qual}" + (f" (module {module})" if module else "")


def check_tensors(out, outputs: int, who: str) -> list[Tensor]:
    """Return `out` as a list, if it is te tensors in kernel parameter order: placeholders that
    hold every input read, then `outputs` computed tensors, each once, of kernel dtypes.

    Raises:
        TunekitError: what is wrong with `out`, addressed to `who` (the function).
    """
    hint = "return a list of te tensors: its inputs (te.placeholder), then its outputs (te.compute)"
    if not isinstance(out, (list, tuple)):
        raise TunekitError(f"{who} returned a {type(out).__name__}; {hint}")
    out = list(out)
    for k, t in enumerate(out):
        if not isinstance(t, Tensor):
            raise TunekitError(f"{who} returned a {type(t).__name__} at position {k}; {hint}")
    if len(out) < outputs:
        raise TunekitError(f"{who} returned {len(out)} tensors, fewer than its {outputs} output(s); {hint}")
    n_in = len(out) - outputs
    for k, t in enumerate(out[n_in:], n_in):
        if not isinstance(t.op, ComputeOp):
            raise TunekitError(f"{who}: tensor {k} ({t.name}) is a placeholder, but the last {outputs} tensor(s) "
                               "must be outputs (te.compute); put the inputs first")
    for k, t in enumerate(out[:n_in]):
        if not isinstance(t.op, PlaceholderOp):
            more = all(isinstance(u.op, ComputeOp) for u in out[k:])
            raise TunekitError(f"{who}: tensor {k} ({t.name}) is computed, but all tensors before the last {outputs} "
                               "must be inputs (te.placeholder)" + (f"; if it is an output too, pass outputs="
                                                                    f"{len(out) - k}" if more else ""))
    for k, t in enumerate(out):
        if t in out[:k]:
            raise TunekitError(f"{who}: tensor {t.name} is returned twice")
        if t.dtype not in DTYPES:
            raise TunekitError(f"{who}: tensor {t.name} has dtype {t.dtype!r}; a kernel's arrays are one of "
                               f"{', '.join(DTYPES)} (te.compute's dtype is its body's: cast it)")
    for t in _reachable(out[n_in:]):
        if isinstance(t.op, PlaceholderOp) and t not in out:
            raise TunekitError(f"{who}: its outputs read placeholder {t.name}, which is not among the tensors it "
                               "returns; return every input, in the kernel's parameter order")
    return out


def _reachable(tensors) -> list[Tensor]:
    seen: dict[Tensor, None] = {}
    todo = list(tensors)
    while todo:
        t = todo.pop()
        if t not in seen:
            seen[t] = None
            if isinstance(t.op, ComputeOp):
                todo.extend(t.op.inputs)
    return list(seen)


def count(tensors) -> tuple[int, int]:
    """Count (floating-point operations, longest reduction) of computing `tensors`: the float
    arithmetic of each compute's body per element times its iteration space (a
    reduction's source and combiner over its reduction axes too)."""
    flops, longest = 0, 1
    for t in _reachable(tensors):
        op = t.op
        if not isinstance(op, ComputeOp):
            continue
        space = math.prod(a.extent for a in op.axis)
        if isinstance(op.body, Reduce):
            r = math.prod(a.extent for a in op.body.axes)
            longest = max(longest, r)
            flops += space * r * (_arith(op.body.source) + op.body.dtype.startswith("float"))   # the combiner's
        else:
            flops += space * _arith(op.body)
    return flops, longest


def _arith(e) -> int:
    """Float arithmetic operations in expression tree `e` (fma counts two)."""
    n = 0
    if isinstance(e, ir.BinOp) and e.op in _ARITH and e.dtype.startswith("float"):
        n = 1
    elif isinstance(e, ir.Call) and e.dtype.startswith("float"):
        n = 2 if e.fn == "fma" else 1
    return n + sum(_arith(c) for c in ir.children(e))
