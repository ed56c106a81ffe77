"""A plan's kernel calls bound to arrays, each made once for what it depends on: a call is
bound again only when the dimensions it reads, or the arrays a caller gives for its buffers,
change, and then, where its arrays are its kernel's parameters shape for shape, by handing
its kernel the new sizes (and addresses) alone (`host.resized`): a generation step binds its
attention anew at a new cache length, its matmuls not at all."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tunekit.errors import TunekitError
from tunekit.runtime.dims import growing, names, value
from tunekit.runtime.dims import shape as dims_shape
from tunekit.runtime.host import resized

#: how many bindings each call keeps (a generation loop's recent lengths)
KEPT = 8


class PlanError(TunekitError, ValueError):
    """A plan that does not hold together (a corrupt file): it would read or write out of bounds."""


class Binding:
    """The calls of a plan (`tunekit.runtime.model.PLAN_KEYS`) on its buffers and weights.

    Args:
        plan: the plan.
        sets: its sets of kernels (one unless it was scheduled at several sizes).
        binders: per kernel of every set in turn, `bind(*arrays, sizes=()) -> call`.
        buffers, weights: the plan's buffers and weights (flat uint8 arrays).
    """

    def __init__(self, plan: dict, sets: list[dict], binders: Sequence[Callable], buffers: list[np.ndarray],
                 weights: list[np.ndarray]):
        self.plan, self.sets, self.binders, self.buffers, self.weights = plan, sets, list(binders), buffers, weights
        self.first = [sum(len(s["kernels"]) for s in sets[:k]) for k in range(len(sets))]
        self.addresses = [b.ctypes.data for b in buffers]
        dims = set(plan.get("dims", {}))
        # per call: the dimensions it reads (its arrays' shapes and offsets, its kernels' sizes), the
        # buffers it reads and writes, and its bound calls by those
        read = [{d for s in sets for d in s["kernels"][c["kernel"]].get("sizes", ())} |
                names(*(x for r in c["args"] for x in (*r["shape"], r.get("offset", 0)))) for c in plan["calls"]]
        self.reads = [sorted(dims & r) for r in read]
        self.held = [sorted({r["buffer"] for r in c["args"] if "buffer" in r}) for c in plan["calls"]]
        self.calls: list[dict] = [{} for _ in plan["calls"]]
        # a call whose arrays are its kernels' parameters, shape for shape, is bound at other sizes by
        # giving its kernel the new sizes and, where they moved, its arrays' addresses
        self.by_start: list[dict] = [{} for _ in plan["calls"]]   # by the given arrays it holds, and the last
        self.same_shapes = [all(r["shape"] == p[1] for s in sets
                                for r, p in zip(c["args"], s["kernels"][c["kernel"]]["params"]))
                            for c in plan["calls"]]
        # ... and where its arrays start at fixed offsets and grow with the dimensions (no term below 0),
        # they start where they did and fit their buffers at every size in range (as at the largest)
        self.fixed = [all(isinstance(r.get("offset", 0), int) and growing(*r["shape"]) for r in c["args"])
                      for c in plan["calls"]]

    def call(self, k: int, kernels: int, dims: dict[str, int], given: dict | None, addresses: dict[int, int]):
        """Call `k` of the plan with the set of kernels `kernels`, at `dims`, `given` (buffer index ->
        a caller's bytes, at `addresses`) standing for the plan's buffers."""
        held = self.held[k]
        key = (kernels, *(dims[d] for d in self.reads[k]), *(addresses.get(b) for b in held))
        if (call := self.calls[k].get(key)) is None:
            if len(self.calls[k]) >= KEPT:
                self.calls[k].pop(next(iter(self.calls[k])))
            c = self.plan["calls"][k]
            kernel = self.sets[kernels]["kernels"][c["kernel"]]
            sizes = [dims[d] for d in kernel.get("sizes", ())]
            where = (kernels, *(addresses.get(b) for b in held))
            if self.same_shapes[k] and self.fixed[k] and (last := self.by_start[k].get(where)):
                call = resized(last, sizes)   # its arrays where they were
            elif self.same_shapes[k] and (last := self.by_start[k].get(kernels)) and \
                    None not in (starts := [self.start(r, dims, given, addresses) for r in c["args"]]):
                call = resized(last, sizes, starts)   # its arrays elsewhere in their buffers (checked there)
            else:
                call = self.binders[self.first[kernels] + c["kernel"]](
                    *(self.array(r, dims, given) for r in c["args"]), **({"sizes": sizes} if sizes else {}))
            self.calls[k][key] = call
            if len(self.by_start[k]) >= KEPT:
                self.by_start[k].pop(next(iter(self.by_start[k])))
            self.by_start[k][kernels] = self.by_start[k][where] = call
        return call

    def start(self, ref: dict, dims: dict[str, int], given: dict | None, addresses: dict[int, int]) -> int | None:
        """The address where `ref` starts at `dims`, or None if it would not fit its buffer (which `array` tells)."""
        if "weight" in ref:
            return self.weights[ref["weight"]].ctypes.data
        base = given[ref["buffer"]] if given and ref["buffer"] in given else self.buffers[ref["buffer"]]
        start = value(ref.get("offset", 0), dims)
        return addresses.get(ref["buffer"], self.addresses[ref["buffer"]]) + start \
            if 0 <= start <= end(ref, dims) <= base.nbytes else None

    def array(self, ref: dict, dims: dict[str, int], given: dict[int, np.ndarray] | None = None) -> np.ndarray:
        """The array of `ref` at `dims` (PlanError if it lies outside its buffer)."""
        if "weight" in ref:
            base = self.weights[ref["weight"]]
        else:
            base = given[ref["buffer"]] if given and ref["buffer"] in given else self.buffers[ref["buffer"]]
        start, stop = value(ref.get("offset", 0), dims), end(ref, dims)
        if not 0 <= start <= stop <= base.nbytes:
            raise PlanError(f"an array of the plan ({ref}) lies outside its buffer of {base.nbytes} bytes")
        return base[start:stop].view(ref["dtype"]).reshape(dims_shape(ref["shape"], dims))


def end(ref: dict, dims: dict[str, int]) -> int:
    """Where the array of `ref` ends in its buffer, in bytes, at `dims`."""
    size = math.prod(dims_shape(ref["shape"], dims)) * np.dtype(ref["dtype"]).itemsize
    return value(ref.get("offset", 0), dims) + size
