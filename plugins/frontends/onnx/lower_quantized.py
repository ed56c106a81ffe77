"""The quantized ONNX nodes that onnxruntime.quantization writes, lowered through
`tunekit.topi.quantize`: QDQ pairs (QuantizeLinear, DequantizeLinear; the QOperator form is
read as these, `qoperator.py`) and dynamic quantization (DynamicQuantizeLinear, MatMulInteger,
ConvInteger). Products accumulate in int32."""
from __future__ import annotations

import math

import numpy as np

from tunekit.graph import Node
from tunekit.ops.qmatmul import pack_weights
from tunekit.topi import quantize as q

from .context import NodeContext, ident, lowerings


def qmatmul_nodes(cv, n) -> list[Node] | None:
    """A MatMulInteger of 8-bit data (its zero point one value: constant, or for uint8 data also
    computed) and constant int8 weights [K, N] (K a multiple of 4, their zero point 0) as tunekit's
    `qmatmul` op on the dot instruction, the weights in the op's layout with their column sums; int8
    data is read as uint8 (128 more, and so its zero point) through a te call before it. None where
    it is not such a product (then it is a te call)."""
    a, b = n.input[0], n.input[1]
    a0, b0 = ((n.input[k] if len(n.input) > k else "") for k in (2, 3))
    w, signed = cv.constants.get(b), cv.dtypes.get(a) == "int8"
    if (w is None or w.ndim != 2 or w.dtype != np.int8 or w.shape[0] % 4 or cv.dtypes.get(a) not in ("uint8", "int8")
            or a0 and (cv.dtypes.get(a0) != cv.dtypes[a] or math.prod(cv.shapes[a0]) != 1
                       or signed and a0 not in cv.constants)
            or b0 and (b0 not in cv.constants or cv.constants[b0].any())):
        return None
    (K, N), nodes = w.shape, []
    if signed:   # uint8 data: 128 more (the int8 value's bits with the sign bit flipped)
        shift = int(cv.constants[a0].reshape(())) + 128 if a0 else 128
        a0 = cv.const(f"{n.output[0]}/a0", shift, "uint8")
        cv.shapes[f"{a}/u8"], cv.dtypes[f"{a}/u8"] = cv.shapes[a], "uint8"
        nodes.append(cv.te_call("Cast", f"{n.name or n.output[0]}_u8", [a], [f"{a}/u8"], 0, {},
                                lambda cx: [q.to_unsigned(cx.tensor(0), ident(cx.name))]))
        a = f"{a}/u8"
    a0 = a0 or cv.const(f"{n.output[0]}/a0", 0, "uint8")
    inputs = [a, cv.const(f"{b}/dot4", pack_weights(w), "int32"), cv.const(f"{b}/sums", w.astype(np.int32).sum(0),
                                                                                "int32"), a0]
    M = int(np.prod(cv.shapes[n.input[0]])) // K
    return [*nodes, Node("qmatmul", dict(M=M, N=N, K=K), inputs, n.output[0], n.name, n.op_type)]


def _opt(cx: NodeContext, k: int):
    return cx.tensor(k) if cx.has(k) else None


def _quantize(cx: NodeContext) -> list:
    if cx.attr("saturate", 1) != 1 or cx.attr("block_size", 0):
        raise cx.fail("only saturating, per-tensor or per-axis quantization (no block_size) is supported")
    return [q.quantize(cx.tensor(0), cx.tensor(1), _opt(cx, 2), cx.attr("axis", 1), cx.out_dtypes[0],
                       ident(cx.name))]


def _dequantize(cx: NodeContext) -> list:
    if cx.attr("block_size", 0):
        raise cx.fail("blocked quantization (block_size) is not supported; per tensor or per axis is")
    return [q.dequantize(cx.tensor(0), cx.tensor(1), _opt(cx, 2), cx.attr("axis", 1), ident(cx.name))]


def _conv(cx: NodeContext, x: int, w: int, xz: int, wz: int, name: str):
    if cx.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise cx.fail("auto_pad SAME is not supported; export with explicit pads")
    return q.conv_integer(cx.tensor(x), cx.tensor(w), _opt(cx, xz), _opt(cx, wz), name, cx.attr("strides"),
                          cx.attr("pads"), cx.attr("dilations"), cx.attr("group", 1))


QUANTIZED = lowerings({
    "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize,
    "DynamicQuantizeLinear": lambda cx: q.dynamic_quantize(cx.tensor(0), ident(cx.name)),
    "MatMulInteger": lambda cx: [q.matmul_integer(cx.tensor(0), cx.tensor(1), _opt(cx, 2), _opt(cx, 3),
                                                  ident(cx.name))],
    "ConvInteger": lambda cx: [_conv(cx, 0, 1, 2, 3, ident(cx.name))],
})
KINDS = {**dict.fromkeys(QUANTIZED, "injective"), "DynamicQuantizeLinear": "reduction",
         **dict.fromkeys(("MatMulInteger", "ConvInteger"), "contraction")}
