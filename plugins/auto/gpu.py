"""GPU rules (cuda, opencl, mali: one kernel, one launch), the CPU rules' counterparts.

1. Inline every injective stage that is not an output.
2. A reduction with data reuse gets multi-level tiling: each space axis split into
   block, thread and inner (register tile) levels; the block levels fused and bound
   to blockIdx.x, the thread levels fused and bound to threadIdx.x, the inner tile
   accumulated in registers (a local stage computed at the thread loop) over the
   reduction split in two (R0 R1). Where shared memory is on chip, the inputs it
   reuses are staged in shared memory per R0 step (a knob), copied cooperatively by
   all threads of the block. Its elementwise consumer (the epilogue) is the stage
   that writes the tile out.
3. A reduction without reuse read row-wise by its consumer is split across the
   block's threads: each thread reduces a strided slice into a shared buffer, then
   every thread combines the slices (a split reduction); the consumer's row is the
   block, its columns the threads.
4. Every other stage runs a thread per output element (threads per block a knob).
Device limits (threads per block, shared bytes, registers) are constraints.
"""
from __future__ import annotations

import math

from .analysis import RuleSet, has_reuse, inline_injective, loads, producers

MAX_ACC = 64   # accumulators per thread: beyond this registers spill


def _threads(device) -> int:
    return device.max_threads_per_block or 256


def _pow2(limit: int) -> list[int]:
    return [1 << i for i in range(11) if 1 << i <= limit]


class Rules(RuleSet):
    """The GPU rules applied to one schedule."""

    def run(self) -> None:
        inline_injective(self.s, self.outputs)
        for st in reversed(list(self.s.stages)):
            if st.attach == "inline" or st in self.done:
                continue
            if st.op.reduce_axis and has_reuse(self.s, st.op):
                self.tile(st, self.s[self.s.cache_write(st.op.output, "local")])
            elif st.op.reduce_axis:
                self.elementwise(st)
            else:
                self.output(st)
            self.count += 1

    def output(self, st) -> None:
        full, stats = producers(self.s, st, self.done)
        if full:
            self.tile(st, full[0])
            return
        if stats:
            self.rows(st, stats)
        else:
            self.elementwise(st)

    # -- rule 2 ----------------------------------------------------------------
    def tile(self, out, acc) -> None:
        cfg, dev, s = self.cfg, self.device, self.s
        axes, raxes = list(out.op.axis), list(acc.op.reduce_axis)
        sk = [self.knob(f"tile_{a.name}") for a in acc.op.axis]   # the same knobs with or without an epilogue
        rk = [self.knob(f"tile_{a.name}") for a in raxes]
        for k, a in zip(sk, axes):
            cfg.define_split(k, a.extent, num_outputs=3, filter=lambda v: v[2] <= 8)
        for k, a in zip(rk, raxes):
            cfg.define_split(k, a.extent, num_outputs=2, filter=lambda v: v[1] <= 32)
        shared = self.knob("shared")
        cfg.define_knob(shared, [True, False] if dev.shared_on_chip() else [False])
        unroll = self.knob("unroll")
        cfg.define_knob(unroll, [True, False])
        nbytes = 4
        tmax = _threads(dev)
        cfg.constrain(lambda c: math.prod(c[k][1] for k in sk) <= tmax
                      and math.prod(c[k][2] for k in sk) <= MAX_ACC)
        cached = [t for t in dict.fromkeys(ld.tensor for ld in loads(acc.op.body))]
        if dev.shared_on_chip():
            limit = dev.max_shared_memory

            def smem(c):   # a rough bound: every cached input's tile of one R0 step
                tile = math.prod(c[k][1] * c[k][2] for k in sk)
                step = math.prod(c[k][1] for k in rk)
                return len(cached) * tile * step * nbytes
            cfg.constrain(lambda c: not c[shared] or smem(c) <= limit)

        levels = [cfg[k].apply(s, out.op.output, a) for k, a in zip(sk, axes)]
        out.reorder(*[lv[i] for i in range(3) for lv in levels])
        bx = out.fuse(*[lv[0] for lv in levels])
        tx = out.fuse(*[lv[1] for lv in levels])
        out.bind(bx, "blockIdx.x")
        out.bind(tx, "threadIdx.x")
        acc.compute_at(out, tx)
        red = [cfg[k].apply(s, acc.op.output, a) for k, a in zip(rk, raxes)]
        sp = list(acc.op.axis)
        acc.reorder(*[r[0] for r in red], *[r[1] for r in red], *sp)
        if cfg[unroll]:
            for v in sp:
                acc.unroll(v)
        if cfg[shared]:
            threads = math.prod(cfg[k][1] for k in sk)
            for t in cached:
                c = s.cache_read(t, "shared", [acc.op.output])
                cs = s[c]
                cs.compute_at(acc, red[-1][0])
                f = cs.fuse(*cs.op.axis)
                _, t_in = cs.split(f, factor=threads)
                cs.bind(t_in, "threadIdx.x")
                self.done.add(cs)
        self.done |= {out, acc}

    # -- rule 3 ----------------------------------------------------------------
    def rows(self, st, stats) -> None:
        cfg, s = self.cfg, self.s
        axes = list(st.op.axis)
        n = max(len(p.op.axis) for p in stats)
        tk = self.knob("threads")
        cfg.define_knob(tk, [t for t in _pow2(_threads(self.device)) if t >= 8] or [1])
        row = st.fuse(*axes[:n])
        col = st.fuse(*axes[n:])
        st.bind(row, "blockIdx.x")
        co, ci = st.split(col, factor=cfg[tk])
        st.reorder(row, ci, co)
        st.bind(ci, "threadIdx.x")
        for p in stats:
            big = max(p.op.reduce_axis, key=lambda a: a.extent)
            if big.extent % cfg[tk] == 0:
                rf = s.rfactor(p.op.output, big, cfg[tk])
                rs = s[rf]
                rs.scope = "shared"
                rs.compute_at(st, ci)
                *sp, lane = rs.op.axis
                rs.reorder(*sp, lane, *rs.op.reduce_axis)
                rs.bind(lane, "threadIdx.x")
                self.done.add(rs)
            p.compute_at(st, ci)
            self.done.add(p)
        self.done.add(st)

    # -- rule 4 ----------------------------------------------------------------
    def elementwise(self, st) -> None:
        tk = self.knob("threads")
        self.cfg.define_knob(tk, [t for t in _pow2(_threads(self.device)) if t >= 32] or [1])
        fused = st.fuse(*st.op.axis)
        bx, tx = st.split(fused, factor=self.cfg[tk])
        st.reorder(bx, tx, *st.op.reduce_axis)
        st.bind(bx, "blockIdx.x")
        st.bind(tx, "threadIdx.x")
        self.done.add(st)


def schedule(s, outputs, cfg, device) -> None:
    """Apply the GPU rules to schedule `s` of `outputs`, defining their knobs on `cfg`."""
    Rules(s, outputs, cfg, device).run()
