"""Blocked activations through a network: rewrite a Graph so that its convolutions
and pools pass blocked tensors ("NCHW{b}c", `tunekit.ops.layout`) from layer to
layer, with their weights blocked once here. Each tensor takes the largest block
that divides its channels, of the target's vector (b) and half of it (MobileNet's
24 channels go in blocks of 8 where b is 16); a conv reads its data in the block its
producer wrote. A tensor stays NCHW where something needs it so: the network's
inputs and feature-map outputs, an op with no blocked form, a channel count that
neither block divides. A tensor of 1 x 1 pixels is the same bytes in every layout,
so it passes between them freely (a global pool's output feeding a dense layer); a
dense of constant weights reads any blocked feature map flattened, its weights
permuted here to the blocked order (DQN's conv -> Flatten -> Gemm).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tunekit.graph import Graph, Node
from tunekit.ops import layout as layouts
from tunekit.ops import winograd

#: the ops this pass can block (data first; a convolution's weight second, its residual last)
LAYOUT_OPS = frozenset({"conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d"})


def channel_block(channels: int, b: int) -> int:
    """The block a tensor of `channels` takes where the target's block is `b`: b, else b / 2
    (at least 4), else 0 (NCHW)."""
    return next((k for k in (b, b // 2) if k >= 4 and channels % k == 0), 0)


def _out_block(node: Node, b: int) -> int:
    return channel_block(node.args["K_out" if node.op == "conv2d" else "C"], b)


def block_options(plan: tuple, b: int) -> dict[str, tuple]:
    """The tensors `block_activations` blocks (by `plan_blocks`' `plan`), each with the
    blocks it may take: the rule's (`channel_block`) first, then the others of (b, b / 2)
    that divide its channels (the graph tuner's choices, `tunekit.graph.layout_search`)."""
    shapes, block, blocked, _ = plan
    return {t: tuple(k for k in dict.fromkeys((block[t], b, b // 2)) if k >= 4 and shapes[t][1] % k == 0)
            for t, on in blocked.items() if on}


def layout_args(node: Node, block: int, data_block: int) -> dict:
    """The args of layout op `node` writing blocks of `block`, its data (a conv's) in `data_block`."""
    args = {**node.args, "layout": layouts.blocked(block)}
    if node.op == "conv2d" and data_block != block:
        args["data_layout"] = layouts.blocked(data_block)
    return args


def block_activations(graph: Graph, b: int, node_shapes: dict[str, tuple], ops=LAYOUT_OPS,
                      blocks: dict[str, int] | None = None) -> Graph:
    """Return `graph` with activations in channel blocks of `b` wherever that needs no
    transpose between layers (see the module's doc); `graph` itself is not changed.

    Args:
        graph: the network, in NCHW.
        b: the largest channel block (the target's vector lanes).
        node_shapes: each node's output shape in NCHW, by output name.
        ops: the ops the target has blocked templates for (of `LAYOUT_OPS`; others stay NCHW).
        blocks: a block for some of the blocked tensors (one of their `block_options`), in
            place of the rule's.
    Returns:
        the new Graph, checked.
    """
    shapes, block, blocked, pixel = plan_blocks(graph, b, node_shapes, ops)
    block.update(blocks or {})
    constants, nodes = dict(graph.constants), []
    for node in graph.nodes:
        data = node.inputs[0] if node.inputs else None
        if node.op == "dense" and blocked.get(data) and data not in pixel:
            # its K axis in the order of the blocked tensor's elements
            key = _derived(constants, node.inputs[1], f"flat{layouts.blocked(block[data])}", _flat_blocked,
                           shapes[data], block[data])
            nodes.append(replace(node, inputs=[data, key, *node.inputs[2:]]))
            continue
        if not blocked[node.output]:
            nodes.append(node)
            continue
        k = block[node.output]
        inputs = list(node.inputs)
        # the data in its producer's block (a 1 x 1 tensor: any block, so the conv's input channels')
        db = block[data] if blocked.get(data) else channel_block(node.args["C"], b) if data in pixel else 0
        args = layout_args(node, k, db)
        if node.op == "conv2d":
            inputs[1] = _derived(constants, inputs[1], layouts.blocked(k), layouts.conv_weight, k)
        elif node.op == "depthwise_conv2d":
            inputs[1] = _derived(constants, inputs[1], layouts.blocked(k), layouts.depthwise_weight, k)
        nodes.append(Node(node.op, args, inputs, node.output, node.name, node.kind))
    out = Graph(graph.inputs, constants, nodes, graph.outputs, graph.shapes, graph.output_shapes, views=graph.views)
    out.check()
    return out


def plan_blocks(graph: Graph, b: int, node_shapes: dict[str, tuple], ops) -> tuple[dict, dict, dict, set]:
    """The rule's plan: (every tensor's shape, the rule's block of each node's output,
    whether that output is blocked, the 1 x 1 tensors)."""
    shapes = dict(node_shapes)
    shapes.update({name: shape for name, (shape, _) in graph.inputs.items()})
    pixel = {t for t, s in shapes.items() if len(s) == 4 and s[2] == s[3] == 1}   # 1x1: either layout
    readers = graph.readers()
    block = {node.output: _out_block(node, b) if node.op in LAYOUT_OPS and node.op in ops else 0
             for node in graph.nodes}
    blocked = {name: k > 0 for name, k in block.items()}

    def ok(node: Node) -> bool:
        if node.op != "conv2d" and not _reads_blocked(node.inputs[0]):
            return False    # a depthwise conv or pool reads its data in its own layout
        if node.args.get("residual") and not _reads_blocked(node.inputs[-1]):
            return False
        if node.output in graph.outputs and node.output not in pixel:
            return False
        # every reader of the output takes it blocked (a conv's data may be either only if the conv is blocked)
        return node.output in pixel or all(blocked[r.output] and (k == 0 or r.args.get("residual")
                                                                  and k == len(r.inputs) - 1)
                                           or _flattens(r, k) for r, k in readers.get(node.output, []))

    def _flattens(reader: Node, k: int) -> bool:
        """A dense reading the tensor flattened, with constant weights: they are permuted to match."""
        return (reader.op == "dense" and k == 0 and reader.inputs[1] in graph.constants
                and reader.args["M"] == shapes[reader.inputs[0]][0])

    def _reads_blocked(name: str) -> bool:
        return blocked.get(name, False) or name in pixel

    changed = True
    while changed:   # only ever unblocks a tensor, so this ends
        changed = False
        for node in graph.nodes:
            if blocked[node.output] and not ok(node):
                blocked[node.output], changed = False, True

    return shapes, block, blocked, pixel


def _flat_blocked(w, shape: tuple, b: int):
    """numpy: dense weights [N_out, C*H*W] over a flattened NCHW tensor, as weights over the
    same tensor flattened in channel block `b`."""
    _, C, H, W = shape
    n = w.shape[0]
    return np.ascontiguousarray(w.reshape(n, C // b, b, H, W).transpose(0, 1, 3, 4, 2).reshape(n, -1))


def _derived(constants: dict, name: str, tag: str, transform, *args) -> str:
    """The name of constant `name` as `transform(value, *args)` (`tag` names the result), added
    to `constants` on first use: each weight is transformed once, however many nodes read it."""
    key = f"{name}:{tag}"
    if key not in constants:
        constants[key] = transform(constants[name], *args)
    return key


def _winograd_weight(w, m: int, b: int):
    """numpy: blocked conv2d weights as Winograd F(m x m, 3 x 3)'s U (`tunekit.ops.winograd`)."""
    return winograd.transform_weights(layouts.conv_weight_oihw(w, b), m, b)


def pack_panels(graph: Graph, nv: int) -> Graph:
    """Return `graph` with the constant B of every matmul in column panels of `nv`
    (`tunekit.ops.layout.panels`, computed here once), the nodes reading it with
    `b_panel = nv`; `graph` itself is not changed."""
    constants, nodes = dict(graph.constants), []
    for node in graph.nodes:
        if node.op != "matmul" or node.args.get("b_panel") or node.inputs[1] not in graph.constants:
            nodes.append(node)
            continue
        key = _derived(constants, node.inputs[1], f"panels{nv}", layouts.panels, nv)
        inputs = [node.inputs[0], key, *node.inputs[2:]]
        nodes.append(replace(node, args={**node.args, "b_panel": nv}, inputs=inputs))
    return replace(graph, constants=constants, nodes=nodes)


def winograd_convs(graph: Graph, tiles: dict[str, int]) -> Graph:
    """Return `graph` with the blocked conv2d writing each tensor of `tiles` run as
    conv2d_winograd of that tile (`tunekit.ops.winograd`), its weights transformed
    here, once; `graph` itself is not changed."""
    constants, nodes = dict(graph.constants), []
    for node in graph.nodes:
        m = tiles.get(node.output)
        if not m:
            nodes.append(node)
            continue
        b = layouts.block_of(node.args["layout"])
        key = _derived(constants, node.inputs[1], f"winograd{m}", _winograd_weight, m, b)
        nodes.append(replace(node, op="conv2d_winograd", args={**node.args, "tile": m},
                             inputs=[node.inputs[0], key, *node.inputs[2:]]))
    return replace(graph, constants=constants, nodes=nodes)


def mbconv_chains(graph: Graph) -> dict[str, tuple[list[Node], dict, list[str]]]:
    """MobileNet-v2's inverted-residual chains of blocked `graph`: [1x1 conv + bias + relu6 ->]
    3x3 depthwise (padding 1) + bias + relu6 -> 1x1 conv + bias [+ the chain's input], each
    inner tensor read by the next layer only, the chain's input and output in one block.
    By the chain's output: (its nodes, the args of the `mbconv` op that computes it, its
    inputs with the weights in NCHW: `fuse_mbconv` blocks them for the chain's block)."""
    producer = {n.output: n for n in graph.nodes}
    readers = {name: len(r) for name, r in graph.readers().items()}

    def conv1x1(n, activation):
        return (n is not None and n.op == "conv2d" and (n.args["R"], n.args["S"]) == (1, 1)
                and tuple(n.args["stride"]) == (1, 1) and tuple(n.args["padding"]) == (0, 0)
                and n.args.get("groups", 1) == 1 and n.args.get("bias") and n.args.get("activation") == activation)

    def nchw(key: str) -> str:   # a weight blocked by `block_activations` -> its NCHW original
        return key.rsplit(":", 1)[0]

    chains = {}
    for c in graph.nodes:
        d = producer.get(c.inputs[0]) if conv1x1(c, "none") else None
        if not (d and d.op == "depthwise_conv2d" and readers[d.output] == 1 and (d.args["R"], d.args["S"]) == (3, 3)
                and tuple(d.args["padding"]) == (1, 1) and tuple(d.args["dilation"]) == (1, 1)
                and d.args["stride"][0] == d.args["stride"][1] in (1, 2) and d.args.get("bias")
                and d.args.get("activation") == "relu6"):
            continue
        e = producer.get(d.inputs[0])
        expand = conv1x1(e, "relu6") and readers[e.output] == 1 and not e.args.get("residual")
        first = e if expand else d
        data = first.inputs[0]
        block = layouts.block_of(first.args.get("data_layout") or first.args.get("layout"))
        if (not block or layouts.block_of(c.args.get("layout")) != block or d.args["C"] % block
                or c.args.get("residual") and c.inputs[-1] != data):
            continue
        a = first.args
        args = dict(N=a["N"], C=a["C"], H=a["H"], W=a["W"], E=d.args["C"], K_out=c.args["K_out"], expand=expand,
                    stride=d.args["stride"][0], residual=bool(c.args.get("residual")), layout=layouts.blocked(block),
                    dtype=a["dtype"])
        weights = ([nchw(e.inputs[1]), e.inputs[2]] if expand else []) + [nchw(d.inputs[1]), d.inputs[2],
                                                                           nchw(c.inputs[1]), c.inputs[2]]
        if all(w in graph.constants for w in weights):
            chains[c.output] = ([e, d, c] if expand else [d, c], args, [data, *weights])
    return chains


def fuse_mbconv(graph: Graph, chains: dict[str, tuple[list[Node], dict, list[str]]]) -> Graph:
    """Return `graph` with each chain of `chains` (`mbconv_chains`' entries) run as one
    `mbconv` node, its weights blocked here, once; `graph` itself is not changed."""
    constants, nodes, gone = dict(graph.constants), [], {n.output for ns, _, _ in chains.values() for n in ns[:-1]}
    for node in graph.nodes:
        if node.output in gone:
            continue
        if node.output not in chains:
            nodes.append(node)
            continue
        members, args, inputs = chains[node.output]
        b = layouts.block_of(args["layout"])

        def blk(name: str, transform, b=b) -> str:
            return _derived(constants, name, layouts.blocked(b), transform, b)
        ws, conv = inputs[1:], layouts.conv_weight
        blocked = ([blk(ws[0], conv), ws[1]] if args["expand"] else []) + [
            blk(ws[-4], layouts.depthwise_weight), ws[-3], blk(ws[-2], conv), ws[-1]]
        name = "+".join(n.name or n.output for n in members)
        nodes.append(Node("mbconv", args, [inputs[0], *blocked], node.output, name, "mbconv"))
    return replace(graph, constants=constants, nodes=nodes)
