"""CPU depthwise_conv2d template: vectors along output rows over a flat padded copy.

The data is zero-padded (and split into stride phases) by `FlatPad`, so every
kernel tap reads a contiguous vector along an output row. Each task of the parallel
loop owns a block of channels; per channel it computes register tiles of `rows`
output rows x `cols` pixels (whole vectors, or one short vector) over the R x S
taps, with the channel's weights broadcast.
"""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops import out_size, pair
from tunekit.ops.epilogue import Epilogue

from ._common import FlatPad, cdiv, constrain_tiles, padded_splits, vectorize


def depthwise_conv2d_rows(cfg, device, N, C, H, W, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                          **epilogue):
    """depthwise_conv2d (NCHW data, [C, 1, R, S] weights), vectorized along output rows; a
    fused epilogue is applied in the copy out."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    lanes = device.lanes(dtype)
    c_c = [(cdiv(C, b), b) for b in range(1, min(C, 64) + 1) if C % b == 0 or b == C]
    oh_c = padded_splits(OH, range(1, 17))
    # a row tile is whole vectors (or one short one): no masked access to the accumulators
    ow_c = [(1, OW)] if OW <= lanes else padded_splits(OW, [u * lanes for u in range(1, 9)], lanes)
    cfg.define_split("tile_c", C, num_outputs=2, policy="candidates", candidates=c_c)
    cfg.define_split("tile_oh", OH, num_outputs=2, policy="candidates", candidates=oh_c)
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="candidates", candidates=ow_c)
    cfg.define_knob("pad_at", ["root", "channel"])   # pad all channels first, or each where it is used

    constrain_tiles(cfg, device, lanes, "tile_oh", "tile_ow", "tile_c",
                    {"tile_oh": oh_c, "tile_ow": ow_c, "tile_c": c_c}, N, N * C * OH * OW)

    oho, ohr = cfg["tile_oh"]
    owo, owr = cfg["tile_ow"]
    data = te.placeholder((N, C, H, W), "data", dtype)
    weight = te.placeholder((C, 1, R, S), "weight", dtype)
    # rows of whole vectors make a faster pack (only the pack sees the pitch) unless they add much padding
    q = FlatPad.pitch(W, pw, sw)
    align = lanes if cdiv(q, lanes) * lanes - q <= q // 8 else 1
    Q = FlatPad.pitch(W, pw, sw, align)
    fp = FlatPad(data, (R, S), stride, padding, dilation, (oho * ohr - 1) * Q + owo * owr, align=align)
    ry, rx = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    # the tiles cover a padded output; what lies past OH x OW is dropped by the copy out
    tile = te.compute((N, C, oho * ohr, owo * owr), lambda n, c, y, x: te.sum(
        fp.read(n, c, ry, rx, y * fp.Q + x) * weight[c, 0, ry, rx], axis=[ry, rx]), name="dw_tile")
    epi = Epilogue(C, (N, C, OH, OW), dtype, **epilogue)
    out = te.compute((N, C, OH, OW), lambda n, c, y, x: epi(tile[n, c, y, x], (n, c, y, x)), name="depthwise_conv")

    s = te.create_schedule(out)
    n, c, y, x = s[out].op.axis
    co, ci = s[out].split(c, cfg["tile_c"][1])
    yo, yi = s[out].split(y, ohr)
    xo, xi = s[out].split(x, owr)
    s[out].reorder(n, co, ci, yo, xo, yi, xi)
    par = s[out].fuse(n, co)
    s[out].parallel(par)
    vectorize(s, out, xi, lanes)
    s[tile].compute_at(s[out], xo)

    tn, tc, ty, tx = s[tile].op.axis
    txo, txi = s[tile].split(tx, lanes)
    s[tile].reorder(tn, tc, ry, rx, ty, txo, txi)
    s[tile].unroll(ty)
    s[tile].unroll(txo)
    s[tile].vectorize(txi)
    fp.schedule(s, lanes, at=(s[out], ci) if cfg["pad_at"] == "channel" else None)
    return s, [data, weight, *epi.inputs, out]


TEMPLATES = [Template("depthwise_conv2d", "rows", ("cpu",), depthwise_conv2d_rows, priority=20, epilogue=True)]
