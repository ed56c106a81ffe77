"""Explicit SIMD code for vectorized loops.

A vectorized loop of constant extent n (2..MAX_LANES) whose body is straight-line
stores (Seq, Store, IfThenElse) becomes one pass of `<n x T>` code: the loop
variable is the vector <0, 1, ..., n-1>; lane-invariant subexpressions stay scalar
and are broadcast where they meet vectors. A flat index `c*var + rest` gives a
contiguous vector load/store when c == 1, a scalar load + broadcast when c == 0 and
a gather/scatter otherwise. A condition that depends on the lanes becomes a mask:
loads and stores under it are `llvm.masked.*`, so tails and padding never touch
memory the scalar program would not; a guarded statement runs unmasked in the
passes where every lane is in.

Anything else (nested loops, allocations, stores that several lanes could hit,
lane-crossing dependences) falls back to a scalar loop (`plan` says why).
"""
from __future__ import annotations

from llvmlite import ir as ll

from tunekit import ir, te

from .support import I1, I32, PTR, VOID, elem_bytes, mem_type, value_type

MAX_LANES = 64


class Lane:
    """The vectorized loop being emitted: its variable, lane count and active mask."""

    def __init__(self, var: ir.Var, n: int, dep: dict | None = None):
        self.var, self.n = var, n
        self.mask: ll.Value | None = None
        #: id(expression) -> (it, whether it varies); the code generator keeps one per loop for all its emissions
        self._dep: dict[int, tuple] = {} if dep is None else dep

    def depends(self, e: ir.Expr) -> bool:
        """Whether `e` varies across lanes."""
        hit = self._dep.get(id(e))
        if hit is None or hit[0] is not e:
            varies = e is self.var if isinstance(e, ir.Var) else any([self.depends(c) for c in ir.children(e)])
            hit = self._dep[id(e)] = (e, varies)
        return hit[1]

    def ramp(self) -> ll.Constant:
        return ll.Constant(ll.VectorType(value_type(self.var.dtype), self.n), list(range(self.n)))


def lane_coef(e: ir.Expr, var: ir.Var, lane: Lane | None = None) -> tuple[int, ir.Expr] | None:
    """Write `e` as `c * var + rest` with `rest` free of `var`; None if it is not affine in `var`
    (`lane`: the loop of `var` being emitted, which knows what varies)."""
    if not (lane.depends(e) if lane is not None else var in ir.free_vars(e)):
        return 0, e
    if e is var:
        return 1, ir.const(0, e.dtype)
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        a, b = lane_coef(e.a, var, lane), lane_coef(e.b, var, lane)
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1]) if e.op == "+" else (a[0] - b[0], a[1] - b[1])
    if isinstance(e, ir.BinOp) and e.op == "*":
        for x, k in ((e.a, e.b), (e.b, e.a)):
            if isinstance(k, ir.Const):
                inner = lane_coef(x, var, lane)
                return None if inner is None else (inner[0] * int(k.value), inner[1] * k)
    return None


def _key(e: ir.Expr):
    """A value-equality key of an index expression (affine form when it has one)."""
    form = te.affine(e) if not isinstance(e, ir.Load) else None
    if form is not None:
        return frozenset((id(k) if k is not None else None, v) for k, v in form.items() if v or k is None)
    if isinstance(e, ir.Var):
        return ("var", id(e))
    if isinstance(e, ir.Const):
        return ("const", e.value, e.dtype)
    if isinstance(e, ir.Load):
        return ("load", id(e.buffer), _key(e.index))
    return (type(e).__name__, getattr(e, "op", getattr(e, "fn", None)), e.dtype,
            tuple(_key(c) for c in ir.children(e)))


def same_index(a: ir.Expr, b: ir.Expr) -> bool:
    return a is b or _key(a) == _key(b)


def plan(loop: ir.For) -> str | None:
    """None when `loop` can be emitted as vector code, else why it stays scalar."""
    if not 2 <= loop.extent <= MAX_LANES:
        return f"extent {loop.extent} is not in 2..{MAX_LANES}"
    stores: list[ir.Store] = []
    access: dict[ir.Buffer, list[ir.Expr]] = {}
    reason: list[str] = []

    seen: set[int] = set()

    class V(ir.Visitor):
        def visit(self, node):
            # an unrolled body shares index expressions between its statements: each is looked at once
            if isinstance(node, ir.Expr):
                if id(node) in seen:
                    return None
                seen.add(id(node))
            return super().visit(node)

        def visit_For(self, node):
            reason.append("the body has a nested loop")

        def visit_Allocate(self, node):
            reason.append("the body allocates")

        def visit_Store(self, node):
            stores.append(node)
            access.setdefault(node.buffer, []).append(node.index)
            self.generic_visit(node)

        def visit_Load(self, node):
            access.setdefault(node.buffer, []).append(node.index)
            self.generic_visit(node)

        def visit_BinOp(self, node):
            if node.op in ("//", "%", "/") and not node.dtype.startswith("float") and \
                    not isinstance(node.b, ir.Const) and loop.var in ir.free_vars(node):   # else one scalar, broadcast
                reason.append("integer division by a variable")
            self.generic_visit(node)
    V().visit(loop.body)
    if reason:
        return reason[0]
    for s in stores:
        lc = lane_coef(s.index, loop.var)
        if lc is None or lc[0] == 0:
            return f"store to {s.buffer.name} is not at a distinct element per lane"
        if any(not same_index(i, s.index) for i in access[s.buffer]):
            return f"{s.buffer.name} is stored and accessed at another index (lanes may depend on each other)"
    return None


def emit(cg, loop: ir.For) -> None:
    cg.lane = Lane(loop.var, loop.extent, cg.lanes.setdefault(id(loop), {}))
    try:
        cg.stmt(loop.body)
    finally:
        cg.lane = None


def _under(cg, cond: ll.Value, old: ll.Value | None) -> ll.Value:
    """The mask of lanes active under `cond` inside mask `old`."""
    if not isinstance(cond.type, ll.VectorType):
        cond = cg.splat(cond, cg.lane.n)
    return cond if old is None else cg.b.and_(old, cond)


def _all_true(n: int) -> ll.Constant:
    return ll.Constant(ll.VectorType(ll.IntType(1), n), [1] * n)


def masked_if(cg, s: ir.IfThenElse) -> None:
    lane = cg.lane
    old, cond = lane.mask, cg.expr(s.cond)
    if old is None and isinstance(cond.type, ll.VectorType):
        # a tail or a border: most passes have every lane in, and then run unmasked (masked loads
        # of lane-invariant data would be gathers); the others take the masked code below
        fn = cg.intrinsic("llvm.vector.reduce.and", [cond.type], I1, [cond.type])
        with cg.b.if_else(cg.b.call(fn, [cond])) as (every, some):
            with every:
                cg.stmt(s.then)
            with some:
                _masked(cg, s, cond, old)
        return
    _masked(cg, s, cond, old)


def _masked(cg, s: ir.IfThenElse, cond: ll.Value, old: ll.Value | None) -> None:
    lane = cg.lane
    try:
        lane.mask = _under(cg, cond, old)
        cg.stmt(s.then)
        if s.orelse is not None:
            lane.mask = _under(cg, cg.not_(cond), old)
            cg.stmt(s.orelse)
    finally:
        lane.mask = old


def masked_select(cg, e: ir.Select) -> ll.Value:
    """A select whose sides load: each side loads only in the lanes that take it."""
    lane = cg.lane
    old, cond = lane.mask, cg.expr(e.cond)
    try:
        lane.mask = _under(cg, cond, old)
        t = cg.typed(e.t, e.dtype)
        lane.mask = _under(cg, cg.not_(cond), old)
        f = cg.typed(e.f, e.dtype)
    finally:
        lane.mask = old
    return cg.b.select(*cg.match(cond, t, f))


def _pointers(cg, buf: ir.Buffer, index: ir.Expr) -> ll.Value:
    idx = cg.index(index)
    if not isinstance(idx.type, ll.VectorType):
        idx = cg.splat(idx, cg.lane.n)
    ptrs = cg.element_ptr(buf, idx)
    ptrs.type = ll.VectorType(PTR, cg.lane.n)    # llvmlite types a vector GEP as a scalar ptr
    return ptrs


def load(cg, e: ir.Load) -> ll.Value:
    lane, b = cg.lane, cg.b
    ety, align = mem_type(e.dtype), elem_bytes(e.dtype)
    vt = ll.VectorType(ety, lane.n)
    lc = lane_coef(e.index, lane.var, lane)
    if lc is not None and lc[0] == 0 and lane.mask is None:
        ptr = cg.element_ptr(e.buffer, cg.index(e.index))
        return cg.from_mem(b.load(ptr, typ=ety, align=align), e.dtype)
    zero = ll.Constant(vt, None)
    # the start of a contiguous run; a vector if it is read under a mask (a load's address): then a gather
    start = cg.index(lc[1]) if lc is not None and lc[0] == 1 else None
    if start is not None and not isinstance(start.type, ll.VectorType):
        ptr = cg.element_ptr(e.buffer, start)
        if lane.mask is None:
            v = b.load(ptr, typ=vt, align=align)
        else:
            fn = cg.intrinsic("llvm.masked.load", [vt, ptr.type], vt, [ptr.type, I32, lane.mask.type, vt])
            v = b.call(fn, [ptr, I32(align), lane.mask, zero])
    else:
        ptrs = _pointers(cg, e.buffer, e.index)
        mask = lane.mask if lane.mask is not None else _all_true(lane.n)
        fn = cg.intrinsic("llvm.masked.gather", [vt, ptrs.type], vt, [ptrs.type, I32, mask.type, vt])
        v = b.call(fn, [ptrs, I32(align), mask, zero])
    return cg.from_mem(v, e.dtype)


def store(cg, s: ir.Store) -> None:
    lane, b = cg.lane, cg.b
    align = elem_bytes(s.buffer.dtype)
    val = cg.to_mem(cg.typed(s.value, s.buffer.dtype), s.buffer.dtype)
    if not isinstance(val.type, ll.VectorType):
        val = cg.splat(val, lane.n)
    c, rest = lane_coef(s.index, lane.var, lane)      # plan() made sure c != 0
    if c == 1:
        ptr = cg.element_ptr(s.buffer, cg.index(rest))
        if lane.mask is None:
            b.store(val, ptr, align=align)
        else:
            fn = cg.intrinsic("llvm.masked.store", [val.type, ptr.type], VOID,
                              [val.type, ptr.type, I32, lane.mask.type])
            b.call(fn, [val, ptr, I32(align), lane.mask])
        return
    ptrs = _pointers(cg, s.buffer, s.index)
    mask = lane.mask if lane.mask is not None else _all_true(lane.n)
    fn = cg.intrinsic("llvm.masked.scatter", [val.type, ptrs.type], VOID, [val.type, ptrs.type, I32, mask.type])
    b.call(fn, [val, ptrs, I32(align), mask])
