"""The Alternative contract: a pattern, a task maker and a weight transform; one rewrite for all."""
from __future__ import annotations

from typing import ClassVar

from tunekit.graph import Graph, Node
from tunekit.graph.rewrite import Rewriter, rewrite


class Alternative:
    """One algorithm that a pattern of layers may run instead of their own."""

    #: its name, for messages and `tunekit.deploy.plan.PASSES`
    name: ClassVar[str]

    def matches(self, graph: Graph, choices) -> dict[str, list[Node]]:
        """Find the layers of `graph` this may replace on a target making `choices`.

        Args:
            graph: the network (after channel blocking).
            choices: the target's `tunekit.NetworkChoices`.
        Returns:
            each match's nodes, in order, by the output of its last node (the one it writes).
        """
        raise NotImplementedError

    def candidates(self, nodes: list[Node], choices) -> list[tuple[str, dict]]:
        """Return the (op, args) of each way to run `nodes` (a match) instead: the tasks to tune."""
        raise NotImplementedError

    def inputs(self, nodes: list[Node], args: dict, rw: Rewriter) -> list[str]:
        """Return the inputs of the node that replaces `nodes` as the op of `args`, its weights
        transformed once through `rw` (`Rewriter.derived`)."""
        raise NotImplementedError

    def rewrite(self, graph: Graph, chosen: dict[str, tuple[list[Node], str, dict]]) -> Graph:
        """Return `graph` with each match of `chosen` (nodes, op, args by its output) run as one
        node of that op; `graph` itself is not changed."""
        gone = {n.output for nodes, _, _ in chosen.values() for n in nodes[:-1]}

        def visit(node: Node, rw: Rewriter) -> Node | None:
            if node.output in gone:
                return None
            if node.output not in chosen:
                return node
            nodes, op, args = chosen[node.output]
            one = len(nodes) == 1   # a chain is named by its layers
            return Node(op, args, self.inputs(nodes, args, rw), node.output,
                        node.name if one else "+".join(n.name or n.output for n in nodes), node.kind if one else op)
        return rewrite(graph, visit)
