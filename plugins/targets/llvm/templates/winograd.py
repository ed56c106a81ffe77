"""CPU template of conv2d_winograd (`tunekit.ops.winograd`), in blocked layouts.

The products M = U x V run as register tiles of (`tile_tw` tiles along a row x
`tile_k` vectors of output channels) over the input channels, and each tile's output
transform is fused into the store of its m x m pixels (with the epilogue). The
parallel tasks (knob `order`) are either chunks of tiles along a row, each
transforming its input for all channels and computing M for all output channels (V
and M of a chunk stay in cache; U is read once per chunk), or groups of output
channels over all tiles after one input transform of the whole image (U read once:
the deep layers, whose transformed weights outgrow the caches). The transforms are
unrolled over the tile (no multiply by the matrices' 0s and 1s) and vectorized over
a channel block.
"""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops import conv2d_winograd as op
from tunekit.ops.epilogue import has_epilogue
from tunekit.ops.layout import block_of

from ._common import cdiv, padded_splits, registers, vectorize


def _stage(t: te.Tensor, name: str) -> te.Tensor:
    return next(i for i in t.op.inputs if i.op.name == name)


def conv2d_winograd(cfg, device, N, C, H, W, K_out, tile=2, padding=(0, 0), dtype="float32", layout="NCHW",
                    data_layout=None, **args):
    """conv2d by F(tile x tile, 3 x 3) over chunks of tiles (see the module's doc)."""
    m, lanes = tile, device.lanes(dtype)
    b = block_of(layout)
    KB, vecs = K_out // b, cdiv(b, lanes)
    TH, TW = op.tiles(H, W, padding, m)
    regs = registers(device)
    tw_c = padded_splits(TW, range(1, 9), waste=1 / 4)
    k_c = [(KB // u, u) for u in range(1, 5) if KB % u == 0]
    cfg.define_split("tile_tw", TW, num_outputs=2, policy="candidates", candidates=tw_c)
    cfg.define_split("tile_k", KB, num_outputs=2, policy="candidates", candidates=k_c)
    cfg.define_knob("order", ["tiles", "channels"])   # tasks: chunks of tiles, or groups of output channels
    cfg.define_knob("pad_at", ["root", "chunk"])   # pad the whole input first, or each chunk's rows in its task
    cfg.constrain(lambda c: 2 <= c["tile_tw"][1] * c["tile_k"][1] * vecs <= regs - 4 or c["tile_tw"][1] >= TW)
    cfg.prefer(tile_tw=max((t for t in tw_c if t[1] * vecs <= 12), key=lambda t: t[1], default=tw_c[0]),
               tile_k=max((u for u in k_c if u[1] * vecs <= 2), key=lambda u: u[1]))
    two, pt = cfg["tile_tw"]
    _, mk = cfg["tile_k"]

    tensors = op.compute(N=N, C=C, H=H, W=W, K_out=K_out, padding=padding, tile=m, dtype=dtype, layout=layout,
                         data_layout=data_layout, TW=two * pt, **args)
    out = tensors[-1]
    s = te.create_schedule(out)
    conv = _stage(out, "conv_acc") if has_epilogue(args) else out
    if has_epilogue(args):
        s[conv].compute_inline()
    Y = _stage(conv, "wino_out")
    M = _stage(Y, "wino_mm")
    V = _stage(M, "wino_in")
    pad = _stage(V, "pad")

    n, k, y, x, ki = s[out].op.axis
    yo, yi = s[out].split(y, m)
    xo, xi = s[out].split(x, m)
    xoo, xoi = s[out].split(xo, pt)
    by_tiles = cfg["order"] == "tiles"
    if by_tiles:   # a task per chunk of tiles: V and M of the chunk, all channels (U read once per chunk)
        s[out].reorder(n, yo, xoo, k, xoi, yi, xi, ki)
        task = s[out].fuse(n, yo, xoo)
        at_tile = xoi
    else:          # a task per group of output channels, over all tiles (U read once): V first, for all
        ko, kin = s[out].split(k, mk)
        s[out].reorder(n, ko, yo, xoo, xoi, kin, yi, xi, ki)
        task = s[out].fuse(n, ko)
        at_tile = kin
    s[out].parallel(task)
    s[out].unroll(yi)
    s[out].unroll(xi)
    vectorize(s, out, ki, lanes)

    s[Y].compute_at(s[out], at_tile)
    for a in s[Y].op.axis[4:6]:
        s[Y].unroll(a)
    vectorize(s, Y, s[Y].op.axis[6], lanes)

    s[M].compute_at(s[out], task)
    e, nu, mn, mth, mtw, mkb, mki = s[M].op.axis
    rc, rci = s[M].op.reduce_axis
    ko, kin = s[M].split(mkb, mk)
    two_, ptw = s[M].split(mtw, pt)
    s[M].reorder(mn, mth, two_, e, nu, ko, rc, rci, ptw, kin, mki)
    s[M].unroll(ptw)
    s[M].unroll(kin)
    vectorize(s, M, mki, lanes)

    ve, vnu, vn, vth, vtw, vc, vci = s[V].op.axis
    s[V].reorder(vn, vth, vc, vtw, ve, vnu, vci)
    s[V].unroll(ve)
    s[V].unroll(vnu)
    vectorize(s, V, vci, lanes)
    if by_tiles:
        s[V].compute_at(s[out], task)
    else:
        s[V].parallel(s[V].fuse(vn, vth, vc))

    if cfg["pad_at"] == "chunk" and by_tiles:
        s[pad].compute_at(s[out], task)
        vectorize(s, pad, s[pad].op.axis[-1], lanes)
    else:
        pn, pc, ph, _, pci = s[pad].op.axis
        s[pad].parallel(s[pad].fuse(pn, pc, ph))
        vectorize(s, pad, pci, lanes)
    return s, tensors


TEMPLATES = [Template("conv2d_winograd", "winograd", ("cpu",), conv2d_winograd, priority=20, epilogue=True,
                      blocked=True)]
