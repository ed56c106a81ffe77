"""te lowerings of the ONNX contractions: MatMul (numpy semantics: 1-D operands, broadcast
batch dims), Gemm (transA, transB, alpha, beta, C broadcast to [M, N]) and ConvTranspose
(any number of spatial dims, groups, strides, pads, dilations, output_padding; bias).

Each is one te.sum over the reduced axes; Gemm's alpha, beta and C and ConvTranspose's
bias are a second, elementwise stage after it (a reduction is the whole body of its compute).
"""
from __future__ import annotations

import math

from tunekit import ir, te

from .context import NodeContext, ident
from .lower_layout import broadcast_index, broadcast_shape


def matmul(cx: NodeContext) -> list[te.Tensor]:
    """A 1-D A is a row [1, K] and a 1-D B a column [K, 1], that dim dropped from the output."""
    a, b = cx.tensor(0), cx.tensor(1)
    K = a.shape[-1]
    if K != b.shape[-2 if b.ndim > 1 else 0]:
        raise cx.fail(f"shapes {list(a.shape)} and {list(b.shape)} do not multiply")
    try:
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    except ValueError as e:
        raise cx.fail(f"its batch dims: {e}") from None
    k, nb = te.reduce_axis(K, "k"), len(batch)

    def f(*i):
        m, n = i[nb:nb + (a.ndim > 1)], i[len(i) - (b.ndim > 1):]
        ia = broadcast_index(a.shape[:-2], batch, i[:nb]) + m + (k,)
        ib = broadcast_index(b.shape[:-2], batch, i[:nb]) + (k,) + n
        return te.sum(a[ia] * b[ib], axis=k)
    return [te.compute(cx.out_shapes[0], f, name=ident(cx.name))]


def _scaled(e, s):
    return e if s == 1 else e * s


def gemm(cx: NodeContext) -> list[te.Tensor]:
    a, b = cx.tensor(0), cx.tensor(1)
    ta, tb = cx.attr("transA", 0), cx.attr("transB", 0)
    alpha, beta = cx.attr("alpha", 1.0), cx.attr("beta", 1.0)
    c = cx.tensor(2) if cx.has(2) and beta != 0 else None
    shape, name, plain = cx.out_shapes[0], ident(cx.name), c is None and alpha == 1
    k = te.reduce_axis(a.shape[0 if ta else 1], "k")
    acc = te.compute(shape, lambda i, j: te.sum(a[(k, i) if ta else (i, k)] * b[(j, k) if tb else (k, j)], axis=k),
                     name=name if plain else f"{name}_acc")
    if plain:
        return [acc]

    def f(i, j):
        y = _scaled(acc[i, j], alpha)
        return y if c is None else y + _scaled(c[broadcast_index(c.shape, shape, (i, j))], beta)
    return [te.compute(shape, f, name=name)]


def _taps(o, t, size: int, K: int, s: int, d: int) -> tuple:
    """Along one spatial axis: the input index, kernel index and guards of reduction step `t`
    at output coordinate `o` (pad added). Tap kk reaches o from input i where o = i*s + kk*d.
    With g = gcd(s, d), such taps exist only where g divides o, and they are
    kk = k0 + t*(s/g) for k0 = (o/g) * inverse(d/g) mod s/g; then i = (o - k0*d)/s - t*(d/g)."""
    g = math.gcd(s, d)
    s2, d2 = s // g, d // g
    k0 = (o // g) * pow(d2, -1, s2) % s2 if s2 > 1 else 0
    i = (o // s if d == 1 else (o - k0 * d) // s) - t * d2
    guards = [ir.eq(o % g, 0)] if g > 1 else []
    guards += [k0 + t * s2 < K] if K % s2 else []
    return i, k0 + t * s2, guards + [i >= 0, i < size]


def conv_transpose(cx: NodeContext) -> list[te.Tensor]:
    """out[n, co, o] = the sum over ci and the taps kk with o + pad = i*stride + kk*dilation of
    x[n, ci, i] * w[ci, co, kk], spatial axes after the first two (NCHW in 2-D).

    Written as a gather in which each output element visits only the ceil(K / (stride/g))
    taps per axis that reach it (`_taps`): not all K taps, most guarded off, nor a direct
    conv over a zero-dilated input, which both do stride^d times the multiplications, most
    by zero. The reduction does (and its flops count) only real products, bar the borders;
    the price is a floor division and modulo in the indices where the stride is not 1."""
    x, w = cx.tensor(0), cx.tensor(1)
    sp = x.ndim - 2
    if cx.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or "output_shape" in cx.attrs:
        raise cx.fail("its pads come from auto_pad or output_shape; explicit pads (and output_padding) are "
                      "supported: export it with those")
    group, kernel = cx.attr("group", 1), w.shape[2:]
    strides, dils = cx.attr("strides", [1] * sp), cx.attr("dilations", [1] * sp)
    pads = cx.attr("pads", [0] * 2 * sp)[:sp]
    cin, cout = x.shape[1] // group, w.shape[1]
    rc = te.reduce_axis(cin, "rc")
    rt = [te.reduce_axis(-(-K // (s // math.gcd(s, d))), f"r{k}") for k, (K, s, d) in
          enumerate(zip(kernel, strides, dils))]
    name = ident(cx.name)

    def f(n, co, *o):
        i, kk, guards = zip(*(_taps(v + p, t, size, K, s, d) for v, t, size, K, s, d, p in
                              zip(o, rt, x.shape[2:], kernel, strides, dils, pads)))
        c = rc if group == 1 else co // cout * cin + rc
        prod = x[(n, c, *i)] * w[(c, co % cout if group > 1 else co, *kk)]
        inside = te.all_(*(g for gs in guards for g in gs))
        return te.sum(te.if_then_else(inside, prod, ir.cast(0, x.dtype)), axis=[rc, *rt])
    out = te.compute(cx.out_shapes[0], f, name=f"{name}_acc" if cx.has(2) else name)
    if not cx.has(2):
        return [out]
    bias = cx.tensor(2)
    return [te.compute(out.shape, lambda n, co, *o: out[(n, co, *o)] + bias[co], name=name)]


LOWERINGS = {"MatMul": matmul, "Gemm": gemm, "ConvTranspose": conv_transpose}
KINDS = {op: "contraction" for op in LOWERINGS}
