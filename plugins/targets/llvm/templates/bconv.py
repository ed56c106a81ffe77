"""CPU template of bconv2d (`precision="bf16"`), `blocked`: conv2d's blocked register tiles over
channel pairs (vdpbf16ps, `blocked._conv`), or with the knob `amx` (stride 1, channels in 32s,
output blocks of 16, a CPU with AMX bfloat16 tiles) tdpbf16ps tiles over flat pixels, as qconv2d's
(`qconv._qconv2d_tiles`): a padded copy of the data as pairs, row after row, so that a tap is one
offset and a tile's rows are one pixel apart; the pixels past each row are computed and dropped."""
from __future__ import annotations

from tunekit import Template, ir, te
from tunekit.ops import out_size, pair
from tunekit.ops.epilogue import Epilogue
from tunekit.ops.layout import block_of

from ._common import cdiv, vectorize
from .blocked import _conv


def bconv2d_blocked(cfg, device, N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                    layout="NCHW", data_layout=None, **epilogue):
    """bconv2d in registers or on AMX tiles (see the module's doc)."""
    b = block_of(layout)
    tiles = "amx-bf16" in device.extra.get("tiles", "").split() and pair(stride) == (1, 1) and C % 32 == 0 \
        and b == 16
    cfg.define_knob("amx", [0, 1] if tiles else [0])
    cfg.define_knob("amx_m", [16, 32, 64, 128] if tiles else [16])   # the tiles' block of pixels
    s, params = _conv(cfg, device, N, C, H, W, K_out, R, S, stride, padding, dilation, dtype, layout, data_layout,
                      epilogue, bf16=True)
    # each config is one kernel: the knobs of the other way stay at their first values
    regs = ("tile_oc", "tile_oh", "tile_ow", "tile_ic", "reduce_order", "unroll_rx")
    cfg.constrain(lambda c: all(c[k] == cfg.values(k)[0] for k in (regs if c["amx"] else ("amx_m",))))
    if tiles:   # untuned: tiles of 64 pixels
        cfg.prefer(**{k: cfg.values(k)[0] for k in regs}, amx=1, amx_m=64)
    if not cfg["amx"]:
        return s, params
    return _tiles(cfg, device, params, N, C, H, W, K_out, R, S, padding, dilation, dtype, layout, data_layout,
                  epilogue)


def _tiles(cfg, device, params, N, C, H, W, K_out, R, S, padding, dilation, dtype, layout, data_layout, epilogue):
    """bconv2d (stride 1) on AMX tiles over flat pixels: output pixel p = y * Wp + x (Wp the padded
    width) reads tap (r, s) at flat pixel p + r * Wp + s of the pairs ("flat"); blocks of amx_m
    pixels x 16 output channels ("bconv_flat"), then the output's rows with the epilogue ("conv")."""
    data, weight = params[:2]
    b, db = block_of(layout), block_of(data_layout or layout)
    (ph, pw), (dh, dw) = pair(padding), pair(dilation)
    Hp, Wp = H + 2 * ph, W + 2 * pw
    OH, OW = out_size(H, R, 1, ph, dh), out_size(W, S, 1, pw, dw)
    bm = cfg["amx_m"]
    P = cdiv(OH * Wp, bm) * bm

    def flat(n, q, c):
        h, w = ir.min_(ir.max_(q // Wp - ph, 0), H - 1), ir.min_(ir.max_(q % Wp - pw, 0), W - 1)
        inside = te.all_(q < Hp * Wp, q // Wp >= ph, q // Wp < H + ph, q % Wp >= pw, q % Wp < W + pw)
        at = [(n, (2 * c + e) // db, h, w, (2 * c + e) % db) if db else (n, 2 * c + e, h, w) for e in (0, 1)]
        return te.if_then_else(inside, te.bf16x2(data[at[0]], data[at[1]]), 0)
    pairs = te.compute((N, P + (R - 1) * dh * Wp + (S - 1) * dw, C // 2), flat, name="flat")
    r, s_, c = te.reduce_axis(R, "r"), te.reduce_axis(S, "s"), te.reduce_axis(C // 2, "c")
    acc = te.compute((N, K_out // b, P, b), lambda n, k, p, ki: te.sum(te.dot2_bf16(
        pairs[n, p + r * dh * Wp + s_ * dw, c], weight[k, c, r, s_, ki]), axis=[r, s_, c]), name="bconv")
    block = te.compute(acc.shape, lambda *i: acc[i], name="bconv_flat")
    epi = Epilogue(K_out, (N, K_out // b, OH, OW, b), dtype, **epilogue, block=b)
    out = te.compute((N, K_out // b, OH, OW, b), lambda n, k, y, x, ki: epi(block[n, k, y * Wp + x, ki],
                                                                              (n, k, y, x, ki)), name="conv")
    s = te.create_schedule(out)
    lanes = device.lanes("float32")
    fn, fq, fc = s[pairs].op.axis
    s[pairs].parallel(s[pairs].fuse(fn, fq))
    vectorize(s, pairs, fc, lanes)
    n, k, p, ki = s[block].op.axis
    po, pi = s[block].split(p, bm)
    par = s[block].fuse(n, k, po)
    s[block].parallel(par)
    vectorize(s, block, ki, lanes)
    s[acc].compute_at(s[block], par)
    an, ak, ap, aki = s[acc].op.axis
    s[acc].reorder(an, ak, r, s_, c, ap, aki)
    s[acc].tensorize(c, "amx")   # (a reduction loop: the accumulator's zeroing is not part of the nest)
    on, ok, oy, ox, oki = s[out].op.axis
    s[out].parallel(s[out].fuse(on, ok, oy))
    vectorize(s, out, oki, lanes)
    return s, [data, weight, *epi.inputs, out]


TEMPLATES = [Template("bconv2d", "blocked", ("cpu",), bconv2d_blocked, priority=20, epilogue=True, blocked=True)]
