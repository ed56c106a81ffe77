"""CPU templates of the int8 convolutions, channels last: qconv2d (`tiled`: vpdpbusd on a register
block, or AMX tiles over flat pixels) and qdepthwise_conv2d (`rows`)."""
from __future__ import annotations

import numpy as np

from tunekit import Template, ir, te
from tunekit.ops import pair
from tunekit.ops.qconv2d import compute as qconv2d_compute
from tunekit.ops.qdepthwise_conv2d import compute as qdepthwise_compute
from tunekit.topi.quantize import quantized

from ._common import cdiv, registers, vectorize


def _blocks(lanes: int, n: int) -> list[int]:
    """The register blocks of `n` channels: whole vectors (at most four) or one short vector (a masked
    tail vector after whole ones runs several times slower); else the widest short one."""
    factors = [k for k in range(1, n + 1) if n % k == 0]
    return [k for k in factors if k <= 4 * lanes and k % lanes == 0 or lanes > k and 2 * k > min(n, lanes)] or \
        [max(k for k in factors if k <= lanes)]


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
    blocks = _blocks(lanes, K)
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda v: v[1] in blocks)
    cfg.define_knob("k_outer", [0, 1])
    first = {name: cfg.values(name)[0] for name in ("amx_m", "amx_n", "tile_x", "tile_k", "k_outer")}
    # each config is one kernel: the knobs of the other way stay at their first values
    cfg.constrain(lambda c: all(c[k] == first[k] for k in (("tile_x", "tile_k", "k_outer") if c["amx"]
                                                            else ("amx_m", "amx_n"))))
    cfg.constrain(lambda c: c["amx"] or c["tile_x"][1] * cdiv(c["tile_k"][1], lanes) <= regs - 2)
    k = max(blocks)   # untuned: the widest block, as many pixels as fit
    x = max(v for v in range(1, min(OW, 16) + 1) if OW % v == 0 and v * cdiv(k, lanes) <= regs - 2)
    cfg.prefer(tile_k=(K // k, k), tile_x=(cdiv(OW, x), x))
    if tiles:
        cfg.prefer(**{**first, "amx": 1, "amx_m": 64, "amx_n": max(cfg.values("amx_n"))})
    if cfg["amx"]:
        return _qconv2d_tiles(cfg, device, params, R, S, padding, dilation, out_dtype, zero, pad_value)
    return _register_blocks(cfg, device, out, "qconv", "tile_k", cfg["k_outer"], False), params


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


def qdepthwise_rows(cfg, device, N, H, W, C, R, S, stride=1, padding=0, dilation=1, dtype="uint8",
                    out_dtype="uint8", zero=0, pad_value=0):
    """qdepthwise_conv2d with a block of (pixels of a row) x (channels) per task in vector registers,
    accumulated across the taps: per tap, the block's data widened to int32 and the tap's weights."""
    params = qdepthwise_compute(N, H, W, C, R, S, stride, padding, dilation, dtype, out_dtype, zero, pad_value)
    out, lanes, regs = params[-1], device.lanes("int32"), registers(device)
    _, _, OW, _ = out.shape
    blocks = _blocks(lanes, C)
    cfg.define_split("tile_x", OW, num_outputs=2, filter=lambda v: v[1] <= 16)
    cfg.define_split("tile_c", C, num_outputs=2, filter=lambda v: v[1] in blocks)
    cfg.constrain(lambda c: c["tile_x"][1] * cdiv(c["tile_c"][1], lanes) <= regs - 4)
    k = max(blocks)   # untuned: the widest block, as many pixels as fit
    x = max(v for v in range(1, min(OW, 16) + 1) if OW % v == 0 and v * cdiv(k, lanes) <= regs - 4)
    cfg.prefer(tile_c=(C // k, k), tile_x=(OW // x, x))
    return _register_blocks(cfg, device, out, "qdw", "tile_c", False, True), params


def _register_blocks(cfg, device, out, product: str, channels: str, channels_outer: bool, vector_pad: bool):
    """The schedule of a channels-last `out` [N, OH, OW, C]: blocks of knob tile_x's pixels x knob
    `channels`' channels in parallel (the channel blocks outermost where `channels_outer`), stage
    `product` accumulated per block in vector registers across its reduction; the stage "pad"
    (where there is one) parallel over its rows, its channels in vectors where `vector_pad`."""
    s, lanes = te.create_schedule(out), device.lanes("int32")
    stage = {st.op.name: st.op.output for st in s.stages}
    acc = stage[product]
    n, y, ox, oc = s[out].op.axis
    xo, xi = cfg["tile_x"].apply(s, out, ox)
    co, ci = cfg[channels].apply(s, out, oc)
    outer = (co, n, y, xo) if channels_outer else (n, y, xo, co)
    s[out].reorder(*outer, xi, ci)
    par = s[out].fuse(*outer)
    s[out].parallel(par)
    vectorize(s, out, ci, lanes)
    s[acc].compute_at(s[out], par)
    an, ay, ax, ac = s[acc].op.axis
    s[acc].reorder(*s[acc].op.reduce_axis, an, ay, ax, ac)
    s[acc].unroll(ax)
    vectorize(s, acc, ac, lanes)
    if "pad" in stage:
        pad = s[stage["pad"]]
        pn, ph, _, pc = pad.op.axis
        pad.parallel(pad.fuse(pn, ph))
        if vector_pad:
            vectorize(s, stage["pad"], pc, device.lanes(stage["pad"].dtype))
    return s


TEMPLATES = [Template("qconv2d", "tiled", ("cpu",), qconv2d_tiled, priority=20),
             Template("qdepthwise_conv2d", "rows", ("cpu",), qdepthwise_rows, priority=20)]
