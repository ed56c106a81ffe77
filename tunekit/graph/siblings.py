"""The sibling-merge pass: matmuls of constant weights that read the same data (a transformer's
Q, K and V projections) become one matmul of their weights side by side: one kernel, one pass
over the data, N the sum. Each one's output is a column range of it, a te call its readers fuse."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tunekit.graph import Graph, Node, TeCall
from tunekit.topi.layout import columns, reshape


def merge_siblings(graph: Graph) -> Graph:
    """Return `graph` with sibling matmuls merged (see the module's doc); `graph` itself is not
    changed. A matmul with a residual or an activation, or whose output stays a tensor of its own
    (an output of the graph, read by an op), is left alone."""
    groups: dict[tuple, list[Node]] = {}
    for n in graph.nodes:
        if n.op == "matmul" and not n.call and not n.args.get("residual") and n.args.get("activation") == "none" \
                and n.inputs[1] in graph.constants:
            groups.setdefault((n.inputs[0], n.args["M"], n.args["K"], bool(n.args.get("bias"))), []).append(n)
    kept = set(graph.outputs) | {i for n in graph.nodes if not n.call for i in n.inputs}
    merged = {}   # the first sibling's output -> [the merged matmul, a columns call per sibling]
    consts, shapes, dtypes = dict(graph.constants), dict(graph.shapes), dict(graph.dtypes)
    gone, renamed = set(), {}
    for (*_, bias), sib in groups.items():
        sib = [f for f in sib if f.output not in kept]
        if len(sib) < 2:
            continue
        out, N = f"{sib[0].output}/merged", sum(f.args["N"] for f in sib)
        consts[out + "/kn:tunekit"] = np.ascontiguousarray(np.concatenate([consts[f.inputs[1]] for f in sib], 1))
        inputs = [sib[0].inputs[0], out + "/kn:tunekit"]
        if bias:
            consts[out + "/bias:tunekit"] = np.ascontiguousarray(np.concatenate([consts[f.inputs[2]] for f in sib]))
            inputs.append(out + "/bias:tunekit")
        shapes[out], dtypes[out] = (*shapes[sib[0].output][:-1], N), "float32"
        nodes, start = [Node("matmul", {**sib[0].args, "N": N}, inputs, out, sib[0].name, sib[0].kind)], 0
        for f in sib:
            nodes.append(Node("slice", {}, [out], f.output, f.name, "Slice", call=TeCall(
                lambda values, outside, start=start, width=f.args["N"]: columns(values[0], start, width, "columns"),
                [shapes[out]], moves=True)))
            start += f.args["N"]
            # a te call that read the output in another shape (through an alias of it) reads a reshape of it now
            for shape in dict.fromkeys(tuple(r.call.shapes[k]) for r in graph.nodes if r.call
                                       for k, i in enumerate(r.inputs) if i == f.output and r.call.shapes[k] !=
                                       shapes[f.output]):
                name = renamed[f.output, shape] = f"{f.output}@{'x'.join(map(str, shape))}"
                shapes[name], dtypes[name] = shape, "float32"
                nodes.append(Node("reshape", {}, [f.output], name, f.name, "Reshape", call=TeCall(
                    lambda values, outside, shape=shape: reshape(values[0], shape, "reshaped"), [shapes[f.output]],
                    moves=True, reshape=True)))
        merged[sib[0].output] = nodes
        gone |= {f.output for f in sib}
    if not merged:
        return graph
    nodes = [m for n in graph.nodes
             for m in (merged.get(n.output) or ([] if n.output in gone else [_read(n, renamed)]))]
    return replace(graph, constants=consts, nodes=nodes, shapes=shapes, dtypes=dtypes)


def _read(node: Node, renamed: dict) -> Node:
    """`node` reading the reshapes of `renamed` ((tensor, shape) -> its reshape) where it reads those."""
    if not node.call:
        return node
    inputs = [renamed.get((i, tuple(s)), i) for i, s in zip(node.inputs, node.call.shapes)]
    return node if inputs == node.inputs else replace(node, inputs=inputs)
