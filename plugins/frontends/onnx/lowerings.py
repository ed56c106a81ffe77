"""Every ONNX node type lowered to te through `tunekit.topi`, by op type (`LOWERINGS`), and how
the fusion pass may group each (`KINDS`): here the elementwise nodes ("injective"), reductions
(opset 13 Softmax) and contractions; `lower_layout` those that move data ("injective"),
`lower_quantized` the quantized ones."""
from __future__ import annotations

from tunekit.topi import elementwise as ew
from tunekit.topi import linear, reduce

from . import lower_layout, lower_quantized
from .context import NodeContext, ident, lowerings


def _map(fn: str, n: int | None = None, params=lambda cx: ()):
    """The lowering computing `tunekit.topi.elementwise.FUNCTIONS[fn]` of inputs :n (all), `params(cx)`."""
    return lambda cx: [ew.apply(fn, [cx.tensor(k) for k in range(len(cx.values) if n is None else n)], ident(cx.name),
                                *params(cx))]


def _dropout(cx: NodeContext) -> list:
    """Inference: the input unchanged (and a mask of all True if it is asked for)."""
    if cx.has(2) and (cx.const(2) is None or cx.const(2).any()):
        raise cx.fail("it runs in training mode (input 2, training_mode, is not a constant false); only "
                      "inference is supported")
    return [cx.tensor(0), *(ew.full(s, True, "bool", f"{ident(cx.name)}_mask") for s in cx.out_shapes[1:])]


def _batch_norm(cx: NodeContext) -> list:
    """Inference, computed from the inputs (a NodeContext hands the kernel its inputs, not arrays made from them)."""
    if len(cx.out_shapes) > 1 or cx.attr("training_mode", 0):
        raise cx.fail("it runs in training mode (it has the running mean and variance outputs); only "
                      "inference, with output Y alone, is supported")
    if cx.attr("spatial", 1) != 1:
        raise cx.fail("spatial=0 (statistics per element) is not supported; only spatial=1")
    return [ew.batch_norm(*(cx.tensor(k) for k in range(5)), float(cx.attr("epsilon", 1e-5)), ident(cx.name))]


ELEMENTWISE = lowerings({
    **{op: _map(op.lower()) for op in ("Add", "Sub", "Mul", "Div", "Where", "Equal", "Less", "Greater", "And", "Or")},
    **{op: _map(op.lower(), 1) for op in ("Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Erf", "Sigmoid", "Relu",
                                          "Neg", "Abs", "Not", "IsNaN")},
    "LessOrEqual": _map("less_equal"), "GreaterOrEqual": _map("greater_equal"),
    "LeakyRelu": _map("leaky_relu", 1, lambda cx: [float(cx.attr("alpha", 0.01))]),
    "Pow": _map("pow", 1, lambda cx: [float(cx.scalar(1, "exponent"))]),
    # Clip's bounds: attributes before opset 11, optional constant inputs 1 and 2 since
    "Clip": _map("clip", 1, lambda cx: [cx.scalar(k, what) if cx.has(k) else cx.attr(what)
                                        for k, what in ((1, "min"), (2, "max"))]),
    "Cast": lambda cx: [ew.cast(cx.tensor(0), cx.out_dtypes[0], ident(cx.name))],   # (a float one: its input)
    "Identity": lambda cx: [cx.tensor(0)], "Dropout": _dropout, "BatchNormalization": _batch_norm,
})


def _reduction(cx: NodeContext) -> list:
    """Reduce<Kind> over input 1 (opset 13+ for ReduceSum, 18+ for the others) or attribute `axes`;
    none given: all axes, or none (the input itself) if noop_with_empty_axes."""
    x, axes = cx.tensor(0), cx.ints(1, "axes")
    if not axes and cx.attr("noop_with_empty_axes", 0):
        return [x]
    return [reduce.reduction(x, cx.op_type[6:].lower(), axes or None, bool(cx.attr("keepdims", 1)), ident(cx.name))]


def _layer_norm(cx: NodeContext) -> list:
    if len(cx.out_shapes) > 1:
        raise cx.fail("its outputs Mean and InvStdDev are used; only output Y is supported")
    return [reduce.layer_norm(cx.tensor(0), cx.tensor(1), cx.tensor(2) if cx.has(2) else None, cx.attr("axis", -1),
                              float(cx.attr("epsilon", 1e-5)), ident(cx.name))]


REDUCTIONS = lowerings({
    **dict.fromkeys(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"), _reduction),
    **{op: lambda cx, log=op == "LogSoftmax": [reduce.softmax(cx.tensor(0), cx.attr("axis", -1), ident(cx.name), log)]
       for op in ("Softmax", "LogSoftmax")},
    "LayerNormalization": _layer_norm,
})


def _gemm(cx: NodeContext) -> list:
    beta = cx.attr("beta", 1.0)
    return [linear.gemm(cx.tensor(0), cx.tensor(1), cx.tensor(2) if cx.has(2) and beta != 0 else None,
                        cx.attr("transA", 0), cx.attr("transB", 0), cx.attr("alpha", 1.0), beta, ident(cx.name))]


def _conv_transpose(cx: NodeContext) -> list:
    if cx.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or "output_shape" in cx.attrs:
        raise cx.fail("its pads come from auto_pad or output_shape; explicit pads (and output_padding) are "
                      "supported: export it with those")
    return [linear.conv_transpose(cx.tensor(0), cx.tensor(1), cx.tensor(2) if cx.has(2) else None, ident(cx.name),
                                  *map(cx.attr, ("strides", "pads", "dilations", "output_padding")),
                                  cx.attr("group", 1))]


LINEAR = lowerings({"MatMul": lambda cx: [linear.matmul(cx.tensor(0), cx.tensor(1), ident(cx.name))], "Gemm": _gemm,
                    "ConvTranspose": _conv_transpose})

ELEMENTWISE_KINDS, REDUCTION_KINDS = dict.fromkeys(ELEMENTWISE, "injective"), dict.fromkeys(REDUCTIONS, "reduction")
LOWERINGS = {**ELEMENTWISE, **REDUCTIONS, **lower_layout.LOWERINGS, **LINEAR, **lower_quantized.QUANTIZED}
KINDS = {**ELEMENTWISE_KINDS, **REDUCTION_KINDS, **dict.fromkeys(lower_layout.LOWERINGS, "injective"),
         **dict.fromkeys(LINEAR, "contraction"), **lower_quantized.KINDS}
