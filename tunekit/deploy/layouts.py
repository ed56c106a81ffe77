"""A layout chosen per layer (AutoTVM's graph tuner): the channel block of every blocked
tensor of a network picked by its layers' records, for the whole network at once
(`tunekit.graph.layout_search`), instead of the rule's one block per target.

A layer's cost under a choice of blocks is the best record of its task in those
layouts (of any algorithm it may run: `algorithms.alternatives`). A conv reads its
data in any block, so the transform between two blocks costs what the conv's own
records say; a depthwise conv or pool reads and writes one block, and a conv's
residual is read in its output's block, so choices that break these cost infinity.
A layer whose rule layout has no record keeps the rule's blocks (it is free; the
others cost infinity), so an untuned network runs the rule's layout.
"""
from __future__ import annotations

import math

from tunekit.graph import Graph, Node
from tunekit.graph.layout import block_options, channel_block, layout_args, plan_blocks
from tunekit.graph.layout_search import choose_blocks
from tunekit.plugin.registry import task as make_task
from tunekit.store.database import Database
from tunekit.task import Task

from .algorithms import alternatives, fastest


def _data_block(node: Node, blocks: dict, rule: dict, pixel: set, b: int) -> int:
    data = node.inputs[0]
    if data in pixel:
        return channel_block(node.args["C"], b)
    return blocks.get(data, rule.get(data, 0))


def _variant(node: Node, block: int, data_block: int, residual_block: int | None) -> Task | None:
    """The task of layout op `node` in these blocks, or None where it cannot run so."""
    if node.op != "conv2d" and data_block != block:
        return None
    if node.args.get("residual") and residual_block not in (None, block):
        return None
    return make_task(node.op, layout_args(node, block, data_block))


def _layers(graph: Graph, b: int, shapes: dict, ops) -> tuple[dict, dict, set]:
    """(each blocked tensor's options, the rule's blocks (each tensor's first option), the 1 x 1 tensors)."""
    plan = plan_blocks(graph, b, shapes, ops)
    options = block_options(plan, b)
    return options, {t: o[0] for t, o in options.items()}, plan[3]


def layout_tasks(graph: Graph, b: int, shapes: dict, ops, target) -> list[Task]:
    """Every task the layers of `graph` (in NCHW) may run in the blocks they may take, with
    their algorithms' alternatives: what the graph tuner needs records of."""
    options, rule, pixel = _layers(graph, b, shapes, ops)
    tasks: dict[str, Task] = {}
    for node in graph.nodes:
        if node.output not in options:
            continue
        data = node.inputs[0]
        for k in options[node.output]:
            for db in options.get(data, (_data_block(node, {}, rule, pixel, b),)):
                task = _variant(node, k, db, None)
                if task is not None:
                    for t in [task, *alternatives(Node(node.op, task.args, node.inputs, node.output), target)]:
                        tasks.setdefault(t.key, t)
    return list(tasks.values())


def choose_layouts(graph: Graph, b: int, shapes: dict, ops, target, db: Database) -> dict[str, int]:
    """The block of each blocked tensor of `graph` (in NCHW) whose layers' records sum least."""
    options, rule, pixel = _layers(graph, b, shapes, ops)
    memo: dict[tuple, float] = {}

    def seconds(task: Task) -> float:
        if task.key not in memo:
            best = fastest(db, Node(task.op.name, task.args, [], ""), target)
            memo[task.key] = best[0] if best else math.nan
        return memo[task.key]

    def cost(node: Node, blocks: dict[str, int]) -> float:
        if node.output not in options:
            return 0.0
        k, dk = blocks[node.output], _data_block(node, blocks, rule, pixel, b)
        task = _variant(node, k, dk, blocks.get(node.inputs[-1]) if node.args.get("residual") else None)
        if task is None:
            return math.inf
        rule_k, rule_dk = rule[node.output], _data_block(node, {}, rule, pixel, b)
        if math.isnan(seconds(make_task(node.op, layout_args(node, rule_k, rule_dk)))):
            return 0.0 if (k, dk) == (rule_k, rule_dk) else math.inf   # an untuned layer keeps the rule's blocks
        s = seconds(task)
        return math.inf if math.isnan(s) else s

    blocks, _ = choose_blocks(graph.nodes, options, cost)
    return blocks
