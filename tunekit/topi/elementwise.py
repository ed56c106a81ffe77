"""Elementwise maps as te computes (arithmetic and math functions, comparisons and logic, select, cast,
clip, pow, inference-time batch normalization, constants; a kernel's parameters and output): each one
te.compute over the broadcast shape of its inputs, read with numpy's broadcasting (`broadcast_load`), so
a fusion pass may inline it into its readers. Comparisons, logic and isnan make "bool" tensors."""
from __future__ import annotations

import functools

from tunekit import ir, te
from tunekit.errors import ArgumentError
from tunekit.te.tensor import ComputeOp

from .layout import broadcast_index, broadcast_shape, copy

#: |exponent| up to which an integer power multiplies out (beyond: exp(y * log(x)))
MAX_INT_POW = 8

# Erf as XLA and Eigen compute it in float32: x clamped to [-4, 4] (erf is +-1 in float32
# beyond), then x * P(x^2) / Q(x^2); about 1e-7 from math.erf in float64, 5e-7 in float32.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def broadcast_load(t: te.Tensor, out_shape, axes) -> ir.Expr:
    """Return `t` read at index `axes` of an output of `out_shape` under numpy broadcasting."""
    return t[broadcast_index(t.shape, out_shape, axes)]


def erf(x: ir.Expr) -> ir.Expr:
    """Return erf(x) in float32 expressions (see `_ERF_P`): no exp, one division."""
    x = ir.min_(ir.max_(x, -4.0), 4.0)
    x2 = x * x
    p, q = (functools.reduce(lambda acc, c: acc * x2 + c, cs[1:], ir.const(cs[0], x.dtype)) for cs in (_ERF_P, _ERF_Q))
    return x * p / q


def _power(x: ir.Expr, y: float) -> ir.Expr:
    """x ** y: integer powers multiplied out, 0.5 a square root, other exponents exp(y * log(x))
    (NaN for negative x, as numpy's for a non-integer y)."""
    if y.is_integer() and abs(y) <= MAX_INT_POW:
        p = ir.const(1.0, x.dtype)
        for _ in range(abs(int(y))):
            p = p * x   # 1 * x folds to x
        return 1.0 / p if y < 0 else p
    if abs(y) == 0.5:
        return te.sqrt(x) if y > 0 else 1.0 / te.sqrt(x)
    return te.exp(y * te.log(x))


def _clip(x: ir.Expr, lo, hi) -> ir.Expr:
    x = x if lo is None else ir.max_(x, lo)
    return x if hi is None else ir.min_(x, hi)


#: the scalar functions `apply` maps, by name: of one expression per input ("where": three), then of
#: the parameters given to `apply` (leaky_relu: alpha; clip: min and max, None for no bound; pow: y)
FUNCTIONS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "sqrt": te.sqrt, "reciprocal": lambda x: 1.0 / x, "exp": te.exp, "log": te.log, "tanh": te.tanh, "erf": erf,
    "sigmoid": lambda x: 1.0 / (1.0 + te.exp(-x)), "relu": lambda x: ir.max_(x, 0), "neg": lambda x: -x,
    "abs": lambda x: te.fabs(x) if x.dtype.startswith("float") else x * ir.select(x < 0, -1, 1),
    "leaky_relu": lambda x, alpha: x * ir.select(x < 0.0, alpha, 1.0),   # a select of constants: no branch
    "clip": _clip, "pow": _power, "where": ir.select, "equal": ir.eq, "less": lambda a, b: a < b,
    "greater": lambda a, b: a > b, "less_equal": lambda a, b: a <= b, "greater_equal": lambda a, b: a >= b,
    "not": ir.Not, "and": ir.and_, "or": ir.or_, "isnan": lambda x: ir.ne(x, x),
}


def apply(fn, inputs: list[te.Tensor], name: str, *params) -> te.Tensor:
    """Return `fn` (a name in `FUNCTIONS`, or a function of one expression per input) of `inputs`
    and `params` elementwise, the inputs broadcast together (ArgumentError: they do not broadcast)."""
    fn = FUNCTIONS[fn] if isinstance(fn, str) else fn
    try:
        shape = broadcast_shape(*(t.shape for t in inputs))
    except ValueError as e:
        raise ArgumentError(str(e)) from None
    return te.compute(shape, lambda *i: fn(*(broadcast_load(t, shape, i) for t in inputs), *params), name=name)


def cast(x: te.Tensor, dtype: str, name: str) -> te.Tensor:
    """Return `x` converted to `dtype`; `x` itself between float types (a float model computes in its own)."""
    return x if x.dtype[:5] == dtype[:5] == "float" else apply(lambda v: ir.cast(v, dtype), [x], name)


def batch_norm(x, scale, bias, mean, var, eps: float, name: str) -> te.Tensor:
    """Return (x - mean) * scale / sqrt(var + eps) + bias, the parameters per channel (axis 1)."""
    return te.compute(x.shape, lambda *i: (x[i] - mean[i[1]]) * (scale[i[1]] / te.sqrt(var[i[1]] + eps)) + bias[i[1]],
                      name=name)


def full(shape, value, dtype: str, name: str) -> te.Tensor:
    """Return a tensor of `shape` whose every element is `value` (a number, made `dtype`)."""
    value = bool(value) if dtype == "bool" else int(value) if dtype.startswith(("int", "uint")) else float(value)
    return te.compute(shape, lambda *i: ir.const(value, dtype), name=name)


def ident(name: str) -> str:
    """Return `name` made an identifier (for te and kernel names)."""
    out = "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")
    return out if out[:1].isalpha() else f"t_{out}"


def kernel_parameter(shape, name: str, dtype: str) -> tuple[te.Tensor, te.Tensor]:
    """Return the placeholder of a kernel's input tensor and the tensor its computation reads: the
    placeholder, or for a bool tensor (a kernel's arrays are never bool) a uint8 one read as a mask `{name}_mask`."""
    p = te.placeholder(shape, name, "uint8" if dtype == "bool" else dtype)
    return p, p if dtype != "bool" else te.compute(p.shape, lambda *i: ir.ne(p[i], ir.const(0, "uint8")),
                                                   name=f"{p.name}_mask")


def kernel_output(t: te.Tensor) -> te.Tensor:
    """Return what a kernel writes for tensor `t`: `t`, a copy `{name}_copy` if it is not a compute
    (a placeholder returned as it is), made uint8 `{name}_u8` if it is bool."""
    if not isinstance(t.op, ComputeOp):
        t = copy(t, f"{t.name}_copy")
    if t.dtype == "bool":
        t = te.compute(t.shape, lambda *i: ir.cast(t[i], "uint8"), name=f"{t.name}_u8")
    return t
