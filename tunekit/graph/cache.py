"""The append-cache pass: a language model's key/value cache appended to in place.

An exported model takes the past keys (values) of each layer as an input and returns the
present, the past joined with the new entries (a Concat along the sequence axis), which the
next step takes as its past: a copy of the whole cache per step. Laid out with the
sequence axis first, the past is the leading part of the present: this pass makes the
present one tensor of that layout, the past input a view of its leading part, and the Concat
a write of the new entries alone into the view after it. Its readers read it through a
transpose back to the model's layout (a move, fused into them).
"""
from __future__ import annotations

import dataclasses
import math

from tunekit.graph import Graph, Node, TeCall
from tunekit.topi.elementwise import ident
from tunekit.topi.layout import transpose


def append_cache(graph: Graph) -> Graph:
    """Return `graph` with each Concat of two tensors along one axis, the first a graph input
    read by nothing else (the past) and its output a graph output (the present), rewritten as
    above: the input and the output then have the sequence-major layout (the axis first, the
    others in order), the input's bytes the leading part of the output's. `graph` itself is not
    changed."""
    readers = graph.readers()
    renamed: dict[str, str] = {}   # a present -> the tensor its readers read instead
    nodes, inputs, views = [], dict(graph.inputs), dict(graph.views)
    shapes, dtypes, out_shapes = dict(graph.shapes), dict(graph.dtypes), list(graph.output_shapes)
    for node in graph.nodes:
        axis = _appends(graph, node, readers)
        if axis is None:
            if renamed.keys() & set(node.inputs):
                node = dataclasses.replace(node, inputs=[renamed.get(name, name) for name in node.inputs])
            nodes.append(node)
            continue
        past, new = node.inputs
        present, dtype = node.output, inputs[past][1]
        perm = [axis, *(d for d in range(len(shapes[present])) if d != axis)]
        back = [perm.index(d) for d in range(len(perm))]
        before, added, length = (tuple(shapes[t][d] for d in perm) for t in (past, new, present))
        inputs[past], shapes[past] = (before, dtype), before
        views[past] = (present, 0, before)
        written, joined = f"{present}:appended", f"{present}:joined"
        views[written] = (present, math.prod(before), added)
        shapes.update({written: added, present: length, joined: graph.shapes[present]})
        dtypes.update({written: dtype, present: dtype, joined: dtype})
        out_shapes[graph.outputs.index(present)] = length
        nodes.append(Node("transpose", {}, [new], written, node.name, node.kind,
                          call=TeCall(_transposed(perm, written), [graph.shapes[new]], moves=True)))
        nodes.append(Node("transpose", {}, [present], joined, f"{node.name}:read", node.kind,
                          call=TeCall(_transposed(back, joined), [length], moves=True)))
        renamed[present] = joined
    return Graph(inputs, graph.constants, nodes, graph.outputs, shapes, out_shapes, graph.source, views,
                 graph.input_bounds, dtypes, graph.frontend, graph.output_steps, graph.quantized)


def _appends(graph: Graph, node: Node, readers: dict) -> int | None:
    """The axis along which `node` appends new entries to a past input into a present output, or None."""
    if node.call is None or node.kind != "Concat" or len(node.inputs) != 2:
        return None
    past, new = node.inputs
    if past not in graph.inputs or past in graph.views or len(readers.get(past, ())) != 1 or \
            node.output not in graph.outputs:
        return None
    a, b, out = graph.shapes[past], graph.shapes[new], graph.shapes[node.output]
    axes = [d for d in range(len(out)) if not a[d] == b[d] == out[d]]
    if len(a) != len(b) or len(axes) != 1 or a[axes[0]] + b[axes[0]] != out[axes[0]]:
        return None
    return axes[0]


def _transposed(perm: list[int], name: str):
    return lambda values, outside: transpose(values[0], perm, ident(name))
