"""A network's compile plan: the graph, the target's choices and the records, each piece
of work done once. Every distinct node's Task is made once, the target's
`network_choices` asked once and each task's best record read once; the pass pipeline,
the task list (`extract_tasks`, a recipe's model tasks) and the compiled model read them.

The passes, in order (each `Graph -> Graph`, in a module of `tunekit.graph`):
- qdq: a quantized model's dequantize -> conv, matmul or max pool -> quantize as one int8 op,
  channels last, with the elementwise nodes between them on the 8-bit values;
- epilogues: what follows a conv, dense or matmul folds into it (BatchNormalization, a bias,
  a residual, ReLU/ReLU6), and a reshape of an op's output is an alias of it;
- merge-siblings: matmuls of constant weights reading the same data run as one (Q, K, V);
- bf16: with precision "bf16", matmuls of constant weights run on bfloat16 data and weights;
- append-cache: for generation, a key/value cache's past the leading part of its present,
  each step appending the new entries alone;
- fuse-te: a frontend's te calls grouped into kernels (left out: one kernel each);
- dense-rows: a product of constant weights with few rows runs as dense;
- pack-panels: constant matmul weights in the target's column panels;
- block-channels: activations in channel blocks, the rule's or, with records, the blocks
  per tensor the graph tuner picks (`tunekit.graph.layout_search`);
- bf16-convs: with precision "bf16", blocked convolutions of constant weights run on
  bfloat16 data and weights (so Winograd and mbconv, float32 algorithms, do not replace them);
- alternatives: each layer or chain runs the algorithm its records say is fastest
  (`tunekit.graph.alternatives`: an inverted-residual chain as one mbconv kernel,
  Winograd for a 3x3 conv); a layer without a record counts as infinitely slow.
"""
from __future__ import annotations

import functools
import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tunekit.errors import ArgumentError, ModelError
from tunekit.graph import Graph, Node
from tunekit.graph.alternatives import ALTERNATIVES
from tunekit.graph.bf16 import convs_to_bf16, to_bf16
from tunekit.graph.blocking import BlockPlan, block_activations, plan_blocks
from tunekit.graph.cache import append_cache
from tunekit.graph.dense_rows import dense_rows
from tunekit.graph.epilogues import fuse_epilogues
from tunekit.graph.fuse_te import fuse_te
from tunekit.graph.layout_search import layer_variants, search_blocks
from tunekit.graph.panels import pack_panels
from tunekit.graph.qdq import fold_qdq
from tunekit.graph.siblings import merge_siblings
from tunekit.ops.computed import ComputedOp
from tunekit.plugin.registry import registry
from tunekit.store.database import Database
from tunekit.task import Task

from .kernels import best_record


@dataclass(frozen=True)
class Pass:
    """One rewrite of the pipeline."""
    name: str
    doc: str
    #: (graph, plan, by_records) -> graph; `by_records`: choose by the plan's records (else the rule's choices)
    run: Callable[[Graph, NetworkPlan, bool], Graph]


def node_error(graph: Graph, node: Node, why: str) -> ModelError:
    """The error saying that `node` of `graph` cannot run, and why (naming the file and the node)."""
    return ModelError(f"{graph.source or 'the model'}: node {node.name or node.output!r} ({node.kind or node.op}): "
                      f"{why}")


@functools.lru_cache(maxsize=4096)
def computed(name: str, data: str) -> Task:
    """The Task of a node's computation (te data as JSON), made once per process."""
    # a network repeats its groups (a transformer's layers): hash each computation once
    return registry().computed_task(ComputedOp.from_data(json.loads(data), name), {})


class NetworkPlan:
    """`graph` on `target`, with the records of `database` (None: none).

    The passes up to fuse-te run here, on the graph as a frontend translated it: what
    they leave (`graph`) is op calls and computations, each a Task.

    Args:
        graph: the network as loaded (`tunekit.deploy.network.load_graph`).
        target: the Target it runs on.
        database: an open Database to choose by (layouts, algorithms) and build from.
        passes: the names of the passes to run (of `PASSES`; None: all).
        precision: "float32", or "bf16": matmuls and convolutions of constant weights with bfloat16
            data and weights and float32 accumulation (the bf16 passes; the rest stays float32).
        dense: the layers (by name) the dense-rows pass runs as dense whatever their rows (None: by
            their rows): a symbolic compile keeps its representative sizes' choice at every size.
        generation: a key/value cache appended to in place (the append-cache pass).
    Raises:
        ModelError: the target cannot run a node (its dtype, its memory), naming it.
        ArgumentError: an unknown pass name.
    """

    def __init__(self, graph: Graph, target, database: Database | None = None, passes: Sequence[str] | None = None,
                 precision: str = "float32", dense: frozenset[str] | None = None, generation: bool = False):
        if precision not in PRECISIONS:
            raise ArgumentError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
        self.target, self.database = target, _ReadOnce(database) if database is not None else None
        self.precision, self.dense, self.generation = precision, dense, generation
        self.choices = target.network_choices()
        if precision == "bf16" and not self.choices.bf16_dot:
            warnings.warn(f"precision bf16 on {target.name}: it declares no bfloat16 dot instruction (x86: "
                          "AVX512-BF16), so the products decode their pairs into float32: bfloat16's error "
                          "(about 1e-2 of the output's range) and no faster than float32", stacklevel=3)
        chosen = [p for p in PASSES if p.name in _known(passes or ())] if passes is not None else list(PASSES)
        lowering = [p for p in chosen if PASSES.index(p) <= _FUSE]
        self.passes = chosen[len(lowering):]
        for p in lowering:
            graph = p.run(graph, self, False)
        self.graph = graph = fuse_te(graph, group=False) if any(n.call for n in graph.nodes) else graph
        self._tasks: dict[tuple, tuple] = {}   # a node's op and args (or computation) -> (its Task, what keys it)
        self._best: dict[str, tuple | None] = {}
        checked = set()
        for node in graph.nodes:
            task = self.task(node)
            if task.key not in checked and (why := target.check_task(task)):
                raise node_error(graph, node, why)
            checked.add(task.key)

    def task(self, node: Node) -> Task:
        """The Task `node` runs: its op at its args, or its own computation (made once)."""
        if node.computation is not None:   # the passes hand one computation on: its JSON is made once
            key = (node.op, id(node.computation))
            if key not in self._tasks:   # (the computation is kept with it, so that its id stays its own)
                self._tasks[key] = computed(node.op, json.dumps(node.computation, sort_keys=True)), node.computation
        elif (key := (node.op, repr(sorted(node.args.items())))) not in self._tasks:
            self._tasks[key] = registry().task(node.op, node.args), None
        return self._tasks[key][0]

    def best(self, task: Task) -> tuple | None:
        """`tunekit.deploy.kernels.best_record` of `task` (read once), or None."""
        if task.key not in self._best:
            self._best[task.key] = best_record(self.database, task, self.target) if self.database else None
        return self._best[task.key]

    def seconds(self, task: Task) -> float | None:
        """The seconds of `task`'s best record, or None: what the choices compare."""
        return best[0] if (best := self.best(task)) else None

    def alternatives(self, nodes: list[Node], after: int = 0) -> list[Task]:
        """The tasks of the alternatives (from `ALTERNATIVES[after]` on) that may run layer `nodes[0]` alone."""
        if len(nodes) != 1:
            return []
        return [self.task(Node(op, args, [], "")) for alt in ALTERNATIVES[after:]
                for match in alt.matches(Graph({}, {}, nodes, []), self.choices).values()
                for op, args in alt.candidates(match, self.choices)]

    def fastest(self, node: Node, after: int = 0) -> float | None:
        """The best recorded seconds of layer `node` by its own op or an alternative (from `after` on)."""
        times = [s for t in [self.task(node), *self.alternatives([node], after)] if (s := self.seconds(t)) is not None]
        return min(times, default=None)

    def shapes(self, graph: Graph) -> dict[str, tuple]:
        """The output shape of every node of `graph`, by output name."""
        return {node.output: (t := self.task(node)).op.output_shapes(t.args)[0][0] for node in graph.nodes}

    def blocks(self, graph: Graph) -> BlockPlan | None:
        """The channel-block plan of `graph` (in NCHW), or None where the target blocks nothing."""
        b = self.choices.channel_block
        return plan_blocks(graph, b, self.shapes(graph), self.choices.blocked_ops) if b else None

    def compiled(self, by_records: bool = True, until: str | None = None) -> Graph:
        """The graph after the passes (those before pass `until`): what the compiled model runs,
        chosen by the records where `by_records` and the plan has a database."""
        graph = self.graph
        for p in self.passes:
            if p.name == until:
                break
            graph = p.run(graph, self, by_records and self.database is not None)
        return graph

    def tasks(self, search_layouts: bool = False) -> list[tuple[Task, int]]:
        """The distinct tuning tasks with how many times the network runs each, in order of first
        use: each layer's followed by the alternatives that may run it alone, then those of chains
        of layers (all candidates, unchosen); with `search_layouts` (and the block-channels pass), then the
        tasks of the other channel blocks its layers may take, with their alternatives."""
        graph = self.compiled(by_records=False)
        ends: dict[str, list[Task]] = {}   # a layer's own alternatives, after it
        chains: list[Task] = []            # those of several layers, after all (the order keys a tuning run)
        for alt in ALTERNATIVES:
            for out, nodes in alt.matches(graph, self.choices).items():
                tasks = [self.task(Node(op, args, [], "")) for op, args in alt.candidates(nodes, self.choices)]
                (ends.setdefault(out, []) if len(nodes) == 1 else chains).extend(tasks)
        found: dict[str, list] = {}
        for task in [*(t for node in graph.nodes for t in [self.task(node), *ends.get(node.output, [])]), *chains]:
            task = task.anchor()
            found.setdefault(task.key, [task, 0])[1] += 1
        packed = self.compiled(by_records=False, until="block-channels")
        if search_layouts and any(p.name == "block-channels" for p in self.passes) and \
                (bp := self.blocks(packed)) is not None:
            for v in layer_variants(packed, bp):
                for task in [self.task(v), *self.alternatives([v])]:
                    found.setdefault(task.anchor().key, [task.anchor(), 1])
        return [(t, n) for t, n in found.values()]


class _ReadOnce:
    """A database whose trials of each task are read once (several fused tasks share an anchor's)."""

    def __init__(self, db: Database):
        self._db, self._read = db, {}

    def trials(self, key) -> list:
        k = (key.workload, key.target, key.device, key.template)
        if k not in self._read:
            self._read[k] = self._db.trials(key)
        return self._read[k]

    def __getattr__(self, name: str):
        return getattr(self._db, name)


def _known(names: Sequence[str]) -> list[str]:
    if unknown := sorted(set(names) - {p.name for p in PASSES}):
        raise ArgumentError(f"unknown pass(es) {', '.join(unknown)} (passes: {', '.join(p.name for p in PASSES)})")
    return list(names)


def passes_without(names: Sequence[str]) -> list[str]:
    """The names of the passes in `PASSES` but those of `names` (each a pass's, else ArgumentError)."""
    left_out = _known(names)
    return [p.name for p in PASSES if p.name not in left_out]


def _block(graph: Graph, plan: NetworkPlan, by_records: bool) -> Graph:
    if (bp := plan.blocks(graph)) is None:
        return graph
    return block_activations(graph, bp, search_blocks(graph, bp, plan.fastest) if by_records else None)


def _choose(graph: Graph, plan: NetworkPlan, by_records: bool) -> Graph:
    """Each match runs its fastest candidate where that beats the sum of its layers' fastest (by
    their own ops or the alternatives chosen after this one; a layer without a record: infinity)."""
    if not by_records:
        return graph
    for k, alt in enumerate(ALTERNATIVES):
        chosen = {}
        for out, nodes in alt.matches(graph, plan.choices).items():
            own = [math.inf if (s := plan.fastest(n, k + 1)) is None else s for n in nodes]
            options = [(s, op, args) for op, args in alt.candidates(nodes, plan.choices)
                       if (s := plan.seconds(plan.task(Node(op, args, [], "")))) is not None]
            best = min(options, key=lambda o: o[0], default=None)
            if best and best[0] < sum(own):
                chosen[out] = (nodes, best[1], best[2])
        graph = alt.rewrite(graph, chosen) if chosen else graph
    return graph


PASSES = (
    Pass("qdq", "dequantize -> conv, matmul or max pool -> quantize as one int8 op (qconv2d, qdepthwise_conv2d, "
         "qmatmul), channels last", lambda graph, plan, by_records: fold_qdq(graph)),
    Pass("epilogues", "BatchNormalization, bias, residual and ReLU/ReLU6 folded into the conv, dense or matmul "
         "before them", lambda graph, plan, by_records: fuse_epilogues(graph)),
    Pass("merge-siblings", "matmuls of constant weights reading the same data run as one (Q, K, V)",
         lambda graph, plan, by_records: merge_siblings(graph)),
    Pass("bf16", "with precision bf16: matmuls of constant weights on bfloat16 data and weights (bmatmul)",
         lambda graph, plan, by_records: to_bf16(graph) if plan.precision == "bf16" else graph),
    Pass("append-cache", "with generation: each past input of a key/value cache the leading part of its present "
         "output, a step appending the new entries alone",
         lambda graph, plan, by_records: append_cache(graph) if plan.generation else graph),
    Pass("fuse-te", "a frontend's te calls grouped into kernels (left out: one kernel each)",
         lambda graph, plan, by_records: fuse_te(graph)),
    Pass("dense-rows", "products of constant weights with few rows (the target's dense_rows) run as dense",
         lambda graph, plan, by_records: dense_rows(graph, plan.choices.dense_rows, plan.dense)),
    Pass("pack-panels", "constant matmul weights packed in the target's column panels",
         lambda graph, plan, by_records: pack_panels(graph, plan.choices.panel_width)),
    Pass("block-channels", "activations in channel blocks (per tensor by the records with a database)", _block),
    Pass("bf16-convs", "with precision bf16: blocked convolutions of constant weights on bfloat16 data and "
         "weights (bconv2d)",
         lambda graph, plan, by_records: convs_to_bf16(graph) if plan.precision == "bf16" else graph),
    Pass("alternatives", "layers run the algorithm their records say is fastest (Winograd, mbconv)", _choose),
)
PRECISIONS = ("float32", "bf16")
#: the passes up to this one run on the graph as translated (`NetworkPlan`'s graph is after them)
_FUSE = [p.name for p in PASSES].index("fuse-te")
