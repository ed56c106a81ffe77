"""Loop IR -> LLVM IR: one module per `Program`, built with `llvmlite.ir`.

The kernel is `void <program.name>(T* noalias p0, T* noalias p1, ...)` over the
program's params (each also `align sizeof(T)` and dereferenceable for its size).
Index math is int64; `//` and `%` floor. Float arithmetic
carries the `contract` fast-math flag (and `reassoc` on the combine of a
reduction), so LLVM may form FMAs and vectorize reductions, as DESIGN allows.
Vectorized loops are emitted as explicit `<n x T>` code (`vectorize.py`),
parallel loops are outlined and run on libgomp (`parallel.py`).
"""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir as ll

from tunekit import ir
from tunekit.errors import BuildError

from . import parallel, vectorize
from .support import (
    FAST,
    I1,
    I8,
    I32,
    I64,
    PTR,
    VOID,
    check_supported,
    elem_bytes,
    float_bits,
    is_float,
    is_unsigned,
    mem_type,
    type_suffix,
    value_type,
)

ALLOCA_MAX_BYTES = 256 << 10      # larger buffers come from the heap, not the stack
UNROLL_MAX = 512                  # an unrolled loop longer than this stays a loop
_ICMP = {"<", "<=", ">", ">=", "==", "!="}


class Codegen:
    """Emit one Program as an LLVM module. `generate()` returns the module;
    `num_threads` is what parallel loops ask libgomp for."""

    def __init__(self, program: ir.Program, num_threads: int = 1):
        self.program, self.num_threads = program, max(1, int(num_threads))
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

    # -- module and functions ---------------------------------------------------
    def generate(self) -> ll.Module:
        p = self.program
        check_supported(p)
        fn = ll.Function(self.module, ll.FunctionType(VOID, [PTR] * len(p.params)), name=p.name)
        self._names.add(p.name)
        with self.function(fn):
            for arg, buf in zip(fn.args, p.params):
                arg.add_attribute("noalias")
                arg.attributes.align = elem_bytes(buf.dtype)
                arg.attributes.dereferenceable = buf.size * elem_bytes(buf.dtype)
                arg.name = buf.name
                self.bufs[buf] = arg
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
        elif s.kind == ir.VECTORIZED and vectorize.plan(s) is None:
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

    # -- memory -------------------------------------------------------------------
    def index(self, e: ir.Expr) -> ll.Value:
        v = self.expr(e)
        t = v.type.element if isinstance(v.type, ll.VectorType) else v.type
        return self.b.sext(v, self.retype(v.type, I64)) if t != I64 else v

    def element_ptr(self, buf: ir.Buffer, idx: ll.Value) -> ll.Value:
        if buf not in self.bufs:
            raise BuildError(f"{self.program.name}: buffer {buf.name} is used outside its allocation "
                             "(not a parameter and not allocated around this use)")
        return self.b.gep(self.bufs[buf], [idx], inbounds=True, source_etype=mem_type(buf.dtype))

    def to_mem(self, v: ll.Value, dtype: str) -> ll.Value:
        return self.b.zext(v, self.retype(v.type, I8)) if dtype == "bool" else v

    def from_mem(self, v: ll.Value, dtype: str) -> ll.Value:
        return self.b.trunc(v, self.retype(v.type, I1)) if dtype == "bool" else v

    @staticmethod
    def retype(t: ll.Type, elem: ll.Type) -> ll.Type:
        """`elem`, or a vector of `elem` as wide as `t`."""
        return ll.VectorType(elem, t.count) if isinstance(t, ll.VectorType) else elem

    # -- expressions --------------------------------------------------------------
    def expr(self, e: ir.Expr) -> ll.Value:
        if isinstance(e, ir.Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, ir.Var):
            if self.lane is not None and e is self.lane.var:
                return self.lane.ramp()
            if e not in self.vars:
                raise BuildError(f"{self.program.name}: variable {e.name} is used outside its loop")
            return self.vars[e]
        if isinstance(e, ir.Load):
            if self.lane is not None:
                return vectorize.load(self, e)
            v = self.b.load(self.element_ptr(e.buffer, self.index(e.index)), typ=mem_type(e.dtype),
                            align=elem_bytes(e.dtype))
            return self.from_mem(v, e.dtype)
        if isinstance(e, ir.BinOp):
            return self.binop(e)
        if isinstance(e, ir.Not):
            return self.not_(self.expr(e.a))
        if isinstance(e, ir.Select):
            return self.select(e)
        if isinstance(e, ir.Cast):
            return self.cast(self.expr(e.a), e.a.dtype, e.dtype)
        if isinstance(e, ir.Call):
            return self.call(e)
        raise BuildError(f"{self.program.name}: llvm codegen cannot handle expression {type(e).__name__} ({e!r})")

    def const(self, value, dtype: str) -> ll.Value:
        t = value_type(dtype)
        return t(float(value) if is_float(dtype) else int(value))

    def typed(self, e: ir.Expr, dtype: str) -> ll.Value:
        """`e` as a value of `dtype` (operands of mixed int widths take the result's)."""
        return self.cast(self.expr(e), e.dtype, dtype)

    def match(self, *vals: ll.Value) -> list[ll.Value]:
        """Broadcast scalar operands to the vector width of the others."""
        n = max((v.type.count for v in vals if isinstance(v.type, ll.VectorType)), default=0)
        return [self.splat(v, n) if n and not isinstance(v.type, ll.VectorType) else v for v in vals]

    def not_(self, v: ll.Value) -> ll.Value:
        n = v.type.count if isinstance(v.type, ll.VectorType) else None
        ones = ll.Constant(v.type, [1] * n) if n else I1(1)
        return self.b.xor(v, ones)

    def splat(self, v: ll.Value, n: int) -> ll.Value:
        vt = ll.VectorType(v.type, n)
        if isinstance(v, ll.Constant):
            return ll.Constant(vt, [v.constant] * n)
        one = self.b.insert_element(ll.Constant(vt, ll.Undefined), v, I32(0))
        return self.b.shuffle_vector(one, ll.Constant(vt, ll.Undefined), ll.Constant(ll.VectorType(I32, n), [0] * n))

    def binop(self, e: ir.BinOp) -> ll.Value:
        b, op, dt = self.b, e.op, e.a.dtype
        if op == "+" and is_float(e.dtype):   # x + a*b -> fmuladd (fused where the target has FMA)
            for acc, prod in ((e.a, e.b), (e.b, e.a)):
                if isinstance(prod, ir.BinOp) and prod.op == "*":
                    x, y, z = self.match(*(self.typed(v, e.dtype) for v in (prod.a, prod.b, acc)))
                    fn = self.intrinsic("llvm.fmuladd", [x.type], x.type, [x.type] * 3)
                    return b.call(fn, [x, y, z], fastmath=FAST + (("reassoc",) if e is self.reassoc else ()))
        x, y = self.match(self.typed(e.a, dt), self.typed(e.b, dt))
        if op in ("and", "or"):
            return b.and_(x, y) if op == "and" else b.or_(x, y)
        if is_float(dt):
            flags = FAST + (("reassoc",) if e is self.reassoc else ())
            if op in _ICMP:
                return b.fcmp_unordered(op, x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
            if op in ("min", "max"):   # Python's min/max: keep a unless b is strictly smaller/larger
                return b.select(b.fcmp_ordered("<" if op == "min" else ">", y, x), y, x)
            if op == "//":
                v = b.fdiv(x, y, flags=FAST)
                return b.call(self.intrinsic("llvm.floor", [v.type], v.type, [v.type]), [v])
            fn = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv, "%": b.frem}.get(op)
            if fn is None:
                raise BuildError(f"{self.program.name}: operator {op} on {dt} is not supported")
            return fn(x, y, flags=flags)
        signed = not is_unsigned(dt)
        if op in _ICMP:
            return b.icmp_signed(op, x, y) if signed else b.icmp_unsigned(op, x, y)
        if op in ("min", "max"):
            cmp = b.icmp_signed if signed else b.icmp_unsigned
            return b.select(cmp("<" if op == "min" else ">", y, x), y, x)
        wrap = ("nsw",) if dt == ir.INDEX else ()
        if op in ("+", "-", "*"):
            return {"+": b.add, "-": b.sub, "*": b.mul}[op](x, y, flags=wrap)
        if op in ("//", "/", "%"):
            return self._floor_divmod(x, y, e.b, signed, op == "%")
        raise BuildError(f"{self.program.name}: operator {op} on {dt} is not supported")

    def _floor_divmod(self, x, y, divisor: ir.Expr, signed: bool, mod: bool) -> ll.Value:
        """Floor division / modulo; LLVM folds the adjustment away for operands it
        proves non-negative."""
        b = self.b
        if not signed:
            return b.urem(x, y) if mod else b.udiv(x, y)
        q, r = b.sdiv(x, y), b.srem(x, y)
        zero = ll.Constant(r.type, None)
        if isinstance(divisor, ir.Const) and divisor.value > 0:
            adjust = b.icmp_signed("<", r, zero)
        else:
            adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, y), zero))
        if mod:
            return b.add(r, b.select(adjust, y, zero))
        return b.sub(q, b.zext(adjust, q.type))

    def cast(self, v: ll.Value, src: str, dst: str) -> ll.Value:
        b = self.b
        st, dt = value_type(src), value_type(dst)
        to = self.retype(v.type, dt)
        if st == dt:
            return v
        if dst == "bool":
            zero = ll.Constant(v.type, None)
            return b.fcmp_unordered("!=", v, zero) if is_float(src) else b.icmp_unsigned("!=", v, zero)
        if is_float(src) and is_float(dst):
            return b.fpext(v, to) if float_bits(st) < float_bits(dt) else b.fptrunc(v, to)
        if is_float(src):
            return b.fptoui(v, to) if is_unsigned(dst) else b.fptosi(v, to)
        if is_float(dst):
            return b.uitofp(v, to) if is_unsigned(src) or src == "bool" else b.sitofp(v, to)
        if st.width > dt.width:
            return b.trunc(v, to)
        return b.zext(v, to) if is_unsigned(src) or src == "bool" else b.sext(v, to)

    def call(self, e: ir.Call) -> ll.Value:
        args = self.match(*(self.typed(a, e.dtype) for a in e.args))
        t = args[0].type
        name = {"fabs": "llvm.fabs", "fma": "llvm.fma"}.get(e.fn, f"llvm.{e.fn}")
        return self.b.call(self.intrinsic(name, [t], t, [t] * len(args)), args, fastmath=FAST)

    def select(self, e: ir.Select) -> ll.Value:
        """Speculate both sides only when that is safe: a side that loads (padding
        reads out of bounds there) or divides by a variable is branched around."""
        if not (self.unsafe(e.t) or self.unsafe(e.f)):
            c, t, f = self.match(self.expr(e.cond), self.typed(e.t, e.dtype), self.typed(e.f, e.dtype))
            return self.b.select(c, t, f)
        if self.lane is not None and self.lane.depends(e.cond):
            return vectorize.masked_select(self, e)
        b = self.b
        want = self.lane.n if self.lane is not None and self.lane.depends(e) else 0

        def side(x):
            v = self.typed(x, e.dtype)
            if want and not isinstance(v.type, ll.VectorType):   # broadcast inside the branch
                v = self.splat(v, want)
            return v, b.block
        cond = self.expr(e.cond)
        with b.if_else(cond) as (then, orelse):
            with then:
                tv, tb = side(e.t)
            with orelse:
                fv, fb = side(e.f)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, tb)
        phi.add_incoming(fv, fb)
        return phi

    def unsafe(self, e: ir.Expr) -> bool:
        """Whether evaluating `e` can fault: it loads, or divides ints by a non-constant."""
        key = id(e)
        if key not in self._unsafe or self._unsafe[key][0] is not e:
            if isinstance(e, ir.Load) or (isinstance(e, ir.BinOp) and e.op in ("//", "%", "/")
                                          and not is_float(e.dtype)
                                          and not (isinstance(e.b, ir.Const) and e.b.value != 0)):
                r = True
            else:
                r = any(self.unsafe(c) for c in ir.children(e))
            self._unsafe[key] = (e, r)   # keeps e alive so its id is not reused
        return self._unsafe[key][1]


def generate(program: ir.Program, num_threads: int = 1) -> ll.Module:
    """Lower `program` to an LLVM module (see the module docstring for the ABI)."""
    return Codegen(program, num_threads).generate()
