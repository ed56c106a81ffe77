"""A compiled network as data: its buffers, weights and kernel calls (the plan), run over
arrays allocated once. What `CompiledModel` runs in the compiler's process and what
`tunekit.runtime.load` runs from a saved file: the same calls on the same plan."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from tunekit.errors import ArgumentError, TunekitError
from tunekit.memory import empty

#: `plan` (a JSON-able dict), as `Model` reads it:
#:   buffers: [nbytes, ...]: the activation buffers, each allocated once and reused by tensors in turn
#:   inputs: {name: ref}, outputs: [[name, ref], ...], input_bounds: {name: bound} (token ids below it)
#:   kernels: [{symbol, template, flops, tuned, params: [[name, shape, dtype], ...]}, ...]
#:   calls: [{kernel, layer, op, args: [ref, ...]}, ...]: in order; a kernel's arrays, inputs then outputs
#: where a ref is {"buffer": i, "offset": bytes, ...} or {"weight": i, ...} with "shape" and "dtype".
PLAN_KEYS = ("buffers", "inputs", "outputs", "kernels", "calls")


class PlanError(TunekitError, ValueError):
    """A plan that does not hold together (a corrupt file): it would read or write out of bounds."""


class Model:
    """A network's plan bound to its kernels: call it with its inputs (numpy arrays in the
    model's input order, or by name) to get its outputs (fresh arrays).

    Attributes:
        inputs: {name: (shape, dtype)}, in the model's order.
        input_bounds: {name: bound} of integer inputs that index a table (token ids are below it).
        output_names: the names of the outputs a call returns, in order.
        peak_bytes: bytes of the activation buffers (weights apart), reused across layers.
        weight_bytes: bytes of the weights it holds (in the layouts its kernels read).
    """

    def __init__(self, plan: dict, weights: Sequence[np.ndarray], binders: Sequence[Callable]):
        """Allocate the plan's buffers and bind its calls.

        Args:
            plan: the plan (see `PLAN_KEYS`).
            weights: the weights' bytes (flat uint8 arrays, 64-byte aligned), by the plan's weight index.
            binders: per kernel of the plan, `bind(*arrays) -> call`: checks the arrays once and
                returns a call that runs the kernel on them.
        """
        self.plan = plan
        self._buffers = [empty((n,), "uint8") for n in plan["buffers"]]
        self._weights = list(weights)
        self.peak_bytes = sum(plan["buffers"])
        self.weight_bytes = sum(w.nbytes for w in self._weights)
        self._inputs = {name: self._array(ref) for name, ref in plan["inputs"].items()}
        self.inputs = {name: (a.shape, str(a.dtype)) for name, a in self._inputs.items()}
        self.input_bounds = dict(plan.get("input_bounds", {}))
        self._outputs = [self._array(ref) for _, ref in plan["outputs"]]
        self.output_names = [name for name, _ in plan["outputs"]]
        self.calls = [binders[c["kernel"]](*map(self._array, c["args"])) for c in plan["calls"]]

    def _array(self, ref: dict) -> np.ndarray:
        base = self._buffers[ref["buffer"]] if "buffer" in ref else self._weights[ref["weight"]]
        dtype = np.dtype(ref["dtype"])
        start = ref.get("offset", 0)
        stop = start + int(np.prod(ref["shape"], dtype=np.int64)) * dtype.itemsize
        if not 0 <= start <= stop <= base.nbytes:
            raise PlanError(f"an array of the plan ({ref}) lies outside its buffer of {base.nbytes} bytes")
        return base[start:stop].view(dtype).reshape(ref["shape"])

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        for name, value in {**dict(zip(self._inputs, args)), **named}.items():
            if name not in self._inputs:
                raise ArgumentError(f"the model has no input {name!r} (inputs: {', '.join(self._inputs)})")
            buf = self._inputs[name]
            if np.shape(value) != buf.shape or np.asarray(value).dtype != buf.dtype:
                raise ArgumentError(f"input {name!r} must be a {buf.dtype} array of shape {list(buf.shape)}; got "
                                    f"{np.asarray(value).dtype} of shape {list(np.shape(value))}")
            buf[...] = value
        if len(args) + len(named) != len(self._inputs):
            raise ArgumentError(f"the model takes {len(self._inputs)} inputs ({', '.join(self._inputs)}), "
                                f"got {len(args) + len(named)}")
        for call in self.calls:
            call()
        return [o.copy() for o in self._outputs]

    def profile(self, repeat: int = 10) -> list[dict]:
        """Time every layer on the current buffers, the median of `repeat` runs after one warm-up:
        alone, run after run ("seconds", as tuning timed it: its data and weights in cache), and
        within whole runs of the network ("in_run": its data and weights where the layers
        before it left them; the gap between the two is memory traffic)."""
        runs = [[_seconds(call) for call in self.calls] for _ in range(repeat + 1)][1:]   # after a warm-up run
        rows = []
        for k, (call, c) in enumerate(zip(self.calls, self.plan["calls"])):
            call()
            s = float(np.median([_seconds(call) for _ in range(repeat)]))
            kernel = self.plan["kernels"][c["kernel"]]
            rows.append({"layer": c["layer"], "op": c["op"], "template": kernel["template"], "seconds": s,
                         "in_run": float(np.median([run[k] for run in runs])), "gflops": kernel["flops"] / s / 1e9,
                         "tuned": kernel["tuned"]})
        return rows


def _seconds(call) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0
