"""A network's layers run the algorithm their records say is fastest: a blocked 3x3,
stride-1 conv2d has Winograd alternatives (conv2d_winograd, tiles 2 and 4), tuned as
tasks of their own, and runs the one whose best record beats the conv's own best
record (a layer without records keeps the direct conv)."""
from __future__ import annotations

from tunekit.graph import Graph, Node
from tunekit.graph.layout import winograd_convs
from tunekit.ops.layout import block_of
from tunekit.plugin.registry import registry
from tunekit.plugin.registry import task as make_task
from tunekit.store.database import Database
from tunekit.task import Task

from .kernels import best_record

#: the Winograd output tiles a layer may run (`tunekit.ops.winograd`)
WINOGRAD_TILES = (2, 4)


def alternatives(node: Node, target) -> list[Task]:
    """The Winograd tasks `node` could run instead on `target` (none where no template serves them)."""
    a = node.args
    if (node.op != "conv2d" or not block_of(a.get("layout")) or not block_of(a.get("data_layout") or a["layout"])
            or (a["R"], a["S"]) != (3, 3)
            or tuple(a.get("stride", (1, 1))) != (1, 1) or tuple(a.get("dilation", (1, 1))) != (1, 1)
            or not any(t.op == "conv2d_winograd" and t.serves(target) for t in registry().templates)):
        return []
    return [make_task("conv2d_winograd", {**a, "tile": m}) for m in WINOGRAD_TILES]


def choose(graph: Graph, target, db: Database | None) -> Graph:
    """`graph` with each layer that has alternatives running the fastest by the records in `db`."""
    if db is None:
        return graph
    tiles = {}
    for node in graph.nodes:
        options = alternatives(node, target)
        if not options:
            continue
        direct = best_record(db, make_task(node.op, node.args), target)
        best = min(((rec[0], t.args["tile"]) for t in options if (rec := best_record(db, t, target))),
                   default=None)
        if best and (direct is None or best[0] < direct[0]):
            tiles[node.output] = best[1]
    return winograd_convs(graph, tiles) if tiles else graph
