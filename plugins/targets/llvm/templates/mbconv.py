"""CPU template of mbconv (`tunekit.ops.mbconv`, MobileNet-v2's inverted-residual block)
in its blocked layout: the expanded activations live only in task-local buffers.

Each task of the parallel loop owns `tile_oh` output rows of one image, and for each
group of `tile_e` expanded channel blocks computes:
- the expand 1x1 conv of the (rows - 1) * stride + 3 padded input rows those output
  rows read: register tiles of `expand_w` pixels x `expand_e` vectors over the input
  channels, bias, relu6 and the zero padding applied as they are stored;
- the depthwise 3x3 of those rows: register tiles of `tile_ow` pixels x one vector
  over the 9 taps (unrolled), bias and relu6 in the store;
- the project 1x1 over the group's channels: register tiles of `tile_ow` pixels x
  `tile_k` vectors of output channels. With one group (all E channels at once) each
  register tile is complete and gets its bias and the residual as it is stored; with
  several, the task's output tile accumulates over the groups and gets them when
  written out (the expand and depthwise buffers then hold one group: fewer rows' worth
  of cache per task, so taller tasks and less halo).
The input is zero-padded once for all (`pad_at` "root") or per task; without an expand
layer the depthwise reads the padded input, padded per group of channels. Neighbouring
tasks both compute the expand of the 2 rows of halo between them: a compute_at stage
computes a region per iteration and cannot keep the rows the previous iteration
computed (a rolling buffer), so the tasks are made tall instead. Channel blocks are
vectors (lanes of a block, or several unrolled vectors).
"""
from __future__ import annotations

import numpy as np

from tunekit import Template, te
from tunekit.ops import mbconv as op
from tunekit.ops import out_size
from tunekit.ops.layout import block_of

from ._common import balanced, cdiv, padded_splits, registers, vectorize, widest


def _stage(t: te.Tensor, name: str) -> te.Tensor:
    return next(i for i in t.op.inputs if i.op.name == name)


def mbconv(cfg, device, N, C, H, W, E, K_out, layout, expand=True, stride=1, residual=False, dtype="float32"):
    """mbconv by tasks of output rows and groups of expanded channels (see the module's doc)."""
    s, lanes, b = stride, device.lanes(dtype), block_of(layout)
    vecs, EB, KB = cdiv(b, lanes), E // b, K_out // b
    OH, OW = out_size(H, 3, s, 1, 1), out_size(W, 3, s, 1, 1)
    regs, size = registers(device), np.dtype(dtype).itemsize
    oh_c = padded_splits(OH, range(1, 33), waste=1 / 8)
    ow_c = padded_splits(OW, range(1, 17), waste=1 / 4)
    k_c = [(KB // m, m) for m in range(1, 9) if KB % m == 0 and (m == 1 or m * vecs <= 4)]
    e_c = [(EB // g, g) for g in range(1, EB + 1) if EB % g == 0]
    cfg.define_split("tile_oh", OH, num_outputs=2, policy="candidates", candidates=oh_c)
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="candidates", candidates=ow_c)
    cfg.define_split("tile_k", KB, num_outputs=2, policy="candidates", candidates=k_c)
    cfg.define_split("tile_e", EB, num_outputs=2, policy="candidates", candidates=e_c)
    if expand:
        cfg.define_knob("expand_w", list(range(1, 9)))
        cfg.define_knob("expand_e", [u for u in range(1, 5) if u == 1 or u * vecs <= 4])
        cfg.define_knob("pad_at", ["root", "task"])   # pad the whole input first, or each task's rows in it

    def footprint(c) -> int:
        """Bytes of the expanded and the depthwise rows of a task's group of channels (the
        buffers written and read back)."""
        (_, rows), (owo, ow), (_, g) = c["tile_oh"], c["tile_ow"], c["tile_e"]
        return size * g * b * (((rows - 1) * s + 3) * ((owo * ow - 1) * s + 3) + rows * owo * ow)

    def fits(c) -> bool:
        """Register tiles that fit the register file with their weights and a broadcast (or 1 pixel wide)."""
        m = c["tile_k"][1] * vecs
        if c["tile_ow"][1] * m > regs - m - 1 and c["tile_ow"][1] > 1:
            return False
        if expand:
            u = c["expand_e"] * vecs
            return c["tile_e"][1] % c["expand_e"] == 0 and (c["expand_w"] * u <= regs - u - 1 or c["expand_w"] == 1)
        return True
    cfg.constrain(lambda c: fits(c) and footprint(c) <= device.l2_bytes)
    if any(balanced(N * o, device.cores) for o, _ in oh_c):
        cfg.constrain(lambda c: balanced(N * c["tile_oh"][0], device.cores))
    # untuned: a task a core; up to 3 vectors of output channels by the widest pixel tile of the
    # least padding that fits; the most expanded channels a task's buffers hold in L2
    m0 = max((m for _, m in k_c if m * vecs <= 3), default=k_c[0][1])
    pref = {"tile_oh": widest(oh_c, cdiv(OH, device.cores)), "tile_k": (KB // m0, m0),
            "tile_ow": min((t for t in ow_c if t[1] * m0 * vecs <= regs - m0 * vecs - 1),
                           key=lambda t: (t[0] * t[1], -t[1]), default=ow_c[0])}
    if expand:   # a register tile of 3 vectors (of 1 if vectors are wide) by up to 7 pixels
        u = 3 if 3 * vecs <= 4 else 1
        pref.update(expand_e=u, expand_w=max(1, min(7, (regs - u * vecs - 1) // (u * vecs))), pad_at="task")
    pref["tile_e"] = max((e for e in e_c if footprint({**pref, "tile_e": e}) <= device.l2_bytes
                          and e[1] % pref.get("expand_e", 1) == 0), key=lambda e: e[1], default=e_c[0])
    cfg.prefer(**pref)

    (oho, rows), (owo, ow), (_, m), (ng, g) = cfg["tile_oh"], cfg["tile_ow"], cfg["tile_k"], cfg["tile_e"]
    xw = cfg["expand_w"] if expand else 1
    OWp = owo * ow
    tensors = op.compute(N=N, C=C, H=H, W=W, E=E, K_out=K_out, layout=layout, expand=expand, stride=s,
                         residual=residual, dtype=dtype, OHp=oho * rows, OWp=OWp,
                         Wxp=cdiv((OWp - 1) * s + 3, xw) * xw)
    out = tensors[-1]
    p_acc = _stage(out, "project_acc")
    dw = _stage(p_acc, "dw")
    dw_acc = _stage(dw, "dw_acc")
    expanded = _stage(dw_acc, "expand" if expand else "pad")
    sch = te.create_schedule(out)

    n, k, y, x, ki = sch[out].op.axis
    yo, yi = sch[out].split(y, rows)
    ko, kin = sch[out].split(k, m)
    xo, xi = sch[out].split(x, ow)
    sch[out].reorder(n, yo, yi, xo, ko, xi, kin, ki)
    task = sch[out].fuse(n, yo)
    sch[out].parallel(task)
    sch[out].unroll(xi)
    sch[out].unroll(kin)
    vectorize(sch, out, ki, lanes)

    # the project's register tiles: (ow pixels x m vectors) over the input channels of a group
    pn, pk, py, px, pki = sch[p_acc].op.axis
    re, rei = sch[p_acc].op.reduce_axis
    pxo, pxi = sch[p_acc].split(px, ow)
    pko, pkin = sch[p_acc].split(pk, m)
    if ng == 1:   # one register tile per output tile, stored with the bias and residual
        sch[p_acc].compute_at(sch[out], ko)
        sch[p_acc].reorder(pn, py, pxo, pko, re, rei, pxi, pkin, pki)
        group = (sch[out], task)
    else:         # the task's output tile accumulates over the groups of expanded channels
        sch[p_acc].compute_at(sch[out], task)
        reo, rem = sch[p_acc].split(re, g)
        sch[p_acc].reorder(pn, reo, py, pxo, pko, rem, rei, pxi, pkin, pki)
        group = (sch[p_acc], reo)
    sch[p_acc].unroll(pxi)
    sch[p_acc].unroll(pkin)
    vectorize(sch, p_acc, pki, lanes)

    # the depthwise of a group: register tiles of ow pixels x one vector over the 9 taps
    sch[dw].compute_at(*group)
    _, _, _, dx, dei = sch[dw].op.axis
    dxo, dxi = sch[dw].split(dx, ow)
    sch[dw].unroll(dxi)
    vectorize(sch, dw, dei, lanes)
    sch[dw_acc].compute_at(sch[dw], dxo)
    an, ae, ay, ax, aei = sch[dw_acc].op.axis
    ry, rx = sch[dw_acc].op.reduce_axis
    sch[dw_acc].reorder(an, ae, ry, rx, ay, ax, aei)
    for a in (ry, rx, ax):
        sch[dw_acc].unroll(a)
    vectorize(sch, dw_acc, aei, lanes)

    sch[expanded].compute_at(*group)
    if not expand:
        vectorize(sch, expanded, sch[expanded].op.axis[-1], lanes)
        return sch, tensors
    # the expand of a group's rows: register tiles of (xw pixels x expand_e vectors) over C
    x_acc = _stage(expanded, "expand_acc")
    pad = _stage(x_acc, "pad")
    xn, xe, xh, xx, xei = sch[expanded].op.axis
    xeo, xein = sch[expanded].split(xe, cfg["expand_e"])
    xxo, xxi = sch[expanded].split(xx, xw)
    sch[expanded].reorder(xn, xeo, xh, xxo, xxi, xein, xei)
    sch[expanded].unroll(xxi)
    sch[expanded].unroll(xein)
    vectorize(sch, expanded, xei, lanes)
    sch[x_acc].compute_at(sch[expanded], xxo)
    cn, ce, ch, cx, cei = sch[x_acc].op.axis
    rc, rci = sch[x_acc].op.reduce_axis
    sch[x_acc].reorder(cn, rc, rci, ch, cx, ce, cei)
    sch[x_acc].unroll(cx)
    sch[x_acc].unroll(ce)
    vectorize(sch, x_acc, cei, lanes)

    dn, dc, dh, _, dci = sch[pad].op.axis
    if cfg["pad_at"] == "task":
        sch[pad].compute_at(sch[out], task)
    else:
        sch[pad].parallel(sch[pad].fuse(dn, dc, dh))
    vectorize(sch, pad, dci, lanes)
    return sch, tensors


TEMPLATES = [Template("mbconv", "fused", ("cpu",), mbconv, priority=20, epilogue=True, blocked=True)]
