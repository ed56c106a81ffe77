"""ONNX elementwise nodes as te computes: arithmetic and math functions, comparisons and
logic, Where, Cast, Clip, inference-time BatchNormalization, Identity and Dropout.

Each node becomes one te.compute over its output shape that reads its inputs with numpy's
multidirectional broadcasting (`broadcast_load`): every output element reads a bounded set
of input elements, so all of them are "injective" (`KINDS`) and the fusion pass may inline
them into their readers. Arithmetic is written in float32 expressions; comparisons,
Not/And/Or and IsNaN make "bool" ones. Identity, Dropout and a Cast between float types
(a no-op in float32 models) return their input tensor itself.
"""
from __future__ import annotations

from tunekit import ir, te

from .context import ONNX_DTYPES, NodeContext, ident

#: |exponent| up to which an integer Pow multiplies out (beyond: exp(y * log(x)))
MAX_INT_POW = 8

# Erf as XLA and Eigen compute it in float32: x clamped to [-4, 4] (erf is +-1 in float32
# beyond), then x * P(x^2) / Q(x^2); about 1e-7 from math.erf in float64, 5e-7 in float32.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def broadcast_load(t: te.Tensor, out_shape, axes) -> ir.Expr:
    """`t` read at index `axes` of an output of `out_shape` under numpy broadcasting: t's
    dimensions align with the trailing ones of the output; those of size 1 are read at 0."""
    lead = len(out_shape) - t.ndim
    return t[tuple(0 if d == 1 else axes[lead + k] for k, d in enumerate(t.shape))]


def name_of(cx: NodeContext, suffix: str = "") -> str:
    """The name of a te tensor made for node `cx`: the node's name made an identifier."""
    return ident(cx.name) + suffix


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _apply(cx: NodeContext, fn, n: int | None = None) -> list[te.Tensor]:
    """The node's output: `fn` of the values of its first `n` inputs (all), broadcast."""
    ins = [cx.tensor(k) for k in range(len(cx.values) if n is None else n)]
    shape = cx.out_shapes[0]
    return [te.compute(shape, lambda *i: fn(*(broadcast_load(t, shape, i) for t in ins)), name=name_of(cx))]


def _map(fn, n: int | None = None):
    """The lowering that computes `fn` of the node's first `n` inputs (all) elementwise."""
    return lambda cx: _apply(cx, fn, n)


def _scalar(cx: NodeContext, k: int, what: str):
    """The value of input `k`, a constant of one element."""
    v = cx.need_const(k, what)
    if v.size != 1:
        raise cx.fail(f"its {what} (input {k}) has {v.size} elements; only a single value is supported")
    return v.reshape(()).item()


def erf(x: ir.Expr) -> ir.Expr:
    """erf(x) in float32 expressions (see `_ERF_P`): no exp, one division."""
    x = ir.min_(ir.max_(x, -4.0), 4.0)
    x2 = x * x
    p, q = ir.const(_ERF_P[0], x.dtype), ir.const(_ERF_Q[0], x.dtype)
    for c in _ERF_P[1:]:
        p = p * x2 + c
    for c in _ERF_Q[1:]:
        q = q * x2 + c
    return x * p / q


def _abs(cx: NodeContext) -> list[te.Tensor]:
    if _is_float(cx.dtype(0)):
        return _apply(cx, te.fabs, 1)
    return _apply(cx, lambda x: x * ir.select(x < 0, -1, 1), 1)


def _leaky_relu(cx: NodeContext) -> list[te.Tensor]:
    alpha = float(cx.attr("alpha", 0.01))
    return _apply(cx, lambda x: x * ir.select(x < 0.0, alpha, 1.0), 1)   # a select of constants: no branch


def _pow(cx: NodeContext) -> list[te.Tensor]:
    """x ** y for a constant y: integer powers multiplied out, 0.5 a square root, other
    exponents exp(y * log(x)) (NaN for negative x, as numpy's for a non-integer y)."""
    y = float(_scalar(cx, 1, "exponent"))

    def power(x):
        if y.is_integer() and abs(y) <= MAX_INT_POW:
            p = ir.const(1.0, x.dtype)
            for _ in range(abs(int(y))):
                p = p * x   # 1 * x folds to x
            return 1.0 / p if y < 0 else p
        if abs(y) == 0.5:
            return te.sqrt(x) if y > 0 else 1.0 / te.sqrt(x)
        return te.exp(y * te.log(x))
    return _apply(cx, power, 1)


def _clip(cx: NodeContext) -> list[te.Tensor]:
    """Clip to min and max: attributes before opset 11, optional constant inputs 1 and 2 since."""
    lo, hi = (_scalar(cx, k, what) if cx.has(k) else cx.attr(what) for k, what in ((1, "min"), (2, "max")))

    def clip(x):
        x = x if lo is None else ir.max_(x, lo)
        return x if hi is None else ir.min_(x, hi)
    return _apply(cx, clip, 1)


def _cast(cx: NodeContext) -> list[te.Tensor]:
    x, to = cx.tensor(0), cx.out_dtypes[0]
    if _is_float(x.dtype) and _is_float(to):
        return [x]   # float32 models compute in float32 throughout
    if to not in ONNX_DTYPES.values():
        raise cx.fail(f"it casts to {to}; supported: {', '.join(sorted(set(ONNX_DTYPES.values())))}")
    return _apply(cx, lambda v: ir.cast(v, to), 1)


def _dropout(cx: NodeContext) -> list[te.Tensor]:
    """Inference: the input unchanged (and a mask of all True if it is asked for)."""
    if cx.has(2) and (cx.const(2) is None or cx.const(2).any()):
        raise cx.fail("it runs in training mode (input 2, training_mode, is not a constant false); only "
                      "inference is supported")
    if len(cx.out_shapes) == 1:
        return [cx.tensor(0)]
    return [cx.tensor(0), te.compute(cx.out_shapes[1], lambda *i: ir.const(True), name=name_of(cx, "_mask"))]


def _batch_norm(cx: NodeContext) -> list[te.Tensor]:
    """Inference: (x - mean) * scale / sqrt(var + epsilon) + B, per channel (axis 1).

    The per-channel factors are computed in te from the inputs rather than folded in numpy:
    a NodeContext can hand the kernel its inputs, not arrays made from them."""
    if len(cx.out_shapes) > 1 or cx.attr("training_mode", 0):
        raise cx.fail("it runs in training mode (it has the running mean and variance outputs); only "
                      "inference, with output Y alone, is supported")
    if cx.attr("spatial", 1) != 1:
        raise cx.fail("spatial=0 (statistics per element) is not supported; only spatial=1")
    eps = float(cx.attr("epsilon", 1e-5))
    x, scale, bias, mean, var = (cx.tensor(k) for k in range(5))

    def bn(*i):
        c = i[1]
        return (x[i] - mean[c]) * (scale[c] / te.sqrt(var[c] + eps)) + bias[c]
    return [te.compute(x.shape, bn, name=name_of(cx))]


LOWERINGS = {
    "Add": _map(lambda a, b: a + b), "Sub": _map(lambda a, b: a - b), "Mul": _map(lambda a, b: a * b),
    "Div": _map(lambda a, b: a / b), "Pow": _pow,
    "Sqrt": _map(te.sqrt, 1), "Reciprocal": _map(lambda x: 1.0 / x, 1), "Exp": _map(te.exp, 1),
    "Log": _map(te.log, 1), "Tanh": _map(te.tanh, 1), "Erf": _map(erf, 1),
    "Sigmoid": _map(lambda x: 1.0 / (1.0 + te.exp(-x)), 1),
    "Relu": _map(lambda x: ir.max_(x, 0), 1), "LeakyRelu": _leaky_relu, "Clip": _clip,
    "Neg": _map(lambda x: -x, 1), "Abs": _abs,
    "Where": _map(ir.select), "Cast": _cast,
    "Equal": _map(ir.eq), "Less": _map(lambda a, b: a < b), "Greater": _map(lambda a, b: a > b),
    "LessOrEqual": _map(lambda a, b: a <= b), "GreaterOrEqual": _map(lambda a, b: a >= b),
    "Not": _map(ir.Not, 1), "And": _map(ir.and_), "Or": _map(ir.or_), "IsNaN": _map(lambda x: ir.ne(x, x), 1),
    "Identity": lambda cx: [cx.tensor(0)], "Dropout": _dropout, "BatchNormalization": _batch_norm,
}

KINDS = {op: "injective" for op in LOWERINGS}
