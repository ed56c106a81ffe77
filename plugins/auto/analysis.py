"""What the rules read from a computation: which stages inline, which reduce with
data reuse, which loads are contiguous along which axis, and how a stage reads its
producer."""
from __future__ import annotations

from tunekit import ir
from tunekit.te.tensor import ComputeOp, TensorLoad


class RuleSet:
    """The state of one application of a family's rules to a schedule: the stages
    already placed, and knob names made unique per root stage (`knob`)."""

    def __init__(self, s, outputs, cfg, device):
        self.s, self.outputs, self.cfg, self.device = s, outputs, cfg, device
        self.done: set = set()
        self.count = 0

    def knob(self, name: str) -> str:
        return f"{name}.{self.count}" if self.count else name


def loads(expr) -> list[TensorLoad]:
    """The tensor reads of `expr`, in order."""
    out = []

    class V(ir.Visitor):
        def visit_TensorLoad(self, node):
            out.append(node)
            self.generic_visit(node)
    V().visit(expr)
    return out


def inline_injective(s, outputs, keep=()) -> None:
    """Inline every elementwise/injective stage that is not an output or in `keep` into
    its consumers (padding, layout packing, epilogue producers): no buffer, no extra pass;
    but a scalar computed from a reduction (a quantization's scale) is computed once."""
    outs = {t.op for t in outputs}
    for st in s.stages:
        if st.op not in outs and st not in keep and not st.op.reduce_axis and \
                not (st.op.output.shape == () and any(getattr(t.op, "reduce_axis", ()) for t in st.op.inputs)):
            st.compute_inline()


def padding(s, outputs) -> list:
    """The injective stages (not outputs) with a condition in their body (zero padding)
    that a reduction with reuse reads: each read of an inlined one pays the condition."""
    outs = {t.op for t in outputs}
    found = []
    for st in s.stages:
        if st.op in outs or st.op.reduce_axis or not _has_select(st.op.body):
            continue
        readers = [c for c in s.consumers(st.op.output) if c.op.reduce_axis]
        if readers and all(has_reuse(s, c.op) for c in readers):
            found.append(st)
    return found


def _has_select(expr) -> bool:
    hit = []

    class V(ir.Visitor):
        def visit_Select(self, node):
            hit.append(node)
    V().visit(expr)
    return bool(hit)


def body_of(s, op: ComputeOp):
    """`op`'s body with inlined producers substituted (what its loops really read)."""
    from tunekit.te.lower import inline
    return inline(op.body, {st.op for st in s.stages if st.attach == "inline"})


def has_reuse(s, op: ComputeOp) -> bool:
    """Whether some input of reduction `op` is read by fewer than all its spatial axes
    (so a tile of outputs reuses its elements: matmul, conv; not softmax, pooling)."""
    if not op.reduce_axis:
        return False
    spatial = set(op.axis)
    for load in loads(body_of(s, op)):
        used = set().union(*(ir.free_vars(i) for i in load.indices)) if load.indices else set()
        if not spatial <= used:
            return True
    return False


def contiguous_axis(s, op: ComputeOp) -> dict:
    """{axis: number of reads of `op` that are contiguous along it} (the last index is
    the axis plus terms of other axes only)."""
    count: dict = {}
    for load in loads(body_of(s, op)):
        if not load.indices:
            continue
        last = load.indices[-1]
        form = _affine(last)
        if form is None:
            continue
        for v, c in form.items():
            if v is not None and c == 1:
                count[v] = count.get(v, 0) + 1
    return count


def reads_of(s, consumer: ComputeOp, producer) -> list[TensorLoad]:
    """The reads of `producer` (a tensor) by `consumer`, inlined stages seen through."""
    return [ld for ld in loads(body_of(s, consumer)) if ld.tensor is producer]


def prefix_read(s, consumer: ComputeOp, producer) -> int:
    """n when `consumer` reads `producer` (n-dimensional) only at its own first n axes
    (a row statistic read by a row-wise consumer: softmax's max and sum give 1, an
    epilogue's accumulator gives all of them), else -1."""
    reads = reads_of(s, consumer, producer)
    n = len(producer.shape)
    if not reads or n > len(consumer.axis):
        return -1
    ok = all(len(ld.indices) == n and all(i is a for i, a in zip(ld.indices, consumer.axis)) for ld in reads)
    return n if ok else -1


def consumers(s, producer) -> list:
    """The stages that are not inlined and read `producer`, inlined stages seen through."""
    return [st for st in s.stages if st.attach != "inline" and st.op.output is not producer
            and reads_of(s, st.op, producer)]


def producers(s, st, done) -> tuple[list, list]:
    """The reductions at the root that only `st` (an injective root) needs: (those with
    reuse that it reads elementwise: its anchor, those without reuse that it reads by
    its leading axes: its row statistics). A statistic may also be read by another
    (softmax's max by its sum): they are computed together, per row of `st`."""
    cands = [p for p in s.stages if p.attach is None and p is not st and p.op.reduce_axis and p not in done
             and prefix_read(s, st.op, p.op.output) >= 0]
    full = [p for p in cands if len(p.op.axis) == len(st.op.axis) and has_reuse(s, p.op)
            and all(c is st for c in consumers(s, p.op.output))]
    stats = [p for p in cands if not has_reuse(s, p.op) and 0 < len(p.op.axis) < len(st.op.axis)]
    while True:
        keep = [p for p in stats if all(c is st or c in stats and prefix_read(s, c.op, p.op.output) >= 0
                                        for c in consumers(s, p.op.output))]
        if len(keep) == len(stats):
            return full, stats
        stats = keep


def _affine(e) -> dict | None:
    from tunekit.te import bound
    return bound.affine(e, bound.ALL)
