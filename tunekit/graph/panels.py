"""The weight-packing pass: constant matmul weights in column panels, packed once."""
from __future__ import annotations

from tunekit.graph import Graph, Node
from tunekit.graph.rewrite import rewrite
from tunekit.ops import layout as layouts


def pack_panels(graph: Graph, nv: int) -> Graph:
    """Return `graph` with the constant B of every matmul in column panels of `nv`
    (`tunekit.ops.layout.panels`, computed here once), the nodes reading it with
    `b_panel = nv` (0: none packed); `graph` itself is not changed."""
    def visit(node: Node, rw) -> Node:
        if not nv or node.op != "matmul" or node.args.get("b_panel") or node.inputs[1] not in graph.constants:
            return node
        key = rw.derived(node.inputs[1], f"panels{nv}", layouts.panels, nv)
        return Node(node.op, {**node.args, "b_panel": nv}, [node.inputs[0], key, *node.inputs[2:]], node.output,
                    node.name, node.kind, node.computation)
    return rewrite(graph, visit)
