"""GPU matmul templates.

`matmul_shared` (AutoTVM's CUDA dense schedule): a block computes a (BM x BN)
tile of C, staging (BM x KT) of A and (KT x BN) of B in shared memory per step
of the reduction, copied cooperatively by all threads (vector loads optional);
each thread accumulates a (YI x XI) register tile (cache_write "local"); blocks
may loop over virtual threads (vy x vx sub-tiles).

`matmul_register` (no shared memory; Mali, and CPU OpenCL): each thread
accumulates a (YI x XI) register tile straight from global memory, the XI
columns vectorized.

`dense_shared` and `dense_register` are the same schedules for dense, whose
weights are [N, K]: the weight tile is copied along K (coalesced, vectors of
`vec`), and its columns are not vectorized in the register tile (they are K apart).
"""
from __future__ import annotations

from tunekit import te
from tunekit.ops.dense import compute as dense_compute
from tunekit.ops.epilogue import accumulator
from tunekit.ops.matmul import compute as matmul_compute

from .common import bind, block_limits, cooperative_fetch, cpu_device, fits_block, on_chip_shared

MAX_ACC = 64   # accumulators per thread: beyond this registers spill


def matmul_shared(cfg, device, M, N, K, dtype="float32", **epilogue):
    return _shared(cfg, device, matmul_compute(M, N, K, dtype, **epilogue), M, N, K, dtype, epilogue, False)


def dense_shared(cfg, device, M, N, K, dtype="float32", **epilogue):
    return _shared(cfg, device, dense_compute(M, N, K, dtype, **epilogue), M, N, K, dtype, epilogue, True)


def _shared(cfg, device, tensors, M, N, K, dtype, epilogue, rows_of_k: bool):
    """The shared-memory schedule of `tensors` (A, B, epilogue inputs, C); B is
    [N, K] if `rows_of_k` (dense), else [K, N] (matmul)."""
    *params, C = tensors
    A, B = params[:2]
    s = te.create_schedule(C)
    CL = accumulator(s, C, epilogue)
    AA = s.cache_read(A, "shared", [CL])
    BB = s.cache_read(B, "shared", [CL])
    _, _, max_shared = block_limits(device)
    nbytes = int("".join(c for c in dtype if c.isdigit()) or 32) // 8

    cfg.define_split("tile_y", M, num_outputs=4, filter=lambda v: v[1] <= 4 and v[3] <= 16)
    cfg.define_split("tile_x", N, num_outputs=4, filter=lambda v: v[1] <= 4 and v[3] <= 16)
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda v: v[1] <= 64)
    cfg.define_knob("vec", [1, 2, 4])          # vector width of the global->shared copies and the XI columns
    cfg.define_knob("unroll_k", [False, True])
    vec_ok = lambda c: c["vec"] == 1 or (c["tile_k"][1] % c["vec"] == 0
                                          and c["tile_x"][2] * c["tile_x"][3] % c["vec"] == 0)
    cfg.constrain(lambda c: fits_block((c["tile_x"][2], c["tile_y"][2]), device)
                  and c["tile_y"][3] * c["tile_x"][3] <= MAX_ACC
                  and (c["tile_y"][2] * c["tile_y"][3] + c["tile_x"][2] * c["tile_x"][3]) * c["tile_k"][1] * nbytes
                  <= max_shared
                  and vec_ok(c))

    i, j = s[C].op.axis
    by, vy, ty, yi = cfg["tile_y"].apply(s, C, i)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, C, j)
    s[C].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    bind(s[C], [by, bx, vy, vx, ty, tx], ["blockIdx.y", "blockIdx.x", "vthread", "vthread",
                                          "threadIdx.y", "threadIdx.x"])
    s[CL].compute_at(s[C], tx)
    if cfg["vec"] > 1 and cfg["tile_x"][3] % cfg["vec"] == 0:
        _, xv = s[C].split(xi, factor=cfg["vec"])
        s[C].vectorize(xv)

    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, CL, k)
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ci)
    if cfg["vec"] > 1 and cfg["tile_x"][3] % cfg["vec"] == 0 and not rows_of_k:
        cjo, cjv = s[CL].split(cj, factor=cfg["vec"])
        s[CL].unroll(cjo)
        s[CL].vectorize(cjv)
    else:
        s[CL].unroll(cj)
    if cfg["unroll_k"]:
        s[CL].unroll(ki)
    threads = (cfg["tile_x"][2], cfg["tile_y"][2])
    for cache in (AA, BB):
        s[cache].compute_at(s[CL], ko)
    along_k = cfg["vec"] if cfg["tile_k"][1] % cfg["vec"] == 0 else 1
    cooperative_fetch(s, AA, threads, along_k)
    cooperative_fetch(s, BB, threads, along_k if rows_of_k else cfg["vec"])
    return s, [*params, C]


def matmul_register(cfg, device, M, N, K, dtype="float32", **epilogue):
    return _register(cfg, device, matmul_compute(M, N, K, dtype, **epilogue), M, N, K, dtype, epilogue, False)


def dense_register(cfg, device, M, N, K, dtype="float32", **epilogue):
    return _register(cfg, device, dense_compute(M, N, K, dtype, **epilogue), M, N, K, dtype, epilogue, True)


def _register(cfg, device, tensors, M, N, K, dtype, epilogue, rows_of_k: bool):
    """The register-only schedule of `tensors` (as `_shared`'s)."""
    *params, C = tensors
    s = te.create_schedule(C)
    CL = accumulator(s, C, epilogue)
    lanes = max(1, min(16, device.lanes(dtype)))
    # without on-chip shared memory (Mali, CPUs) explicit full-width vectors are what is fast; a CPU
    # runs the work-items of a group in a loop, so small groups
    full = not on_chip_shared(device) and N % lanes == 0
    max_threads = 64 if cpu_device(device) else 1 << 30
    cfg.define_split("tile_y", M, num_outputs=3, filter=lambda v: v[2] <= 16)
    cfg.define_split("tile_x", N, num_outputs=3, filter=lambda v: v[2] <= 4 * lanes and (not full or v[2] >= lanes))
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda v: v[1] <= 16)
    cfg.define_knob("vec", [lanes] if full else [w for w in (1, 2, 4, 8, 16) if w <= lanes])
    cfg.define_knob("unroll_k", [False, True])
    cfg.constrain(lambda c: fits_block((c["tile_x"][1], c["tile_y"][1]), device)
                  and c["tile_x"][1] * c["tile_y"][1] <= max_threads
                  and c["tile_y"][2] * c["tile_x"][2] <= MAX_ACC * max(1, lanes // 4)
                  and c["tile_x"][2] % c["vec"] == 0)

    i, j = s[C].op.axis
    by, ty, yi = cfg["tile_y"].apply(s, C, i)
    bx, tx, xi = cfg["tile_x"].apply(s, C, j)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    bind(s[C], [by, bx, ty, tx], ["blockIdx.y", "blockIdx.x", "threadIdx.y", "threadIdx.x"])
    s[CL].compute_at(s[C], tx)
    vec = cfg["vec"]
    if vec > 1:
        _, xv = s[C].split(xi, factor=vec)
        s[C].vectorize(xv)
    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, CL, k)
    cjo, cjv = s[CL].split(cj, factor=vec)
    s[CL].reorder(ko, ki, ci, cjo, cjv)
    s[CL].unroll(ci)
    s[CL].unroll(cjo)
    if vec > 1 and not rows_of_k:
        s[CL].vectorize(cjv)
    elif vec > 1:
        s[CL].unroll(cjv)
    if cfg["unroll_k"]:
        s[CL].unroll(ki)
    return s, [*params, C]
