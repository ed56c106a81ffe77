"""CPU rules: the schedule of any computation from a few rules, each adding knobs.

1. Inline every injective stage that is not an output (packing, epilogue producers);
   padding read by a tiled reduction is inlined or computed first (a knob).
2. A reduction with data reuse (matmul, conv) gets multi-level tiling: its space
   loops in four levels S0 S1 S2 S3 and its reduction loops in two R0 R1, ordered
   S0 S1 R0 S2 R1 S3 (Ansor's SSRSRS), accumulated in a local buffer computed at
   S0 or S1 (a knob) of the stage that writes the result, its elementwise consumer
   (the epilogue: bias, activation, residual, any chain) or its own copy-out
   (`cache_write`). The outer S0 loops are fused into a parallel loop (how many is
   a knob); the innermost S3 loop of the last axis is vectorized, the other S3 and
   R1 loops unrolled (a knob). The register tile (S3) fits the register file, the
   accumulator tile L2. An input read along the vector loop but not by every space
   loop (matmul's B) may be packed into a contiguous panel per R0 step (a knob).
   When no read is contiguous along the last space axis but one is along a
   reduction axis (dense: weights [N, K]), the reduction is split per vector lane
   (`rfactor`) and the lanes are vectorized instead ("row dot").
3. A reduction without reuse (softmax, layer norm, pooling, mean) read row-wise by
   its consumer is computed per row inside the consumer's parallel row loop; its
   contiguous reduction axis is split per vector lane (a knob); at the root, its
   outer space loops run in parallel and its innermost space loop is vectorized.
4. Every other stage (injective outputs) runs parallel over its fused outer loops
   (a knob) with the innermost loop in vectors (a knob: how many).
"""
from __future__ import annotations

import math

from tunekit import ir
from tunekit.space import factorizations

from .analysis import RuleSet, contiguous_axis, has_reuse, inline_injective, loads, padding, producers


class Rules(RuleSet):
    """The CPU rules applied to one schedule."""

    # -- stage kinds ------------------------------------------------------------
    def run(self) -> None:
        keep = []
        for st in padding(self.s, self.outputs):
            name = self.knob(f"inline_{st.op.name}")
            self.cfg.define_knob(name, [True, False])
            if not self.cfg[name]:
                keep.append(st)
        inline_injective(self.s, self.outputs, keep)
        for st in keep:   # a plain copy: no knobs of its own, as it exists in some configs only
            axes = st.op.axis
            o, v = st.split(axes[-1], factor=self.device.lanes(st.op.output.dtype))
            st.parallel(st.fuse(*axes[:-1], o))
            st.vectorize(v)
            self.done.add(st)
        for st in reversed(list(self.s.stages)):
            if st.attach == "inline" or st in self.done:
                continue
            if st.op.reduce_axis:
                if has_reuse(self.s, st.op):
                    if self.row_dot_axis(st) is not None:
                        self.row_dot(st, None)
                    else:
                        self.tile(st, self.s[self.s.cache_write(st.op.output, "local")])
                else:
                    self.injective(st, [])
            else:
                self.output(st)
            self.count += 1

    def output(self, st) -> None:
        """An injective root: an epilogue of one reduction with reuse, a row-wise
        consumer of statistics, or plain elementwise work."""
        full, stats = producers(self.s, st, self.done)
        if full:
            r = full[0]
            self.row_dot(r, st) if self.row_dot_axis(r) is not None else self.tile(st, r)
            return
        self.injective(st, stats)

    # -- rule 2: multi-level tiling ---------------------------------------------
    def tile(self, out, acc) -> None:
        """`acc` (a reduction with reuse) tiled SSRSRS inside `out`, which reads it elementwise."""
        cfg, dev, s = self.cfg, self.device, self.s
        axes, raxes = list(out.op.axis), list(acc.op.reduce_axis)
        n, lanes = len(axes), dev.lanes(out.op.output.dtype)
        last = axes[-1].extent
        vec = [v for v in (lanes, 2 * lanes, 3 * lanes, 4 * lanes) if last % v == 0] or [d for d in
                                                                                         _divisors(last) if d <= lanes]
        # a row that is no multiple of a vector also gets whole vectors, the last one masked (its guard
        # branches to unmasked code while every lane is in): the splits of the row rounded up
        pad = -(-last // lanes) * lanes
        rows = [v for v in factorizations(last, 4) if v[-1] in vec]
        if pad != last:
            rows += [v for v in factorizations(pad, 4) if v[-1] % lanes == 0 and v[-1] <= 4 * lanes]
        regs = dev.vector_registers()
        sk = [self.knob(f"tile_{a.name}") for a in acc.op.axis]   # the same knobs with or without an epilogue
        rk = [self.knob(f"tile_{a.name}") for a in raxes]
        for d, a in enumerate(axes):
            if d == n - 1:
                cfg.define_split(sk[d], a.extent, num_outputs=4, policy="candidates", candidates=rows)
            else:
                cfg.define_split(sk[d], a.extent, num_outputs=4, filter=lambda v: v[-1] <= 8)
        for k, a in zip(rk, raxes):
            cfg.define_split(k, a.extent, num_outputs=2)
        at, par, unroll = self.knob("acc_at"), self.knob("parallel"), self.knob("unroll")
        cfg.define_knob(at, [1, 0])
        cfg.define_knob(par, list(range(1, n + 1)))
        cfg.define_knob(unroll, [True, False])

        def reg_tile(c):
            rows = math.prod(c[k][-1] for k in sk[:-1])
            return rows * -(-c[sk[-1]][-1] // lanes)
        cfg.constrain(lambda c: reg_tile(c) <= regs - 4)
        budget = dev.l2_bytes // 2
        cfg.constrain(lambda c: math.prod(math.prod(c[k][1 + c[at]:]) for k in sk) * 4 <= budget)
        work = math.prod(a.extent for a in axes)
        if work >= 4096:
            cfg.constrain(lambda c: math.prod(c[k][0] for k in sk[:c[par]]) >= dev.cores)
        panels = packable(acc.op)
        pack = self.knob("pack")
        cfg.define_knob(pack, [False, True] if panels else [False])

        def panel_bytes(c):   # each packed input's region below the last R0 loop
            return max(math.prod([c[rk[i]][1] for i, a in enumerate(raxes) if a in used]
                                 + [c[sk[d]][2] * c[sk[d]][3] for d, a in enumerate(acc.op.axis) if a in used])
                       for _, used in panels) * 4
        cfg.constrain(lambda c: not c[pack] or panel_bytes(c) <= _PANEL_BYTES)

        levels = [cfg[k].apply(s, out.op.output, a) for k, a in zip(sk, axes)]
        out.reorder(*[lv[i] for i in range(4) for lv in levels])
        fused = out.fuse(*[lv[0] for lv in levels[:cfg[par]]])
        out.parallel(fused)
        attach = levels[-1][cfg[at]] if cfg[at] or cfg[par] < n else fused
        self.vectorize(out, levels[-1][3])
        acc.compute_at(out, attach)

        s1, s2, s3 = [], [], []
        for d, a in enumerate(acc.op.axis):
            f = cfg[sk[d]]
            o, i3 = acc.split(a, factor=f[3])
            if not cfg[at]:
                i1, o = acc.split(o, factor=f[2])
                s1.append(i1)
            s2.append(o), s3.append(i3)
        red = [cfg[k].apply(s, acc.op.output, a) for k, a in zip(rk, raxes)]
        acc.reorder(*s1, *[r[0] for r in red], *s2, *[r[1] for r in red], *s3)
        self.vectorize(acc, s3[-1])
        if cfg[pack]:
            for t, _ in panels:
                cs = s[s.cache_read(t, "local", [acc.op.output])]
                cs.compute_at(acc, red[-1][0])
                *_, v = cs.op.axis
                if v.extent > 64:
                    _, v = cs.split(v, factor=dev.lanes(t.dtype))
                cs.vectorize(v)
                self.done.add(cs)
        if cfg[unroll]:   # the register tile, and inner reduction loops while the body stays small
            for v in s3[:-1]:
                acc.unroll(v)
            room = _UNROLLED // math.prod(v.extent for v in s3[:-1])
            for r in reversed(red):
                if r[1].extent <= room:
                    acc.unroll(r[1])
                    room //= r[1].extent
        self.done |= {out, acc}

    # -- rule 2b: row dot ---------------------------------------------------------
    def row_dot_axis(self, st):
        """The reduction axis to split per vector lane when no read is contiguous along
        the last space axis and one is along a reduction axis, else None."""
        counts = contiguous_axis(self.s, st.op)
        if counts.get(st.op.axis[-1], 0) if st.op.axis else 1:
            return None
        lanes = self.device.lanes(st.op.output.dtype)
        cands = [a for a in st.op.reduce_axis if counts.get(a, 0) and a.extent % lanes == 0]
        return max(cands, key=lambda a: counts[a], default=None)

    def row_dot(self, acc, out) -> None:
        """`acc` reduced per vector lane (rfactor) inside a parallel loop over tiles of
        `out` (its elementwise consumer, or `acc` itself)."""
        cfg, dev, s = self.cfg, self.device, self.s
        k = self.row_dot_axis(acc)
        lanes = dev.lanes(acc.op.output.dtype)
        vk, tk = self.knob("vec"), self.knob("tile_rows")
        cfg.define_knob(vk, [u * lanes for u in (1, 2, 4) if k.extent % (u * lanes) == 0])
        top = out or acc
        axes = list(top.op.axis)
        cfg.define_split(tk, axes[-1].extent, num_outputs=2, filter=lambda v: v[1] <= 8)
        cfg.constrain(lambda c: c[tk][1] * (c[vk] // lanes) <= dev.vector_registers() - 2)
        rf = s.rfactor(acc.op.output, k, cfg[vk])
        rfs = s[rf]
        o, i = cfg[tk].apply(s, top.op.output, axes[-1])
        loop = top.fuse(*axes[:-1], o)
        top.parallel(loop)
        if out is not None:
            acc.compute_at(top, loop)
        rfs.compute_at(top, loop)
        *sp, lane = rfs.op.axis
        rfs.reorder(*sp[:-1], *rfs.op.reduce_axis, sp[-1], lane)
        rfs.unroll(sp[-1])
        rfs.vectorize(lane)
        self.done |= {top, acc, rfs}

    # -- rules 3 and 4: row statistics and elementwise ---------------------------
    def injective(self, st, stats) -> None:
        """`st` parallel over its outer loops, innermost in vectors; `stats` (reductions
        without reuse read by its first axes) computed per row inside its row loop."""
        cfg, dev = self.cfg, self.device
        axes = list(st.op.axis)
        if not axes:   # a scalar: a reduction over all of a tensor (its range, for dynamic quantization)
            if st.op.reduce_axis:
                self.statistic(st)
            return
        lanes = dev.lanes(st.op.output.dtype)
        rows = max((len(p.op.axis) for p in stats), default=0)
        vk, par = self.knob("vec"), self.knob("parallel")
        last = axes[-1].extent
        cfg.define_knob(vk, [u * lanes for u in (1, 2, 4, 8) if u == 1 or u * lanes <= last])
        if rows:
            row = st.fuse(*axes[:rows])
            rest = axes[rows:]
            st.parallel(row)
            inner = st.fuse(*rest)
            _, v = st.split(inner, factor=cfg[vk])
            st.vectorize(v)
            for p in stats:
                self.statistic(p, st, row)
            self.done.add(st)
            return
        cfg.define_knob(par, [p for p in range(1, len(axes) + 1) if p < len(axes) or len(axes) == 1])
        self.busy(par, [a.extent for a in axes])
        if st.op.reduce_axis:   # a reduction without reuse at the root: reduce loops inside, vectors innermost
            self.reduce_root(st, axes)
            return
        o, v = st.split(axes[-1], factor=cfg[vk])
        loops = [*axes[:-1], o]
        p = min(cfg[par], len(loops))
        st.parallel(st.fuse(*loops[:p]))
        st.vectorize(v)
        self.done.add(st)

    def statistic(self, p, st=None, row=None) -> None:
        """Reduction `p` computed for one row of `st` inside its `row` loop (or at the root),
        split per vector lane along a contiguous reduction axis (a knob)."""
        cfg, s = self.cfg, self.s
        lanes = self.device.lanes(p.op.output.dtype)
        counts = contiguous_axis(s, p.op)
        ks = [a for a in p.op.reduce_axis if counts.get(a)]
        rk = self.knob(f"rf_{p.op.name}")
        opts = [0] + ([u * lanes for u in (1, 2, 4) if ks and ks[-1].extent % (u * lanes) == 0])
        cfg.define_knob(rk, opts)
        if st is None:   # at the root: in vectors, untuned too (a row's reduction may be too short to gain)
            cfg.prefer(**{rk: opts[-1]})
        if cfg[rk]:
            rf = s.rfactor(p.op.output, ks[-1], cfg[rk])
            rfs = s[rf]
            *sp, lane = rfs.op.axis
            rfs.reorder(*sp, *rfs.op.reduce_axis, lane)
            rfs.vectorize(lane)
            self.done.add(rfs)
            if st is not None:
                rfs.compute_at(st, row)
        if st is not None:
            p.compute_at(st, row)
        self.done.add(p)

    def reduce_root(self, st, axes) -> None:
        cfg = self.cfg
        vk, par = self.knob("vec"), self.knob("parallel")
        o, v = st.split(axes[-1], factor=cfg[vk])
        loops = [*axes[:-1], o]
        p = min(cfg[par], len(loops))
        fused = st.fuse(*loops[:p])
        st.reorder(fused, *loops[p:], *st.op.reduce_axis, v)
        st.parallel(fused)
        st.vectorize(v)
        self.done.add(st)

    def busy(self, par: str, extents: list[int]) -> None:
        """Untuned: knob `par` fuses the fewest outer loops (of these extents) that give each core
        several iterations (the outermost alone is one for a batch of one)."""
        most, n, p = self.cfg.values(par)[-1], 1, 0
        while p < min(most, len(extents)) and n < 4 * self.device.cores:
            n, p = n * extents[p], p + 1
        self.cfg.prefer(**{par: max(p, 1)})

    @staticmethod
    def vectorize(st, v) -> None:
        if v.extent > 1:
            st.vectorize(v)


#: most copies of the micro-kernel's body unrolled (beyond this LLVM takes seconds to compile it)
_UNROLLED = 256
#: largest panel of an input packed per reduction step (on the stack of each parallel task)
_PANEL_BYTES = 64 << 10


def packable(op) -> list:
    """(tensor, axes it is indexed by) of the inputs of reduction `op` that are read
    contiguously along its last space axis but not by every space axis (matmul's B):
    copied into a contiguous panel per reduction step, the micro-kernel streams them."""
    from tunekit.te.tensor import PlaceholderOp
    out, last = {}, op.axis[-1]
    for ld in loads(op.body):
        form = _affine_last(ld)
        used = set().union(*(ir.free_vars(i) for i in ld.indices))
        if isinstance(ld.tensor.op, PlaceholderOp) and form.get(last) == 1 and not set(op.axis) <= used:
            out.setdefault(ld.tensor, used)
    return list(out.items())


def _affine_last(ld) -> dict:
    from tunekit.te import bound
    return bound.affine(ld.indices[-1], bound.ALL) or {} if ld.indices else {}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def schedule(s, outputs, cfg, device) -> None:
    """Apply the CPU rules to schedule `s` of `outputs`, defining their knobs on `cfg`."""
    Rules(s, outputs, cfg, device).run()



