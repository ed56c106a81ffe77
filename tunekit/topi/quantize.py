"""Quantization as te computes, as ONNX defines it: a real value x is an 8-bit integer q with
x = (q - zero_point) * scale, per tensor (scale and zero point of one element) or per channel
(of one element per index along `axis`). Quantizing rounds half to even and saturates to the
integer type; integer products accumulate in int32 (`matmul_integer`, `conv_integer`), and an
int32 accumulator is brought back to 8 bits by `requantize` (its float multiplier is the input
scales' product over the output's scale)."""
from __future__ import annotations

import numpy as np

from tunekit import ir, te
from tunekit.errors import ArgumentError

from .layout import broadcast_index, broadcast_shape, normalize_axis

#: the integer types a quantized tensor may have, with their ranges
RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-2 ** 31, 2 ** 31 - 1)}


def round_even(x: ir.Expr) -> ir.Expr:
    """Return float expression `x` rounded half to even, as an int32 expression (|x| < 2**31)."""
    return ir.cast(te.rint(x), "int32")


def saturate(x: ir.Expr, dtype: str) -> ir.Expr:
    """Return integer expression `x` clamped to the range of `dtype`, as `dtype`."""
    lo, hi = RANGES[dtype]
    return ir.cast(ir.min_(ir.max_(x, lo), hi), dtype)


def quantized(value: ir.Expr, zero: ir.Expr, dtype: str) -> ir.Expr:
    """Float `value` (the real value over the scale) rounded, plus `zero`, saturated to `dtype`: clamped
    first to just past the range, so that the int32 rounding never overflows."""
    lo, hi = RANGES[dtype]
    zero = ir.cast(zero, "float32")
    near = ir.min_(ir.max_(value, (lo - 1.0) - zero), (hi + 1.0) - zero)
    return saturate(round_even(near) + ir.cast(zero, "int32"), dtype)


def _per(t: te.Tensor | None, shape: tuple, axis: int, what: str):
    """A loader of per-tensor or per-`axis` parameter `t` at an index of a tensor of `shape`."""
    if t is None:
        return lambda i: ir.const(0, "int32")
    if t.ndim == 0 or t.shape == (1,):
        return lambda i: t[(0,) * t.ndim]
    axis = normalize_axis(axis, len(shape))
    if t.ndim != 1 or t.shape[0] != shape[axis]:
        raise ArgumentError(f"its {what} has shape {list(t.shape)}; it takes one value, or one per index of axis "
                            f"{axis} ({shape[axis]})")
    return lambda i: t[i[axis]]


def quantize(x: te.Tensor, scale: te.Tensor, zero: te.Tensor | None, axis: int, dtype: str, name: str) -> te.Tensor:
    """Return `x` quantized to `dtype` (int8 or uint8): saturate(round(x / scale) + zero)."""
    if dtype not in ("int8", "uint8"):
        raise ArgumentError(f"it quantizes to {dtype}; int8 and uint8 are supported")
    s, z = _per(scale, x.shape, axis, "scale"), _per(zero, x.shape, axis, "zero point")
    return te.compute(x.shape, lambda *i: quantized(x[i] / s(i), z(i), dtype), name=name)


def dequantize(q: te.Tensor, scale: te.Tensor, zero: te.Tensor | None, axis: int, name: str) -> te.Tensor:
    """Return integer `q` as float32: (q - zero) * scale."""
    s, z = _per(scale, q.shape, axis, "scale"), _per(zero, q.shape, axis, "zero point")
    return te.compute(q.shape, lambda *i: ir.cast(ir.cast(q[i], "int32") - ir.cast(z(i), "int32"), "float32") * s(i),
                      name=name)


def requantize(acc: te.Tensor, multiplier: te.Tensor, zero: te.Tensor | None, axis: int, dtype: str,
               name: str, bias: te.Tensor | None = None) -> te.Tensor:
    """Return int32 `acc` (plus an int32 `bias`) brought to `dtype`: saturate(round((acc + bias) *
    multiplier) + zero), the bias, multiplier and zero point per tensor or per index of `axis`."""
    m, z = _per(multiplier, acc.shape, axis, "multiplier"), _per(zero, acc.shape, axis, "zero point")
    b = _per(bias, acc.shape, axis, "bias")
    return te.compute(acc.shape, lambda *i: quantized(ir.cast(acc[i] + b(i), "float32") * m(i), z(i), dtype),
                      name=name)


def multiplier(scale_a: te.Tensor, scale_b: te.Tensor, scale_y: te.Tensor, n: int, name: str) -> te.Tensor:
    """Return the requantize multiplier scale_a * scale_b / scale_y of a product's `n` output channels
    (each scale per tensor, or one per channel)."""
    at = [_per(t, (n,), 0, "scale") for t in (scale_a, scale_b, scale_y)]
    return te.compute((n,), lambda c: at[0]((c,)) * at[1]((c,)) / at[2]((c,)), name=name)


def to_unsigned(x: te.Tensor, name: str) -> te.Tensor:
    """Return int8 `x` as uint8, 128 more (its bits with the sign bit flipped): the data of the
    unsigned-by-signed dot instruction, its zero point 128 more too."""
    return te.compute(x.shape, lambda *i: ir.cast(ir.cast(x[i], "int32") + 128, "uint8"), name=name)


def bf16_pairs(x: te.Tensor, name: str) -> te.Tensor:
    """Return float32 `x` [..., K] (K even) rounded to bfloat16, two of its last axis per int32
    [..., K/2] (`te.bf16x2`): the data of the bfloat16 dot instruction (`tunekit.ops.bmatmul`)."""
    *lead, K = x.shape
    return te.compute((*lead, K // 2), lambda *i: te.bf16x2(x[(*i[:-1], 2 * i[-1])], x[(*i[:-1], 2 * i[-1] + 1)]),
                      name=name)


def dynamic_quantize(x: te.Tensor, name: str) -> list[te.Tensor]:
    """Return uint8 `x`, its scale and its zero point, chosen from x's range (which always holds 0):
    scale = (max - min) / 255, zero = saturate(round(-min / scale)) (ONNX's DynamicQuantizeLinear)."""
    axes = [te.reduce_axis(d, f"k{a}") for a, d in enumerate(x.shape)]
    top = te.compute((), lambda: te.max(x[tuple(axes)], axis=axes), name=f"{name}_max")
    axes2 = [te.reduce_axis(d, f"j{a}") for a, d in enumerate(x.shape)]
    low = te.compute((), lambda: te.max(-x[tuple(axes2)], axis=axes2), name=f"{name}_negmin")
    scale = te.compute((), lambda: (ir.max_(top[()], 0.0) + ir.max_(low[()], 0.0)) / 255.0, name=f"{name}_scale")
    zero = te.compute((), lambda: saturate(round_even(ir.max_(low[()], 0.0) / scale[()]), "uint8"),
                      name=f"{name}_zero")
    q = te.compute(x.shape, lambda *i: quantized(x[i] / scale[()], zero[()], "uint8"), name=name)
    return [q, scale, zero]


def _minus(t: te.Tensor, index: tuple, zero) -> ir.Expr:
    """t[index] - zero as int32."""
    v = ir.cast(t[index], "int32")
    return v if zero is None else v - ir.cast(zero, "int32")


def matmul_integer(a: te.Tensor, b: te.Tensor, a_zero, b_zero, name: str) -> te.Tensor:
    """Return the int32 product of integer `a` [..., M, K] and `b` [..., K, N] less their zero points:
    sum_k (a - a_zero) * (b - b_zero), a_zero per tensor or per row (M), b_zero per tensor or per
    column (N); batch dims broadcast as numpy's matmul."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ArgumentError(f"shapes {list(a.shape)} and {list(b.shape)} do not multiply (2-D or more each)")
    try:
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    except ValueError as e:
        raise ArgumentError(f"its batch dims: {e}") from None
    M, N, k, nb = a.shape[-2], b.shape[-1], te.reduce_axis(a.shape[-1], "k"), len(batch)
    za = _per(a_zero, (M,), 0, "a zero point") if a_zero is not None else None
    zb = _per(b_zero, (N,), 0, "b zero point") if b_zero is not None else None

    def f(*i):
        m, n = i[nb], i[nb + 1]
        ia = broadcast_index(a.shape[:-2], batch, i[:nb]) + (m, k)
        ib = broadcast_index(b.shape[:-2], batch, i[:nb]) + (k, n)
        return te.sum(_minus(a, ia, za((m,)) if za else None) * _minus(b, ib, zb((n,)) if zb else None), axis=k)
    return te.compute((*batch, M, N), f, name=name)


def conv_integer(x: te.Tensor, w: te.Tensor, x_zero, w_zero, name: str, strides=None, pads=None, dilations=None,
                 group: int = 1) -> te.Tensor:
    """Return the int32 2-D convolution of integer `x` [N, C, H, W] by `w` [K, C/group, R, S] less
    their zero points (x's per tensor, w's per tensor or per output channel): padding reads x's zero
    point, so it adds nothing."""
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ArgumentError(f"2-D convolutions only: data {list(x.shape)} and weights {list(w.shape)} in {group} "
                            "group(s) do not match")
    (sh, sw), (dh, dw) = strides or (1, 1), dilations or (1, 1)
    pt, pl, pb, pr = pads or (0, 0, 0, 0)
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    OH, OW = (H + pt + pb - (R - 1) * dh - 1) // sh + 1, (W + pl + pr - (S - 1) * dw - 1) // sw + 1
    zx = _per(x_zero, (), 0, "data zero point") if x_zero is not None else None
    zw = _per(w_zero, (K,), 0, "weight zero point") if w_zero is not None else None
    rc, rr, rs = te.reduce_axis(Cg, "rc"), te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")

    def f(n, k, oh, ow):
        c = rc if group == 1 else k // (K // group) * Cg + rc
        ih, iw = oh * sh + rr * dh - pt, ow * sw + rs * dw - pl
        inside = te.all_(ih >= 0, ih < H, iw >= 0, iw < W)
        xv = te.if_then_else(inside, _minus(x, (n, c, ih, iw), zx(()) if zx else None), ir.const(0, "int32"))
        return te.sum(xv * _minus(w, (k, rc, rr, rs), zw((k,)) if zw else None), axis=[rc, rr, rs])
    return te.compute((N, K, OH, OW), f, name=name)


def quantize_array(x: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int = 1) -> np.ndarray:
    """numpy: ONNX's QuantizeLinear of constant `x` (to `zero`'s type, uint8 without one)."""
    dtype = zero.dtype if zero is not None else np.dtype(np.uint8)
    s, z = (_along(v, x.ndim, axis) for v in (scale, zero if zero is not None else np.zeros((), dtype)))
    lo, hi = RANGES[str(dtype)]
    return np.clip(np.rint(x.astype(np.float32) / s) + z.astype(np.int32), lo, hi).astype(dtype)


def dequantize_array(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int = 1) -> np.ndarray:
    """numpy: ONNX's DequantizeLinear of constant `q`."""
    z = _along(zero, q.ndim, axis).astype(np.int32) if zero is not None else 0
    return ((q.astype(np.int32) - z).astype(np.float32) * _along(scale, q.ndim, axis)).astype(np.float32)


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """Per-tensor `v` as it is, per-channel `v` shaped to broadcast along `axis` of `ndim` dims."""
    if v.size == 1:
        return v.reshape(())
    return v.reshape([-1 if a == axis % ndim else 1 for a in range(ndim)])


def channels_last(x: te.Tensor, channels: int, pad: int, name: str) -> te.Tensor:
    """Return NCHW `x` as [N, H, W, channels], the channels past x's reading `pad`."""
    N, C, H, W = x.shape

    def at(n, h, w, c):
        if channels == C:
            return x[n, c, h, w]
        return te.if_then_else(c < C, x[n, ir.min_(c, C - 1), h, w], ir.const(pad, x.dtype))
    return te.compute((N, H, W, channels), at, name=name)


def packed_words(x: te.Tensor, channels: int, pad: int, shift: int, name: str) -> te.Tensor:
    """Return 8-bit NCHW `x` plus `shift` (int8 data plus 128 is uint8) channels last, four channels per
    int32, little-endian: [N, H, W, channels / 4], or [N, H, W] for one word a pixel (so that the
    transpose runs in vectors along the rows); the channels past x's read `pad`."""
    N, C, H, W = x.shape

    def byte(n, c, h, w):
        if isinstance(c, int) and c >= C:
            return ir.const(pad, "int64")
        whole = isinstance(c, int) or C == channels
        value = ir.cast(x[n, c if whole else ir.min_(c, C - 1), h, w], "int64") + shift
        return value if whole else te.if_then_else(c < C, value, ir.const(pad, "int64"))

    def word(n, h, w, g):   # in 64 bits, its low 32 the word
        b = [byte(n, 4 * g + j, h, w) for j in range(4)]
        return ir.cast(b[0] + b[1] * 256 + b[2] * 65536 + b[3] * 16777216, "int32")
    if channels == 4:
        return te.compute((N, H, W), lambda n, h, w: word(n, h, w, 0), name=name)
    return te.compute((N, H, W, channels // 4), word, name=name)


def channels_first(t: te.Tensor, name: str) -> te.Tensor:
    """Return channels-last `t` [N, H, W, C] as NCHW."""
    N, H, W, C = t.shape
    return te.compute((N, C, H, W), lambda n, c, h, w: t[n, h, w, c], name=name)


def max_pool_channels_last(x: te.Tensor, kernel, strides, pads, dilations, name: str) -> te.Tensor:
    """Return the max pool of channels-last `x` [N, H, W, C] (of any type: padding reads its least value)."""
    N, H, W, C = x.shape
    (R, S), (sh, sw), (ph, pw), (dh, dw) = kernel, strides, pads, dilations
    r, s = te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    least = ir.const(int(np.iinfo(x.dtype).min) if "int" in x.dtype else float("-inf"), x.dtype)
    OH, OW = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1, (W + 2 * pw - dw * (S - 1) - 1) // sw + 1

    def window(b, y, v, c):   # (a window holds some input)
        h, w = y * sh + r * dh - ph, v * sw + s * dw - pw
        at = x[b, ir.min_(ir.max_(h, 0), H - 1), ir.min_(ir.max_(w, 0), W - 1), c]
        return te.max(te.if_then_else(te.all_(h >= 0, h < H, w >= 0, w < W), at, least), axis=[r, s])
    return te.compute((N, OH, OW, C), window, name=name)
