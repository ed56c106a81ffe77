"""Loop IR -> LLVM IR: one module per `Program`, built with `llvmlite.ir`.

The kernel is `void <program.name>(T* noalias p0, T* noalias p1, ..., i64 size0, ...)` over
the program's params (each also `align sizeof(T)` and dereferenceable for its smallest size),
then its symbolic sizes.
Index math is int64; `//` and `%` floor. Float arithmetic
carries the `contract` fast-math flag (and `reassoc` on the combine of a
reduction), so LLVM may form FMAs and vectorize reductions, as DESIGN allows.
Expressions are emitted by `expressions.py`, vectorized loops as explicit
`<n x T>` code (`vectorize.py`); parallel loops are outlined and run on libgomp
(`parallel.py`); tensorized ones run on AMX tiles (`tiles.py`).
"""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir as ll

from tunekit import ir
from tunekit.errors import BuildError
from tunekit.ir.sizes import interval

from . import parallel, tiles, vectorize
from .expressions import ExpressionEmitter
from .support import (
    I64,
    PTR,
    VOID,
    check_supported,
    elem_bytes,
    is_float,
    mem_type,
    type_suffix,
    value_type,
)

ALLOCA_MAX_BYTES = 256 << 10      # larger buffers come from the heap, not the stack
UNROLL_MAX = 512                  # an unrolled loop longer than this stays a loop


class Codegen(ExpressionEmitter):
    """Emit one Program as an LLVM module. `generate()` returns the module;
    `num_threads` is what parallel loops ask libgomp for; `features`, the CPU features (LLVM's names)
    that instructions without a portable form may use (VNNI's dot product)."""

    def __init__(self, program: ir.Program, num_threads: int = 1, features: frozenset = frozenset()):
        self.program, self.num_threads, self.features = program, max(1, int(num_threads)), features
        self.module = ll.Module(name=program.name)
        self.fn: ll.Function | None = None
        self.b: ll.IRBuilder | None = None
        self.vars: dict[ir.Var, ll.Value] = {}
        self.bufs: dict[ir.Buffer, ll.Value] = {}
        self.allocas: dict[tuple, ll.Value] = {}
        self.lane: vectorize.Lane | None = None     # set while emitting a vectorized loop
        self.in_parallel = False                    # nested parallel loops run serially
        self.reassoc: ir.Expr | None = None         # the combine op of the current reduction store
        self._unsafe: dict[int, tuple] = {}
        self._names: set[str] = set()
        # an unrolled body is emitted many times: of each vectorized loop in it, what is known of it
        self._scalar: dict[int, str | None] = {}    # loop id -> why it stays scalar
        self.lanes: dict[int, dict] = {}            # loop id -> which of its expressions vary (`Lane`)

    # -- module and functions ---------------------------------------------------
    def generate(self) -> ll.Module:
        p = self.program
        check_supported(p)
        fn = ll.Function(self.module, ll.FunctionType(VOID, [PTR] * len(p.params) + [I64] * len(p.sizes)),
                         name=p.name)
        self._names.add(p.name)
        with self.function(fn):
            for arg, buf in zip(fn.args, p.params):
                arg.add_attribute("noalias")
                arg.attributes.align = elem_bytes(buf.dtype)
                arg.attributes.dereferenceable = max(1, interval(buf.size)[0]) * elem_bytes(buf.dtype)
                arg.name = buf.name
                self.bufs[buf] = arg
            for arg, size in zip(fn.args[len(p.params):], p.sizes):
                arg.name = size.name
                self.vars[size] = arg
            self.stmt(p.body)
            self.b.ret_void()
        return self.module

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}.{k}", k + 1
        self._names.add(name)
        return name

    @contextmanager
    def function(self, fn: ll.Function):
        """Emit into `fn` with its own variables and buffers. Its first block only
        holds allocas (see `entry_alloca`); code starts in the second."""
        saved = (self.fn, self.b, self.vars, self.bufs, self.in_parallel, self.lane)
        fn.attributes.add("nounwind")
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        self.fn, self.b = fn, ll.IRBuilder(body)
        self.vars, self.bufs, self.lane = {}, {}, None
        try:
            yield
            ll.IRBuilder(entry).branch(body)
        finally:
            self.fn, self.b, self.vars, self.bufs, self.in_parallel, self.lane = saved

    def declare(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ll.Function(self.module, ll.FunctionType(ret, args), name=name)
        return fn

    def intrinsic(self, base: str, types: list[ll.Type], ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        return self.declare(".".join([base] + [type_suffix(t) for t in types]), ret, args)

    def entry_alloca(self, ty: ll.Type, name: str = "") -> ll.Value:
        """An alloca in the entry block of the current function (so it is allocated once)."""
        a = ll.IRBuilder(self.fn.entry_basic_block).alloca(ty, name=name)
        a.align = 64
        a.type = PTR    # llvmlite types an alloca as a typed pointer; LLVM 22 has only opaque ones
        return a

    # -- statements ---------------------------------------------------------------
    def stmt(self, s: ir.Stmt) -> None:
        m = getattr(self, "_s_" + type(s).__name__, None)
        if m is None:
            raise BuildError(f"{self.program.name}: llvm codegen cannot handle statement {type(s).__name__}")
        m(s)

    def _s_Seq(self, s: ir.Seq) -> None:
        for x in s.stmts:
            self.stmt(x)

    def _s_Store(self, s: ir.Store) -> None:
        v = s.value
        self.reassoc = v if (isinstance(v, ir.BinOp) and v.op in ("+", "*") and is_float(v.dtype)
                             and any(isinstance(x, ir.Load) and x.buffer is s.buffer
                                     and vectorize.same_index(x.index, s.index) for x in (v.a, v.b))) else None
        try:
            if self.lane is not None:
                vectorize.store(self, s)
                return
            val = self.to_mem(self.typed(s.value, s.buffer.dtype), s.buffer.dtype)
            self.b.store(val, self.element_ptr(s.buffer, self.index(s.index)), align=elem_bytes(s.buffer.dtype))
        finally:
            self.reassoc = None

    def _s_Allocate(self, s: ir.Allocate) -> None:
        buf = s.buffer
        ety = mem_type(buf.dtype)
        nbytes = buf.size * elem_bytes(buf.dtype)
        if nbytes <= ALLOCA_MAX_BYTES:
            key = (self.fn.name, buf)
            if key not in self.allocas:     # unrolled copies of one Allocate share it
                self.allocas[key] = self.entry_alloca(ll.ArrayType(ety, max(1, buf.size)), buf.name)
            self.bufs[buf] = self.allocas[key]
            self.stmt(s.body)
            return
        alloc = self.declare("aligned_alloc", PTR, [I64, I64])
        free = self.declare("free", VOID, [PTR])
        ptr = self.b.call(alloc, [I64(64), I64(-(-nbytes // 64) * 64)], name=buf.name)
        self.bufs[buf] = ptr
        self.stmt(s.body)
        self.b.call(free, [ptr])

    def _s_IfThenElse(self, s: ir.IfThenElse) -> None:
        if self.lane is not None and self.lane.depends(s.cond):
            vectorize.masked_if(self, s)
            return
        cond = self.expr(s.cond)
        if s.orelse is None:
            with self.b.if_then(cond):
                self.stmt(s.then)
        else:
            with self.b.if_else(cond) as (then, orelse):
                with then:
                    self.stmt(s.then)
                with orelse:
                    self.stmt(s.orelse)

    def _s_For(self, s: ir.For) -> None:
        if isinstance(s.extent, ir.Expr):   # symbolic: a plain loop (or a parallel one) over its value
            if s.kind == ir.PARALLEL and not self.in_parallel:
                parallel.emit(self, s)
            else:
                self.range_loop(s.var, I64(0), self.index(s.extent), lambda: self.stmt(s.body))
            return
        if s.extent <= 0:
            return
        if s.kind == ir.UNROLLED and s.extent <= UNROLL_MAX:
            ty = value_type(s.var.dtype)
            for k in range(s.extent):
                self.vars[s.var] = ty(k)
                self.stmt(s.body)
            del self.vars[s.var]
        elif s.kind == ir.PARALLEL and not self.in_parallel and s.extent > 1:
            parallel.emit(self, s)
        elif s.kind == ir.TENSORIZED:
            tiles.emit(self, s)
        elif s.kind == ir.VECTORIZED and (self._scalar[id(s)] if id(s) in self._scalar else
                                          self._scalar.setdefault(id(s), vectorize.plan(s))) is None:
            vectorize.emit(self, s)
        else:
            ty = value_type(s.var.dtype)
            self.range_loop(s.var, ty(0), ty(s.extent), lambda: self.stmt(s.body), guarded=False)

    def range_loop(self, var: ir.Var, lo: ll.Value, hi: ll.Value, body, guarded: bool = True) -> None:
        """`for var in range(lo, hi): body()`; `guarded=False` when lo < hi is known."""
        b = self.b
        pre = b.block
        head = b.append_basic_block(f"{var.name}.loop")
        exit_ = b.append_basic_block(f"{var.name}.exit")
        if guarded:
            b.cbranch(b.icmp_signed("<", lo, hi), head, exit_)
        else:
            b.branch(head)
        b.position_at_end(head)
        i = b.phi(lo.type, name=var.name)
        i.add_incoming(lo, pre)
        self.vars[var] = i
        body()
        nxt = b.add(i, lo.type(1), flags=("nuw", "nsw"))
        i.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_signed("<", nxt, hi), head, exit_)
        b.position_at_end(exit_)
        del self.vars[var]


def generate(program: ir.Program, num_threads: int = 1, features: frozenset = frozenset()) -> ll.Module:
    """Lower `program` to an LLVM module (see the module docstring for the ABI) for a CPU with
    `features` (LLVM's names, e.g. "avx512vnni")."""
    return Codegen(program, num_threads, features).generate()
