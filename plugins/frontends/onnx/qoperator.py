"""The QOperator form (onnxruntime.quantization's QuantFormat.QOperator) read as the QDQ form it
computes: QLinearConv, QLinearMatMul and com.microsoft's QLinearAdd and QLinearGlobalAveragePool
become DequantizeLinear of each 8-bit input, the float node, and QuantizeLinear of its output.
Loading then folds the dequantized weights into constants, and the core's QDQ pass folds each
dequantize -> conv or matmul -> quantize into one int8 op (`tunekit.graph.qdq`), as it does for
a QDQ model; what it does not fold runs in float32 between the quantizations."""
from __future__ import annotations

import math

from tunekit.errors import ModelError

#: the QOperator nodes read, by domain
QOPERATORS = {"QLinearConv": "", "QLinearMatMul": "", "QLinearAdd": "com.microsoft",
              "QLinearGlobalAveragePool": "com.microsoft"}


def as_qdq(model, path: str):
    """Return `model` with its QOperator nodes in the QDQ form (see the module's doc)."""
    from onnx import helper
    g = model.graph
    if any(map(_qoperator, g.node)):
        sizes = {t.name: math.prod(t.dims) for t in g.initializer}
        nodes = [m for n in g.node for m in (_expand(n, path, helper, sizes) if _qoperator(n) else [n])]
        del g.node[:]
        g.node.extend(nodes)
    return model


def _qoperator(n) -> bool:
    return n.op_type in QOPERATORS and (n.domain if n.domain != "ai.onnx" else "") == QOPERATORS[n.op_type]


def _expand(n, path: str, helper, sizes: dict) -> list:
    ins, y, name = [*n.input, *[""] * 9], n.output[0], n.name or n.output[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}

    def dq(k: int, tag: str, axis: int | None = None):
        """DequantizeLinear of input k (its scale and zero point the two inputs after it), along `axis`
        where the scale has an element per index (an attribute of opset 13 on)."""
        x, s, z = ins[k:k + 3]
        along = {"axis": axis} if axis is not None and sizes.get(s, 1) > 1 else {}
        return helper.make_node("DequantizeLinear", [x, s, *[z] * bool(z)], [f"{y}/{tag}"], f"{name}/{tag}", **along)

    def node(op: str, inputs: list, **a):
        return helper.make_node(op, inputs, [f"{y}/float"], f"{name}/float", **a)

    # the output quantized (its scale and zero point: the node's last two inputs but a bias)
    s, z = (3, 4) if n.op_type == "QLinearGlobalAveragePool" else (6, 7)
    out = helper.make_node("QuantizeLinear", [f"{y}/float", ins[s], *[ins[z]] * bool(ins[z])], [y], name)
    if n.op_type == "QLinearConv":
        body = [dq(0, "x"), dq(3, "w", axis=0), node("Conv", [f"{y}/x", f"{y}/w", *[f"{y}/b"] * bool(ins[8])],
                                                      **attrs)]
        if ins[8]:   # an int32 bias on the scale x_scale * w_scale, zero point 0
            body[2:2] = [helper.make_node("Mul", [ins[1], ins[4]], [f"{y}/bs"], f"{name}/bs"),
                         helper.make_node("DequantizeLinear", [ins[8], f"{y}/bs"], [f"{y}/b"], f"{name}/b", axis=0)]
        return [*body, out]
    if n.op_type == "QLinearMatMul":   # a's scale per tensor or row, b's per tensor or column
        return [dq(0, "a", axis=-2), dq(3, "b", axis=-1), node("MatMul", [f"{y}/a", f"{y}/b"]), out]
    if n.op_type == "QLinearAdd":
        return [dq(0, "a"), dq(3, "b"), node("Add", [f"{y}/a", f"{y}/b"]), out]
    if attrs.get("channels_last", 0):
        raise ModelError(f"{path}: node {name!r} (QLinearGlobalAveragePool) is not supported: channels_last=1 "
                         "(NCHW only)")
    return [dq(0, "x"), node("GlobalAveragePool", [f"{y}/x"]), out]
