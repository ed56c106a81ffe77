"""CPU schedule templates for the LLVM targets (x86, arm-cpu)."""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops.matmul import compute as matmul_compute

# Register budget of the micro-kernel: rows x vectors of accumulators kept in
# registers (x86 has 32 zmm/ymm registers with AVX-512, NEON has 32 q registers).
_MAX_ACC = 24


def matmul_cpu(cfg, device, M, N, K, dtype="float32"):
    """Tiled matmul: a parallel loop over (row tile, column tile) pairs, each
    accumulating into a local tile with a register-blocked, vectorized micro-kernel."""
    A, B, C = matmul_compute(M, N, K, dtype)
    s = te.create_schedule(C)
    CC = s.cache_write(C, "local")
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
    cfg.constrain(lambda c: c["tile_i"][0] * c["tile_j"][0] >= min(device.cores, M * N))

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
    return s, [A, B, C]


TEMPLATES = [Template("matmul", "tiled", ("cpu",), matmul_cpu, priority=10)]
