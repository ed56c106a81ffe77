"""CPU templates of the products on dot instructions (`tiled`): qmatmul (int8, four k per
int32) and bmatmul (bfloat16, two k per int32). A parallel loop over (row tile, column tile)
pairs; each accumulates its block in 32-bit lanes, then writes it out through the op's output
stage (qmatmul: less the zero point's part, requantized where asked; bmatmul: its epilogue).
The block is either an mr x nv tile in vector registers (nv a whole number of vectors: one
vpdpbusd or vdpbf16ps per vector and step of k where the CPU has it, the data's k broadcast,
the weights' loaded as they lie) or, where the CPU has AMX tiles for the product and the knob
`amx` picks them, 16 x 16 tiles: the reduction tensorized as "amx" in k blocks of `tile_k`.
The weights' layout (the k of a column in one int32) is both instructions' own."""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops.bmatmul import compute as bmatmul_compute
from tunekit.ops.epilogue import accumulator
from tunekit.ops.qmatmul import compute as qmatmul_compute

from ._common import cdiv, registers, vectorize


def qmatmul_tiled(cfg, device, M, N, K, dtype="uint8", out_dtype="int32", zero=0):
    """qmatmul with an accumulator block per task, in registers or AMX tiles (see the module's doc)."""
    *params, out = qmatmul_compute(M, N, K, dtype, out_dtype, zero)
    s = te.create_schedule(out)
    acc = next(st.op.output for st in s.stages if st.op.name == "qmm")
    _tiled(cfg, device, s, acc, out, "amx-int8", K // 4)
    return s, [*params, out]


def bmatmul_tiled(cfg, device, M, N, K, dtype="float32", **epilogue):
    """bmatmul with an accumulator block per task, in registers or AMX tiles (see the module's doc)."""
    *params, out = bmatmul_compute(M, N, K, dtype, **epilogue)
    s = te.create_schedule(out)
    acc = accumulator(s, out, epilogue)
    _tiled(cfg, device, s, acc, out, "amx-bf16", K // 2)
    return s, [*params, out]


def _tiled(cfg, device, s, acc, out, tile_feature: str, groups: int) -> None:
    """Schedule product `acc` (M x N over `groups` k groups) inside `out`'s parallel block loop."""
    M, N = out.shape
    lanes = device.lanes("int32")
    tiles = tile_feature in device.extra.get("tiles", "").split() and M % 16 == N % 16 == groups % 16 == 0
    cfg.define_knob("amx", [0, 1] if tiles else [0])
    in_tiles = lambda v: tiles and v[1] % 16 == 0
    cfg.define_split("tile_m", M, num_outputs=2, filter=lambda v: v[1] <= 8 or in_tiles(v) and v[1] <= 128)
    cfg.define_split("tile_n", N, num_outputs=2, policy="power2",
                     filter=lambda v: (v[1] <= 4 * lanes and (v[1] % lanes == 0 or 2 * v[1] > min(N, lanes)))
                     or in_tiles(v) and v[1] <= 256)
    cfg.define_split("tile_k", groups, num_outputs=2, filter=lambda v: v[1] <= 64 or in_tiles(v))
    # registers: the accumulators, with one for the weights and one for the broadcast data; tiles: whole ones
    cfg.constrain(lambda c: c["tile_m"][1] * cdiv(c["tile_n"][1], lanes) <= registers(device) - 2
                  and c["tile_k"][1] <= 64 if c["amx"] == 0 else
                  all(c[k][1] % 16 == 0 for k in ("tile_m", "tile_n", "tile_k")) and N % c["tile_n"][1] == 0)
    if M * N >= 64 * 64:
        cfg.constrain(lambda c: c["tile_m"][0] * c["tile_n"][0] >= device.cores)
    if tiles:   # untuned: tiles, blocks of up to 128 rows and 256 columns, k whole
        m = max(f for f in range(16, min(M, 128) + 1, 16) if M % f == 0)
        n = max(f for f in (16, 32, 64, 128, 256) if N % f == 0)
        cfg.prefer(amx=1, tile_m=(M // m, m), tile_n=(N // n, n), tile_k=(1, groups))

    m, n = s[out].op.axis
    mo, mi = cfg["tile_m"].apply(s, out, m)
    no, ni = cfg["tile_n"].apply(s, out, n)
    s[out].reorder(mo, no, mi, ni)
    par = s[out].fuse(mo, no)
    s[out].parallel(par)
    vectorize(s, out, ni, lanes)
    s[acc].compute_at(s[out], par)
    am, an = s[acc].op.axis
    (k,) = s[acc].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, acc, k)
    s[acc].reorder(ko, ki, am, an)
    if cfg["amx"]:
        s[acc].tensorize(ki, "amx")
    else:
        s[acc].unroll(am)
        vectorize(s, acc, an, lanes)


TEMPLATES = [Template("qmatmul", "tiled", ("cpu",), qmatmul_tiled, priority=20),
             Template("bmatmul", "tiled", ("cpu",), bmatmul_tiled, priority=20, epilogue=True)]
