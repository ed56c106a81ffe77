"""The graph tuner's search: a layout (channel block) for every blocked tensor of a
network, the one whose layers cost least together (AutoTVM's graph tuner).

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

from tunekit.graph import Node

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
    last = {}
    for k, node in enumerate(nodes):
        for name in node.inputs:
            last[name] = k
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
    if math.isinf(total):
        return {t: opts[0] for t, opts in options.items()}, total
    return {t: chosen.get(t, opts[0]) for t, opts in options.items()}, total
