"""A network's layers run the algorithm their records say is fastest:

- a blocked 3x3, stride-1 conv2d has Winograd alternatives (conv2d_winograd, tiles 2
  and 4), tuned as tasks of their own, and runs the one whose best record beats the
  conv's own best record;
- an inverted-residual chain (1x1 expand -> 3x3 depthwise -> 1x1 project,
  `tunekit.graph.layout.mbconv_chains`) runs as one `mbconv` kernel when its best
  record beats the sum of its layers' (each at its fastest algorithm).
A layer or chain without records keeps its direct layers."""
from __future__ import annotations

from tunekit.graph import Graph, Node
from tunekit.graph.layout import fuse_mbconv, mbconv_chains, winograd_convs
from tunekit.ops.layout import block_of
from tunekit.plugin.registry import registry
from tunekit.plugin.registry import task as make_task
from tunekit.store.database import Database
from tunekit.task import Task

from .kernels import best_record

#: the Winograd output tiles a layer may run (`tunekit.ops.winograd`)
WINOGRAD_TILES = (2, 4)


def _served(op: str, target) -> bool:
    return any(t.op == op and t.serves(target) for t in registry().templates)


def alternatives(node: Node, target) -> list[Task]:
    """The Winograd tasks `node` could run instead on `target` (none where no template serves them)."""
    a = node.args
    if (node.op != "conv2d" or not block_of(a.get("layout")) or not block_of(a.get("data_layout") or a["layout"])
            or (a["R"], a["S"]) != (3, 3)
            or tuple(a.get("stride", (1, 1))) != (1, 1) or tuple(a.get("dilation", (1, 1))) != (1, 1)
            or not _served("conv2d_winograd", target)):
        return []
    return [make_task("conv2d_winograd", {**a, "tile": m}) for m in WINOGRAD_TILES]


def fusions(graph: Graph, target) -> dict[str, Task]:
    """The `mbconv` task of each inverted-residual chain of `graph` on `target`, by the chain's output."""
    if not _served("mbconv", target):
        return {}
    return {out: make_task("mbconv", args) for out, (_, args, _) in mbconv_chains(graph).items()}


def fastest(db: Database, node: Node, target) -> tuple[float, int | None] | None:
    """(the best recorded seconds of `node`'s layer, the Winograd tile that ran them or None), or None."""
    options = [(rec[0], None) for rec in [best_record(db, make_task(node.op, node.args), target)] if rec]
    options += [(rec[0], t.args["tile"]) for t in alternatives(node, target) if (rec := best_record(db, t, target))]
    return min(options, key=lambda o: o[0], default=None)


def choose(graph: Graph, target, db: Database | None) -> Graph:
    """`graph` with each layer or chain that has alternatives running the fastest by the records in `db`."""
    if db is None:
        return graph
    chains, fused = mbconv_chains(graph) if _served("mbconv", target) else {}, {}
    for out, (nodes, args, _) in chains.items():
        rec = best_record(db, make_task("mbconv", args), target)
        parts = [fastest(db, n, target) for n in nodes]
        if rec and all(parts) and rec[0] < sum(p[0] for p in parts):
            fused[out] = chains[out]
    graph = fuse_mbconv(graph, fused) if fused else graph
    tiles = {}
    for node in graph.nodes:
        best = fastest(db, node, target) if alternatives(node, target) else None
        if best and best[1]:
            tiles[node.output] = best[1]
    return winograd_convs(graph, tiles) if tiles else graph
