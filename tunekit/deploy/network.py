"""Whole networks: the distinct tasks of a model file, and a compiled model that runs
it as a flat plan of tuned kernels over buffers allocated once and reused."""
from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from contextlib import closing, nullcontext
from pathlib import Path

from tunekit._version import __version__
from tunekit.deploy import symbolic
from tunekit.deploy.kernels import build_all, builders, choice, loaded
from tunekit.deploy.layout import lay_out
from tunekit.deploy.plan import NetworkPlan, computed, node_error
from tunekit.errors import ArgumentError, ModelError, TunekitError
from tunekit.graph import Graph
from tunekit.plugin.registry import make_component, registry
from tunekit.runtime import artifact
from tunekit.runtime.model import Model
from tunekit.store.database import Database


def load_graph(path: str, dims: dict[str, int] | None = None) -> Graph:
    """Read a model file with the frontend that takes its suffix, its symbolic dimensions at the
    sizes `dims` gives; every node's args are valid (else a ModelError naming the file and the node)."""
    suffix = Path(path).suffix.lower()
    table = registry().components["frontend"]
    for entry in table.values():
        if suffix in entry.obj.suffixes:
            if why := entry.obj.available():
                raise ModelError(f"{path}: the {entry.obj.name!r} frontend cannot run here: {why}")
            return _checked(entry.obj().load(str(path), dims) if dims else entry.obj().load(str(path)), str(path))
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


def planned(graph: Graph, target, db, passes, precision) -> tuple[Graph, list, list[int]]:
    """The graph after the passes, its distinct kernels as (task space, config index, tuned), and
    per node the index of its kernel."""
    plan = NetworkPlan(graph, target, db, passes, precision)
    compiled = plan.compiled()
    keys: dict[str, int] = {}   # one kernel per distinct (fused) task
    chosen = []
    for node in compiled.nodes:
        if (task := plan.task(node)).key not in keys:
            keys[task.key] = len(chosen)
            best = plan.best(task)
            chosen.append((*choice(task, target, best), best is not None))
    return compiled, chosen, [keys[plan.task(node).key] for node in compiled.nodes]


def symbols(chosen: list) -> list[str]:
    """The kernels' entry names: distinct, as one library holds them all when the model is saved."""
    return [f"tk{k}_{ts.task.op.name}" for k, (ts, _, _) in enumerate(chosen)]


class CompiledModel(Model):
    """A network compiled for one target: call it with its inputs (numpy arrays in the
    model's input order, or by name) to get its outputs (fresh arrays); `save` it to run
    it elsewhere with `tunekit.runtime` alone.

    Attributes:
        graph: the Graph it runs.
        fallback: the tasks that had no record and run a default config.
        kernels: its distinct kernels (`tunekit.deploy.kernels.Kernel`), in the order the plan names them.
        peak_bytes: bytes of the activation buffers (weights apart), reused across layers.
        weight_bytes: bytes of the weights it holds (in the layouts its kernels read).
    """

    def __init__(self, graph: Graph, target, database: str | None = None, passes: Sequence[str] | None = None,
                 precision: str = "float32"):
        # the build workers start while the graph is planned (about as many kernels as nodes, or fewer)
        with closing(Database(database, readonly=True)) if database else nullcontext() as db, \
                builders(target, len(graph.nodes)) as pool:
            self.graph, chosen, uses = planned(graph, target, db, passes, precision)
            self.target = target
            artifacts = build_all(target, [(ts, index, sym) for (ts, index, _), sym in zip(chosen, symbols(chosen))],
                                  pool)
        self.kernels = [loaded(target, ts, index, art, tuned) for (ts, index, tuned), art in zip(chosen, artifacts)]
        self._warn_fallback()
        layout, weights = lay_out(self.graph, self.kernels, symbols(chosen), uses)
        super().__init__(layout, [w.reshape(-1).view("uint8") for w in weights], [k.bind for k in self.kernels])

    def _warn_fallback(self) -> None:
        self.fallback = sorted({k.task.anchor().name for k in self.kernels if not k.tuned})
        if self.fallback:
            n = len({k.task.anchor().name for k in self.kernels})
            warnings.warn(f"{len(self.fallback)} of the network's {n} tasks have no tuning record and "
                          f"run a default config: {'; '.join(self.fallback)}; tune them (a recipe task "
                          "`model = ...` tunes them all)", stacklevel=4)

    def save(self, path: str) -> None:
        """Write the model to `path` as one file that `tunekit.runtime.load` runs with numpy alone
        (the format: `tunekit.runtime.artifact`): its kernels linked into a shared library by the
        target (`Target.link`), its plan, and its weights in the layouts the kernels read.

        Raises:
            BuildError: the target's kernels cannot be linked (not a CPU target, no linker).
        """
        library = self.target.link([k.artifact for k in self.kernels])
        header = {"tunekit": __version__, "target": self.target.name, "options": self.target.options.model_dump(),
                  "machine": library.machine, "cpu": self.target.device().name, "features": list(library.features),
                  "source": Path(self.graph.source).name if self.graph.source else "", "plan": self.plan}
        artifact.write(str(path), json.loads(json.dumps(header)), library.data, self._weights)


def compile_model(path: str, target="x86", database: str | None = None,
                  passes: Sequence[str] | None = None, precision: str = "float32",
                  dims: dict[str, tuple[int, int]] | None = None, at: dict[str, int] | None = None) -> CompiledModel:
    """Compile the model at `path` for `target` with the best configs in `database`
    (a default config, with one warning listing them, for tasks without a record).

    Args:
        passes: the graph passes to run, by name (`tunekit.deploy.plan.PASSES`; None: all):
            leave one out to see what it buys.
        precision: "float32", or "bf16": matmuls and convolutions of constant weights on bfloat16
            data and weights with float32 accumulation (tune with the same precision: a model entry's `precision`).
        dims: the range (lo, hi) of each symbolic dimension of the model ({"batch": (1, 8),
            "sequence": (1, 512)}): one compiled model runs every size in them.
        at: the sizes its kernels are scheduled for and read their records at (default: the largest).
    Returns:
        a CompiledModel: `outputs = net(x)`.
    """
    target = make_component("target", target)
    if dims:
        return _compile_symbolic(path, target, database, passes, precision, dims, at)
    return CompiledModel(load_graph(path), target, database, passes, precision)


class _Planned:
    """A kernel as the layout reads it, unbuilt (a probe of a symbolic model)."""

    def __init__(self, ts, tuned: bool):
        self.task, self.tuned, self.template = ts.task, tuned, ts.template.name
        self.params = ts.task.op.buffers(ts.task.args)


def _probe(path, point, target, db, passes, precision) -> tuple:
    graph, chosen, uses = planned(load_graph(path, point), target, db, passes, precision)
    layout, weights = lay_out(graph, [_Planned(ts, tuned) for ts, _, tuned in chosen], symbols(chosen), uses)
    strip = lambda r: {k: v for k, v in r.items() if k != "buffer"}
    sample = {"kernels": [symbolic.payload(ts.task) for ts, _, _ in chosen],
              "params": [[list(shape) for _, shape, _ in ts.task.op.buffers(ts.task.args)] for ts, _, _ in chosen],
              "inputs": {n: strip(r) for n, r in layout["inputs"].items()},
              "outputs": [[n, strip(r)] for n, r in layout["outputs"]],
              "calls": [{**c, "args": [strip(r) for r in c["args"]]} for c in layout["calls"]],
              "table": [{k: v for k, v in t.items() if k != "params"} for t in layout["kernels"]]}
    return graph, chosen, layout, weights, sample


def _compile_symbolic(path, target, database, passes, precision, dims, at) -> CompiledModel:
    bounds, rep = symbolic.ranges(dims, at)
    grid, largest = symbolic.probes(bounds, rep)
    points = [largest, *(p for p in grid if p != largest)]   # the largest first: its buffers and weights are kept
    with closing(Database(database, readonly=True)) if database else nullcontext() as db:
        samples = []
        for point in points:
            graph, chosen, layout, weights, sample = _probe(path, point, target, db, passes, precision)
            if point == largest:
                plan, kept = layout, weights
            else:
                for k, w in enumerate(weights):
                    reader = next((c["layer"] for c in layout["calls"] if any(r.get("weight") == k for r in c["args"])),
                                  f"weight {k}")
                    symbolic.prefix_weight(reader, kept[k], w, path)
            if point == rep:
                rep_graph, rep_chosen = graph, chosen
            samples.append(sample)
        names = list(bounds)
        try:
            general = symbolic.generalize(samples, points, names)
        except symbolic.Mismatch as e:
            raise ModelError(f"{path}: the model's plan at sizes {points[0]} and {points[1:]} differs in more than "
                             f"its sizes ({e}); compile it with fixed sizes, or narrower dims") from None
        sizes = symbolic.size_vars(bounds)
        jobs = [(symbolic.symbolic_space(ts, general["kernels"][k], rep, sizes), index, sym)
                for k, ((ts, index, _), sym) in enumerate(zip(rep_chosen, symbols(rep_chosen)))]
        # built here: a build worker rebuilds a task from its plain description, whose sizes are static
        artifacts = build_all(target, jobs)
    model = CompiledModel.__new__(CompiledModel)
    model.graph, model.target = rep_graph, target
    # a kernel's task is the representative one (what names it, its flops, its records)
    model.kernels = [loaded(target, ts, index, art, tuned) for (ts, index, tuned), art in zip(rep_chosen, artifacts)]
    model._warn_fallback()
    texts = symbolic.texts(general)
    plan["dims"] = {n: list(b) for n, b in bounds.items()}
    for name, ref in plan["inputs"].items():
        ref.update(texts["inputs"][name])
    for (_, ref), (_, fitted) in zip(plan["outputs"], texts["outputs"]):
        ref.update(fitted)
    for call, fitted in zip(plan["calls"], texts["calls"]):
        for ref, f in zip(call["args"], fitted["args"]):
            ref.update(f)
    for entry, params, fitted, k in zip(plan["kernels"], texts["params"], texts["table"], model.kernels):
        entry["params"] = [[n, shape, dtype] for (n, _, dtype), shape in zip(entry["params"], params)]
        entry["flops"] = fitted["flops"]
        entry["sizes"] = [name for name, _, _ in k.artifact.meta.get("sizes", ())]
    Model.__init__(model, plan, [w.reshape(-1).view("uint8") for w in kept], [k.fn.bind for k in model.kernels])
    return model
