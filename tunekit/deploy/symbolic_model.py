"""Compiling a model for symbolic dimensions (`compile_model(..., dims=...)`): the model is
planned at the largest sizes and at a grid around each representative size (`at`), the plans
fitted (`tunekit.deploy.symbolic`), and each representative's kernels built once, symbolic.
The plan is the largest sizes' (its buffers, its weights) with fitted shapes and offsets; with
several representative sizes it holds a set of kernels for each, and a call runs the set of the
nearest (`tunekit.runtime.Model`)."""
from __future__ import annotations

from contextlib import closing, nullcontext

from tunekit.deploy import symbolic
from tunekit.deploy.kernels import build_all, loaded
from tunekit.deploy.layout import lay_out
from tunekit.deploy.network import CompiledModel, load_graph, planned
from tunekit.errors import ModelError
from tunekit.runtime.model import Model
from tunekit.store.database import Database


class _Planned:
    """A kernel as the layout reads it, unbuilt."""

    def __init__(self, ts, tuned: bool):
        self.task, self.tuned, self.template = ts.task, tuned, ts.template.name
        self.params = ts.task.op.buffers(ts.task.args)


def _probe(path, point, target, db, passes, precision) -> tuple:
    """The model planned at sizes `point`: (graph, chosen kernels, layout, weights, what is fitted)."""
    graph, chosen, uses = planned(load_graph(path, point), target, db, passes, precision)
    layout, weights = lay_out(graph, [_Planned(ts, tuned) for ts, _, tuned in chosen],
                              [f"k{k}" for k in range(len(chosen))], uses)
    strip = lambda r: {k: v for k, v in r.items() if k != "buffer"}
    sample = {"kernels": [symbolic.payload(ts.task) for ts, _, _ in chosen],
              "params": [[list(shape) for _, shape, _ in _Planned(ts, False).params] for ts, _, _ in chosen],
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


def compile_symbolic(path: str, target, database, passes, precision, dims: dict, at) -> CompiledModel:
    """`tunekit.compile_model` of a model with symbolic dimensions `dims` (see its doc)."""
    bounds, reps = symbolic.ranges(dims, at)
    largest = {name: hi for name, (_, hi) in bounds.items()}
    names, sizes = list(bounds), symbolic.size_vars(bounds)
    with closing(Database(database, readonly=True)) if database else nullcontext() as db:
        top_graph, top_chosen, plan, kept, top = _probe(path, largest, target, db, passes, precision)
        variants, fitted = [], None
        for rep in reps:
            samples, points, at_rep = [top], [largest], (top_graph, top_chosen)
            for point in symbolic.probes(bounds, rep):
                if point == largest:
                    continue
                graph, chosen, layout, weights, sample = _probe(path, point, target, db, passes, precision)
                _same_layers(path, plan["calls"], largest, layout["calls"], point)
                for k, w in enumerate(weights):
                    reader = next((c["layer"] for c in layout["calls"] if any(r.get("weight") == k for r in c["args"])),
                                  f"weight {k}")
                    symbolic.prefix_weight(reader, kept[k], w, path)
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
