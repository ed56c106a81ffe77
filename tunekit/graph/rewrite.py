"""The one way a pass changes a graph: node by node, with constants derived once."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tunekit.graph import Graph, Node


@dataclass
class Rewriter:
    """What a pass's visit function sees: the graph's constants so far, to which it adds
    transformed weights (`derived`)."""
    constants: dict[str, np.ndarray]

    def derived(self, name: str, tag: str, transform: Callable, *args) -> str:
        """Return the name of constant `name` as `transform(value, *args)` (`tag` names the result),
        computed on first use: each weight is transformed once, however many nodes read it."""
        key = f"{name}:{tag}"
        if key not in self.constants:
            self.constants[key] = transform(self.constants[name], *args)
        return key


def rewrite(graph: Graph, visit: Callable[[Node, Rewriter], Node | list[Node] | None]) -> Graph:
    """Return `graph` with each node replaced by what `visit(node, rewriter)` returns: the node
    itself, another, several, or None (dropped); `graph` itself is not changed.

    Args:
        graph: the graph to rewrite.
        visit: called once per node, in order; it may add constants through the rewriter.
    Returns:
        the new Graph (sharing everything `visit` left alone).
    """
    rw, nodes = Rewriter(dict(graph.constants)), []
    for node in graph.nodes:
        out = visit(node, rw)
        nodes.extend([] if out is None else out if isinstance(out, list) else [out])
    return replace(graph, constants=rw.constants, nodes=nodes)
