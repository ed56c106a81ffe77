"""Whole networks: the distinct tasks of a model file, and a compiled model that runs
it as a flat plan of tuned kernels over buffers allocated once and reused."""
from __future__ import annotations

import functools
import json
import time
import warnings
from pathlib import Path

import numpy as np

from tunekit.deploy.algorithms import alternatives, choose, fusions
from tunekit.deploy.kernels import Kernel, build
from tunekit.deploy.layouts import choose_layouts, layout_tasks
from tunekit.errors import ArgumentError, ModelError, TunekitError
from tunekit.graph import Graph
from tunekit.graph.layout import block_activations, pack_panels
from tunekit.memory import empty
from tunekit.ops.computed import ComputedOp
from tunekit.plugin.registry import make_component, registry
from tunekit.plugin.registry import task as make_task
from tunekit.store.database import Database
from tunekit.task import Task


def load_graph(path: str) -> Graph:
    """Read a model file with the frontend that takes its suffix."""
    suffix = Path(path).suffix.lower()
    table = registry().components["frontend"]
    for entry in table.values():
        if suffix in entry.obj.suffixes:
            why = entry.obj.available()
            if why:
                raise ModelError(f"{path}: the {entry.obj.name!r} frontend cannot run here: {why}")
            return _checked(entry.obj().load(str(path)), str(path))
    known = ", ".join(f"{s} ({e.obj.name})" for e in table.values() for s in e.obj.suffixes) or "none"
    raise ModelError(f"{path}: no frontend reads {suffix or 'files without a suffix'} files (installed: {known})")


def node_task(node) -> Task:
    """The Task a graph node runs: its op at its args, or its own computation."""
    if node.computation is None:
        return make_task(node.op, node.args)
    return _computed(node.op, json.dumps(node.computation, sort_keys=True))


@functools.lru_cache(maxsize=4096)
def _computed(name: str, data: str) -> Task:
    # a network repeats its groups (a transformer's layers): hash each computation once
    return registry().computed_task(ComputedOp.from_data(json.loads(data), name), {})


def blocked_ops(target) -> set[str]:
    """The ops that a template schedules in blocked layouts ("NCHW{b}c") on `target`."""
    return {t.op for t in registry().templates if t.blocked and t.serves(target)}


def _node_error(graph: Graph, node, why: str) -> ModelError:
    return ModelError(f"{graph.source or 'the model'}: node {node.name or node.output!r} ({node.kind or node.op}): "
                      f"{why}")


def _checked(graph: Graph, path: str) -> Graph:
    """`graph` read from `path`, which it now names; every node's args are valid (else a
    ModelError naming the file and the node)."""
    graph.source = graph.source or path
    try:
        graph.check()
    except ValueError as e:
        raise ModelError(f"{path}: {e}") from None
    for node in graph.nodes:
        try:
            node_task(node)
        except ArgumentError as e:
            raise _node_error(graph, node, f"{e}; these args come from the model's tensor sizes: export it with "
                              "sizes the op takes") from None
        except TunekitError as e:   # an op no plugin provides
            raise _node_error(graph, node, str(e)) from None
    return graph


def layout_block(target) -> int:
    """The channel block a network's activations take on `target`: its float32 vector
    lanes where a template schedules blocked layouts for it, else 0 (plain NCHW)."""
    return target.device().lanes("float32") if blocked_ops(target) else 0


def node_shapes(graph: Graph) -> dict[str, tuple]:
    """The output shape of every node of `graph`, by output name."""
    out = {}
    for node in graph.nodes:
        task = node_task(node)
        out[node.output] = task.op.output_shapes(task.args)[0][0]
    return out


def panel_width(target) -> int:
    """The column panel of constant matmul weights on `target`: two float32 vectors where a
    template takes packed weights there (`Template.panels`), else 0 (weights as they are)."""
    takes = any(t.panels and t.op == "matmul" and t.serves(target) for t in registry().templates)
    return 2 * target.device().lanes("float32") if takes else 0


def _prepared(graph: Graph, target) -> Graph:
    """`graph` checked against `target` (a ModelError naming the file and the node where it
    cannot run a node: its dtype, its memory), its constant matmul weights packed."""
    seen = set()
    for node in graph.nodes:
        task = node_task(node)
        if task.key not in seen and (why := target.check_task(task)):
            raise _node_error(graph, node, why)
        seen.add(task.key)
    nv = panel_width(target)
    return pack_panels(graph, nv) if nv else graph


def for_target(graph: Graph, target, db: Database | None = None) -> Graph:
    """`graph` in the activation layout `target` runs best, its constant matmul weights
    packed (`panel_width`); a ModelError naming the file and the node if `target` cannot
    run a node. The layout: channel blocks of `layout_block`, or with `db`, the blocks
    per tensor that the graph tuner picks by the records (`tunekit.deploy.layouts`)."""
    return _blocked(_prepared(graph, target), target, db)


def _blocked(graph: Graph, target, db: Database | None) -> Graph:
    """`for_target`'s layout step, on a `_prepared` graph."""
    b = layout_block(target)
    if not b:
        return graph
    shapes, ops = node_shapes(graph), blocked_ops(target)
    blocks = choose_layouts(graph, b, shapes, ops, target, db) if db is not None else None
    out = block_activations(graph, b, shapes, ops, blocks)
    out.source = graph.source
    return out


def graph_tasks(graph: Graph, target=None) -> list[tuple[Task, int]]:
    """The distinct tuning tasks of `graph` with how many times it runs each, in order of first
    use; with `target`, each followed by the alternatives a layer may run instead there, and
    then the fused chains' (`tunekit.deploy.algorithms`), which `compile_model` picks from
    by their records."""
    on = target is not None
    tasks = [t for node in graph.nodes for t in [node_task(node), *(alternatives(node, target) if on else [])]]
    found: dict[str, list] = {}
    for task in [*tasks, *(fusions(graph, target).values() if on else [])]:
        task = task.anchor()
        found.setdefault(task.key, [task, 0])[1] += 1
    return [(t, n) for t, n in found.values()]


def network_tasks(graph: Graph, target, search_layouts: bool = False) -> list[tuple[Task, int]]:
    """`graph_tasks` of `graph` (as loaded) on `target`; with `search_layouts`, followed by
    the tasks of the other channel blocks its layers may take (once each), from whose
    records `compile_model` picks a layout per tensor (`tunekit.deploy.layouts`)."""
    prepared = _prepared(graph, target)
    tasks = graph_tasks(_blocked(prepared, target, None), target)
    b = layout_block(target)
    if search_layouts and b:
        seen = {t.key for t, _ in tasks}
        for task in layout_tasks(prepared, b, node_shapes(prepared), blocked_ops(target), target):
            if (task := task.anchor()).key not in seen:
                seen.add(task.key)
                tasks.append((task, 1))
    return tasks


def extract_tasks(path: str, target="x86", search_layouts: bool = False) -> list[tuple[Task, int]]:
    """Return the distinct tuning tasks of the model at `path` on `target`, each with how
    many times the network runs it, in order of first use. Fused variants of one op
    and shape count as one task: they share its config space and records. The tasks
    are in the activation layout the target runs (blocked on CPUs: `layout_block`),
    the layout `compile_model` runs them in, with the alternatives a layer may run
    (Winograd for 3x3 stride-1 convs: `tunekit.deploy.algorithms`); with
    `search_layouts`, also in the other channel blocks the graph tuner may pick."""
    tgt = make_component("target", target)
    return network_tasks(load_graph(path), tgt, search_layouts)


class CompiledModel:
    """A network compiled for one target: call it with its inputs (numpy arrays in the
    model's input order, or by name) to get its outputs (fresh arrays).

    Attributes:
        graph: the Graph it runs.
        fallback: the tasks that had no record and run a default config.
        peak_bytes: bytes of the activation buffers (weights apart), reused across layers.
        weight_bytes: bytes of the weights it holds (in the layouts its kernels read).
    """

    def __init__(self, graph: Graph, target, database: str | None = None):
        db = Database(database, readonly=True) if database else None
        try:
            graph = choose(for_target(graph, target, db), target, db)
            self.graph, self.target = graph, target
            keys = [node_task(node).key for node in graph.nodes]
            kernels: dict[str, Kernel] = {}   # one per distinct (fused) task
            for node, key in zip(graph.nodes, keys):
                if key not in kernels:
                    kernels[key] = build(node_task(node), target=target, database=db)
        finally:
            if db is not None:
                db.close()
        tasks = {k.task.anchor().name for k in kernels.values()}
        self.fallback = sorted({k.task.anchor().name for k in kernels.values() if not k.tuned})
        if self.fallback:
            warnings.warn(f"{len(self.fallback)} of the network's {len(tasks)} tasks have no tuning record and "
                          f"run a default config: {'; '.join(self.fallback)}; tune them (a recipe task "
                          "`model = ...` tunes them all)", stacklevel=3)
        self._plan([kernels[key] for key in keys])

    def _plan(self, kernels: list[Kernel]) -> None:
        """Allocate aligned buffers once (an activation's buffer is reused after its last reader, so
        about the two largest activations are live at once) and write the flat list of calls
        bound to them; `kernels` are the nodes' kernels, in order. A view lives in its base's
        buffer, which lives from the first write of it or a view of it to the last read."""
        g = self.graph
        last = {}
        for k, node in enumerate(g.nodes):
            for name in node.inputs:
                last[g.base(name)] = k
        # the weights the nodes read (a frontend or layout pass may leave replaced ones in the graph)
        consts = {name: _aligned(g.constants[name]) for name in [*last, *g.outputs] if name in g.constants}
        self.weight_bytes = sum(a.nbytes for a in consts.values())
        free: list[np.ndarray] = []        # bytes past their last reader, the most recently freed last
        raw: dict[str, np.ndarray] = {}     # tensor -> the bytes it lives at the start of
        self.peak_bytes = 0

        def allocate(name: str, nbytes: int) -> np.ndarray:
            fits = [k for k, b in enumerate(free) if b.size >= nbytes]
            if fits:   # the smallest that fits; of equals, the most recently freed (still in cache)
                raw[name] = free.pop(min(fits, key=lambda k: (free[k].size, -k)))
            else:
                raw[name] = empty((nbytes,), "uint8")
                self.peak_bytes += nbytes
            return raw[name]

        def array(name: str, shape: tuple, dtype: str) -> np.ndarray:
            """Tensor `name` as an array of `shape` (the same size as it has), allocated on first use."""
            if name in consts:
                return consts[name].reshape(shape)
            size, itemsize = int(np.prod(shape)), np.dtype(dtype).itemsize
            base, offset = (g.views[name][:2]) if name in g.views else (name, 0)
            if base not in raw:
                allocate(base, int(np.prod(g.shapes[base])) * itemsize if base != name else size * itemsize)
            start = offset * itemsize
            return raw[base][start:start + size * itemsize].view(dtype).reshape(shape)

        kept = {g.base(o) for o in g.outputs} | set(consts)   # never reused
        self._inputs = {name: array(name, shape, dtype) for name, (shape, dtype) in g.inputs.items()}
        self.calls, self.layers = [], []
        for k, (node, kernel) in enumerate(zip(g.nodes, kernels)):
            # a tensor may be read in another shape of the same size (a Flatten before a Gemm): a view
            args = [array(name, shape, dtype) for name, (_, shape, dtype) in zip(node.inputs, kernel.params)]
            args.append(array(node.output, *kernel.params[-1][1:]))
            kernel._check(args)   # once: the plan's arrays never change
            bind = getattr(kernel.fn, "bind", None)
            self.calls.append(bind(*args) if bind else functools.partial(kernel.fn, *args))
            self.layers.append((node, kernel))
            for base in {g.base(name) for name in node.inputs}:
                if last.get(base) == k and base not in kept:
                    free.append(raw[base])
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
        within: list[list[float]] = [[] for _ in self.calls]
        for k in range(repeat + 1):
            for call, times in zip(self.calls, within):
                t0 = time.perf_counter()
                call()
                if k:
                    times.append(time.perf_counter() - t0)
        rows = []
        for call, (node, kernel), runs in zip(self.calls, self.layers, within):
            call()
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            s = float(np.median(times))
            rows.append({"layer": node.name or node.output, "op": node.op, "template": kernel.template, "seconds": s,
                         "in_run": float(np.median(runs)), "gflops": kernel.task.flops / s / 1e9,
                         "tuned": kernel.tuned})
        return rows


def _aligned(value: np.ndarray) -> np.ndarray:
    out = empty(value.shape, "uint8" if value.dtype == bool else str(value.dtype))
    out[...] = value
    return out


def compile_model(path: str, target="x86", database: str | None = None) -> CompiledModel:
    """Compile the model at `path` for `target` with the best configs in `database`
    (a default config, with one warning listing them, for tasks without a record).

    Returns:
        a CompiledModel: `outputs = net(x)`.
    """
    return CompiledModel(load_graph(path), make_component("target", target), database)
