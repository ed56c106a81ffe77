"""The graph tuner's search: a layout (channel block) for every blocked tensor of a
network, the one whose layers cost least together (AutoTVM's graph tuner), instead of
the rule's one block per target.

A layer's cost under a choice of blocks is the best record of its task in those layouts
(of any algorithm it may run). A conv reads its data in any block, so the transform
between two blocks costs what the conv's own records say; a depthwise conv or pool reads
and writes one block, and a conv's residual is read in its output's block, so choices
that break these cost infinity. A layer whose rule layout has no record keeps the rule's
blocks (it is free; the others cost infinity), so an untuned network runs the rule's layout.

A node's cost depends on the blocks of the tensors it reads and writes (a conv reads
its data in any block, so the cost of changing block lies in its records). Dynamic
programming over the nodes in order: a state is the blocks of the tensors that are
written and still to be read (the frontier: one tensor in a chain, two across a
residual branch), so the search is exact and its size is the product of the options
of the frontier's tensors, not of the whole network.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tunekit.graph import Graph, Node
from tunekit.graph.blocking import BlockPlan, layout_args

#: the most frontier states kept; past it the search keeps the cheapest (a network whose
#: frontier grows this wide would need an approximate solver, PBQP in AutoTVM)
MAX_STATES = 4096


def choose_blocks(nodes: Sequence[Node], options: dict[str, Sequence[int]],
                  cost: Callable[[Node, dict[str, int]], float]) -> tuple[dict[str, int], float]:
    """Pick a block for every tensor of `options` so that the nodes' costs sum least.

    Args:
        nodes: the graph's nodes, in order (each written before it is read).
        options: each tensor's candidate blocks; the tensors not in it are fixed.
        cost: `cost(node, blocks)`, blocks holding the chosen block of each of the node's
            inputs and its output that are in `options`: seconds, or math.inf where the
            node cannot run so (two inputs that must share a block, a missing record).
    Returns:
        (the block of each tensor of `options`, the total cost); every tensor gets its
        first option where no choice has a finite cost.
    """
    last = {name: k for k, node in enumerate(nodes) for name in node.inputs}
    # a state: sorted ((tensor, block), ...) of the live tensors -> (cost, every choice so far)
    states: dict[tuple, tuple[float, dict[str, int]]] = {(): (0.0, {})}
    for k, node in enumerate(nodes):
        outs = options.get(node.output, (None,))
        nxt: dict[tuple, tuple[float, dict[str, int]]] = {}
        for state, (total, chosen) in states.items():
            live = dict(state)
            for block in outs:
                blocks = {t: live[t] for t in node.inputs if t in live}
                if block is not None:
                    blocks[node.output] = block
                c = total + cost(node, blocks)
                after = {t: v for t, v in live.items() if last.get(t, -1) > k}
                if block is not None and last.get(node.output, -1) > k:
                    after[node.output] = block
                key = tuple(sorted(after.items()))
                if key not in nxt or c < nxt[key][0]:
                    nxt[key] = (c, {**chosen, node.output: block} if block is not None else chosen)
        states = dict(sorted(nxt.items(), key=lambda kv: kv[1][0])[:MAX_STATES])
    total, chosen = min(states.values(), key=lambda v: v[0])
    chosen = {} if math.isinf(total) else chosen   # no finite choice: every tensor its first option
    return {t: chosen.get(t, opts[0]) for t, opts in options.items()}, total


def _variant(node: Node, block: int, data_block: int, residual_block: int | None) -> Node | None:
    """Layout op `node` writing `block`, reading its data in `data_block`, or None where it cannot run so."""
    if node.op != "conv2d" and data_block != block or node.args.get("residual") and residual_block not in (None, block):
        return None
    return Node(node.op, layout_args(node, block, data_block), node.inputs, node.output, node.name, node.kind)


def layer_variants(graph: Graph, plan: BlockPlan) -> list[Node]:
    """Every blocked layer of `graph` (in NCHW) in each of the blocks it may take: the layers
    the search needs records of."""
    options = plan.options()
    return [v for node in graph.nodes for k in options.get(node.output, ())
            for db in options.get(node.inputs[0], (plan.data_block(node, {}),))
            if (v := _variant(node, k, db, None)) is not None]


def search_blocks(graph: Graph, plan: BlockPlan, seconds: Callable[[Node], float | None]) -> dict[str, int]:
    """The block of each blocked tensor of `graph` (in NCHW, planned by `plan`) whose layers'
    records sum least; `seconds(layer)` is a layer's best recorded time, or None."""
    options = plan.options()

    def cost(node: Node, blocks: dict[str, int]) -> float:
        if node.output not in options:
            return 0.0
        residual = blocks.get(node.inputs[-1]) if node.args.get("residual") else None
        v = _variant(node, blocks[node.output], plan.data_block(node, blocks), residual)
        if v is None:
            return math.inf
        rule = (plan.block[node.output], plan.data_block(node, {}))
        if seconds(Node(node.op, layout_args(node, *rule), node.inputs, node.output)) is None:
            return 0.0 if (blocks[node.output], plan.data_block(node, blocks)) == rule else math.inf
        return math.inf if (s := seconds(v)) is None else s

    return choose_blocks(graph.nodes, options, cost)[0]
