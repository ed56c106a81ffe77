"""CPU matmul and batch_matmul templates: `tiled` (direct) and `packed` (B packed into column
panels). matmul's fused epilogue (bias, residual, activation) is applied as the local
accumulator block is copied out."""
from __future__ import annotations

from tunekit import Template, ir, te
from tunekit.ir.sizes import is_symbolic
from tunekit.ops.epilogue import Epilogue, accumulator
from tunekit.ops.matmul import compute as matmul_compute

from ._common import acc_range, balanced, cdiv, padded_splits, register_tile_rule, vectorize, zero

# Register budget of the micro-kernel: rows x vectors of accumulators kept in
# registers (x86 has 32 zmm/ymm registers with AVX-512, NEON has 32 q registers).
_MAX_ACC = 24


def matmul_cpu(cfg, device, M, N, K, dtype="float32", **epilogue):
    """Tiled matmul: a parallel loop over (row tile, column tile) pairs, each
    accumulating into a local tile with a register-blocked, vectorized micro-kernel."""
    *params, C = matmul_compute(M, N, K, dtype, **epilogue)
    s = te.create_schedule(C)
    CC = accumulator(s, C, epilogue)
    lanes = device.lanes(dtype)
    i, j = s[C].op.axis
    cfg.define_split("tile_i", M, num_outputs=3, filter=lambda v: v[-1] <= 16)
    # whole vectors across columns (a guarded, masked tail when N is not a multiple)
    cfg.define_split("tile_j", N, num_outputs=3, policy="power2",
                     filter=lambda v: v[-1] <= 4 * lanes and (v[-1] % lanes == 0 or 2 * v[-1] > min(N, lanes)))
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda v: v[-1] >= min(K, 8))
    cfg.define_knob("order", [0, 1, 2])
    cfg.define_knob("unroll_k", [False, True])
    cfg.constrain(lambda c: c["tile_i"][-1] * -(-c["tile_j"][-1] // lanes) <= _MAX_ACC)
    # the local tile lives in L2, and there is a tile per core at least
    cfg.constrain(lambda c: c["tile_i"][1] * c["tile_i"][2] * c["tile_j"][1] * c["tile_j"][2] * 4 <= device.l2_bytes)
    if M * N >= 64 * 64:  # worth splitting across cores
        cfg.constrain(lambda c: c["tile_i"][0] * c["tile_j"][0] >= device.cores)

    io, im, ii = cfg["tile_i"].apply(s, C, i)
    jo, jm, jv = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, im, ii, jm, jv)
    outer = s[C].fuse(io, jo)
    s[C].parallel(outer)
    s[C].vectorize(jv)
    s[CC].compute_at(s[C], outer)

    ci, cj = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    cim, cii = s[CC].split(ci, factor=cfg["tile_i"][-1])
    cjm, cjv = s[CC].split(cj, factor=cfg["tile_j"][-1])
    ko, ki = cfg["tile_k"].apply(s, CC, k)
    order = [(ko, cim, cjm, ki, cii, cjv), (cim, cjm, ko, ki, cii, cjv), (ko, cjm, cim, ki, cii, cjv)]
    s[CC].reorder(*order[cfg["order"]])
    s[CC].unroll(cii)
    s[CC].vectorize(cjv)
    if cfg["unroll_k"] and cfg["tile_k"][-1] <= 16:
        s[CC].unroll(ki)
    return s, [*params, C]


def _packed(cfg, device, batch, M, N, K, dtype, epilogue=None, b_panel=0):
    """matmul (batch=0) or batch_matmul with B packed into zero-padded column
    panels Bp[b, N/nv, K, nv] and C accumulated in a padded local block of
    mc x nv, itself register-tiled mr x nv (mr rows unrolled, nv = whole vectors).
    With `b_panel` (matmul only) B comes packed, in panels of nv = b_panel."""
    lanes, cores = device.lanes(dtype), device.cores
    nb = max(batch, 1)
    # column panels of whole vectors; one vector per row measured slow (a broadcast per FMA)
    n_c = [(cdiv(N, b_panel), b_panel)] if b_panel else \
        padded_splits(N, [u * lanes for u in (range(2, 5) if N > lanes else (1,))], lanes)
    # row blocks of `blk` register tiles of `mr` rows; rows past M use a clamped A row and are dropped
    m_c = [(cdiv(M, mr * b), b, mr) for b in (1, 2, 4, 8, 16, 32, 64, 128) for mr in range(1, min(M, 16) + 1)
           if (b == 1 or b * 2 <= M) and cdiv(M, mr * b) * mr * b - M < max(mr, M // 16)]
    cfg.define_split("tile_n", N, num_outputs=2, policy="candidates", candidates=n_c)
    cfg.define_split("tile_m", M, num_outputs=3, policy="candidates", candidates=m_c)
    # k blocks long enough to amortize loading and storing the accumulators around each
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda v: v[1] >= min(K, 64))
    cfg.define_knob("k_outer", [True, False])     # k blocks around the row tiles, or inside each tile
    # pack all of B first, or each panel where it is used (B packed already: neither)
    roots = [False] if b_panel else [False, True]
    cfg.define_knob("pack_root", roots)

    def acc(n, m):
        u = n[1] // lanes
        return m[2] * u, acc_range(device, u)[1]

    def parallel(c):
        return nb * c["tile_n"][0] * (c["tile_m"][0] if c["pack_root"] else 1)
    fits = register_tile_rule(device, acc, [n_c, m_c])
    cfg.constrain(lambda c: fits(c["tile_n"], c["tile_m"]))
    # the accumulator block stays in L2 (and on the stack)
    block_bytes = min(device.l2_bytes // 2, 256 << 10)
    cfg.constrain(lambda c: c["tile_m"][1] * c["tile_m"][2] * c["tile_n"][1] * 4 <= block_bytes)
    if nb * M * N >= 64 * 64 and any(balanced(nb * n[0] * (m[0] if root else 1), cores)
                                     for n in n_c for m in m_c for root in roots):
        cfg.constrain(lambda c: balanced(parallel(c), cores))
    cfg.constrain(lambda c: not c["pack_root"] or c["tile_m"][0] > 1)   # else the same as per panel
    # with one tile per block or one k block both orders are the same program
    cfg.constrain(lambda c: c["k_outer"] or (c["tile_m"][1] > 1 and c["tile_k"][0] > 1))

    no, nv = cfg["tile_n"]
    _, blk, mr = cfg["tile_m"]
    mc = blk * mr
    # the tile counts of the sizes (a symbolic size's count is symbolic, its last tile maybe partial)
    no, mo = cdiv(N, nv) if is_symbolic(N) else no, cdiv(M, mc)
    bshape = (nb,) if batch else ()
    A = te.placeholder((*bshape, M, K), "A", dtype)
    B = te.placeholder((*bshape, K, N), "W" if batch else "B", dtype)
    bidx = (lambda b: (b,)) if batch else (lambda b: ())

    def pack(*ax):
        b, jo, k, jv = ax if batch else (0, *ax)
        load = B[(*bidx(b), k, jo * nv + jv)]
        return te.if_then_else(jo * nv + jv < N, load, zero(dtype)) if is_symbolic(N) or no * nv > N else load
    if b_panel:
        B = Bp = te.placeholder((no, K, nv), "B", dtype)
    else:
        Bp = te.compute((*bshape, no, K, nv), pack, name="Bp")
    k = te.reduce_axis(K, "k")

    def accumulate(*ax):
        b, i, j = ax if batch else (0, *ax)
        row = ir.min_(i, M - 1) if is_symbolic(M) or mo * mc > M else i
        return te.sum(A[(*bidx(b), row, k)] * Bp[(*bidx(b), j // nv, k, j % nv)], axis=k)
    Cp = te.compute((*bshape, mo * mc, no * nv), accumulate, name="Cp")
    epi = Epilogue(N, (M, N), dtype, **(epilogue or {}))   # matmul only (batch_matmul has none)
    C = te.compute((*bshape, M, N), lambda *ax: epi(Cp[ax], ax), name="C")

    s = te.create_schedule(C)
    *b, i, j = s[C].op.axis
    jo, jv = s[C].split(j, nv)
    io, ii = s[C].split(i, mc)
    s[C].reorder(*b, jo, io, ii, jv)
    panel = s[C].fuse(*b, jo)
    vectorize(s, C, jv, lanes)
    if cfg["pack_root"]:
        par = s[C].fuse(panel, io)
        *pb, pj, _, pv = s[Bp].op.axis
        s[Bp].parallel(s[Bp].fuse(*pb, pj))
        at = par
    else:
        par = at = panel
        if not b_panel:
            s[Bp].compute_at(s[C], panel)
            pv = s[Bp].op.axis[-1]
    if not b_panel:
        vectorize(s, Bp, pv, lanes)
    s[C].parallel(par)
    s[Cp].compute_at(s[C], at if cfg["pack_root"] else io)

    *cb, ci, cj = s[Cp].op.axis
    cio, cii = s[Cp].split(ci, mr)
    cju, cjl = s[Cp].split(cj, lanes)
    ko, ki = cfg["tile_k"].apply(s, Cp, s[Cp].op.reduce_axis[0])
    outer = (ko, cio) if cfg["k_outer"] else (cio, ko)
    s[Cp].reorder(*cb, *outer, ki, cii, cju, cjl)
    s[Cp].unroll(cii)
    s[Cp].unroll(cju)
    s[Cp].vectorize(cjl)
    return s, [A, B, *epi.inputs, C]


def matmul_packed(cfg, device, M, N, K, dtype="float32", b_panel=0, **epilogue):
    """matmul with B packed into column panels (by the kernel, or before: `b_panel`) and a
    register-tiled local accumulator (see `_packed`)."""
    return _packed(cfg, device, 0, M, N, K, dtype, epilogue, b_panel)


def batch_matmul_packed(cfg, device, B, M, N, K, dtype="float32"):
    """batch_matmul: `matmul_packed` per batch, the batch fused into the parallel loop."""
    return _packed(cfg, device, B, M, N, K, dtype)


TEMPLATES = [
    Template("matmul", "tiled", ("cpu",), matmul_cpu, priority=10, epilogue=True),
    Template("matmul", "packed", ("cpu",), matmul_packed, priority=20, epilogue=True, panels=True),
    Template("batch_matmul", "packed", ("cpu",), batch_matmul_packed, priority=20),
]
