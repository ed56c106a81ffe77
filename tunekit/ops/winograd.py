"""Winograd convolution F(m x m, 3 x 3) (Lavin and Gray, 2016) for blocked layouts:
each m x m tile of output pixels is computed from an alpha x alpha tile of input
(alpha = m + 2) as A^T [(G g G^T) * (B^T d B)] A, an elementwise product per
(tile, channel) summed over input channels: alpha^2 matrix products of K x C by
C x tiles, against the m^2 x 9 multiplies of a direct 3x3 convolution per tile.

conv2d takes `winograd = m` (2 or 4) with its weights already transformed (U = G g
G^T, done once when a model is compiled: `transform_weights`), in
[alpha, alpha, K_out / b, C, b]. Its te computation is three stages: "wino_in"
(B^T d B of every tile), "wino_mm" (the products, summed over input channels) and
"wino_out" (A^T M A, in output tiles), read by the output stage, which drops the
pixels past the edge and applies the epilogue. The transforms are sums with the
matrices' nonzero constants written in (a table picks the row by index, which
unrolling resolves), so a schedule that unrolls a tile does no multiply by 0 or 1.

F(4x4) does 4x fewer multiplies than direct, F(2x2) 2.25x; the transforms round
differently from a direct sum, by amounts bounded from the data (`error_bound`).
"""
from __future__ import annotations

from fractions import Fraction as F

import numpy as np

from .. import ir, te
from ..te.tensor import all_

#: m -> (B^T [alpha, alpha], G [alpha, 3], A^T [m, alpha]): interpolation points 0, 1, -1 (, 2, -2) and infinity
MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [F(1, 2), F(1, 2), F(1, 2)], [F(1, 2), F(-1, 2), F(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[F(1, 4), 0, 0], [F(-1, 6), F(-1, 6), F(-1, 6)], [F(-1, 6), F(1, 6), F(-1, 6)],
         [F(1, 24), F(1, 12), F(1, 6)], [F(1, 24), F(-1, 12), F(1, 6)], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}
#: how many standard deviations of the rounding's random walk the check allows (Higham and Mary's
#: probabilistic bound: exceeded with probability under 2 exp(-LAMBDA^2 / 2), 3e-8, per output)
LAMBDA = 6.0


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m x m, 3 x 3) as float64 arrays."""
    bt, g, at = MATRICES[m]
    return tuple(np.array([[float(v) for v in row] for row in mat]) for mat in (bt, g, at))


def transform_weights(w: np.ndarray, m: int, b: int) -> np.ndarray:
    """numpy: OIHW 3x3 weights [K, C, 3, 3] as U = G g G^T in [alpha, alpha, K / b, C, b]."""
    _, g, _ = matrices(m)
    K, C = w.shape[:2]
    u = np.einsum("ar,kcrs,bs->abkc", g, w.astype(np.float64), g)
    return np.ascontiguousarray(u.reshape(m + 2, m + 2, K // b, b, C).transpose(0, 1, 2, 4, 3)).astype(w.dtype)


def error_bound(data: np.ndarray, u: np.ndarray, m: int, padding: tuple, b: int) -> np.ndarray:
    """numpy: a bound on each output's rounding error, [N, K/b, OH, OW, b], for blocked `data` and
    transformed weights `u`: LAMBDA sqrt(k) eps |A^T| (sum over channels of |U| * |B^T| |d| |B|) |A|,
    the transforms and products in absolute values (what their roundings scale with), k the
    roundings along one output's path (the channel sum and the four transforms)."""
    bt, _, at = (np.abs(x) for x in matrices(m))
    alpha, ph, pw = m + 2, *padding
    N, CB, H, W, db = data.shape
    K, C = u.shape[2] * u.shape[4], u.shape[3]
    TH, TW = -(-(H + 2 * ph - 2) // m), -(-(W + 2 * pw - 2) // m)
    d = np.zeros((N, C, TH * m + 2, TW * m + 2))
    d[:, :, ph:ph + H, pw:pw + W] = np.abs(data).transpose(0, 1, 4, 2, 3).reshape(N, C, H, W)
    win = np.lib.stride_tricks.sliding_window_view(d, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ei,nctwij,vj->evnctw", bt, win, bt, optimize=True)
    uk = np.abs(u).astype(np.float64).transpose(0, 1, 2, 4, 3).reshape(alpha, alpha, K, C)
    mm = np.einsum("evkc,evnctw->nktwev", uk, v, optimize=True)
    y = np.einsum("ye,nktwev,xv->nktywx", at, mm, at, optimize=True)   # output row t m + y, column w m + x
    y = y.reshape(N, K, TH * m, TW * m)[:, :, :H + 2 * ph - 2, :W + 2 * pw - 2]
    eps = float(np.finfo(data.dtype).eps) / 2
    out = LAMBDA * np.sqrt(C + 4 * alpha) * eps * y
    return out.reshape(N, K // b, b, *out.shape[2:]).transpose(0, 1, 3, 4, 2)


def weights_oihw(u: np.ndarray, m: int) -> np.ndarray:
    """numpy: transformed weights back as OIHW [K, C, 3, 3] (G has full column rank: exact
    up to rounding)."""
    _, g, _ = matrices(m)
    gi = np.linalg.pinv(g)
    a, _, KB, C, b = u.shape
    uk = u.astype(np.float64).transpose(0, 1, 2, 4, 3).reshape(a, a, KB * b, C)
    return np.einsum("ra,abkc,sb->kcrs", gi, uk, gi)


def _table(index, rows: list):
    """rows[index] for a loop index: a chain of selects that unrolling folds to one row."""
    out = rows[-1]
    for k in range(len(rows) - 2, -1, -1):
        out = te.if_then_else(ir.eq(index, k), rows[k], out)
    return out


def _combine(coefs, terms: list):
    """sum(c * t) over the nonzero coefficients, with no multiply by 1 or -1 (every row of
    the matrices has a positive coefficient, which goes first)."""
    out = None
    for c, t in sorted(((c, t) for c, t in zip(coefs, terms) if c), key=lambda ct: ct[0] < 0):
        t = t if abs(c) == 1 else t * ir.cast(float(abs(c)), t.dtype)
        out = t if out is None else out + t if c > 0 else out - t
    return out


def transform_2d(mat, rows: int, index: tuple, tile):
    """mat @ x @ mat^T at (index[0], index[1]), x[i][j] = tile(i, j), as nested sums (the
    inner ones shared between outputs of one row, for the compiler to reuse)."""
    cols = len(mat[0])

    def row(e):
        return lambda nu: _combine(mat[e], [_combine(mat[nu], [tile(i, j) for j in range(cols)])
                                            for i in range(cols)])
    return _table(index[0], [_table(index[1], [row(e)(nu) for nu in range(rows)]) for e in range(rows)])


def stages(Dp: te.Tensor, U: te.Tensor, m: int, db: int, TH: int, TW: int):
    """The three stages over tiles: "wino_in" V[alpha, alpha, N, TH, TW, C/db, db],
    "wino_mm" M[alpha, alpha, N, TH, TW, K/b, b] and "wino_out" Y[N, K/b, TH, TW, m, m, b].

    Args:
        Dp: the blocked data padded so that every tile's alpha x alpha window is inside it.
        U: the transformed weights [alpha, alpha, K/b, C, b].
        db: the data's channel block.
    """
    bt, _, at = MATRICES[m]
    alpha = m + 2
    N, CB = Dp.shape[:2]
    _, _, KB, C, b = U.shape
    V = te.compute((alpha, alpha, N, TH, TW, CB, db), lambda e, nu, n, th, tw, c, ci: transform_2d(
        bt, alpha, (e, nu), lambda i, j: Dp[n, c, th * m + i, tw * m + j, ci]), name="wino_in")
    rc, rci = te.reduce_axis(CB, "rc"), te.reduce_axis(db, "rci")
    M = te.compute((alpha, alpha, N, TH, TW, KB, b), lambda e, nu, n, th, tw, k, ki: te.sum(
        V[e, nu, n, th, tw, rc, rci] * U[e, nu, k, rc * db + rci, ki], axis=[rc, rci]), name="wino_mm")
    Y = te.compute((N, KB, TH, TW, m, m, b), lambda n, k, th, tw, y, x, ki: transform_2d(
        at, m, (y, x), lambda e, nu: M[e, nu, n, th, tw, k, ki]), name="wino_out")
    return V, M, Y


def tile_pad(data: te.Tensor, padding, Hp: int, Wp: int) -> te.Tensor:
    """Blocked `data` zero-padded by `padding` at the top and left and to Hp x Wp (stage "pad")."""
    ph, pw = padding
    N, C, H, W, b = data.shape
    zero = ir.cast(0, data.dtype)
    return te.compute((N, C, Hp, Wp, b), lambda n, c, h, w, i: te.if_then_else(
        all_(h >= ph, h < H + ph, w >= pw, w < W + pw), data[n, c, h - ph, w - pw, i], zero), name="pad")
