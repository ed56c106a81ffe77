"""Loop IR expressions -> LLVM values: the half of `Codegen` that emits expressions
(memory access, constants, arithmetic with floor division, casts, calls, lazy selects; the dot
products in `dots.py`), as a mixin over the builder state `Codegen` holds (`b`, `vars`, `bufs`,
`lane`, `features`, `reassoc`). Index math is int64; float arithmetic carries the `contract` flag."""
from __future__ import annotations

from llvmlite import ir as ll

from tunekit import ir
from tunekit.errors import BuildError

from . import vectorize
from .dots import DotEmitter
from .support import (
    FAST,
    I1,
    I8,
    I32,
    I64,
    elem_bytes,
    float_bits,
    is_float,
    is_unsigned,
    mem_type,
    value_type,
)

_ICMP = {"<", "<=", ">", ">=", "==", "!="}
#: the dot product intrinsics -> the dtype they accumulate in
_DOTS = {"dot4_u8s8": "int32", "dot2_bf16": "float32"}


class ExpressionEmitter(DotEmitter):
    """Emit expressions into `self.b` (see the module's doc); `Codegen` provides the state."""

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
        return ll.Constant(value_type(dtype), float(value) if is_float(dtype) else int(value))

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
        if op == "+":   # acc + dot4_u8s8 / dot2_bf16(x, y) -> one dot instruction that accumulates
            for acc, dot in ((e.a, e.b), (e.b, e.a)):
                if isinstance(dot, ir.Call) and _DOTS.get(dot.fn) == e.dtype:
                    return self.dot(dot, self.typed(acc, e.dtype))
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
        if _of_sizes(divisor) and not isinstance(divisor, ir.Const):
            # a divisor of symbolic sizes (a tile count) is at least 1 where a division runs: said so, LLVM may
            # hoist the division out of loops (it never speculates one that might divide by zero)
            y = b.call(self.intrinsic("llvm.smax", [y.type], y.type, [y.type, y.type]), [y, y.type(1)])
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
        if st == dt:
            return v
        to = self.retype(v.type, dt)
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
        if e.fn == "bf16x2":
            return self.bf16x2(*self.match(*(self.typed(a, "float32") for a in e.args)))
        if e.fn in _DOTS:
            return self.dot(e, None)
        args = self.match(*(self.typed(a, e.dtype) for a in e.args))
        t = args[0].type
        if e.fn in ("exp", "tanh") and e.dtype == "float32":
            return self.exp_f32(args[0]) if e.fn == "exp" else self.tanh_f32(args[0])
        name = {"fabs": "llvm.fabs", "fma": "llvm.fma"}.get(e.fn, f"llvm.{e.fn}")
        return self.b.call(self.intrinsic(name, [t], t, [t] * len(args)), args, fastmath=FAST)

    def dot(self, e: ir.Call, acc: ll.Value | None) -> ll.Value:
        """acc + the dot product call `e` (`_DOTS`; acc None: 0), scalars broadcast to the vectors' lanes."""
        x, y, *rest = self.match(*(self.typed(a, "int32") for a in e.args), *(() if acc is None else (acc,)))
        return (self.dot4 if e.fn == "dot4_u8s8" else self.dot2)(x, y, rest[0] if rest else None)

    def _splat(self, t, value):
        if isinstance(t, ll.VectorType):
            return ll.Constant(t, [ll.Constant(t.element, value)] * t.count)
        return ll.Constant(t, value)

    def exp_f32(self, x: ll.Value) -> ll.Value:
        """e**x in float32 inline (Cephes' expf: 2**n times a degree-6 polynomial, about
        1 ulp): LLVM lowers `llvm.exp` on vectors to one libm call per lane. Below the smallest
        normal result it is 0: a masked softmax's probabilities are then 0, not denormals, which
        every product with them would slow down many times over on CPUs that trap to microcode."""
        b, t = self.b, x.type
        c = lambda v: self._splat(t, v)
        it = ll.VectorType(ll.IntType(32), t.count) if isinstance(t, ll.VectorType) else ll.IntType(32)
        clamp = lambda name, v, bound: b.call(self.intrinsic(name, [t], t, [t, t]), [v, c(bound)])
        under = b.fcmp_ordered("<", x, c(-87.33654))
        x = clamp("llvm.minnum", clamp("llvm.maxnum", x, -87.33654), 88.72283)
        n = b.call(self.intrinsic("llvm.floor", [t], t, [t]), [b.fadd(b.fmul(x, c(1.44269504)), c(0.5))])
        r = b.fsub(b.fsub(x, b.fmul(n, c(0.693359375))), b.fmul(n, c(-2.12194440e-4)))
        p = c(1.9875691500e-4)
        for k in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
            p = b.fadd(b.fmul(p, r), c(k))
        p = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), c(1.0))
        scale = b.bitcast(b.shl(b.add(b.fptosi(n, it), self._splat(it, 127)), self._splat(it, 23)), t)
        return b.select(under, c(0.0), b.fmul(p, scale))

    def tanh_f32(self, x: ll.Value) -> ll.Value:
        """tanh(x) = 1 - 2 / (e**(2x) + 1) through `exp_f32`; x - x**3/3 + 2x**5/15 near 0,
        where the difference would lose the relative precision."""
        b, t = self.b, x.type
        c = lambda v: self._splat(t, v)
        far = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(self.exp_f32(b.fmul(x, c(2.0))), c(1.0))))
        x2 = b.fmul(x, x)
        near = b.fmul(x, b.fadd(c(1.0), b.fmul(x2, b.fadd(c(-1 / 3), b.fmul(x2, c(2 / 15))))))
        small = b.fcmp_ordered("<", b.call(self.intrinsic("llvm.fabs", [t], t, [t]), [x]), c(0.1))
        return b.select(small, near, far)

    def static(self, e: ir.Expr):
        """The value of an integer or boolean expression of constants and unrolled loop
        variables, else None (a Winograd table's row, a padding test in an unrolled tile)."""
        if isinstance(e, ir.Const):
            return e.value
        if isinstance(e, ir.Var):
            v = self.vars.get(e)
            return v.constant if isinstance(v, ll.Constant) and isinstance(v.constant, int) else None
        if isinstance(e, ir.BinOp) and not is_float(e.a.dtype):
            a = self.static(e.a)
            b = None if a is None else self.static(e.b)
            if b is None:
                return None
            folded = ir.binop(e.op, ir.Const(a, e.a.dtype), ir.Const(b, e.b.dtype))   # the IR's own folding
            return folded.value if isinstance(folded, ir.Const) else None
        return None

    def select(self, e: ir.Select) -> ll.Value:
        """Speculate both sides only when that is safe: a side that loads (padding
        reads out of bounds there) or divides by a variable is branched around. A
        condition known here picks its side."""
        if (known := self.static(e.cond)) is not None:
            return self.typed(e.t if known else e.f, e.dtype)
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



def _of_sizes(e: ir.Expr) -> bool:
    """Whether `e` is computed from constants and symbolic sizes alone (a tile count)."""
    if isinstance(e, (ir.Const, ir.SizeVar)):
        return True
    return isinstance(e, ir.BinOp) and _of_sizes(e.a) and _of_sizes(e.b)
