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

import numpy as np

from tunekit import Template, ir, te
from tunekit.ops import pair
from tunekit.ops.bmatmul import compute as bmatmul_compute
from tunekit.ops.epilogue import accumulator
from tunekit.ops.qconv2d import compute as qconv2d_compute
from tunekit.ops.qmatmul import compute as qmatmul_compute
from tunekit.topi.quantize import quantized

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


def qconv2d_tiled(cfg, device, N, H, W, C, K_out, R, S, stride=1, padding=0, dilation=1, dtype="uint8",
                  out_dtype="uint8", zero=0, pad_value=0):
    """qconv2d with a block of (pixels of a row) x (output channels) per task in vector registers: per
    tap and four channels, a pixel's data broadcast and the block's weights loaded as they lie. The
    knob `k_outer` runs the output channel blocks outermost (each block's weights stay in cache).
    With the knob `amx` (stride 1, channels in 64s, output channels in 16s, a CPU with AMX tiles) the
    product runs on tiles instead (`_qconv2d_tiles`)."""
    params = qconv2d_compute(N, H, W, C, K_out, R, S, stride, padding, dilation, dtype, out_dtype, zero, pad_value)
    out, lanes, regs = params[-1], device.lanes("int32"), registers(device)
    _, _, OW, K = out.shape
    tiles = "amx-int8" in device.extra.get("tiles", "").split() and pair(stride) == (1, 1) and C % 64 == 0 \
        and K % 16 == 0
    cfg.define_knob("amx", [0, 1] if tiles else [0])
    cfg.define_knob("amx_m", [16, 32, 64, 128])                       # the tiles' block of pixels
    cfg.define_knob("amx_n", [v for v in (16, 32, 64) if K % v == 0 and tiles] or [16])   # ... of output channels
    cfg.define_split("tile_x", OW, num_outputs=2, filter=lambda v: v[1] <= 16)
    # whole vectors, or one short one (a masked tail vector after whole ones is several times slower)
    wide = lambda k: k <= 4 * lanes and k % lanes == 0 or lanes > k and 2 * k > min(K, lanes)
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda v: wide(v[1]))
    cfg.define_knob("k_outer", [0, 1])
    first = {name: cfg.values(name)[0] for name in ("amx_m", "amx_n", "tile_x", "tile_k", "k_outer")}
    # each config is one kernel: the knobs of the other way stay at their first values
    cfg.constrain(lambda c: all(c[k] == first[k] for k in (("tile_x", "tile_k", "k_outer") if c["amx"]
                                                            else ("amx_m", "amx_n"))))
    cfg.constrain(lambda c: c["amx"] or c["tile_x"][1] * cdiv(c["tile_k"][1], lanes) <= regs - 2)
    k = max(v for v in range(1, K + 1) if K % v == 0 and wide(v))   # untuned: the widest block, as many pixels as fit
    x = max(v for v in range(1, min(OW, 16) + 1) if OW % v == 0 and v * cdiv(k, lanes) <= regs - 2)
    cfg.prefer(tile_k=(K // k, k), tile_x=(cdiv(OW, x), x))
    if tiles:
        cfg.prefer(**{**first, "amx": 1, "amx_m": 64, "amx_n": max(cfg.values("amx_n"))})
    if cfg["amx"]:
        return _qconv2d_tiles(cfg, device, params, R, S, padding, dilation, out_dtype, zero, pad_value)
    s = te.create_schedule(out)
    stage = {st.op.name: st.op.output for st in s.stages}
    acc = stage["qconv"]
    n, y, ox, ok = s[out].op.axis
    xo, xi = cfg["tile_x"].apply(s, out, ox)
    ko, ki = cfg["tile_k"].apply(s, out, ok)
    s[out].reorder(*((ko, n, y, xo) if cfg["k_outer"] else (n, y, xo, ko)), xi, ki)
    par = s[out].fuse(*((ko, n, y, xo) if cfg["k_outer"] else (n, y, xo, ko)))
    s[out].parallel(par)
    vectorize(s, out, ki, lanes)
    s[acc].compute_at(s[out], par)
    an, ay, ax, ak = s[acc].op.axis
    s[acc].reorder(*s[acc].op.reduce_axis, an, ay, ax, ak)
    s[acc].unroll(ax)
    vectorize(s, acc, ak, lanes)
    if "pad" in stage:
        pn, ph, *_ = s[stage["pad"]].op.axis
        s[stage["pad"]].parallel(s[stage["pad"]].fuse(pn, ph))
    return s, params


def _qconv2d_tiles(cfg, device, params, R, S, padding, dilation, out_dtype, zero, pad_value):
    """qconv2d (stride 1) on AMX tiles over flat pixels: the padded data flattened, row after row
    ("flat"), so that output pixel p = y * Wp + x (Wp the padded width) reads tap (r, s) at p + r * Wp
    + s, rows of a tile apart by one pixel; the pixels x >= OW of each row are computed and dropped.
    Blocks of amx_m pixels x amx_n output channels, each requantized where it is computed
    ("qconv_flat"), then copied to the output's rows ("qconv_out")."""
    X, Wt, offset, scale, _ = params
    N, H, W, C4 = X.shape
    K = Wt.shape[-1]
    (ph, pw), (dh, dw) = pair(padding), pair(dilation)
    Hp, Wp = H + 2 * ph, W + 2 * pw
    OH, OW = Hp - dh * (R - 1), Wp - dw * (S - 1)
    bm, bn = cfg["amx_m"], cfg["amx_n"]
    P = cdiv(OH * Wp, bm) * bm
    word = ir.const(int(np.array([pad_value] * 4, np.uint8).view(np.int32)[0]), "int32")

    def flat(n, q, c):
        h, w = q // Wp - ph, q % Wp - pw
        inside = te.all_(q < Hp * Wp, h >= 0, h < H, w >= 0, w < W)
        return te.if_then_else(inside, X[n, ir.min_(ir.max_(h, 0), H - 1), ir.min_(ir.max_(w, 0), W - 1), c], word)
    data = te.compute((N, P + (R - 1) * dh * Wp + (S - 1) * dw, C4), flat, name="flat")
    r, s_, c = te.reduce_axis(R, "r"), te.reduce_axis(S, "s"), te.reduce_axis(C4, "c")
    acc = te.compute((N, P, K), lambda n, p, k: te.sum(
        te.dot4_u8s8(data[n, p + r * dh * Wp + s_ * dw, c], Wt[r, s_, c, k]), axis=[r, s_, c]), name="qconv")
    q = te.compute((N, P, K), lambda n, p, k: quantized(ir.cast(acc[n, p, k] + offset[k], "float32") * scale[k],
                                                        ir.const(zero, "int32"), out_dtype), name="qconv_flat")
    out = te.compute((N, OH, OW, K), lambda n, y, x, k: q[n, y * Wp + x, k], name="qconv_out")
    s = te.create_schedule(out)
    lanes = device.lanes("int32")
    fn, fq, fc = s[data].op.axis
    s[data].parallel(s[data].fuse(fn, fq))
    vectorize(s, data, fc, lanes)
    n, p, k = s[q].op.axis
    po, pi = s[q].split(p, bm)
    ko, ki = s[q].split(k, bn)
    s[q].reorder(n, po, ko, pi, ki)
    par = s[q].fuse(n, po, ko)
    s[q].parallel(par)
    vectorize(s, q, ki, lanes)
    s[acc].compute_at(s[q], par)
    an, ap, ak = s[acc].op.axis
    s[acc].reorder(an, r, s_, c, ap, ak)
    s[acc].tensorize(c, "amx")   # (a reduction loop: the accumulator's zeroing is not part of the nest)
    on, oy, ox, ok = s[out].op.axis
    s[out].parallel(s[out].fuse(on, oy))
    vectorize(s, out, ok, lanes)
    return s, [X, Wt, offset, scale, out]


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
             Template("qconv2d", "tiled", ("cpu",), qconv2d_tiled, priority=20),
             Template("bmatmul", "tiled", ("cpu",), bmatmul_tiled, priority=20, epilogue=True)]
