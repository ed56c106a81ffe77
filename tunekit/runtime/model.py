"""A compiled network as data: its buffers, weights and kernel calls (the plan), run over
arrays allocated once. What `CompiledModel` runs in the compiler's process and what
`tunekit.runtime.load` runs from a saved file: the same calls on the same plan."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from tunekit.errors import ArgumentError
from tunekit.memory import empty
from tunekit.runtime.binding import KEPT, Binding, PlanError, end
from tunekit.runtime.dims import nearest, read, value

#: `plan` (a JSON-able dict), as `Model` reads it:
#:   buffers: [nbytes, ...]: the activation buffers, each allocated once and reused by tensors in turn
#:   inputs: {name: ref}, outputs: [[name, ref], ...], input_bounds: {name: bound} (token ids below it)
#:   kernels: [{symbol, template, flops, tuned, params: [[name, shape, dtype], ...], sizes}, ...]
#:   calls: [{kernel, layer, op, args: [ref, ...]}, ...]: in order; a kernel's arrays, inputs then outputs
#: where a ref is {"buffer": i, "offset": bytes, ...} or {"weight": i, ...} with "shape" and "dtype".
#: A model compiled for symbolic dimensions also has
#:   dims: {name: [lo, hi]}: each dimension's range (the buffers are sized for the largest)
#: and its shapes and offsets may be polynomials of them (`tunekit.runtime.dims`), its kernels'
#: "sizes" the dimensions each takes after its arrays; and, scheduled at several sizes,
#:   variants: [{at: {name: size}, kernels: [...]}, ...]: a set of kernels per sizes (the first is
#:   "kernels"); a call runs the set whose sizes are nearest its own.
PLAN_KEYS = ("buffers", "inputs", "outputs", "kernels", "calls")
__all__ = ["PLAN_KEYS", "Model", "PlanError"]


class Model:
    """A network's plan bound to its kernels: call it with its inputs (numpy arrays in the
    model's input order, or by name) to get its outputs (fresh arrays).

    Attributes:
        inputs: {name: (shape, dtype)}, in the model's order (a symbolic dimension by its name).
        dims: {name: (lo, hi)}: the symbolic dimensions a call may size, with their ranges.
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
            binders: per kernel of the plan, `bind(*arrays, sizes=()) -> call`: checks the arrays
                once and returns a call that runs the kernel on them (and on the int64 `sizes`).
        """
        self.plan = plan
        self._buffers = [empty((n,), "uint8") for n in plan["buffers"]]
        self._weights = list(weights)
        # the sets of kernels (one unless the model was scheduled at several sizes), and where each
        # set's binders start
        self._sets = plan.get("variants") or [{"at": {}, "kernels": plan["kernels"]}]
        self.peak_bytes = sum(plan["buffers"])
        self.weight_bytes = sum(w.nbytes for w in self._weights)
        self.dims = {name: (int(lo), int(hi)) for name, (lo, hi) in plan.get("dims", {}).items()}
        self.inputs = {name: (tuple(ref["shape"]), ref["dtype"]) for name, ref in plan["inputs"].items()}
        self.input_bounds = dict(plan.get("input_bounds", {}))
        self.output_names = [name for name, _ in plan["outputs"]]
        self._refs = {**plan["inputs"], **dict(plan["outputs"])}   # inputs and outputs by name
        self._bound: dict[tuple, tuple] = {}
        self._binding = Binding(plan, self._sets, binders, self._buffers, self._weights)
        # bound at the largest sizes until a call says others (what `profile` times before any call)
        self._inputs, self._outputs, self.calls = self._bind({d: hi for d, (_, hi) in self.dims.items()})

    @property
    def scheduled_at(self) -> dict[str, int]:
        """The sizes the kernels of the last call were scheduled for ({} for a model of static shapes)."""
        return dict(self._sets[self._set]["at"])

    def _bind(self, dims: dict[str, int], given: dict[int, np.ndarray] | None = None) -> tuple:
        """The input arrays, output arrays and bound calls at the dimensions `dims` (made once each):
        the calls of the kernels scheduled at the sizes nearest them; `given`: buffers (by index) that
        are a caller's arrays (`run`)."""
        self._dims = dims
        self._set = nearest([s["at"] for s in self._sets], dims) if len(self._sets) > 1 else 0
        addresses = {b: a.ctypes.data for b, a in (given or {}).items()}
        key = (tuple(dims.values()), *addresses.items())
        if key not in self._bound:
            if len(self._bound) >= KEPT:
                self._bound.pop(next(iter(self._bound)))
            array = lambda ref: self._binding.array(ref, dims, given)
            calls = [self._binding.call(k, self._set, dims, given, addresses) for k in range(len(self.plan["calls"]))]
            inputs = {name: array(ref) for name, ref in self.plan["inputs"].items()}
            outputs = [array(ref) for _, ref in self.plan["outputs"]]
            self._bound[key] = inputs, outputs, calls
        return self._bound[key]

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        given = {**dict(zip(self.inputs, args)), **named}
        if len(args) + len(named) != len(self.inputs) and not [n for n in given if n not in self.inputs]:
            raise ArgumentError(f"the model takes {len(self.inputs)} inputs ({', '.join(self.inputs)}), "
                                f"got {len(args) + len(named)}")
        return [o.copy() for o in self.run(given)]

    def run(self, inputs: dict[str, np.ndarray], arrays: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Run the model on `inputs` (by name: every input, copied into its buffer), reading and
        writing `arrays` in place (inputs or outputs by name: a generation loop's cache).

        Args:
            inputs: the inputs not in `arrays`, by name.
            arrays: inputs and outputs the call reads and writes where they are: each a C-contiguous
                numpy array of its dtype, its size at least the tensor's at this call's sizes (the
                leading bytes are used, as an array of its shape).
        Returns:
            the outputs, in order: the given arrays (of the call's shapes) and views of the model's
            buffers, which the next call overwrites.
        """
        arrays = arrays or {}
        given = {**inputs, **{n: a for n, a in arrays.items() if n in self.inputs}}
        if unknown := [name for name in given if name not in self.inputs]:
            raise ArgumentError(f"the model has no input {unknown[0]!r} (inputs: {', '.join(self.inputs)})")
        if missing := [name for name in self.inputs if name not in given]:
            raise ArgumentError(f"the model takes {len(self.inputs)} inputs ({', '.join(self.inputs)}); "
                                f"{', '.join(map(repr, missing))} not given")
        buffers = self._given(arrays)
        dims = read({n: s for n, (s, _) in self.inputs.items()}, given, self.dims) if self.dims else {}
        for name, a in arrays.items():
            if (need := end(self._refs[name], dims)) > a.nbytes:
                raise ArgumentError(f"{name!r}: the array given to run in place has {a.nbytes} bytes; the tensor it "
                                    f"holds needs {need} at sizes {dims}")
        self._inputs, self._outputs, self.calls = self._bind(dims, buffers)
        for name, value_ in inputs.items():
            buf = self._inputs[name]
            if np.shape(value_) != buf.shape or np.asarray(value_).dtype != buf.dtype:
                raise ArgumentError(f"input {name!r} must be a {buf.dtype} array of shape {list(buf.shape)}; got "
                                    f"{np.asarray(value_).dtype} of shape {list(np.shape(value_))}")
            buf[...] = value_
        for call in self.calls:
            call()
        return list(self._outputs)

    def _given(self, arrays: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
        """The buffers (by index) that `arrays` (inputs and outputs by name) stand for, as bytes."""
        refs, out = self._refs, {}
        for name, a in arrays.items():
            if name not in refs:
                raise ArgumentError(f"the model has no input or output {name!r} (inputs: {', '.join(self.inputs)}; "
                                    f"outputs: {', '.join(self.output_names)})")
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype == refs[name]["dtype"]):
                raise ArgumentError(f"{name!r}: give a C-contiguous {refs[name]['dtype']} numpy array to run in place")
            b, data = refs[name]["buffer"], a.reshape(-1).view("uint8")
            if b in out and out[b].ctypes.data != data.ctypes.data:
                raise ArgumentError(f"{name!r} shares its buffer with another input or output given (a past and its "
                                    "present: a model compiled for generation): give arrays that start at one address")
            out[b] = data if b not in out or data.nbytes > out[b].nbytes else out[b]   # the larger of the two
        return out

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
            kernel = self._sets[self._set]["kernels"][c["kernel"]]
            rows.append({"layer": c["layer"], "op": c["op"], "template": kernel["template"], "seconds": s,
                         "in_run": float(np.median([run[k] for run in runs])),
                         "gflops": value(kernel["flops"], self._dims) / s / 1e9,
                         "tuned": kernel["tuned"]})
        return rows


def _seconds(call) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0
