"""Contractions as te computes: matmul, gemm, the transposed convolution, and a 2-D transposed convolution's
phases (ordinary convolutions) and their interleave. Each contraction is one te.sum over the reduced axes;
gemm's alpha, beta and C and a bias are an elementwise stage after it (a reduction is a compute's whole body)."""
from __future__ import annotations

import math

from tunekit import ir, te
from tunekit.errors import ArgumentError

from .layout import broadcast_index, broadcast_shape


def matmul(a: te.Tensor, b: te.Tensor, name: str) -> te.Tensor:
    """Return the matrix product of `a` and `b` as numpy's matmul (ArgumentError: they do not
    multiply): a 1-D `a` is a row [1, K] and a 1-D `b` a column [K, 1], that dim dropped from the
    output; batch dims broadcast."""
    K = a.shape[-1]
    if K != b.shape[-2 if b.ndim > 1 else 0]:
        raise ArgumentError(f"shapes {list(a.shape)} and {list(b.shape)} do not multiply")
    try:
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    except ValueError as e:
        raise ArgumentError(f"its batch dims: {e}") from None
    k, nb = te.reduce_axis(K, "k"), len(batch)

    def f(*i):
        m, n = i[nb:nb + (a.ndim > 1)], i[len(i) - (b.ndim > 1):]
        ia = broadcast_index(a.shape[:-2], batch, i[:nb]) + m + (k,)
        ib = broadcast_index(b.shape[:-2], batch, i[:nb]) + (k,) + n
        return te.sum(a[ia] * b[ib], axis=k)
    return te.compute((*batch, *a.shape[-2:-1], *(b.shape[-1:] if b.ndim > 1 else ())), f, name=name)


def gemm(a, b, c, trans_a: bool, trans_b: bool, alpha: float, beta: float, name: str) -> te.Tensor:
    """Return alpha * A @ B + beta * C, A = a (transposed if `trans_a`), B = b (`trans_b`), C = c
    broadcast to [M, N] (None: none). The product alone is `{name}_acc` unless it is the output."""
    shape, plain = (a.shape[1 if trans_a else 0], b.shape[0 if trans_b else 1]), c is None and alpha == 1
    k = te.reduce_axis(a.shape[0 if trans_a else 1], "k")
    acc = te.compute(shape, lambda i, j: te.sum(a[(k, i) if trans_a else (i, k)] * b[(j, k) if trans_b else (k, j)],
                                                axis=k), name=name if plain else f"{name}_acc")
    if plain:
        return acc
    _scaled = lambda e, s: e if s == 1 else e * s

    def f(i, j):
        y = _scaled(acc[i, j], alpha)
        return y if c is None else y + _scaled(c[broadcast_index(c.shape, shape, (i, j))], beta)
    return te.compute(shape, f, name=name)


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


def conv_transpose(x: te.Tensor, w: te.Tensor, bias, name: str, strides=None, pads=None, dilations=None,
                   output_padding=None, group: int = 1) -> te.Tensor:
    """Return the transposed convolution of `x` [N, C, *spatial] by `w` [C, K/group, *kernel]:
    out[n, co, o] = the sum over ci and the taps kk with o + pad = i*stride + kk*dilation of
    x[n, ci, i] * w[ci, co, kk], plus bias[co] (None: none; the sum is `{name}_acc` if not); `strides`,
    `dilations` (default 1), `output_padding` per spatial axis, `pads` at their beginnings, then ends (0).
    A gather in which each output element visits only the ceil(K / (stride/g)) taps per axis that
    reach it (`_taps`): not all K taps, most guarded off, nor a direct conv over a zero-dilated
    input, which both do stride^d times the multiplications, most by zero. The reduction does (and
    its flops count) only real products, bar the borders; the price is a floor division and modulo
    in the indices where the stride is not 1."""
    sp, kernel = x.ndim - 2, w.shape[2:]
    strides, dilations, output_padding = (v or [d] * sp for v, d in ((strides, 1), (dilations, 1), (output_padding, 0)))
    pads = pads or [0] * 2 * sp
    cin, cout = x.shape[1] // group, w.shape[1]
    shape = (x.shape[0], cout * group, *(s * (n - 1) + op + (K - 1) * d + 1 - b - e for n, K, s, d, op, b, e in
                                         zip(x.shape[2:], kernel, strides, dilations, output_padding, pads[:sp],
                                             pads[sp:])))
    rc = te.reduce_axis(cin, "rc")
    rt = [te.reduce_axis(-(-K // (s // math.gcd(s, d))), f"r{k}") for k, (K, s, d) in
          enumerate(zip(kernel, strides, dilations))]

    def f(n, co, *o):
        i, kk, guards = zip(*(_taps(v + p, t, size, K, s, d) for v, t, size, K, s, d, p in
                              zip(o, rt, x.shape[2:], kernel, strides, dilations, pads[:sp])))
        c = rc if group == 1 else co // cout * cin + rc
        prod = x[(n, c, *i)] * w[(c, co % cout if group > 1 else co, *kk)]
        inside = te.all_(*(g for gs in guards for g in gs))
        return te.sum(te.if_then_else(inside, prod, ir.cast(0, x.dtype)), axis=[rc, *rt])
    out = te.compute(shape, f, name=name if bias is None else f"{name}_acc")
    if bias is None:
        return out
    return te.compute(out.shape, lambda n, co, *o: out[(n, co, *o)] + bias[co], name=name)


def conv_transpose_phase(N, C, H, W, K, Q, P, A, B, off_h, off_w, last: bool = False) -> list[te.Tensor]:
    """Return the placeholders "data" [N, C, H, W] and "weight", and the convolution "phase":
    out[n, k, q, p] = sum x[n, c, q + off_h + a, p + off_w + b] * w[k, c, a, b], zero outside x;
    with `last`, channels last: out[n, q, p, k] from w[a, b, c, k]. (One output phase of a
    transposed convolution: see `interleave`.)"""
    x = te.placeholder((N, C, H, W), "data")
    w = te.placeholder((A, B, C, K) if last else (K, C, A, B), "weight")
    lo_h, lo_w = max(0, -off_h), max(0, -off_w)
    hp, wp = max(H + lo_h, Q + off_h + lo_h + A - 1), max(W + lo_w, P + off_w + lo_w + B - 1)
    pad = te.compute((N, C, hp, wp), lambda n, c, i, j: te.if_then_else(
        te.all_(i >= lo_h, i < H + lo_h, j >= lo_w, j < W + lo_w), x[n, c, i - lo_h, j - lo_w], 0.0), name="pad")
    rc, ra, rb = te.reduce_axis(C, "rc"), te.reduce_axis(A, "ra"), te.reduce_axis(B, "rb")

    def f(n, k, q, p):
        tap = w[ra, rb, rc, k] if last else w[k, rc, ra, rb]
        return te.sum(pad[n, rc, q + off_h + lo_h + ra, p + off_w + lo_w + rb] * tap, axis=[rc, ra, rb])
    if last:
        return [x, w, te.compute((N, Q, P, K), lambda n, q, p, k: f(n, k, q, p), name="phase")]
    return [x, w, te.compute((N, K, Q, P), f, name="phase")]


def interleave(phases: list[te.Tensor], scale, shift, strides, last: bool, shape, name: str) -> te.Tensor:
    """Return out[n, k, oh, ow] of `shape` = phase (oh mod sh, ow mod sw) (row-major in `phases`:
    [N, K, Q, P], or channels [N, Q, P, K] if `last`) at (oh div sh, ow div sw), times a
    per-channel `scale`, plus a per-channel `shift`."""
    sh, sw = strides
    at = (lambda t, n, k, q, p: t[n, q, p, k]) if last else (lambda t, n, k, q, p: t[n, k, q, p])

    def f(n, k, oh, ow):
        qh, qw = oh // sh, ow // sw
        value = at(phases[-1], n, k, qh, qw)
        for p in range(sh * sw - 2, -1, -1):
            value = ir.select(te.all_(ir.eq(oh % sh, p // sw), ir.eq(ow % sw, p % sw)), at(phases[p], n, k, qh, qw),
                              value)
        return value * scale[k] + shift[k]
    return te.compute(shape, f, name=name)
