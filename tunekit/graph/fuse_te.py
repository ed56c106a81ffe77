"""The te-fusion pass: the te calls a frontend translated a model into become kernels, each a
group of them whose computation is its members' te composed (`Node.computation`).

A producer joins its reader's group when the reader alone reads its output and:
- the reader is injective (elementwise, broadcast, layout): any producer group with at most one
  reduction or contraction between them (a chain after a softmax or a transposed convolution
  is its output stage);
- the reader is a reduction: the producer group is injective (inlined into it);
- the reader is a contraction (a matmul of two tensors): the producer group only moves data (a
  transpose feeding a matmul becomes its operand's indexing, not a copy).
A reshape left alone is an alias (its readers read its input's bytes). With `group` off, each
te call is a kernel of its own.
"""
from __future__ import annotations

from dataclasses import replace

from tunekit import te
from tunekit.graph import Graph, Node, resolve
from tunekit.topi.elementwise import ident, kernel_output, kernel_parameter


def fuse_te(graph: Graph, group: bool = True) -> Graph:
    """Return `graph` with its te calls grouped into computation nodes (see the module's doc);
    `graph` itself is not changed."""
    uses, made = graph.uses(), {n.output: n for n in graph.nodes if n.call}
    root = {n.output: n.output for n in made.values()}      # a call's output -> its group's root's
    members = {n.output: [n] for n in made.values()}         # a root's output -> its group, in order
    for n in made.values() if group else ():
        for name in dict.fromkeys(n.inputs):
            if root.get(name) == name and uses.get(name) == 1 and _joins(members[name], members[root[n.output]], n):
                r = root[n.output]
                for m in members[name]:
                    root[m.output] = r
                # a producer's subtree before its reader: the members stay in an order to compute them
                members[r] = [*members.pop(name), *members[r]]
    alias = {out: g[0].inputs[0] for out, g in members.items() if len(g) == 1 and g[0].call.reshape}

    nodes = []
    for n in graph.nodes:
        if not n.call:
            nodes.append(replace(n, inputs=[resolve(alias, i) for i in n.inputs]))
        elif root[n.output] == n.output and n.output not in alias:
            group_ = members[n.output]
            reads, tensors = _computation(graph, group_)
            kinds = "_".join(dict.fromkeys(m.op for m in group_))
            op = (f"{graph.frontend}_{kinds}" if graph.frontend else kinds)[:64].rstrip("_")
            nodes.append(Node(op, {}, [resolve(alias, i) for i in reads], n.output, n.name,
                              "+".join(dict.fromkeys(m.kind for m in group_)), computation=te.to_data(tensors)))
    return replace(graph, nodes=nodes, outputs=[resolve(alias, o) for o in graph.outputs])


def _heavy(group: list[Node]) -> int:
    """How many of a group's members reduce (a reduction or a contraction)."""
    return sum(m.call.kind != "injective" for m in group)


def _joins(producer: list[Node], reader_group: list[Node], reader: Node) -> bool:
    if reader.call.kind == "injective":
        return _heavy(producer) + _heavy(reader_group) <= 1
    if reader.call.kind == "reduction":
        return _heavy(producer) == 0
    return all(m.call.moves for m in producer)


def _computation(graph: Graph, group: list[Node]) -> tuple[list[str], list[te.Tensor]]:
    """The te computation of a group: the tensors it reads from outside (their names) and the te
    tensors (placeholders in that order, then the output; bool tensors cross kernels as uint8)."""
    env, params = {}, {}   # tensor -> its te tensor; (tensor, shape) read from outside -> (placeholder, te read)

    def outside(node: Node, k: int) -> te.Tensor:
        t, shape = node.inputs[k], tuple(node.call.shapes[k])   # (an alias reads its tensor in its own shape)
        if (t, shape) not in params:
            dtype = str(graph.constants[t].dtype) if t in graph.constants else graph.dtypes[t]
            params[t, shape] = kernel_parameter(shape, ident(t), dtype)
        return params[t, shape][1]

    for m in group:   # in an order that computes each before its reader
        values = [None if not i else env[i] if i in env else graph.constants.get(i) if i in graph.constants
                  else outside(m, k) for k, i in enumerate(m.inputs)]
        env[m.output] = m.call.lower(values, lambda k, m=m: outside(m, k))
    return [t for t, _ in params], [*(p for p, _ in params.values()), kernel_output(env[group[-1].output])]
