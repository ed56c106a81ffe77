"""Whole networks: the distinct tasks of a model file, and a compiled model that runs
it as a flat plan of tuned kernels over buffers allocated once and reused.

A model with symbolic dimensions (`compile_model(..., dims=...)`) is planned at the largest
sizes and at a grid around each representative size (`at`), the plans fitted
(`tunekit.deploy.symbolic`), and each representative's kernels built once, symbolic. The plan
is the largest sizes' (its buffers, its weights) with fitted shapes and offsets; with several
representative sizes it holds a set of kernels for each, and a call runs the set of the
nearest (`tunekit.runtime.Model`)."""
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
from tunekit.graph.dense_rows import dense_layers
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


def planned(graph: Graph, target, db, passes, precision, dense=None, generation=False) -> tuple[Graph, list, list[int]]:
    """The graph after the passes (`dense`, `generation`: see `NetworkPlan`), its distinct kernels as
    (task space, config index, tuned), and per node the index of its kernel."""
    plan = NetworkPlan(graph, target, db, passes, precision, dense, generation)
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
                  dims: dict[str, tuple[int, int]] | None = None, at: dict[str, int] | None = None,
                  generation: bool = False) -> CompiledModel:
    """Compile the model at `path` for `target` with the best configs in `database`
    (a default config, with one warning listing them, for tasks without a record).

    Args:
        passes: the graph passes to run, by name (`tunekit.deploy.plan.PASSES`; None: all):
            leave one out to see what it buys.
        precision: "float32", or "bf16": matmuls and convolutions of constant weights on bfloat16
            data and weights with float32 accumulation (tune with the same precision: a model entry's `precision`).
        dims: the range (lo, hi) of each symbolic dimension of the model ({"batch": (1, 8),
            "sequence": (1, 512)}): one compiled model runs every size in them.
        at: the sizes its kernels are scheduled for and read their records at (default: the largest);
            lists of sizes ({"sequence": [32, 128, 384]}) build kernels for each combination, and a call
            runs those of the nearest.
        generation: a language model with a key/value cache, for `tunekit.runtime.generate` (needs
            dims): each past input is the leading part of its present output, in one buffer, and a
            step appends the new entries alone; the two then take the layout [length, batch, heads,
            head size] (the model's sequence axis first; the append-cache pass).
    Returns:
        a CompiledModel: `outputs = net(x)`.
    """
    target = make_component("target", target)
    if dims:
        return compile_symbolic(path, {"target": target, "passes": passes, "precision": precision,
                                       "generation": generation}, database, dims, at)
    if generation:
        raise ArgumentError("generation=True needs the cache's symbolic dimensions: dims={'past': (0, P), "
                            "'sequence': (1, S)}")
    return CompiledModel(load_graph(path), target, database, passes, precision)


class _Planned:
    """A kernel as the layout reads it, unbuilt."""

    def __init__(self, ts, tuned: bool):
        self.task, self.tuned, self.template = ts.task, tuned, ts.template.name
        self.params = ts.task.op.buffers(ts.task.args)


def _probe(path, point, how: dict, dense=None) -> tuple:
    """The model planned at sizes `point` (`how`: planned's target, db, passes, precision and
    generation): (graph, chosen kernels, layout, weights, what is fitted)."""
    graph, chosen, uses = planned(load_graph(path, point), **how, dense=dense)
    kernels = [_Planned(ts, tuned) for ts, _, tuned in chosen]
    layout, weights = lay_out(graph, kernels, [f"k{k}" for k in range(len(chosen))], uses)
    strip = lambda r: {k: v for k, v in r.items() if k != "buffer"}
    sample = {"kernels": [symbolic.payload(ts.task) for ts, _, _ in chosen],
              "params": [[list(shape) for _, shape, _ in k.params] for k in kernels],
              "flops": [ts.task.flops for ts, _, _ in chosen],
              "inputs": {n: strip(r) for n, r in layout["inputs"].items()},
              "outputs": [[n, strip(r)] for n, r in layout["outputs"]],
              "calls": [{**c, "args": [strip(r) for r in c["args"]]} for c in layout["calls"]]}
    return graph, chosen, layout, weights, sample


def _same_layers(path: str, calls: list, at: dict, others: list, other: dict) -> None:
    """Raise a ModelError naming the first layer that runs another kernel at sizes `other` than at `at`."""
    missing = {"layer": "(none)", "op": "no kernel"}
    for c, d in zip(calls, others + [missing] * max(0, len(calls) - len(others))):
        if (c["layer"], c["op"]) != (d["layer"], d["op"]):
            raise ModelError(f"{path}: layer {c['layer']} runs {c['op']} at sizes {at} but {d['layer']} runs "
                             f"{d['op']} at {other} (the passes choose by size): one plan cannot serve both; narrow "
                             "dims, or give `at` sizes nearer the largest")


def compile_symbolic(path: str, how: dict, database, dims: dict, at) -> CompiledModel:
    """`tunekit.compile_model` of a model with symbolic dimensions `dims` (see its doc; `how`: its
    target, passes, precision and generation)."""
    bounds, reps = symbolic.ranges(dims, at)
    largest = {name: hi for name, (_, hi) in bounds.items()}
    names, sizes = list(bounds), symbolic.size_vars(bounds)
    target = how["target"]
    with closing(Database(database, readonly=True)) if database else nullcontext() as db:
        how = {**how, "db": db}
        # the layers that run as dense (few rows) at the first representative sizes do at every size
        first = _probe(path, reps[0], how)
        dense, probed = dense_layers(first[0]), {tuple(reps[0].values()): first}
        top_graph, top_chosen, plan, kept, top = _probe(path, largest, how, dense)
        variants, fitted = [], None
        for rep in reps:
            samples, points, at_rep = [top], [largest], (top_graph, top_chosen)
            for point in symbolic.probes(bounds, rep):
                if point == largest:
                    continue
                graph, chosen, layout, weights, sample = probed.pop(tuple(point.values()), None) or \
                    _probe(path, point, how, dense)
                _same_layers(path, plan["calls"], largest, layout["calls"], point)
                for k, w in enumerate(weights):
                    if not symbolic.is_prefix(kept[k], w):
                        reader = next(c["layer"] for c in layout["calls"]
                                      if any(r.get("weight") == k for r in c["args"]))
                        raise ModelError(f"{path}: a constant that {reader} reads depends on the symbolic dimensions "
                                         f"in a way one compiled model cannot read (shape {list(w.shape)} at {point}, "
                                         f"{list(kept[k].shape)} at the largest, and not its leading part); compile "
                                         "the model with fixed sizes")
                if point == rep:
                    at_rep = graph, chosen
                samples.append(sample), points.append(point)
            try:
                general = symbolic.generalize(samples, points, names)
            except symbolic.Mismatch as e:
                raise ModelError(f"{path}: the model's plan at sizes {points[0]} and {points[1:]} differs in more "
                                 f"than its sizes ({e}); compile it with fixed sizes, or narrower dims") from None
            texts = symbolic.texts({k: v for k, v in general.items() if k != "kernels"})
            if fitted is not None and texts != fitted:
                raise ModelError(f"{path}: the model's plan scheduled at {rep} is not its plan at {reps[0]}; "
                                 "compile it for one representative size (at)")
            fitted = texts
            variants.append((rep, *at_rep, general))
        jobs = []
        for v, (rep, _, chosen, general) in enumerate(variants):
            for k, (ts, index, _) in enumerate(chosen):
                symbol = f"tk{k}_{ts.task.op.name}" if len(variants) == 1 else f"tk{v}_{k}_{ts.task.op.name}"
                jobs.append((symbolic.symbolic_space(ts, general["kernels"][k], rep, sizes), index, symbol))
        # built here: a build worker rebuilds a task from its plain description, whose sizes are static
        artifacts = iter(build_all(target, jobs))
    model = CompiledModel.__new__(CompiledModel)
    model.graph, model.target, model.kernels, tables = variants[0][1], target, [], []
    ranged = [n for n, (lo, hi) in bounds.items() if lo < hi]   # one of one size is a constant, no call's to give
    for rep, _, chosen, _ in variants:
        # a kernel's task is the representative one (what names it, its flops, its records)
        kernels = [loaded(target, ts, index, next(artifacts), tuned) for ts, index, tuned in chosen]
        tables.append({"at": {n: v for n, v in rep.items() if n in ranged}, "kernels": [
            {"symbol": k.artifact.entry, "template": k.template, "flops": flops, "tuned": k.tuned,
             "params": [[n, shape, dtype] for (n, _, dtype), shape in zip(k.params, params)],
             "sizes": [name for name, _, _ in k.artifact.meta.get("sizes", ())]}
            for k, params, flops in zip(kernels, fitted["params"], fitted["flops"])]})
        model.kernels += kernels
    model._warn_fallback()
    plan["dims"], plan["kernels"] = {n: list(bounds[n]) for n in ranged}, tables[0]["kernels"]
    if len(tables) > 1:
        plan["variants"] = tables
    for name, ref in plan["inputs"].items():
        ref.update(fitted["inputs"][name])
    for (_, ref), (_, f) in zip(plan["outputs"], fitted["outputs"]):
        ref.update(f)
    for call, f in zip(plan["calls"], fitted["calls"]):
        for ref, g in zip(call["args"], f["args"]):
            ref.update(g)
    Model.__init__(model, plan, [w.reshape(-1).view("uint8") for w in kept], [k.fn.bind for k in model.kernels])
    return model
