"""Whole networks: the distinct tasks of a model file, and a compiled model that runs
it as a flat plan of tuned kernels over buffers allocated once and reused."""
from __future__ import annotations

import json
import time
import warnings
from collections.abc import Sequence
from contextlib import closing, nullcontext
from pathlib import Path

import numpy as np

from tunekit.deploy.kernels import Kernel, kernel_of
from tunekit.deploy.plan import NetworkPlan, computed, node_error
from tunekit.errors import ArgumentError, ModelError, TunekitError
from tunekit.graph import Graph
from tunekit.memory import empty
from tunekit.plugin.registry import make_component, registry
from tunekit.store.database import Database


def load_graph(path: str) -> Graph:
    """Read a model file with the frontend that takes its suffix; every node's args are valid
    (else a ModelError naming the file and the node)."""
    suffix = Path(path).suffix.lower()
    table = registry().components["frontend"]
    for entry in table.values():
        if suffix in entry.obj.suffixes:
            if why := entry.obj.available():
                raise ModelError(f"{path}: the {entry.obj.name!r} frontend cannot run here: {why}")
            return _checked(entry.obj().load(str(path)), str(path))
    known = ", ".join(f"{s} ({e.obj.name})" for e in table.values() for s in e.obj.suffixes) or "none"
    raise ModelError(f"{path}: no frontend reads {suffix or 'files without a suffix'} files (installed: {known})")


def _checked(graph: Graph, path: str) -> Graph:
    graph.source = graph.source or path
    try:
        graph.check()
    except ValueError as e:
        raise ModelError(f"{path}: {e}") from None
    for node in [n for n in graph.nodes if not n.call]:   # a te call: made a computation, and checked, by the plan
        try:
            if node.computation is None:
                registry().op(node.op).canonical(node.args)
            else:
                computed(node.op, json.dumps(node.computation, sort_keys=True))
        except ArgumentError as e:
            raise node_error(graph, node, f"{e}; these args come from the model's tensor sizes: export it with "
                             "sizes the op takes") from None
        except TunekitError as e:   # an op no plugin provides
            raise node_error(graph, node, str(e)) from None
    return graph


def extract_tasks(path: str, target="x86", search_layouts: bool = False,
                  passes: Sequence[str] | None = None, precision: str = "float32") -> list[tuple]:
    """Return the distinct tuning tasks of the model at `path` on `target`, each with how
    many times the network runs it, in order of first use. Fused variants of one op
    and shape count as one task: they share its config space and records. The tasks
    are in the layouts `compile_model` runs them in (`passes`: the passes run, of
    `tunekit.deploy.plan.PASSES`; None: all), with the alternatives a layer may run
    (Winograd for 3x3 stride-1 convs, mbconv for inverted residuals); with
    `search_layouts`, also in the other channel blocks the graph tuner may pick."""
    return NetworkPlan(load_graph(path), make_component("target", target), passes=passes,
                       precision=precision).tasks(search_layouts)


class CompiledModel:
    """A network compiled for one target: call it with its inputs (numpy arrays in the
    model's input order, or by name) to get its outputs (fresh arrays).

    Attributes:
        graph: the Graph it runs.
        fallback: the tasks that had no record and run a default config.
        peak_bytes: bytes of the activation buffers (weights apart), reused across layers.
        weight_bytes: bytes of the weights it holds (in the layouts its kernels read).
    """

    def __init__(self, graph: Graph, target, database: str | None = None, passes: Sequence[str] | None = None,
                 precision: str = "float32"):
        with closing(Database(database, readonly=True)) if database else nullcontext() as db:
            plan = NetworkPlan(graph, target, db, passes, precision)
            self.graph, self.target = plan.compiled(), target
            kernels: dict[str, Kernel] = {}   # one per distinct (fused) task
            for node in self.graph.nodes:
                if (task := plan.task(node)).key not in kernels:
                    kernels[task.key] = kernel_of(task, target, plan.best(task))
        tasks = {k.task.anchor().name for k in kernels.values()}
        self.fallback = sorted({k.task.anchor().name for k in kernels.values() if not k.tuned})
        if self.fallback:
            warnings.warn(f"{len(self.fallback)} of the network's {len(tasks)} tasks have no tuning record and "
                          f"run a default config: {'; '.join(self.fallback)}; tune them (a recipe task "
                          "`model = ...` tunes them all)", stacklevel=3)
        self._bind([kernels[plan.task(node).key] for node in self.graph.nodes])

    def _bind(self, kernels: list[Kernel]) -> None:
        """Allocate aligned buffers once (an activation's buffer is reused after its last reader, so
        about the two largest activations are live at once) and write the flat list of calls
        bound to them; `kernels` are the nodes' kernels, in order. A view lives in its base's
        buffer, which lives from the first write of it or a view of it to the last read."""
        g = self.graph
        last = {g.base(name): k for k, node in enumerate(g.nodes) for name in node.inputs}
        # the weights the nodes read (a frontend or layout pass may leave replaced ones in the graph)
        consts = {name: _aligned(g.constants[name]) for name in [*last, *g.outputs] if name in g.constants}
        self.weight_bytes = sum(a.nbytes for a in consts.values())
        free: list[np.ndarray] = []        # bytes past their last reader, the most recently freed last
        raw: dict[str, np.ndarray] = {}     # tensor -> the bytes it lives at the start of
        self.peak_bytes = 0

        def array(name: str, shape: tuple, dtype: str) -> np.ndarray:
            """Tensor `name` as an array of `shape` (the same size as it has), allocated on first use."""
            if name in consts:
                return consts[name].reshape(shape)
            size, itemsize = int(np.prod(shape)), np.dtype(dtype).itemsize
            base, offset = (g.views[name][:2]) if name in g.views else (name, 0)
            if base not in raw:
                nbytes = int(np.prod(g.shapes[base])) * itemsize if base != name else size * itemsize
                fits = [k for k, b in enumerate(free) if b.size >= nbytes]
                if fits:   # the smallest that fits; of equals, the most recently freed (still in cache)
                    raw[base] = free.pop(min(fits, key=lambda k: (free[k].size, -k)))
                else:
                    raw[base] = empty((nbytes,), "uint8")
                    self.peak_bytes += nbytes
            start = offset * itemsize
            return raw[base][start:start + size * itemsize].view(dtype).reshape(shape)

        kept = {g.base(o) for o in g.outputs} | set(consts)   # never reused
        self._inputs = {name: array(name, shape, dtype) for name, (shape, dtype) in g.inputs.items()}
        self.calls, self.layers = [], list(zip(g.nodes, kernels))
        for k, (node, kernel) in enumerate(self.layers):
            # a tensor may be read in another shape of the same size (a Flatten before a Gemm): a view
            args = [array(name, shape, dtype) for name, (_, shape, dtype) in zip(node.inputs, kernel.params)]
            args.append(array(node.output, *kernel.params[-1][1:]))
            self.calls.append(kernel.bind(*args))   # checked once: the plan's arrays never change
            free += [raw[b] for b in {g.base(name) for name in node.inputs} if last.get(b) == k and b not in kept]
        outs = {node.output: kernel.params[-1] for node, kernel in self.layers}
        shapes = g.output_shapes or [outs[name][1] for name in g.outputs]
        self._outputs = [array(name, shape, outs[name][2] if name in outs else str(g.constants[name].dtype))
                         for name, shape in zip(g.outputs, shapes)]

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        for name, value in {**dict(zip(self.graph.inputs, args)), **named}.items():
            if name not in self._inputs:
                raise ArgumentError(f"the model has no input {name!r} (inputs: {', '.join(self.graph.inputs)})")
            buf = self._inputs[name]
            if np.shape(value) != buf.shape or np.asarray(value).dtype != buf.dtype:
                raise ArgumentError(f"input {name!r} must be a {buf.dtype} array of shape {list(buf.shape)}; got "
                                    f"{np.asarray(value).dtype} of shape {list(np.shape(value))}")
            buf[...] = value
        if len(args) + len(named) != len(self._inputs):
            raise ArgumentError(f"the model takes {len(self._inputs)} inputs ({', '.join(self.graph.inputs)}), "
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
        for k, (call, (node, kernel)) in enumerate(zip(self.calls, self.layers)):
            call()
            s = float(np.median([_seconds(call) for _ in range(repeat)]))
            rows.append({"layer": node.name or node.output, "op": node.op, "template": kernel.template, "seconds": s,
                         "in_run": float(np.median([run[k] for run in runs])), "gflops": kernel.task.flops / s / 1e9,
                         "tuned": kernel.tuned})
        return rows


def _seconds(call) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def _aligned(value: np.ndarray) -> np.ndarray:
    out = empty(value.shape, "uint8" if value.dtype == bool else str(value.dtype))
    out[...] = value
    return out


def compile_model(path: str, target="x86", database: str | None = None,
                  passes: Sequence[str] | None = None, precision: str = "float32") -> CompiledModel:
    """Compile the model at `path` for `target` with the best configs in `database`
    (a default config, with one warning listing them, for tasks without a record).

    Args:
        passes: the graph passes to run, by name (`tunekit.deploy.plan.PASSES`; None: all):
            leave one out to see what it buys.
        precision: "float32", or "bf16": matmuls and convolutions of constant weights on bfloat16
            data and weights with float32 accumulation (tune with the same precision: a model entry's `precision`).
    Returns:
        a CompiledModel: `outputs = net(x)`.
    """
    return CompiledModel(load_graph(path), make_component("target", target), database, passes, precision)
