"""The ONNX nodes that move data, lowered through `tunekit.topi.layout`. Output shapes come from
shape inference (`cx.out_shapes`: Reshape's 0 and -1, Squeeze's and Unsqueeze's axes, Split's sizes
and Slice's ends resolved); a lowering reads only what says which element goes where."""
from __future__ import annotations

from tunekit.topi import layout

from .context import NodeContext, ident, lowerings


def reshape(cx: NodeContext) -> list:
    """Reshape, Flatten, Squeeze, Unsqueeze: the same elements in row-major order."""
    return [layout.reshape(cx.tensor(0), cx.out_shapes[0], ident(cx.name))]


def _gather(cx: NodeContext) -> list:
    """Gather and GatherND (batch_dims 0): constant indices read by value where they step evenly."""
    if cx.attr("batch_dims", 0):
        raise cx.fail("only batch_dims 0 is supported")
    x, ind = cx.tensor(0), cx.tensor(1) if cx.const(1) is None else cx.const(1)
    if cx.op_type == "Gather":
        return [layout.gather(x, ind, cx.attr("axis", 0), ident(cx.name), lambda: cx.tensor(1))]
    return [layout.gather_nd(x, ind, ident(cx.name), lambda: cx.tensor(1))]


LOWERINGS = lowerings({
    "Reshape": reshape, "Flatten": reshape, "Squeeze": reshape, "Unsqueeze": reshape,
    "Transpose": lambda cx: [layout.transpose(cx.tensor(0), cx.attr("perm"), ident(cx.name))],
    "Concat": lambda cx: [layout.concat([cx.tensor(k) for k in range(len(cx.values))], cx.attr("axis"),
                                        ident(cx.name))],
    "Split": lambda cx: layout.split(cx.tensor(0), cx.attr("axis", 0), cx.out_shapes, ident(cx.name)),
    "Gather": _gather, "GatherND": _gather,
    "Slice": lambda cx: [layout.strided_slice(cx.tensor(0), cx.ints(1, "starts"), cx.out_shapes[0], ident(cx.name),
                                              cx.ints(3, "axes"), cx.ints(4, "steps"))],
    "Pad": lambda cx: [layout.pad(cx.tensor(0), cx.ints(1, "pads"), cx.attr("mode", "constant"),
                                  cx.tensor(2) if cx.has(2) else cx.attr("value", 0), ident(cx.name),
                                  cx.ints(3, "axes"))],
    "Expand": lambda cx: [layout.expand(cx.tensor(0), cx.out_shapes[0], ident(cx.name))],
    "Tile": lambda cx: [layout.tile(cx.tensor(0), cx.out_shapes[0], ident(cx.name))],
    "Identity": lambda cx: [layout.copy(cx.tensor(0), ident(cx.name))],
})
