"""Fusion as a graph pass: the ONNX nodes lowered to te (`TeItem`) are grouped, each group
one kernel whose computation is its members' te composed.

A producer joins its consumer's group when the consumer alone reads its output and:
- the consumer is injective (elementwise, broadcast, layout): any producer group with at
  most one reduction or contraction between them (a chain after a softmax or a
  transposed convolution is its output stage);
- the consumer is a reduction: the producer group is injective (inlined into it);
- the consumer is a contraction (a MatMul of two tensors): the producer group only moves
  data (a Transpose feeding a MatMul becomes its operand's indexing, not a copy).
A reshape-like node left alone is an alias (the same bytes under another shape).
"""
from __future__ import annotations

from tunekit import te
from tunekit.topi import elementwise

from .context import NodeContext, ident

#: nodes whose output is their input's bytes in another shape (an alias unless fused)
RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
#: injective nodes that only move data (free to inline into a contraction's operand)
MOVES = RESHAPES | {"Transpose", "Slice", "Gather", "Expand", "Concat", "Split", "Cast", "Pad"}


class TeItem:
    """Output `index` of one node, lowered by `fn`, with its group (`root`, `members`)."""

    def __init__(self, op_type, name, attrs, inputs, outputs, index, fn, kind):
        self.op_type, self.name, self.attrs, self.inputs, self.outputs = op_type, name, attrs, inputs, outputs
        self.index, self.fn, self.kind = index, fn, kind
        self.output = outputs[index]
        self.root, self.members = self, [self]

    def heavy(self) -> int:
        """How many of the group's members reduce (a reduction or a contraction)."""
        return sum(m.kind != "injective" for m in self.members)


class Fixed:
    """An item that is one prebuilt graph node (an LSTM step, a transposed convolution's phase)."""

    def __init__(self, node):
        self._node, self.output = node, node.output

    def node(self):
        return self._node


def _joins(producer: TeItem, consumer: TeItem) -> bool:
    if consumer.kind == "injective":
        return producer.heavy() + consumer.root.heavy() <= 1
    if consumer.kind == "reduction":
        return producer.heavy() == 0
    return all(m.op_type in MOVES for m in producer.members)


def fuse(items: list, made: dict, consumers: dict) -> None:
    """Group the TeItems of `items` (in execution order) in place; `made` maps a tensor to the
    item that writes it, `consumers` a tensor to how many nodes (and graph outputs) read it."""
    for it in items:
        if not isinstance(it, TeItem):
            continue
        for name in dict.fromkeys(it.inputs):
            p = made.get(name)
            if isinstance(p, TeItem) and p.root is p and consumers.get(name) == 1 and _joins(p, it):
                for m in p.members:
                    m.root = it.root
                # a producer's subtree before its reader: the members stay in an order to compute them
                it.root.members = [*p.members, *it.root.members]


def group_tensors(cv, root: TeItem) -> tuple[list[str], list[te.Tensor]]:
    """The te computation of `root`'s group: the tensors it reads from outside (their names) and the
    te tensors (placeholders in that order, then the output; bool tensors cross kernels as uint8)."""
    env, params = {}, {}   # tensor -> its te tensor; one read from outside -> (placeholder, te tensor read)

    def outside(name: str) -> te.Tensor:
        if name not in params:
            params[name] = elementwise.kernel_parameter(cv.shapes[name], ident(name), cv.dtype(name))
        return params[name][1]

    for m in root.members:   # in an order that computes each before its reader (`fuse`)
        values = [None if not i else env[i] if i in env else cv.consts[cv.name(i)] if cv.name(i) in cv.consts
                  else outside(i) for i in m.inputs]
        cx = NodeContext(m.op_type, m.name, m.attrs, values, [cv.shapes[o] for o in m.outputs],
                         [cv.dtype(o) for o in m.outputs], lambda k, m=m: outside(m.inputs[k]), cv.path)
        env[m.output] = m.fn(cx)[m.index]
    return list(params), [*(p for p, _ in params.values()), elementwise.kernel_output(env[root.output])]


def group_name(root: TeItem) -> str:
    """The name of the group's computation: its members' op types ("onnx_add_erf_mul")."""
    kinds = list(dict.fromkeys(m.op_type.lower() for m in root.members))
    return ("onnx_" + "_".join(kinds))[:64].rstrip("_")
