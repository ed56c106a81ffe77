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

from tunekit import ir, te
from tunekit.te.tensor import ComputeOp

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
    """The te computation of `root`'s group: the tensors it reads from outside (their names)
    and the te tensors (placeholders in that order, then the output). Bool tensors cross
    kernels as uint8 (a kernel's arrays are never bool)."""
    env: dict[str, te.Tensor] = {}
    reads: list[str] = []
    holders: dict[str, te.Tensor] = {}
    placeholders: list[te.Tensor] = []

    def outside(name: str) -> te.Tensor:
        if name not in holders:
            dtype = cv.dtype(name)
            p = te.placeholder(cv.shapes[name], ident(name), "uint8" if dtype == "bool" else dtype)
            reads.append(name)
            placeholders.append(p)
            holders[name] = p if dtype != "bool" else te.compute(
                p.shape, lambda *i: ir.ne(p[i], ir.const(0, "uint8")), name=f"{p.name}_mask")
        return holders[name]

    for m in root.members:   # in an order that computes each before its reader (`fuse`)
        values = [None if not i else env[i] if i in env else cv.consts[cv.name(i)] if cv.name(i) in cv.consts
                  else outside(i) for i in m.inputs]
        cx = NodeContext(m.op_type, m.name, m.attrs, values, [cv.shapes[o] for o in m.outputs],
                         [cv.dtype(o) for o in m.outputs], lambda k, m=m: outside(m.inputs[k]), cv.path)
        env[m.output] = m.fn(cx)[m.index]
    out = env[root.output]
    if not isinstance(out.op, ComputeOp):   # a node that returns its input (a Cast to its own type)
        out = te.compute(out.shape, lambda *i: out[i], name=f"{out.name}_copy")
    if out.dtype == "bool":
        out = te.compute(out.shape, lambda *i: ir.cast(out[i], "uint8"), name=f"{out.name}_u8")
    return reads, [*placeholders, out]


def group_name(root: TeItem) -> str:
    """The name of the group's computation: its members' op types ("onnx_add_erf_mul")."""
    kinds = list(dict.fromkeys(m.op_type.lower() for m in root.members))
    return ("onnx_" + "_".join(kinds))[:64].rstrip("_")
