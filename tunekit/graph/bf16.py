"""The bfloat16 passes (`precision="bf16"`): a matmul or dense of constant weights runs as bmatmul
(`tunekit.ops.bmatmul`: bfloat16 data and weights, float32 accumulation), its weights packed in
the instruction's pairs once, its data rounded to pairs by a te call that fuses into what
computes it (`to_bf16`); a blocked convolution runs as bconv2d (`tunekit.ops.bconv2d`), which
rounds its data itself (`convs_to_bf16`). The epilogues go along; other nodes stay float32."""
from __future__ import annotations

import numpy as np

from tunekit.graph import Graph, Node, TeCall
from tunekit.graph.rewrite import rewrite
from tunekit.ops import bconv2d
from tunekit.ops.bmatmul import pack_weights
from tunekit.ops.layout import block_of
from tunekit.topi.elementwise import ident
from tunekit.topi.quantize import bf16_pairs


def to_bf16(graph: Graph) -> Graph:
    """Return `graph` with its matmuls and denses of constant float32 weights (K even) as bmatmul;
    `graph` itself is not changed."""
    shapes, dtypes = dict(graph.shapes), dict(graph.dtypes)

    def visit(node: Node, rw) -> Node | list[Node]:
        w = node.inputs[1] if node.op in ("matmul", "dense") and len(node.inputs) > 1 else None
        a = node.inputs[0]
        # pairs of a row are pairs of neighbours in the data's own shape where its last axis is even
        if w not in graph.constants or graph.constants[w].dtype != np.float32 or node.args["K"] % 2 \
                or node.args.get("b_panel") or graph.shapes[a][-1] % 2:
            return node
        key = rw.derived(w, "bf16", lambda v: pack_weights(v if node.op == "matmul" else v.T))
        pairs, convert = f"{a}/bf16", []
        if pairs not in shapes:   # data read by several products is rounded once
            shapes[pairs], dtypes[pairs] = (*graph.shapes[a][:-1], graph.shapes[a][-1] // 2), "int32"
            convert.append(Node("bf16", {}, [a], pairs, f"{node.name or node.output}_bf16", "Cast",
                                call=TeCall(lambda values, outside, n=pairs: bf16_pairs(values[0], ident(n)),
                                            [tuple(graph.shapes[a])])))
        args = {k: v for k, v in node.args.items() if k != "b_panel"}
        return [*convert, Node("bmatmul", args, [pairs, key, *node.inputs[2:]], node.output, node.name, node.kind)]

    out = rewrite(graph, visit)
    out.shapes, out.dtypes = shapes, dtypes
    return out


def convs_to_bf16(graph: Graph) -> Graph:
    """Return `graph` with its blocked conv2ds of constant float32 weights (C even, the data NCHW or
    in even blocks) as bconv2d; `graph` itself is not changed."""
    def visit(node: Node, rw) -> Node:
        w = node.inputs[1] if node.op == "conv2d" else None
        db = block_of(node.args.get("data_layout") or node.args.get("layout", "NCHW"))
        if w not in graph.constants or graph.constants[w].dtype != np.float32 or node.args["C"] % 2 or db % 2 \
                or not block_of(node.args.get("layout", "NCHW")):
            return node
        key = rw.derived(w, "bf16", bconv2d.pack_weights)
        return Node("bconv2d", node.args, [node.inputs[0], key, *node.inputs[2:]], node.output, node.name, node.kind)

    return rewrite(graph, visit)
