"""Lowering: a schedule becomes a loop-IR `Program`.

Each stage becomes a loop nest over its leaf loops; split/fuse relations give
the value of every original axis; tails of uneven splits are guarded. A stage
attached with compute_at is placed inside its consumer's loop and computes only
the region that loop needs (bound inference), in a buffer of that size.
Reductions get their initialization just above their first reduction loop.

An extent may be symbolic (an expression of `ir.SizeVar`s): loops run over it, and the
analysis (regions, buffer sizes, index proofs) uses its largest value, `upper`.
"""
from __future__ import annotations

import functools

from .. import ir
from ..errors import ScheduleError
from ..ir.sizes import expr_of, is_symbolic, sizes_of, upper
from . import bound
from .schedule import Schedule, Split, Stage
from .tensor import REDUCE, Reduce, Tensor, identity


def _combine(comb: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return a + b if comb == "sum" else ir.max_(a, b)


def _flat(indices, shape, extents: dict) -> ir.Expr:
    out = ir.const(0)
    for i, d in zip(indices, shape):
        out = out * d + bound.simplify(i, extents)
    return _simplify(out)


class _Lowering:
    def __init__(self, sch: Schedule, args: list[Tensor]):
        self.sch = sch
        self.stages = [s for s in sch.stages if s.attach != "inline"]
        self.inline = {s.op for s in sch.stages if s.attach == "inline"}
        self.stage_of = {s.op.output: s for s in self.stages}
        self.buffers = {t: ir.Buffer(t.name, tuple(map(expr_of, t.shape)), t.dtype) for t in args}
        self.ext: dict = {}      # loop var -> its extent, as emitted (int, or an expression of sizes)
        self.hi: dict = {}       # loop var -> the largest value of its extent (what the analysis uses)
        self.values: dict[Stage, dict] = {}
        self.root_min: dict[Stage, list[dict]] = {}
        self.root_ext: dict[Stage, list[int]] = {}
        self.guards: dict[Stage, list[ir.Expr]] = {}
        self.clamped: set[Stage] = set()   # stages whose reads of tensors are clamped into their symbolic sizes
        self.bodies = {s: inline(s.op.body, self.inline) for s in self.stages}
        # whether any extent is symbolic (else nothing here reads a size: the common case, kept fast)
        self.symbolic = any(is_symbolic(d) for t in args for d in t.shape) or any(
            is_symbolic(a.extent) for s in self.stages for a in [*s.op.axis, *s.op.reduce_axis])
        for s in reversed(self.stages):
            self._infer(s)

    # -- analysis -------------------------------------------------------------
    def _fixed_vars(self, stage: Stage, iv) -> list:
        """Loop vars bound outside and at `iv` of `stage` (including its own parents)."""
        out = stage.leaf[:stage.leaf.index(iv) + 1]
        if isinstance(stage.attach, tuple):
            out = self._fixed_vars(*stage.attach) + out
        return out

    def _root_values(self, q: Stage) -> dict:
        return {**{a: bound.to_expr(mn) + self.values[q][a] for a, mn in zip(q.op.axis, self.root_min[q])},
                **{a: self.values[q][a] for a in q.op.reduce_axis}}

    def _region(self, s: Stage):
        parent, iv = s.attach
        fixed = set(self._fixed_vars(parent, iv))
        if s.scope == "shared":   # one copy per block: it spans every thread's needs
            fixed = {v for v in fixed if self._tag(v) in (None, "vthread") or self._tag(v).startswith("blockIdx")}
        t = s.op.output
        accesses = []
        for q in self.stages:
            loads = [] if q is s else _loads_of(self.bodies[q], t)
            if loads:   # a reader of t (inferred already: readers come later)
                vals = self._root_values(q)
                accesses += [[bound.simplify(ir.substitute(i, vals), self.hi) for i in load.indices] for load in loads]
        if self.symbolic:
            fixed |= set(sizes_of(*accesses))   # a kernel's sizes are fixed for all of it
        mins, exts, guards = [], [], []
        for d, size in enumerate(t.shape):
            rng = [bound.access_range(a[d], {v: self.hi[v] for v in ir.free_vars(a[d])
                                             if v not in fixed and v in self.hi}, fixed)
                   for a in accesses]
            start, extent = _union(rng)
            # (of a symbolic size, the region's static extent, not the whole size: a loop of it is a constant one)
            if start is None or not is_symbolic(size) and extent >= size:
                mins.append({None: 0}), exts.append(size), guards.append(False)
                continue
            hi = bound.max_value(start, self.hi)
            mins.append(start), exts.append(extent)
            if is_symbolic(size):   # within the tensor at every size (a tile count's tiles of a size)?
                guards.append(not self.fits(bound.to_expr(start) + (extent - 1), size))
            else:
                guards.append(hi is None or hi + extent > size)
        return mins, exts, guards

    def fits(self, index: ir.Expr, size) -> bool:
        """Whether `index` < `size` (symbolic) at every size, its loops over their extents: its largest
        value, an expression of the sizes, proved no more than size - 1 (terms that cancel)."""
        form = bound.affine(index, bound.ALL)
        if form is None:
            return False
        top = ir.const(form.get(None, 0))
        for v, c in form.items():
            if v is None or c <= 0:
                continue
            if isinstance(v, bound.Term) or v not in self.ext:
                if not isinstance(v, ir.SizeVar):
                    return False
                top = top + v * c
            else:
                top = top + (self.ext[v] - 1) * c
        diff = bound.affine(expr_of(size) - 1 - top, bound.ALL)
        return diff is not None and all(c == 0 for v, c in diff.items() if v is not None) and diff.get(None, 0) >= 0

    def _tag(self, v):
        for st in self.stages:
            if v in st.annotations:
                k, tag = st.annotations[v]
                return tag if k == ir.THREAD else None
        return None

    def _infer(self, s: Stage) -> None:
        op = s.op
        if s.attach is None:
            mins, exts, rguards = [{None: 0}] * len(op.axis), [a.extent for a in op.axis], [False] * len(op.axis)
        else:
            mins, exts, rguards = self._region(s)
        self.root_min[s], self.root_ext[s] = mins, exts
        ext, hi = self.ext, self.hi
        for a, e in [*zip(op.axis, exts), *((a, a.extent) for a in op.reduce_axis)]:
            ext[a], hi[a] = expr_of(e), upper(e)
        for r in s.relations:
            if isinstance(r, Split):
                ext[r.inner] = hi[r.inner] = min(r.factor, hi[r.parent])
                ext[r.outer] = (ext[r.parent] + (ext[r.inner] - 1)) // ext[r.inner]
                hi[r.outer] = -(-hi[r.parent] // hi[r.inner])
            else:
                ext[r.fused], hi[r.fused] = ext[r.outer] * ext[r.inner], hi[r.outer] * hi[r.inner]
        vals = {iv: iv for iv in s.leaf}
        guards = []
        for r in reversed(s.relations):
            if isinstance(r, Split):
                f = self.ext[r.inner]
                vals[r.parent] = vals[r.outer] * f + vals[r.inner]
                if isinstance(ext[r.parent], ir.Expr) or ext[r.parent] % f:
                    guards.append(_simplify(vals[r.parent]) < self.ext[r.parent])
            else:
                vals[r.outer] = vals[r.fused] // self.ext[r.inner]
                vals[r.inner] = vals[r.fused] % self.ext[r.inner]
        for a, mn, g, size in zip(op.axis, mins, rguards, op.output.shape):
            if g and is_symbolic(size) and s.scope != "shared":
                # a region that may pass a symbolic size (a tile of its tail): the extra elements are computed,
                # from reads clamped into their tensors, and never read, rather than guarded one by one
                self.clamped.add(s)
            elif g:
                guards.append(_simplify(bound.to_expr(mn) + vals[a]) < expr_of(size))
        self.values[s], self.guards[s] = vals, guards

    # -- emission -------------------------------------------------------------
    def _load(self, t: Tensor, indices) -> ir.Expr:
        if t not in self.buffers:
            raise ScheduleError(f"{t.name} is read but neither an argument nor computed by the schedule")
        s = self.stage_of.get(t)
        if s is not None and s.attach is not None:
            indices = [i - bound.to_expr(m) for i, m in zip(indices, self.root_min[s])]
        buf = self.buffers[t]
        return _flat(indices, buf.shape, self.hi)

    def _translate(self, expr, vals, clamped: Stage | None = None) -> ir.Expr:
        # conditions (padding masks) index like loads: simplify their div/mod too
        lanes = {iv for iv, (k, _) in clamped.annotations.items() if k == ir.VECTORIZED} if clamped else None
        return bound.simplify(_Loads(self, lanes).visit(ir.substitute(expr, vals)), self.hi)

    def nest(self, s: Stage, tags: dict) -> ir.Stmt:
        op, out = s.op, s.op.output
        vals = self._root_values(s)
        idx = [vals[a] for a in op.axis]
        buf = self.buffers[out]
        flat = self._load(out, idx)
        body = self.bodies[s]
        if isinstance(body, Reduce):
            src = self._translate(body.source, vals, s if s in self.clamped else None)
            main = ir.Store(buf, flat, _combine(body.combiner, ir.Load(buf, flat), src))
            init = ir.Store(buf, flat, identity(body.combiner, body.dtype))
        else:
            main, init = ir.Store(buf, flat, self._translate(body, vals, s if s in self.clamped else None)), None
        leaves = s.leaf
        first_red = next((i for i, v in enumerate(leaves) if v.kind == REDUCE), None)
        guards = [(g, ir.free_vars(g)) for g in self.guards[s]]
        red_vars = {v for v in leaves if v.kind == REDUCE}

        def build(ivs, level, inner, gs, tags, with_children):
            if level == len(ivs):
                return inner
            iv = ivs[level]
            body = build(ivs, level + 1, inner, gs, tags, with_children)
            here = set(ivs[level + 1:])
            for g, fv in gs:
                if iv in fv and not (fv & here):
                    body = ir.IfThenElse(g, body)
            if with_children:
                body = self._children(s, iv, body, tags)
            kind, tag = s.annotations.get(iv, (ir.SERIAL, None))
            if tag is not None and tag != "vthread" and tag in tags and tags[tag][0] is not iv:
                var, ext = tags[tag]
                if self.hi[iv] > ext:
                    raise ScheduleError(f"{op.name}: {iv.name} bound to {tag} needs {self.hi[iv]} threads, "
                                        f"the enclosing launch has {ext}")
                body = ir.substitute(body, {iv: var})
                static = isinstance(self.ext[iv], int) and self.ext[iv] == ext
                return body if static else ir.IfThenElse(var < self.ext[iv], body)
            loop = ir.For(iv, self.ext[iv], kind, body, tag)
            if with_children and level == first_red and init is not None:
                init_ivs = [v for v in leaves[level + 1:] if v.kind != REDUCE]
                init_gs = [(g, fv) for g, fv in gs if not (fv & red_vars) and fv & set(init_ivs)]
                return ir.seq(build(init_ivs, 0, init, init_gs, tags, False), loop)
            return loop

        # thread tags bound by this nest are visible to stages attached inside it
        inner_tags = dict(tags)
        for iv in leaves:
            kind, tag = s.annotations.get(iv, (ir.SERIAL, None))
            if kind == ir.THREAD and tag != "vthread" and tag not in tags:
                inner_tags[tag] = (iv, self.hi[iv])
        stmt = build(leaves, 0, main, guards, inner_tags, True)
        if init is not None and first_red is None:   # reduction over nothing
            stmt = ir.seq(build(leaves, 0, init, guards, inner_tags, False), stmt)
        for g, fv in guards:
            if not fv & set(leaves):
                stmt = ir.IfThenElse(g, stmt)
        return stmt

    def _children(self, parent: Stage, iv, body: ir.Stmt, tags) -> ir.Stmt:
        kids = [c for c in self.stages if isinstance(c.attach, tuple) and c.attach == (parent, iv)]
        if not kids:
            return body
        parts = []
        for c in kids:
            n = self.nest(c, tags)
            parts += [ir.Barrier("shared"), n, ir.Barrier("shared")] if c.scope == "shared" else [n]
        stmt = ir.seq(*parts, body)
        for c in reversed(kids):
            stmt = ir.Allocate(self.buffers[c.op.output], stmt)
        return stmt

    def program(self, name: str, args: list[Tensor]) -> ir.Program:
        temps = []
        for s in self.stages:
            t = s.op.output
            if t in self.buffers:
                continue
            if s.attach is None:   # a temporary has room for the largest sizes
                self.buffers[t] = ir.Buffer(t.name, tuple(map(upper, t.shape)), t.dtype, s.scope)
                temps.append(self.buffers[t])
            else:
                self.buffers[t] = ir.Buffer(t.name, tuple(map(upper, self.root_ext[s])), t.dtype,
                                            "local" if s.scope == "global" else s.scope)
        for s in self.stages:
            if isinstance(s.attach, tuple) and s.attach[0] not in self.stages:
                raise ScheduleError(f"{s.op.name} is attached to {s.attach[0].op.name}, which is inlined")
        body = ir.seq(*[self.nest(s, {}) for s in self.stages if s.attach is None])
        for b in reversed(temps):
            body = ir.Allocate(b, body)
        params = [self.buffers[t] for t in args]
        # the arguments' dimensions, then sizes only values read (a position: `past + i`)
        sizes = sizes_of(*(b.shape for b in params), body) if self.symbolic else []
        return ir.Program(name, params, body, sizes=sizes)


def _simplify(e: ir.Expr) -> ir.Expr:
    """Canonical affine form, non-affine parts kept as terms (so `x % 5 - x % 5` cancels)."""
    form = bound.affine(e, bound.ALL)
    return e if form is None else bound.to_expr(form)


class _Inline(ir.Mutator):
    """Replace reads of inlined tensors by their bodies."""

    def __init__(self, inline: set):
        self.inline = inline

    def visit_TensorLoad(self, node):
        node = self.generic_visit(node)
        op = node.tensor.op
        if op in self.inline:
            return self.visit(ir.substitute(op.body, dict(zip(op.axis, node.indices))))
        return node


class _Root:
    attach = None


_ROOT = _Root()   # what a tensor no stage computes (an argument) is attached to


class _Loads(ir.Mutator):
    """Turn tensor reads into loads of their buffers at flat indices."""

    def __init__(self, low: _Lowering, lanes: set | None = None):
        self.low, self.lanes = low, lanes   # lanes: the vectorized loops of a stage whose reads are clamped

    def visit_TensorLoad(self, node):
        idx = [self.visit(i) for i in node.indices]
        t = node.tensor
        load = lambda ix: ir.Load(self.low.buffers[t], self.low._load(t, ix))
        if self.lanes is None or isinstance(self.low.stage_of.get(t, _ROOT).attach, tuple):   # a region's buffer
            return load(idx)
        # into the tensor: a scalar index clamped, a vector's lanes masked (a masked load, not a gather)
        past = [is_symbolic(d) and not self.low.fits(i, d) for i, d in zip(idx, t.shape)]
        masked = [i < expr_of(d) for i, d, p in zip(idx, t.shape, past) if p and ir.free_vars(i) & self.lanes]
        idx = [ir.min_(i, expr_of(d) - 1) if p and not ir.free_vars(i) & self.lanes else i
               for i, d, p in zip(idx, t.shape, past)]
        return ir.select(functools.reduce(ir.and_, masked), load(idx), ir.const(0, t.dtype)) if masked else load(idx)


class _Reads(ir.Visitor):
    """Collect the tensor reads of an expression."""

    def __init__(self):
        self.loads = []

    def visit_TensorLoad(self, node):
        self.loads.append(node)
        self.generic_visit(node)


def _loads_of(expr, t) -> list:
    v = _Reads()
    v.visit(expr)
    return [n for n in v.loads if n.tensor is t]


def _union(ranges):
    if not ranges or any(r is None for r in ranges):
        return None, 0
    key = {k: v for k, v in ranges[0][0].items() if k is not None}
    if any({k: v for k, v in r[0].items() if k is not None} != key for r in ranges):
        return None, 0
    lo = min(r[0][None] for r in ranges)
    hi = max(r[0][None] + r[1] for r in ranges)
    return {**key, None: lo}, hi - lo


def inline(expr, ops: set):
    """`expr` with every read of a tensor computed by one of `ops` replaced by that op's body
    (what a stage really reads once its inlined producers are substituted)."""
    return _Inline(ops).visit(expr)


def lower(sch: Schedule, args: list[Tensor], name: str = "kernel") -> ir.Program:
    """Lower `sch` to a Program whose parameters are `args` (inputs, then outputs)."""
    for t in args:
        if not isinstance(t, Tensor):
            raise ScheduleError(f"lower: arguments must be tensors, got {type(t).__name__}")
    low = _Lowering(sch, args)
    return low.program(name, args)
