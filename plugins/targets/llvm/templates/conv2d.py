"""CPU conv2d templates. The kernels take NCHW data and OIHW weights (the op's
layouts); any repacking happens inside the timed kernel.

- `direct` (the default): vectors over output pixels of a flat padded copy of the
  data (`FlatPad`), the weights read in place and broadcast: no weight packing,
  which costs as much as the convolution itself on deep layers (C9-C12). It
  schedules group_conv2d too (each output channel reads its group's channels).
- `nchwc`: the spatial pack of AutoTVM's x86 schedule: weights packed into
  [OC/ocb, C/icb, R, S, icb, ocb] and data into [N, C/icb, Hp, Wp, icb]; vectors
  over ocb output channels, output pixels broadcast. Its space is the large one
  (10^4-10^5 configs: register tiles of any size that fits, reduction orders,
  unrolling), pruned only by what the hardware rules out: the space to learn in.

In both, output tiles past the edge are computed on zero padding and dropped by the
unpack to NCHW, so no micro-kernel has a bounds guard.
"""
from __future__ import annotations

from tunekit import Template, ir, te
from tunekit.ops import out_size, pair
from tunekit.ops.epilogue import Epilogue

from ._common import (
    REDUCE_ORDERS,
    FlatPad,
    cdiv,
    constrain_tiles,
    covered,
    padded_blocks,
    padded_splits,
    registers,
    vectorize,
    zero,
)


def conv2d_direct(cfg, device, N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                  groups=1, **epilogue):
    """conv2d (and group_conv2d) vectorized over output pixels, with the weights read in place (OIHW, no packing).

    The data is padded into rows of pitch Q (a whole padded row per stride phase), so
    that output pixel p = oh * Q + ow reads data[p + const] for every (c, r, s): a
    contiguous vector over p. Each task owns `ocr` output channels (weights broadcast)
    and sweeps tiles of `pv` pixels, accumulating ocr x pv in registers; the pixels with
    ow >= OW of each row are computed on padding and dropped by the unpack. With groups,
    output channel o reads the C / groups input channels of its group o // (K_out / groups)."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    Cg, Kg = C // groups, K_out // groups
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    lanes = device.lanes(dtype)
    P = (OH - 1) * cdiv(W + 2 * pw, sw) + OW     # pixels (at the flat layout's pitch) up to the last one kept
    oc_c = padded_splits(K_out, range(1, 17))
    p_c = padded_splits(P, [u * lanes for u in range(1, 9)], lanes)
    cfg.define_split("tile_oc", K_out, num_outputs=2, policy="candidates", candidates=oc_c)
    cfg.define_split("tile_p", P, num_outputs=2, policy="candidates", candidates=p_c)
    # input channel blocks outside the pixel tiles keep a block's rows in cache (accumulating in memory)
    cfg.define_split("tile_rc", Cg, num_outputs=2, filter=lambda v: v[1] >= min(Cg, 32))

    constrain_tiles(cfg, device, lanes, "tile_oc", "tile_p", "tile_oc", {"tile_oc": oc_c, "tile_p": p_c},
                    N, N * K_out * OH * OW)

    oco, ocr = cfg["tile_oc"]
    pt, pv = cfg["tile_p"]
    data = te.placeholder((N, C, H, W), "data", dtype)
    weight = te.placeholder((K_out, Cg, R, S), "weight", dtype)
    fp = FlatPad(data, (R, S), stride, padding, dilation, pt * pv)

    rc, ry, rx = te.reduce_axis(Cg, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")

    def conv(n, o, t, v):
        o = ir.min_(o, K_out - 1) if oco * ocr > K_out else o
        c = rc if groups == 1 else o // Kg * Cg + rc
        return te.sum(fp.read(n, c, ry, rx, t * pv + v) * weight[o, rc, ry, rx], axis=[rc, ry, rx])
    epi = Epilogue(K_out, (N, K_out, OH, OW), dtype, **epilogue)   # fused into the unpack
    if fp.Q == OW and pt * pv == P:   # the tiles are the output's own pixels: a contiguous unpack
        Co = te.compute((N, oco * ocr, P), lambda n, o, p: conv(n, o, 0, p), name="conv_tile")
        out = te.compute((N, K_out, OH, OW), lambda n, k, y, x: epi(Co[n, k, y * OW + x], (n, k, y, x)),
                         name="conv")
    else:   # (p // pv, p % pv) gathers, but tile extents stay whole vectors
        Co = te.compute((N, oco * ocr, pt, pv), conv, name="conv_tile")
        out = te.compute((N, K_out, OH, OW), lambda n, k, y, x: epi(
            Co[n, k, (y * fp.Q + x) // pv, (y * fp.Q + x) % pv], (n, k, y, x)), name="conv")

    s = te.create_schedule(out)
    n, k, _, x = s[out].op.axis
    ko, _ = s[out].split(k, ocr)
    par = s[out].fuse(n, ko)
    s[out].parallel(par)
    vectorize(s, out, x, lanes)
    s[Co].compute_at(s[out], par)

    if len(Co.shape) == 3:
        cn, co, cp = s[Co].op.axis
        ct, cv = s[Co].split(cp, pv)
    else:
        cn, co, ct, cv = s[Co].op.axis
    cvo, cvi = s[Co].split(cv, lanes)
    rco, rci = cfg["tile_rc"].apply(s, Co, rc)
    s[Co].reorder(cn, rco, ct, rci, ry, rx, co, cvo, cvi)
    s[Co].unroll(co)
    s[Co].unroll(cvo)
    s[Co].vectorize(cvi)

    fp.schedule(s, lanes)
    return s, [data, weight, *epi.inputs, out]


def conv2d_nchwc(cfg, device, N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                 **epilogue):
    """conv2d through NCHWc packing: each task of the parallel loop computes register tiles of
    (rows x cols) output pixels x ocb output channels over the whole reduction in a local
    buffer, then unpacks them to NCHW."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    OH, OW = out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)
    lanes = device.lanes(dtype)
    oc_c = padded_splits(K_out, [u * lanes for u in range(1, 5)], lanes)
    oh_c = padded_splits(OH, range(1, 9))
    ow_c = padded_splits(OW, range(1, 31))
    cfg.define_split("tile_oc", K_out, num_outputs=2, policy="candidates", candidates=oc_c)
    cfg.define_split("tile_ic", C, num_outputs=2, filter=lambda v: v[1] <= 64)
    cfg.define_split("tile_oh", OH, num_outputs=2, policy="candidates", candidates=oh_c)
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="candidates", candidates=ow_c)
    cfg.define_knob("weight_at", ["root", "block"])   # pack all weights first, or each block's in its task
    cfg.define_knob("reduce_order", list(REDUCE_ORDERS) if R * S > 1 else ["c-rs-ci"])
    cfg.define_knob("unroll_rx", [False, True] if S > 1 else [False])

    # no rules of thumb (register fit, balanced cores): what is fast is the search's to learn; the
    # cap on the register tile (oh x ow pixels x ocb/lanes vectors: twice the register file) only
    # bounds the size of the unrolled micro-kernel
    cfg.constrain(lambda c: c["tile_oh"][1] * c["tile_ow"][1] * (c["tile_oc"][1] // lanes) <= 2 * registers(device))

    oco, ocb = cfg["tile_oc"]
    ico, icb = cfg["tile_ic"]
    oho, ohr = cfg["tile_oh"]
    owo, owr = cfg["tile_ow"]
    OHp, OWp = oho * ohr, owo * owr
    Hp, Wp = covered(H, ph, OHp, sh, R, dh), covered(W, pw, OWp, sw, S, dw)

    data = te.placeholder((N, C, H, W), "data", dtype)
    weight = te.placeholder((K_out, C, R, S), "weight", dtype)

    Dp = padded_blocks(data, 0, icb, Hp, Wp, ph, pw, "data_pack")

    def pack_weight(o, c, r, s, ci, oi):
        load = weight[o * ocb + oi, c * icb + ci, r, s]
        return te.if_then_else(o * ocb + oi < K_out, load, zero(dtype)) if oco * ocb > K_out else load
    Wk = te.compute((oco, ico, R, S, icb, ocb), pack_weight, name="weight_pack")

    rc, ry, rx, rci = (te.reduce_axis(ico, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx"),
                       te.reduce_axis(icb, "rci"))
    Co = te.compute(
        (N, oco, OHp, OWp, ocb),
        lambda n, o, y, x, oi: te.sum(Dp[n, rc, y * sh + ry * dh, x * sw + rx * dw, rci] * Wk[o, rc, ry, rx, rci, oi],
                                      axis=[rc, ry, rx, rci]),
        name="conv_tile")
    epi = Epilogue(K_out, (N, K_out, OH, OW), dtype, **epilogue)   # fused into the unpack
    out = te.compute((N, K_out, OH, OW), lambda n, k, y, x: epi(Co[n, k // ocb, y, x, k % ocb], (n, k, y, x)),
                     name="conv")

    s = te.create_schedule(out)
    n, k, y, x = s[out].op.axis
    ko, ki = s[out].split(k, ocb)
    yo, yi = s[out].split(y, ohr)
    xo, xi = s[out].split(x, owr)
    s[out].reorder(n, ko, yo, xo, ki, yi, xi)
    block = s[out].fuse(n, ko)
    par = block if cfg["weight_at"] == "block" else s[out].fuse(block, yo)
    s[out].parallel(par)
    vectorize(s, out, xi, lanes)
    s[Co].compute_at(s[out], xo)

    cn, co, cy, cx, cv = s[Co].op.axis
    cvo, cvi = s[Co].split(cv, lanes)
    red = {"rc": rc, "ry": ry, "rx": rx, "rci": rci}
    s[Co].reorder(cn, co, *(red[a] for a in REDUCE_ORDERS[cfg["reduce_order"]]), cy, cx, cvo, cvi)
    if cfg["unroll_rx"]:
        s[Co].unroll(red["rx"])
    s[Co].unroll(cy)
    s[Co].unroll(cx)
    s[Co].unroll(cvo)
    s[Co].vectorize(cvi)

    wo, wc, *_, woi = s[Wk].op.axis
    if cfg["weight_at"] == "block":
        s[Wk].compute_at(s[out], block)
    else:
        s[Wk].parallel(s[Wk].fuse(wo, wc))
    vectorize(s, Wk, woi, lanes)

    dn, dc, dhh, _, dci = s[Dp].op.axis
    s[Dp].parallel(s[Dp].fuse(dn, dc, dhh))
    vectorize(s, Dp, dci, lanes)
    return s, [data, weight, *epi.inputs, out]


TEMPLATES = [Template("conv2d", "direct", ("cpu",), conv2d_direct, priority=20, epilogue=True),
             Template("group_conv2d", "direct", ("cpu",), conv2d_direct, priority=20, epilogue=True),
             Template("conv2d", "nchwc", ("cpu",), conv2d_nchwc, priority=10, epilogue=True)]
