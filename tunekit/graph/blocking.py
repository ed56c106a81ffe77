"""The channel-blocking pass: rewrite a Graph so that its convolutions and pools pass
blocked tensors ("NCHW{b}c", `tunekit.ops.layout`) from layer to layer, with their
weights blocked once here. Each tensor takes the largest block that divides its
channels, of the target's vector (b) and half of it (MobileNet's 24 channels go in
blocks of 8 where b is 16); a conv reads its data in the block its producer wrote.
A tensor stays NCHW where something needs it so: the network's inputs and feature-map
outputs, an op with no blocked form, a channel count that neither block divides. A
tensor of 1 x 1 pixels is the same bytes in every layout, so it passes between them
freely (a global pool's output feeding a dense layer); a dense of constant weights
reads any blocked feature map flattened, its weights permuted here to the blocked
order (DQN's conv -> Flatten -> Gemm).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tunekit.graph import Graph, Node
from tunekit.graph.rewrite import rewrite
from tunekit.ops import layout as layouts

#: the ops this pass can block (data first; a convolution's weight second, its residual last)
LAYOUT_OPS = frozenset({"conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d"})


def channel_block(channels: int, b: int) -> int:
    """The block a tensor of `channels` takes where the target's block is `b`: b, else b / 2
    (at least 4), else 0 (NCHW)."""
    return next((k for k in (b, b // 2) if k >= 4 and channels % k == 0), 0)


@dataclass
class BlockPlan:
    """The rule's plan for a graph's activations (`plan_blocks`)."""
    b: int                        #: the largest channel block (the target's vector lanes)
    shapes: dict[str, tuple]      #: every tensor's shape, in NCHW
    block: dict[str, int]         #: the rule's block of each node's output (0: none)
    blocked: dict[str, bool]      #: whether that output is blocked
    pixel: set[str]               #: the tensors of 1 x 1 pixels (the same bytes in every layout)

    def options(self) -> dict[str, tuple]:
        """The blocked tensors, each with the blocks it may take: the rule's first, then the
        others of (b, b / 2) that divide its channels (the graph tuner's choices)."""
        b = self.b
        return {t: tuple(k for k in dict.fromkeys((self.block[t], b, b // 2)) if k >= 4 and self.shapes[t][1] % k == 0)
                for t, on in self.blocked.items() if on}

    def data_block(self, node: Node, blocks: dict[str, int]) -> int:
        """The block `node` reads its data in, under `blocks` (the rule's where not given)."""
        data = node.inputs[0]
        if self.blocked.get(data):
            return blocks.get(data, self.block[data])
        return channel_block(node.args["C"], self.b) if data in self.pixel else 0   # 1 x 1: any block


def layout_args(node: Node, block: int, data_block: int) -> dict:
    """The args of layout op `node` writing blocks of `block`, its data (a conv's) in `data_block`."""
    args = {**node.args, "layout": layouts.blocked(block)}
    if node.op == "conv2d" and data_block != block:
        args["data_layout"] = layouts.blocked(data_block)
    return args


def plan_blocks(graph: Graph, b: int, node_shapes: dict[str, tuple], ops) -> BlockPlan:
    """The rule's plan of `graph` (in NCHW; `node_shapes`: each node's output shape) where the
    target's block is `b` and it runs `ops` (of `LAYOUT_OPS`) blocked."""
    shapes = {**node_shapes, **{name: shape for name, (shape, _) in graph.inputs.items()}}
    pixel = {t for t, s in shapes.items() if len(s) == 4 and s[2] == s[3] == 1}   # 1x1: either layout
    readers = graph.readers()
    block = {n.output: channel_block(n.args["K_out" if n.op == "conv2d" else "C"], b)
             if n.op in LAYOUT_OPS and n.op in ops else 0 for n in graph.nodes}
    blocked = {name: k > 0 for name, k in block.items()}

    def reads_blocked(name: str) -> bool:
        return blocked.get(name, False) or name in pixel

    def flattens(reader: Node, k: int) -> bool:
        """A dense reading the tensor flattened, with constant weights: they are permuted to match."""
        return (reader.op == "dense" and k == 0 and reader.inputs[1] in graph.constants
                and reader.args["M"] == shapes[reader.inputs[0]][0])

    def ok(node: Node) -> bool:
        if node.op != "conv2d" and not reads_blocked(node.inputs[0]):
            return False    # a depthwise conv or pool reads its data in its own layout
        if node.args.get("residual") and not reads_blocked(node.inputs[-1]):
            return False
        if node.output in graph.outputs and node.output not in pixel:
            return False
        # every reader of the output takes it blocked (a conv's data may be either only if the conv is blocked)
        return node.output in pixel or all(blocked[r.output] and (k == 0 or r.args.get("residual")
                                                                  and k == len(r.inputs) - 1)
                                           or flattens(r, k) for r, k in readers.get(node.output, []))

    changed = True
    while changed:   # only ever unblocks a tensor, so this ends
        changed = False
        for node in graph.nodes:
            if blocked[node.output] and not ok(node):
                blocked[node.output], changed = False, True
    return BlockPlan(b, shapes, block, blocked, pixel)


def block_activations(graph: Graph, plan: BlockPlan, blocks: dict[str, int] | None = None) -> Graph:
    """Return `graph` with activations in channel blocks wherever that needs no transpose
    between layers (see the module's doc); `graph` itself is not changed.

    Args:
        graph: the network, in NCHW.
        plan: its `plan_blocks`.
        blocks: a block for some of the blocked tensors (one of their `plan.options()`), in
            place of the rule's.
    Returns:
        the new Graph, checked.
    """
    block = {**plan.block, **(blocks or {})}

    def visit(node: Node, rw) -> Node:
        data = node.inputs[0] if node.inputs else None
        if node.op == "dense" and plan.blocked.get(data) and data not in plan.pixel:
            # its K axis in the order of the blocked tensor's elements
            key = rw.derived(node.inputs[1], f"flat{layouts.blocked(block[data])}", _flat_blocked,
                             plan.shapes[data], block[data])
            return Node(node.op, node.args, [data, key, *node.inputs[2:]], node.output, node.name, node.kind)
        if not plan.blocked[node.output]:
            return node
        k, inputs = block[node.output], list(node.inputs)
        args = layout_args(node, k, plan.data_block(node, block))
        if node.op in ("conv2d", "depthwise_conv2d"):
            transform = layouts.conv_weight if node.op == "conv2d" else layouts.depthwise_weight
            inputs[1] = rw.derived(inputs[1], layouts.blocked(k), transform, k)
        return Node(node.op, args, inputs, node.output, node.name, node.kind)

    out = rewrite(graph, visit)
    out.check()
    return out


def _flat_blocked(w, shape: tuple, b: int):
    """numpy: dense weights [N_out, C*H*W] over a flattened NCHW tensor, as weights over the
    same tensor flattened in channel block `b`."""
    _, C, H, W = shape
    n = w.shape[0]
    return np.ascontiguousarray(w.reshape(n, C // b, b, H, W).transpose(0, 1, 3, 4, 2).reshape(n, -1))
