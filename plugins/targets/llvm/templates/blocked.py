"""CPU templates of the blocked layouts ("NCHW{b}c", `tunekit.ops.layout`): what a
network runs layer to layer on a CPU. The activations stay blocked between layers
and the weights were blocked when the model was compiled, so nothing is repacked
per call: b channels of a pixel are one vector, read in place (a padded copy is
made only for padded convolutions and tiles past the edge).

- conv2d `blocked`: register tiles of (rows x cols) output pixels x (m blocks of b)
  output channels over the whole reduction; each data element broadcast, each
  weight a vector of b output channels. A first layer whose data is NCHW (3 input
  channels) packs it into input-channel blocks of its own size (a knob).
  `_conv` does the same over pairs of input channels for bconv2d (`bconv`): each data
  element a bfloat16 pair, each product vdpbf16ps; its padded copy rounds the data to pairs.
- depthwise_conv2d `blocked`: tiles of output pixels, one vector of b channels
  each; every tap a vector load (strided convolutions too).

The pools' blocked templates are in `pool`.
"""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops import layout as layouts
from tunekit.ops import out_size, pair
from tunekit.ops.bconv2d import pairs
from tunekit.ops.epilogue import Epilogue
from tunekit.ops.layout import block_of

from ._common import REDUCE_ORDERS, cdiv, covered, padded_blocks, padded_splits, registers, vectorize, widest


def _schedule_copy(s, t, lanes: int, at=None) -> None:
    n, c, h, _, ci = s[t].op.axis
    if at is None:
        s[t].parallel(s[t].fuse(n, c, h))
    else:
        s[t].compute_at(*at)
    vectorize(s, t, ci, lanes)


def _vector_lanes(s, t, axis, lanes: int) -> None:
    """Vectorize a block axis: whole vectors, unrolled when a block is several."""
    if axis.extent > lanes:
        outer, axis = s[t].split(axis, lanes)
        s[t].unroll(outer)
    s[t].vectorize(axis)


def conv2d_blocked(cfg, device, N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                   layout="NCHW", data_layout=None, **epilogue):
    """conv2d from blocked (or NCHW) data and [K_out/b, C, R, S, b] weights to a blocked output."""
    return _conv(cfg, device, N, C, H, W, K_out, R, S, stride, padding, dilation, dtype, layout, data_layout,
                 epilogue, bf16=False)


def _conv(cfg, device, N, C, H, W, K_out, R, S, stride, padding, dilation, dtype, layout, data_layout, epilogue,
          bf16: bool):
    """conv2d `blocked` (see the module's doc); with `bf16`, over C/2 channel pairs (bconv2d)."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    lanes = device.lanes(dtype)
    b, db = block_of(layout), block_of(data_layout or layout)
    KB, vecs = K_out // b, cdiv(b, lanes)
    # the reduction's channels: bf16 reads pairs, blocked data in its own blocks of pairs
    C, db = (C // 2, db // 2) if bf16 else (C, db)
    oc_c = [(KB // m, m) for m in range(1, 9) if KB % m == 0 and m * vecs <= 4]
    # a quarter of padding allowed: on 7x7 layers, 2 x 7 pixel tiles (8 rows computed) beat 1 x 7
    oh_c = padded_splits(OH, range(1, 9), waste=1 / 4)
    ow_c = padded_splits(OW, range(1, 31), waste=1 / 4)
    cfg.define_split("tile_oc", KB, num_outputs=2, policy="candidates", candidates=oc_c)
    cfg.define_split("tile_oh", OH, num_outputs=2, policy="candidates", candidates=oh_c)
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="candidates", candidates=ow_c)
    if db:
        cfg.define_split("tile_ic", C, num_outputs=2, policy="candidates", candidates=[(C // db, db)])
    else:
        cfg.define_split("tile_ic", C, num_outputs=2, filter=lambda v: v[1] <= 64)
    cfg.define_knob("reduce_order", list(REDUCE_ORDERS) if R * S > 1 else ["c-rs-ci"])
    cfg.define_knob("unroll_rx", [False, True] if S > 1 else [False])
    # the register tile (pixels x vectors) only bounded by twice the register file: the rest is the search's
    regs = registers(device)
    cfg.constrain(lambda c: c["tile_oh"][1] * c["tile_ow"][1] * c["tile_oc"][1] * vecs <= 2 * regs)
    # untuned: one row of pixels x up to 2 vectors of channels that fits the registers with its weights
    m0 = max((m for _, m in oc_c if m * vecs <= 2), default=oc_c[0][1])
    cfg.prefer(tile_oc=(KB // m0, m0), tile_ow=widest(ow_c, (regs - m0 * vecs - 2) // (m0 * vecs)))

    oco, m = cfg["tile_oc"]
    ico, icb = cfg["tile_ic"]
    oho, ohr = cfg["tile_oh"]
    owo, owr = cfg["tile_ow"]
    OHp, OWp = oho * ohr, owo * owr
    Hp, Wp = covered(H, ph, OHp, sh, R, dh), covered(W, pw, OWp, sw, S, dw)

    data = layouts.placeholder(N, 2 * C if bf16 else C, H, W, 2 * db if bf16 else db, "data", dtype)
    weight = te.placeholder((KB, C, R, S, b), "weight", "int32" if bf16 else dtype)
    in_place = db and (Hp, Wp) == (H, W) and not bf16   # blocked, unpadded: read the data where it is
    Dp = data if in_place else pairs(data, 2 * db, icb, Hp, Wp, ph, pw) if bf16 else \
        padded_blocks(data, db, icb, Hp, Wp, ph, pw, "data_pad")
    product = te.dot2_bf16 if bf16 else lambda d, w: d * w

    rc, ry, rx, rci = (te.reduce_axis(ico, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx"),
                       te.reduce_axis(icb, "rci"))
    Co = te.compute(
        (N, oco, OHp, OWp, m, b),
        lambda n, o, y, x, mi, ki: te.sum(product(Dp[n, rc, y * sh + ry * dh, x * sw + rx * dw, rci],
                                                  weight[o * m + mi, rc * icb + rci, ry, rx, ki]),
                                          axis=[rc, ry, rx, rci]),
        name="conv_tile")
    epi = Epilogue(K_out, (N, KB, OH, OW, b), dtype, **epilogue, block=b)
    out = te.compute((N, KB, OH, OW, b), lambda n, k, y, x, ki: epi(Co[n, k // m, y, x, k % m, ki], (n, k, y, x, ki)),
                     name="conv")

    s = te.create_schedule(out)
    n, k, y, x, ki = s[out].op.axis
    ko, kin = s[out].split(k, m)
    yo, yi = s[out].split(y, ohr)
    xo, xi = s[out].split(x, owr)
    s[out].reorder(n, ko, yo, xo, kin, yi, xi, ki)
    s[out].parallel(s[out].fuse(n, ko, yo))
    _vector_lanes(s, out, ki, lanes)
    s[Co].compute_at(s[out], xo)

    cn, co, cy, cx, cm, cv = s[Co].op.axis
    red = {"rc": rc, "ry": ry, "rx": rx, "rci": rci}
    s[Co].reorder(cn, co, *(red[a] for a in REDUCE_ORDERS[cfg["reduce_order"]]), cy, cx, cm, cv)
    if cfg["unroll_rx"]:
        s[Co].unroll(rx)
    for a in (cy, cx, cm):
        s[Co].unroll(a)
    _vector_lanes(s, Co, cv, lanes)
    if not in_place:
        _schedule_copy(s, Dp, lanes)
    return s, [data, weight, *epi.inputs, out]



def depthwise_conv2d_blocked(cfg, device, N, C, H, W, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                             layout="NCHW", **epilogue):
    """depthwise_conv2d on blocked data with [C/b, R, S, b] weights; the epilogue in the copy out."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    lanes = device.lanes(dtype)
    b = block_of(layout)
    CB, vecs = C // b, cdiv(b, lanes)
    oh_c = padded_splits(OH, range(1, 9), waste=1 / 4)
    ow_c = padded_splits(OW, range(1, 17), waste=1 / 4)
    cfg.define_split("tile_oh", OH, num_outputs=2, policy="candidates", candidates=oh_c)
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="candidates", candidates=ow_c)
    cfg.define_knob("pad_at", ["root", "block"])   # pad all channels first, or each block in its task
    regs = registers(device)
    cfg.constrain(lambda c: c["tile_oh"][1] * c["tile_ow"][1] * vecs <= regs - 2)
    cfg.prefer(tile_ow=widest(ow_c, (regs - 4) // vecs))   # untuned: one row, as wide as fits

    oho, ohr = cfg["tile_oh"]
    owo, owr = cfg["tile_ow"]
    OHp, OWp = oho * ohr, owo * owr
    Hp, Wp = covered(H, ph, OHp, sh, R, dh), covered(W, pw, OWp, sw, S, dw)
    data = layouts.placeholder(N, C, H, W, b, "data", dtype)
    weight = te.placeholder((CB, R, S, b), "weight", dtype)
    in_place = (Hp, Wp) == (H, W)
    Dp = data if in_place else padded_blocks(data, b, b, Hp, Wp, ph, pw, "data_pad")
    ry, rx = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    tile = te.compute((N, CB, OHp, OWp, b), lambda n, c, y, x, ci: te.sum(
        Dp[n, c, y * sh + ry * dh, x * sw + rx * dw, ci] * weight[c, ry, rx, ci], axis=[ry, rx]), name="dw_tile")
    epi = Epilogue(C, (N, CB, OH, OW, b), dtype, **epilogue, block=b)
    out = te.compute((N, CB, OH, OW, b), lambda n, c, y, x, ci: epi(tile[n, c, y, x, ci], (n, c, y, x, ci)),
                     name="depthwise_conv")

    s = te.create_schedule(out)
    n, c, y, x, ci = s[out].op.axis
    yo, yi = s[out].split(y, ohr)
    xo, xi = s[out].split(x, owr)
    s[out].reorder(n, c, yo, xo, yi, xi, ci)
    per_block = cfg["pad_at"] == "block" and not in_place
    par = s[out].fuse(n, c) if per_block else s[out].fuse(n, c, yo)
    s[out].parallel(par)
    _vector_lanes(s, out, ci, lanes)
    s[tile].compute_at(s[out], xo)
    tn, tc, ty, tx, tci = s[tile].op.axis
    s[tile].reorder(tn, tc, ry, rx, ty, tx, tci)
    s[tile].unroll(ty)
    s[tile].unroll(tx)
    _vector_lanes(s, tile, tci, lanes)
    if not in_place:
        _schedule_copy(s, Dp, lanes, at=(s[out], par) if per_block else None)
    return s, [data, weight, *epi.inputs, out]


TEMPLATES = [Template("conv2d", "blocked", ("cpu",), conv2d_blocked, priority=20, epilogue=True, blocked=True),
             Template("depthwise_conv2d", "blocked", ("cpu",), depthwise_conv2d_blocked, priority=20, epilogue=True,
                      blocked=True)]
