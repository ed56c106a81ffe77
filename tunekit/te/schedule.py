"""Schedules: how a tensor expression is computed (the paper's S_e primitives).

`create_schedule(outputs)` gives one `Stage` per compute op. Stage primitives
rewrite its loop nest (split, tile, fuse, reorder), annotate loops (vectorize,
unroll, parallel, bind to GPU axes), and place it (compute_at, compute_inline).
`Schedule.cache_read` / `cache_write` add staging copies in "shared" or "local"
memory; `Schedule.rfactor` splits a reduction into per-lane partial results.
Nothing is lowered here: `tunekit.te.lower` reads the result.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..errors import ScheduleError
from ..ir.sizes import is_symbolic
from .tensor import (
    REDUCE,
    SPATIAL,
    ComputeOp,
    IterVar,
    PlaceholderOp,
    Reduce,
    Tensor,
    TensorLoad,
    _make,
    compute,
    identity,
)


@dataclass(eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


class Stage:
    """The schedule of one compute op."""

    def __init__(self, op: ComputeOp, schedule: Schedule):
        self.op, self.schedule = op, schedule
        self.leaf: list[IterVar] = list(op.axis) + list(op.reduce_axis)
        self.relations: list = []
        self.annotations: dict[IterVar, tuple[str, str | None]] = {}
        self.attach: tuple[Stage, IterVar] | str | None = None   # None = root, "inline"
        self.scope = "global"

    def __repr__(self) -> str:
        return f"Stage({self.op.name})"

    def _check_leaf(self, iv: IterVar) -> int:
        if iv not in self.leaf:
            raise ScheduleError(f"{self.op.name}: {iv.name} is not a current loop of this stage "
                                f"(loops: {', '.join(v.name for v in self.leaf)})")
        return self.leaf.index(iv)

    def split(self, iv: IterVar, factor: int | None = None, nparts: int | None = None):
        """Split loop `iv` into (outer, inner) with inner extent `factor`
        (or outer extent `nparts`). A factor that does not divide guards the tail, as does any
        factor of a symbolic extent (whose outer loop runs ceil(extent / factor) times)."""
        pos = self._check_leaf(iv)
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"{self.op.name}.split({iv.name}): give exactly one of factor, nparts")
        if nparts is not None and is_symbolic(iv.extent):
            raise ScheduleError(f"{self.op.name}.split({iv.name}, nparts=...): {iv.name}'s extent {iv.extent!r} "
                                "is symbolic; split it by a factor")
        if nparts is not None:
            factor = -(-iv.extent // int(nparts))
        factor = int(factor)
        if factor < 1:
            raise ScheduleError(f"{self.op.name}.split({iv.name}): factor must be >= 1, got {factor}")
        outer = IterVar(f"{iv.name}.o", ir.INDEX, (iv.extent + (factor - 1)) // factor, iv.kind)
        inner = IterVar(f"{iv.name}.i", ir.INDEX, factor, iv.kind)
        self.relations.append(Split(iv, outer, inner, factor))
        self.leaf[pos:pos + 1] = [outer, inner]
        return outer, inner

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int):
        """Split x and y and order the loops (xo, yo, xi, yi)."""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *ivs: IterVar) -> IterVar:
        """Fuse adjacent loops (outermost first) into one."""
        out = ivs[0]
        for iv in ivs[1:]:
            a, b = self._check_leaf(out), self._check_leaf(iv)
            if b != a + 1:
                raise ScheduleError(f"{self.op.name}.fuse: {out.name} and {iv.name} are not adjacent, "
                                    "reorder them first")
            if out.kind != iv.kind:
                raise ScheduleError(f"{self.op.name}.fuse: cannot fuse a reduction loop with a spatial one")
            f = IterVar(f"{out.name}.{iv.name}.f", ir.INDEX, out.extent * iv.extent, out.kind)
            self.relations.append(Fuse(out, iv, f))
            self.leaf[a:b + 1] = [f]
            out = f
        return out

    def reorder(self, *ivs: IterVar) -> None:
        """Put the given loops in this order, keeping the others where they are."""
        pos = sorted(self._check_leaf(iv) for iv in ivs)
        if len(set(ivs)) != len(ivs):
            raise ScheduleError(f"{self.op.name}.reorder: a loop is named twice")
        for p, iv in zip(pos, ivs):
            self.leaf[p] = iv

    def _annotate(self, iv: IterVar, kind: str, tag: str | None = None) -> None:
        self._check_leaf(iv)
        self.annotations[iv] = (kind, tag)

    def vectorize(self, iv: IterVar) -> None:
        """Run loop `iv` as SIMD lanes."""
        self._annotate(iv, ir.VECTORIZED)

    def unroll(self, iv: IterVar) -> None:
        """Unroll loop `iv` completely."""
        self._annotate(iv, ir.UNROLLED)

    def parallel(self, iv: IterVar) -> None:
        """Run iterations of loop `iv` on all cores."""
        self._annotate(iv, ir.PARALLEL)

    def bind(self, iv: IterVar, thread_tag: str) -> None:
        """Bind loop `iv` to a GPU axis: "blockIdx.x|y|z", "threadIdx.x|y|z" or "vthread"."""
        valid = {f"{a}.{d}" for a in ("blockIdx", "threadIdx") for d in "xyz"} | {"vthread"}
        if thread_tag not in valid:
            raise ScheduleError(f"{self.op.name}.bind: unknown GPU axis {thread_tag!r} (one of {sorted(valid)})")
        self._annotate(iv, ir.THREAD, thread_tag)

    def tensorize(self, iv: IterVar, instruction: str) -> None:
        """Run the loop nest from `iv` inward as one `instruction` of the target (e.g. "amx": int8
        matrix tiles). The target's code generator checks that the nest is one it can run so, and
        says why where it is not; other targets run the nest as plain loops."""
        self._annotate(iv, ir.TENSORIZED, instruction)

    def compute_at(self, parent: Stage, iv: IterVar) -> None:
        """Compute this stage inside loop `iv` of `parent`, just the region it needs."""
        parent._check_leaf(iv)
        self.attach = (parent, iv)

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers (no buffer)."""
        if self.op.reduce_axis:
            raise ScheduleError(f"{self.op.name}: a reduction cannot be inlined")
        self.attach = "inline"

    def compute_root(self) -> None:
        self.attach = None


class Schedule:
    """The stages of a computation, in producer-before-consumer order."""

    def __init__(self, outputs: list[Tensor]):
        self.outputs = outputs
        self.stages: list[Stage] = []
        self._by_op: dict = {}
        for op in _topo([t.op for t in outputs]):
            if isinstance(op, ComputeOp):
                self._add(Stage(op, self))

    def _add(self, stage: Stage, before: Stage | None = None) -> Stage:
        if before is None:
            self.stages.append(stage)
        else:
            self.stages.insert(self.stages.index(before), stage)
        self._by_op[stage.op] = stage
        return stage

    def __getitem__(self, t: Tensor | ComputeOp) -> Stage:
        op = t.op if isinstance(t, Tensor) else t
        if op not in self._by_op:
            raise ScheduleError(f"{getattr(op, 'name', op)} is not computed by this schedule")
        return self._by_op[op]

    def consumers(self, t: Tensor) -> list[Stage]:
        return [s for s in self.stages if t in s.op.inputs]

    def cache_read(self, t: Tensor, scope: str, readers: list[Tensor]) -> Tensor:
        """Copy `t` into a `scope` buffer that `readers` read instead of `t`."""
        cache = compute(t.shape, lambda *i: t[i], name=f"{t.name}.{scope}")
        for r in readers:
            _replace_input(r.op, t, cache)
        self._add(Stage(cache.op, self), before=self[readers[0]]).scope = scope
        return cache

    def cache_write(self, t: Tensor, scope: str) -> Tensor:
        """Compute `t` into a `scope` buffer; `t`'s stage becomes a copy out of it.
        Call it before scheduling `t`'s stage."""
        stage = self[t]
        op = stage.op
        if stage.relations:
            raise ScheduleError(f"cache_write({t.name}) must come before {t.name}'s stage is split or fused")
        new_axis = [IterVar(a.name, ir.INDEX, a.extent, SPATIAL) for a in op.axis]
        body = ir.substitute(op.body, dict(zip(op.axis, new_axis)))
        cache = _make(f"{t.name}.{scope}", new_axis, body)
        op.body = TensorLoad(cache, tuple(op.axis))
        op.reduce_axis = []
        stage.leaf = list(op.axis)
        self._add(Stage(cache.op, self), before=stage).scope = scope
        return cache

    def rfactor(self, t: Tensor, axis: IterVar, factor: int) -> Tensor:
        """Reduce `t` in two steps: first into `factor` partial results per element,
        `rf[..., l] = reduce(body with axis = axis.o * factor + l)` over `axis.o` and
        the other reduction axes, then `t[...] = reduce(rf[..., l])` over l. The lanes
        l are a spatial axis of `rf` (its last), so they can be vectorized. Call it
        before scheduling `t`'s stage; `factor` must divide `axis.extent`, unless that is
        symbolic: then the lanes past it add the combiner's identity.

        Returns:
            rf, whose stage is new and comes before `t`'s.
        """
        stage = self[t]
        op, body = stage.op, stage.op.body
        if not isinstance(body, Reduce) or axis not in body.axes:
            raise ScheduleError(f"rfactor({t.name}): {axis.name} is not a reduction axis of {t.name}")
        symbolic = is_symbolic(axis.extent)
        if stage.relations or not symbolic and axis.extent % factor:
            raise ScheduleError(f"rfactor({t.name}, {axis.name}, {factor}): needs an unscheduled stage and a "
                                f"factor that divides {axis.extent}")
        new_axis = [IterVar(a.name, ir.INDEX, a.extent, SPATIAL) for a in op.axis]
        lane = IterVar(f"{axis.name}.l", ir.INDEX, factor, SPATIAL)
        outer = IterVar(f"{axis.name}.o", ir.INDEX, (axis.extent + (factor - 1)) // factor, REDUCE)
        others = {a: IterVar(a.name, ir.INDEX, a.extent, REDUCE) for a in body.axes if a is not axis}
        sub = {**dict(zip(op.axis, new_axis)), **others, axis: outer * factor + lane}
        src = ir.substitute(body.source, sub)
        if symbolic:
            src = ir.select(outer * factor + lane < axis.extent, src, identity(body.combiner, body.dtype))
        rf = _make(f"{t.name}.rf", [*new_axis, lane], Reduce(body.combiner, src, (outer, *others.values()), body.dtype))
        r = IterVar(f"{axis.name}.r", ir.INDEX, factor, REDUCE)
        op.body = Reduce(body.combiner, TensorLoad(rf, (*op.axis, r)), (r,), body.dtype)
        op.reduce_axis = [r]
        stage.leaf = [*op.axis, r]
        self._add(Stage(rf.op, self), before=stage)
        return rf


def _replace_input(op: ComputeOp, old: Tensor, new: Tensor) -> None:
    class M(ir.Mutator):
        def visit_TensorLoad(self, node):
            node = self.generic_visit(node)
            return TensorLoad(new, node.indices) if node.tensor is old else node
    op.body = M().visit(op.body)


def _topo(ops) -> list:
    order, seen = [], set()

    def visit(op):
        if op in seen:
            return
        seen.add(op)
        for t in op.inputs:
            visit(t.op)
        order.append(op)
    for op in ops:
        visit(op)
    return order


def create_schedule(outputs: Tensor | list[Tensor]) -> Schedule:
    """Start a schedule computing `outputs` (and every compute op they read)."""
    return Schedule(outputs if isinstance(outputs, list) else [outputs])


__all__ = ["Schedule", "Stage", "Split", "Fuse", "create_schedule", "PlaceholderOp"]
