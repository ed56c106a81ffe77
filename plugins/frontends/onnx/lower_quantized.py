"""The quantized ONNX nodes that onnxruntime.quantization writes, lowered through
`tunekit.topi.quantize`: QDQ pairs (QuantizeLinear, DequantizeLinear), the QOperator form
(QLinearConv, QLinearMatMul, and com.microsoft's QLinearAdd and QLinearGlobalAveragePool),
and dynamic quantization (DynamicQuantizeLinear, MatMulInteger, ConvInteger). Products
accumulate in int32 and requantize with the multiplier scale_a * scale_b / scale_y."""
from __future__ import annotations

import math

import numpy as np

from tunekit.graph import Node
from tunekit.ops.qmatmul import pack_weights
from tunekit.topi import elementwise, reduce
from tunekit.topi import quantize as q
from tunekit.topi.layout import broadcast_shape

from .context import NodeContext, ident, lowerings

#: the com.microsoft nodes read (the rest of that domain is refused, named)
MICROSOFT = {"QLinearAdd", "QLinearGlobalAveragePool"}


def infer(n, shapes: dict, dtypes: dict) -> None:
    """Add the output shape and dtype of com.microsoft node `n` (onnx's shape inference knows
    only the standard domain): its inputs' broadcast (QLinearAdd) or one pixel per channel."""
    if n.op_type == "QLinearAdd":
        shape = broadcast_shape(shapes[n.input[0]], shapes[n.input[3]])
    else:
        shape = (*shapes[n.input[0]][:2], *(1 for _ in shapes[n.input[0]][2:]))
    shapes.setdefault(n.output[0], shape)
    dtypes.setdefault(n.output[0], dtypes[n.input[0]])


def qmatmul_nodes(cv, n) -> list[Node] | None:
    """A MatMulInteger or QLinearMatMul of 8-bit data (its zero point one value: constant, or for uint8
    data also computed) and constant int8 weights [K, N] (K a multiple of 4, their zero point 0) as
    tunekit's `qmatmul` op on the dot instruction, the weights in the op's layout with their column
    sums; int8 data is read as uint8 (128 more, and so its zero point) through a te call before it.
    None where it is not such a product (then it is a te call)."""
    qlinear = n.op_type == "QLinearMatMul"
    a, b = n.input[0], n.input[3 if qlinear else 1]
    a0, b0 = ((n.input[k] if len(n.input) > k else "") for k in ((2, 5) if qlinear else (2, 3)))
    w, signed = cv.constants.get(b), cv.dtypes.get(a) == "int8"
    if (w is None or w.ndim != 2 or w.dtype != np.int8 or w.shape[0] % 4 or cv.dtypes.get(a) not in ("uint8", "int8")
            or a0 and (cv.dtypes.get(a0) != cv.dtypes[a] or math.prod(cv.shapes[a0]) != 1
                       or signed and a0 not in cv.constants)
            or b0 and (b0 not in cv.constants or cv.constants[b0].any())
            or qlinear and not (all(n.input[k] in cv.constants for k in (1, 4, 6, 7)) and cv.constants[n.input[4]].size
                          in (1, w.shape[1]) and all(cv.constants[n.input[k]].size == 1 for k in (1, 6, 7)))):
        return None
    (K, N), args, nodes = w.shape, {}, []
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
    if qlinear:
        sa, sb, sy = (cv.constants[n.input[k]].astype(np.float32).reshape(-1) for k in (1, 4, 6))
        zy = cv.constants[n.input[7]]
        inputs.append(cv.const(f"{n.output[0]}/scale", np.broadcast_to(sa * sb / sy, (N,))))
        args = dict(out_dtype=str(zy.dtype), zero=int(zy.reshape(())))
    M = int(np.prod(cv.shapes[n.input[0]])) // K
    return [*nodes, Node("qmatmul", dict(M=M, N=N, K=K, **args), inputs, n.output[0], n.name, n.op_type)]


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


def _qlinear_conv(cx: NodeContext) -> list:
    """y = requantize(conv(x - x_zero, w - w_zero) + bias (int32), x_scale * w_scale / y_scale)."""
    acc = _conv(cx, 0, 3, 2, 5, f"{ident(cx.name)}_acc")
    m = q.multiplier(cx.tensor(1), cx.tensor(4), cx.tensor(6), acc.shape[1], f"{ident(cx.name)}_m")
    return [q.requantize(acc, m, cx.tensor(7), 1, cx.out_dtypes[0], ident(cx.name), _opt(cx, 8))]


def _qlinear_matmul(cx: NodeContext) -> list:
    acc = q.matmul_integer(cx.tensor(0), cx.tensor(3), cx.tensor(2), cx.tensor(5), f"{ident(cx.name)}_acc")
    m = q.multiplier(cx.tensor(1), cx.tensor(4), cx.tensor(6), acc.shape[-1], f"{ident(cx.name)}_m")
    return [q.requantize(acc, m, cx.tensor(7), -1, cx.out_dtypes[0], ident(cx.name))]


def _qlinear_add(cx: NodeContext) -> list:
    """C = quantize(dequantize(A) + dequantize(B)), A and B broadcast."""
    name = ident(cx.name)
    a = q.dequantize(cx.tensor(0), cx.tensor(1), _opt(cx, 2), 1, f"{name}_a")
    b = q.dequantize(cx.tensor(3), cx.tensor(4), _opt(cx, 5), 1, f"{name}_b")
    total = elementwise.apply("add", [a, b], f"{name}_sum")
    return [q.quantize(total, cx.tensor(6), _opt(cx, 7), 1, cx.out_dtypes[0], name)]


def _qlinear_global_average_pool(cx: NodeContext) -> list:
    """y = quantize(mean over the pixels of dequantize(x)) (channels first)."""
    if cx.attr("channels_last", 0):
        raise cx.fail("channels_last=1 is not supported (NCHW only)")
    x, name = cx.tensor(0), ident(cx.name)
    mean = reduce.reduction(q.dequantize(x, cx.tensor(1), _opt(cx, 2), 1, f"{name}_x"), "mean",
                            list(range(2, x.ndim)), True, f"{name}_mean")
    return [q.quantize(mean, cx.tensor(3), _opt(cx, 4), 1, cx.out_dtypes[0], name)]


QUANTIZED = lowerings({
    "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize,
    "DynamicQuantizeLinear": lambda cx: q.dynamic_quantize(cx.tensor(0), ident(cx.name)),
    "MatMulInteger": lambda cx: [q.matmul_integer(cx.tensor(0), cx.tensor(1), _opt(cx, 2), _opt(cx, 3),
                                                  ident(cx.name))],
    "ConvInteger": lambda cx: [_conv(cx, 0, 1, 2, 3, ident(cx.name))],
    "QLinearConv": _qlinear_conv, "QLinearMatMul": _qlinear_matmul,
    "QLinearAdd": _qlinear_add, "QLinearGlobalAveragePool": _qlinear_global_average_pool,
})
KINDS = {**dict.fromkeys(QUANTIZED, "injective"), "DynamicQuantizeLinear": "reduction",
         "QLinearGlobalAveragePool": "reduction",
         **dict.fromkeys(("MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul"), "contraction")}
