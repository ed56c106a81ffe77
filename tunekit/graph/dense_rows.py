"""The dense-rows pass: a product of constant weights with few rows runs as `dense`."""
from __future__ import annotations

import numpy as np

from tunekit.graph import Graph, Node
from tunekit.graph.rewrite import rewrite


def dense_rows(graph: Graph, rows: int, names: frozenset[str] | None = None) -> Graph:
    """Return `graph` with each matmul of constant [K, N] weights and fewer than `rows` rows (or,
    `names` given, each named in it) run as a dense of the weights transposed ([N, K], computed
    here once: its templates vectorize along K, where a matmul's vectorize along N and tile the
    rows); `graph` itself is not changed."""
    def visit(node: Node, rw) -> Node:
        if node.op != "matmul" or node.args.get("b_panel") or node.inputs[1] not in graph.constants or \
                not (node.args["M"] < rows if names is None else node.name in names):
            return node
        key = rw.derived(node.inputs[1], "nk", lambda w: np.ascontiguousarray(w.T))
        return Node("dense", node.args, [node.inputs[0], key, *node.inputs[2:]], node.output, node.name, node.kind)
    return rewrite(graph, visit)


def dense_layers(graph: Graph) -> frozenset[str]:
    """The names of the layers `graph` (after the dense-rows pass) runs as dense: what a compile for
    symbolic sizes decides at its first representative sizes and keeps (`dense_rows`' `names`)."""
    return frozenset(n.name for n in graph.nodes if n.op == "dense")
