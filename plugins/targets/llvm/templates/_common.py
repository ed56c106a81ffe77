"""What the CPU templates share: device facts and a few schedule idioms."""
from __future__ import annotations

import itertools

from tunekit import ir, te
from tunekit.ops import pair
from tunekit.ops.conv2d import in_input

#: the reduction orders of the conv2d register-tile templates (input channel blocks, taps, channels in a block)
REDUCE_ORDERS = {"c-rs-ci": ("rc", "ry", "rx", "rci"), "c-ci-rs": ("rc", "rci", "ry", "rx"),
                 "rs-c-ci": ("ry", "rx", "rc", "rci")}


def cdiv(a: int, b: int) -> int:
    return (a + (b - 1)) // b   # of a symbolic size, the form lowering gives a split's tile count


def registers(device) -> int:
    """Vector registers of the ISA (`DeviceInfo.vector_registers`)."""
    return device.vector_registers()


def acc_range(device, vectors: int) -> tuple[int, int]:
    """(fewest, most) accumulator registers worth a register tile of `vectors`
    registers per row: the tile, its row of weights and a broadcast must fit."""
    regs = registers(device)
    return (regs // 2 - 4 if regs > 16 else 6), regs - vectors - 1


def padded_splits(extent: int, sizes, unit: int = 1, waste: float = 1 / 8) -> list[tuple[int, int]]:
    """(tiles, size) splits of `extent` into tiles of the given sizes, padded up
    to whole tiles: those wasting at most `waste` of the work (or the least any wastes)."""
    sizes = sorted({s for s in sizes if s <= max(extent, unit) or s == min(sizes)})
    extra = {s: cdiv(extent, s) * s - extent for s in sizes}
    slack = max(int(extent * waste), min(extra.values()))
    return [(cdiv(extent, s), s) for s in sizes if extra[s] <= slack]


def register_tile_rule(device, acc, knob_values: list[list]):
    """A predicate on register-tile knob values, `acc(*values) -> (accumulators, most that fit)`:
    the tile fits in registers and has about half a register file of accumulators
    (or as many as the largest tile that fits), so random configs are rarely register-starved."""
    lo, _ = acc_range(device, 1)
    best = max((a for a, top in (acc(*v) for v in itertools.product(*knob_values)) if a <= top), default=1)
    floor = min(lo, best)

    def fits(*values):
        a, top = acc(*values)
        return floor <= a <= top
    return fits


def constrain_tiles(cfg, device, lanes: int, rows: str, vecs: str, par: str, candidates: dict, n: int,
                    work: int) -> None:
    """Keep the configs whose register tile, `rows`' inner size times `vecs`' inner
    size in vectors, passes `register_tile_rule`; and, on `work` of 16K outputs or
    more, whose parallel loop (`n` times `par`'s outer size) is `balanced` on the
    cores, when some candidate of `par` can be. `candidates` maps each of the three
    split knobs to its (outer, inner) candidates."""
    def acc(r, v):
        u = cdiv(v[1], lanes)
        return r[1] * u, acc_range(device, u)[1]
    fits = register_tile_rule(device, acc, [candidates[rows], candidates[vecs]])
    cfg.constrain(lambda c: fits(c[rows], c[vecs]))
    if work >= 16 << 10 and any(balanced(n * p[0], device.cores) for p in candidates[par]):
        cfg.constrain(lambda c: balanced(n * c[par][0], device.cores))


def balanced(extent: int, cores: int) -> bool:
    """A parallel loop of `extent` iterations keeps `cores` cores busy (within 25%)."""
    if extent < cores:
        return False
    return cdiv(extent, cores) * cores <= extent * 1.25


def covered(size: int, pad: int, out: int, stride: int, k: int, dil: int) -> int:
    """The padded input extent that `out` output positions (whole tiles) read: at least the padded input."""
    return max(size + 2 * pad, (out - 1) * stride + (k - 1) * dil + 1)


def padded_blocks(data, b_in: int, icb: int, Hp: int, Wp: int, ph: int, pw: int, name: str):
    """[N, C/icb, Hp, Wp, icb]: `data` zero-padded to Hp x Wp, in channel blocks of `icb`
    (blocked data, `b_in` > 0, keeps its own block; NCHW data is packed into blocks)."""
    N, C, H, W = data.shape[0], data.shape[1] * (b_in or 1), data.shape[2], data.shape[3]

    def pad(n, c, h, w, ci):
        load = data[n, c, h - ph, w - pw, ci] if b_in else data[n, c * icb + ci, h - ph, w - pw]
        return te.if_then_else(in_input(h, w, H, W, ph, pw, Hp, Wp), load, zero(data.dtype))
    return te.compute((N, C // icb, Hp, Wp, icb), pad, name=name)


def zero(dtype: str) -> ir.Expr:
    return ir.const(0.0 if dtype.startswith("float") else 0, dtype)


def vectorize(s, tensor, axis, lanes: int, max_unroll: int = 8) -> None:
    """Vectorize `axis` as `lanes`-wide vectors: one (maybe short) vector, or
    several unrolled ones (a tail vector is masked; unrolled, its mask is a constant)."""
    if axis.extent <= lanes:
        s[tensor].vectorize(axis)
        return
    outer, inner = s[tensor].split(axis, lanes)
    if outer.extent <= max_unroll:
        s[tensor].unroll(outer)
    s[tensor].vectorize(inner)


class FlatPad:
    """NCHW data zero-padded into rows of one pitch Q per stride phase, flattened:
    `pad[n, c, phase, i]` holds input row (i // Q) * sh + a, column (i % Q) * sw + b
    for phase (a, b). Output pixel p = oh * Q + ow then reads, for kernel tap (r, s),
    `pad[n, c, phase(r, s), p + offset(r, s)]`: contiguous in p, so a vector over p is
    one load. Pixels with ow >= OW are computed on padding and dropped. Only phase 0
    is packed when the kernel taps no other (1x1 kernels).

    `pixels` is how many pixels the consumer computes (a whole number of its tiles);
    Q is rounded up to a multiple of `align` (whole vectors per row: a faster pack)."""

    def __init__(self, data, kernel, stride, padding, dilation, pixels: int, align: int = 1):
        (self.sh, self.sw), (ph, pw), (self.dh, self.dw) = pair(stride), pair(padding), pair(dilation)
        N, C, H, W = data.shape
        R, S = kernel
        sh, sw, dh, dw = self.sh, self.sw, self.dh, self.dw
        self.Q = Q = self.pitch(W, pw, sw, align)
        self.nph = sh if any(r * dh % sh for r in range(R)) else 1
        self.npw = npw = sw if any(x * dw % sw for x in range(S)) else 1
        reach = ((R - 1) * dh // sh) * Q + (S - 1) * dw // sw
        rows = cdiv(pixels + reach, Q)
        dtype = data.dtype
        nf = self.nph * npw
        self.plain = None
        if sh == sw == 1:
            # which columns hold data: a table, so the pack needs no i % Q in its condition
            self.cols = te.compute((Q,), lambda q: te.tensor.all_(q >= pw, q < W + pw), name="pad_cols")

            def pack(n, c, f, i):
                conds = [i >= ph * Q] if ph else []
                if rows - ph > H:
                    conds.append(i < (H + ph) * Q)
                if pw or Q - pw > W:
                    conds.append(self.cols[i % Q])
                return te.if_then_else(te.tensor.all_(*conds), data[n, c, i // Q - ph, i % Q - pw], zero(dtype))
        elif not (ph or pw) and (rows - 1) * sh + self.nph <= H and (Q - 1) * sw + npw <= W:
            # strided, every read in range: one scalar copy (a strided vector load would be a gather)
            def pack(n, c, f, i):
                a, b = (f // npw if self.nph > 1 else 0), (f % npw if npw > 1 else 0)
                return data[n, c, (i // Q) * sh + a, (i % Q) * sw + b]
        else:
            # strided: zero-pad first (contiguous vectors), then split the phases with unconditional
            # scalar copies
            Hp, Wp = rows * sh, Q * sw

            def padded(n, c, h, w):
                return te.if_then_else(in_input(h, w, H, W, ph, pw, Hp, Wp), data[n, c, h - ph, w - pw], zero(dtype))
            self.plain = te.compute((N, C, Hp, Wp), padded, name="data_padded")

            def pack(n, c, f, i):
                a, b = (f // npw if self.nph > 1 else 0), (f % npw if npw > 1 else 0)
                return self.plain[n, c, (i // Q) * sh + a, (i % Q) * sw + b]
        self.tensor = te.compute((N, C, nf, rows * Q), pack, name="data_pad")

    @staticmethod
    def pitch(W: int, pw: int, sw: int, align: int = 1) -> int:
        """Q for input width W, padding pw, stride sw."""
        return cdiv(cdiv(W + 2 * pw, sw), align) * align

    def read(self, n, c, r, s, p):
        """The padded input that output pixel `p` multiplies by kernel tap (r, s)."""
        y, x = r * self.dh, s * self.dw
        f = (y % self.sh if self.nph > 1 else 0) * self.npw + (x % self.sw if self.npw > 1 else 0)
        return self.tensor[n, c, f, p + (y // self.sh) * self.Q + x // self.sw]

    def schedule(self, s, lanes: int, at=None) -> None:
        """Parallel over (n, c) at the root, or computed at loop `at` = (stage, loop); vector rows."""
        t = self.tensor
        n, c, f, i = s[t].op.axis
        if at is None:
            s[t].parallel(s[t].fuse(n, c))
        else:
            s[t].compute_at(*at)
        row, col = s[t].split(i, self.Q)     # i // Q and i % Q become the row and column loops
        if self.sh > 1 or self.sw > 1:
            s[t].reorder(row, col, f)
            s[t].unroll(f)
        if self.plain is not None:
            pn, pc, _, pw = s[self.plain].op.axis
            if at is None:
                s[self.plain].parallel(s[self.plain].fuse(pn, pc))
            else:
                s[self.plain].compute_at(*at)
            vectorize(s, self.plain, pw, lanes)
        if self.sh > 1 or self.sw > 1:
            return
        # vectors that divide a row, so row and column stay provably in range (contiguous loads)
        vec = lanes if self.Q % lanes == 0 else max(d for d in range(1, min(self.Q, 64) + 1) if self.Q % d == 0)
        if vec < self.Q:
            co, col = s[t].split(col, vec)
            s[t].unroll(co)
        s[t].vectorize(col)


def widest(candidates: list, most: int) -> tuple:
    """The candidate split with the largest inner size up to `most` (else the first)."""
    return max((c for c in candidates if c[1] <= most), key=lambda c: c[1], default=candidates[0])
