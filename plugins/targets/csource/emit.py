"""Loop IR -> CUDA C / OpenCL C kernel source (see the package docstring)."""
from __future__ import annotations

from tunekit import ir
from tunekit.errors import BuildError
from tunekit.ir.printer import Names

from .analysis import coefficient, divisible, value_range
from .dialects import Dialect

_ARITH = {"+", "-", "*", "/"}
_CMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!=", "and": "&&", "or": "||"}


def _contains(node, pred) -> bool:
    return pred(node) or any(_contains(c, pred) for c in ir.children(node))


def _loads(e: ir.Expr, hoistable_only: bool = False) -> list[ir.Load]:
    """Loads in `e`; with `hoistable_only`, not those under a Select branch (which must stay lazy)."""
    out: list[ir.Load] = []

    class V(ir.Visitor):
        def visit_Load(self, n):
            out.append(n)
            self.generic_visit(n)

        def visit_Select(self, n):
            self.visit(n.cond)
            if not hoistable_only:
                self.visit(n.t)
                self.visit(n.f)
    V().visit(e)
    return out


def launch_extents(stmt: ir.Stmt) -> dict[str, int]:
    """Launch size per GPU axis ("blockIdx.x" ...): the largest loop bound to it."""
    ext: dict[str, int] = {}

    def walk(s, open_tags):
        if isinstance(s, ir.For) and s.kind == ir.THREAD and s.tag != "vthread":
            if s.tag in open_tags:
                raise BuildError(f"loop {s.var.name} is bound to {s.tag} inside another loop bound to it")
            ext[s.tag] = max(ext.get(s.tag, 0), s.extent)
            open_tags = open_tags | {s.tag}
        for c in ir.children(s):
            if isinstance(c, ir.Stmt):
                walk(c, open_tags)
    walk(stmt, frozenset())
    return ext


def vector_registers(stmt: ir.Stmt, widths: tuple) -> dict:
    """"local" buffers every access of which is an aligned n-wide vector access in a
    vectorized loop: buffer -> n (they are declared as arrays of n-wide vectors, so
    the compiler keeps them in vector registers)."""
    width: dict = {}
    bad: set = set()

    def note(buf, n):
        if buf.scope == "local":
            if n is None or width.get(buf, n) != n or buf.size % n:
                bad.add(buf)
            else:
                width[buf] = n

    def walk(s):
        if isinstance(s, ir.For) and s.kind == ir.VECTORIZED and isinstance(s.body, ir.Store) \
                and s.extent in widths:
            v, n = s.var, s.extent
            hoisted = {id(ld) for ld in _loads(s.body.value, hoistable_only=True)}
            for buf, idx, lazy in [(s.body.buffer, s.body.index, False)] + \
                    [(ld.buffer, ld.index, id(ld) not in hoisted) for ld in _loads(s.body.value)]:
                ok = not lazy and coefficient(idx, v) == 1 and \
                    divisible(ir.substitute(idx, {v: ir.const(0, v.dtype)}), n)
                note(buf, n if ok else None)
            return
        if isinstance(s, ir.Store):
            note(s.buffer, None)
        for ld in (_loads(s) if isinstance(s, ir.Expr) else []):
            note(ld.buffer, None)
        for c in ir.children(s):
            walk(c)
    walk(stmt)
    return {b: n for b, n in width.items() if b not in bad}


class KernelWriter:
    """Writes the body of one kernel: statements, expressions, vectorized loops."""

    def __init__(self, d: Dialect, names: Names, launch: dict[str, int], idx_t: str):
        self.d, self.name, self.launch, self.idx_t = d, names, launch, idx_t
        self.lines: list[str] = []
        self.shared: dict[int, str] = {}
        self.ranges: dict = {}        # Var -> (lo, hi)
        self.fixed: dict = {}         # Var -> int (extent-1 loops, vector lanes)
        self.lane_loads: dict = {}    # id(Load) -> vector temporary, read lane by lane
        self.lane = 0
        self.thread_vars: set = set()
        self.divergent = 0
        self.tmp = 0
        self.dtypes: set[str] = set()
        self.vec_regs: dict = {}      # Buffer -> n: a "local" array of n-wide vectors

    # -- expressions ----------------------------------------------------------
    def ctype(self, dtype: str) -> str:
        self.dtypes.add(dtype)
        return self.idx_t if dtype == ir.INDEX else self.d.scalar(dtype)

    def expr(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Var):
            return str(self.fixed[e]) if e in self.fixed else self.name(e)
        if isinstance(e, ir.Const):
            if e.dtype == "bool":
                return "true" if e.value else "false"
            if e.dtype.startswith(("int", "uint")):
                v = int(e.value)
                return str(v) if -2 ** 31 < v < 2 ** 31 else f"{v}{self.d.long_suffix}"
            self.dtypes.add(e.dtype)
            return self.d.float_const(float(e.value), e.dtype)
        if isinstance(e, ir.Load):
            if id(e) in self.lane_loads:
                return self.lane_loads[id(e)] + self.d.lane(0, self.lane)
            return f"{self.name(e.buffer)}[{self.expr(e.index)}]"
        if isinstance(e, ir.BinOp):
            return self.binop(e)
        if isinstance(e, ir.Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, ir.Select):   # ?: evaluates only the side taken
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, ir.Cast):
            return f"(({self.ctype(e.dtype)}){self.expr(e.a)})"
        if isinstance(e, ir.Call) and e.fn == "dot4_u8s8":   # the four byte products, portably
            a, b = (self.expr(x) for x in e.args)
            u8, s8, i32 = (self.ctype(t) for t in ("uint8", "int8", "int32"))
            return "(" + " + ".join(f"({i32})({u8})(({a}) >> {s}) * ({i32})({s8})(({b}) >> {s})"
                                    for s in (0, 8, 16, 24)) + ")"
        if isinstance(e, ir.Call) and e.fn == "bf16x2":   # rounded to bfloat16 on the bits (ties to even)
            r = [f"(({u}) + 0x7FFFu + ((({u}) >> 16) & 1u)) >> 16" for u in (self.d.bits(self.expr(x)) for x in e.args)]
            return f"(({self.ctype('int32')})(({r[0]}) | (({r[1]}) << 16)))"
        if isinstance(e, ir.Call) and e.fn == "dot2_bf16":   # the pairs' halves as float32: low, then high
            u = [f"(({self.ctype('uint32')})({self.expr(x)}))" for x in e.args]
            lo, hi = ([self.d.bits(f"({v} {op})", True) for v in u] for op in ("<< 16", "& 0xFFFF0000u"))
            return f"({lo[0]} * {lo[1]} + {hi[0]} * {hi[1]})"
        if isinstance(e, ir.Call):
            return f"{self.d.call(e.fn, e.dtype)}({', '.join(self.expr(a) for a in e.args)})"
        raise BuildError(f"{self.d.name}: cannot emit expression {type(e).__name__}")

    def _range(self, e):
        return value_range(e, {**self.ranges, **{v: (c, c) for v, c in self.fixed.items()}})

    def binop(self, e: ir.BinOp) -> str:
        a, b, op = self.expr(e.a), self.expr(e.b), e.op
        if op in _CMP:
            return f"({a} {_CMP[op]} {b})"
        if op in ("min", "max"):
            return f"{self.d.minmax(op, e.dtype)}({a}, {b})"
        if op in _ARITH:
            return f"({a} {op} {b})"
        if not e.dtype.startswith(("int", "uint")):   # float floor division / modulo
            return f"floor({a} / {b})" if op == "//" else f"({a} - floor({a} / {b}) * {b})"
        ra, rb = self._range(e.a), self._range(e.b)
        if ra is not None and rb is not None and ra[0] >= 0 and rb[0] > 0:   # C agrees with floor semantics
            if ra[1] < rb[0]:
                return "0" if op == "//" else a
            return f"({a} {'/' if op == '//' else '%'} {b})"
        # floor semantics for any signs: adjust C's truncation when the signs differ
        adj = f"((({a}) % ({b}) != 0) && ((({a}) < 0) != (({b}) < 0)))"
        return f"(({a}) / ({b}) - {adj})" if op == "//" else f"(({a}) % ({b}) + {adj} * ({b}))"

    # -- statements -----------------------------------------------------------
    def line(self, ind: int, text: str) -> None:
        self.lines.append("  " * ind + text)

    def stmt(self, s: ir.Stmt, ind: int) -> None:
        if isinstance(s, ir.Seq):
            prev_barrier = False
            for x in s.stmts:
                if isinstance(x, ir.Barrier) and prev_barrier:
                    continue   # two barriers in a row synchronize no more than one
                self.stmt(x, ind)
                prev_barrier = isinstance(x, ir.Barrier)
        elif isinstance(s, ir.For):
            self.loop(s, ind)
        elif isinstance(s, ir.Store):
            self.line(ind, f"{self.name(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};")
        elif isinstance(s, ir.Allocate):
            self.allocate(s, ind)
        elif isinstance(s, ir.IfThenElse):
            div = bool(ir.free_vars(s.cond) & self.thread_vars)
            self.divergent += div
            cond = self.expr(s.cond)
            self.line(ind, f"if {cond} {{" if cond.startswith("(") and cond.endswith(")") else f"if ({cond}) {{")
            self.stmt(s.then, ind + 1)
            if s.orelse is not None:
                self.line(ind, "} else {")
                self.stmt(s.orelse, ind + 1)
            self.line(ind, "}")
            self.divergent -= div
        elif isinstance(s, ir.Barrier):
            if self.divergent:
                raise BuildError(f"{self.d.name}: a barrier lies under a condition on the thread index; "
                                 "threads of a block would not all reach it (use splits that divide the "
                                 "thread-bound extents)")
            self.line(ind, self.d.barrier)
        else:
            raise BuildError(f"{self.d.name}: cannot emit statement {type(s).__name__}")

    def allocate(self, s: ir.Allocate, ind: int) -> None:
        b = s.buffer
        if b.scope == "shared":
            self.shared.setdefault(id(b), self.d.shared(self.ctype(b.dtype), self.name(b), b.size))
            self.stmt(s.body, ind)
        elif b.scope == "local" and b in self.vec_regs:
            n = self.vec_regs[b]
            self.line(ind, f"{self.d.vector(b.dtype, n)} {self.name(b)}[{b.size // n}];")
            self.stmt(s.body, ind)
        elif b.scope == "local":
            self.line(ind, f"{self.ctype(b.dtype)} {self.name(b)}[{b.size}];")
            self.stmt(s.body, ind)
        else:
            raise BuildError(f"{self.d.name}: buffer {b.name} (scope {b.scope!r}) is allocated inside a kernel; "
                             "only 'shared' and 'local' buffers can be (compute a global stage at the root)")

    def loop(self, s: ir.For, ind: int) -> None:
        v, n = s.var, s.extent
        if s.kind == ir.THREAD and s.tag != "vthread":
            tag, full = s.tag, self.launch[s.tag]
            self.line(ind, "{")
            self.line(ind + 1, f"const {self.idx_t} {self.name(v)} = {self.d.builtin(tag)};")
            self.ranges[v] = (0, n - 1)
            guard = n < full
            div = guard and tag.startswith("threadIdx")
            if tag.startswith("threadIdx"):
                self.thread_vars.add(v)
            if guard:
                self.line(ind + 1, f"if ({self.name(v)} < {n}) {{")
            self.divergent += div
            self.stmt(s.body, ind + 1 + guard)
            self.divergent -= div
            if guard:
                self.line(ind + 1, "}")
            self.line(ind, "}")
            return
        if n == 1:
            self.fixed[v] = 0
            self.stmt(s.body, ind)
            del self.fixed[v]
            return
        if s.kind == ir.VECTORIZED and self.vector_loop(s, ind):
            return
        if (s.kind in (ir.UNROLLED, ir.VECTORIZED) or s.tag == "vthread") \
                and not _contains(s.body, lambda x: isinstance(x, ir.Barrier)):   # PoCL miscompiles those
            self.line(ind, "#pragma unroll")
        self.ranges[v] = (0, n - 1)
        name = self.name(v)
        self.line(ind, f"for ({self.idx_t} {name} = 0; {name} < {n}; ++{name}) {{")
        self.stmt(s.body, ind + 1)
        self.line(ind, "}")

    # -- vectorized loops -------------------------------------------------------
    def _vector_access(self, buf: ir.Buffer, index: ir.Expr, v: ir.Var, n: int):
        """(base index expr, vector type) when buf[index] over v in [0, n) is one vector access."""
        vt = self.d.vector(buf.dtype, n)
        if vt is None or coefficient(index, v) != 1:
            return None
        base = ir.substitute(index, {v: ir.const(0, v.dtype)})
        if self.d.name == "cuda" and not (buf.scope in ("global", "shared") and divisible(base, n)):
            return None   # CUDA vector types need aligned addresses (and register arrays stay scalar)
        return base, vt

    def vector_loop(self, s: ir.For, ind: int) -> bool:
        """Emit a vectorized loop with vector loads/stores; False when the scalar loop is as good."""
        v, n, body = s.var, s.extent, s.body
        if not isinstance(body, ir.Store) or n not in self.d.vector_widths:
            return False
        self.ranges[v] = (0, n - 1)
        store = self._vector_access(body.buffer, body.index, v, n)
        hoist = [(ld, acc) for ld in _loads(body.value, hoistable_only=True)
                 if (acc := self._vector_access(ld.buffer, ld.index, v, n)) is not None]
        if store is None and not hoist:
            return False
        self.line(ind, "{")
        for ld, (base, vt) in hoist:
            if id(ld) in self.lane_loads:
                continue
            tmp = self.lane_loads[id(ld)] = f"_v{self.tmp}"
            self.tmp += 1
            self.line(ind + 1, f"const {vt} {tmp} = {self.vload(ld.buffer, base, n, vt)};")
        if store is not None and self.d.name == "opencl" and self._native(body.value, v, hoist):
            value = self.native_vector(body.value, v, n, store[1])
            self.line(ind + 1, self.vstore(body.buffer, store[0], n, store[1], value))
        elif store is not None:
            base, vt = store
            r = f"_v{self.tmp}"
            self.tmp += 1
            self.line(ind + 1, f"{vt} {r};")
            for lane in range(n):
                self.line(ind + 1, f"{r}{self.d.lane(n, lane)} = {self.lane_expr(body.value, v, lane)};")
            self.line(ind + 1, self.vstore(body.buffer, base, n, vt, r))
        else:
            for lane in range(n):
                self.fixed[v] = lane
                idx = self.expr(body.index)
                del self.fixed[v]
                self.line(ind + 1, f"{self.name(body.buffer)}[{idx}] = {self.lane_expr(body.value, v, lane)};")
        for ld, _ in hoist:
            self.lane_loads.pop(id(ld), None)
        self.line(ind, "}")
        return True

    def vload(self, buf: ir.Buffer, base: ir.Expr, n: int, vt: str) -> str:
        if buf in self.vec_regs:
            return f"{self.name(buf)}[{self.expr(base)} / {n}]"
        return self.d.vload(vt, n, f"{self.name(buf)} + {self.expr(base)}")

    def vstore(self, buf: ir.Buffer, base: ir.Expr, n: int, vt: str, value: str) -> str:
        if buf in self.vec_regs:
            return f"{self.name(buf)}[{self.expr(base)} / {n}] = {value};"
        return self.d.vstore(vt, n, f"{self.name(buf)} + {self.expr(base)}", value)

    def lane_expr(self, e: ir.Expr, v: ir.Var, lane: int) -> str:
        self.fixed[v], self.lane = lane, lane
        try:
            return self.expr(e)
        finally:
            del self.fixed[v]

    def _native(self, e: ir.Expr, v: ir.Var, hoist) -> bool:
        """Whether `e` can be computed with OpenCL vector arithmetic (loads either hoisted or invariant)."""
        hoisted = {id(ld) for ld, _ in hoist}
        if v not in ir.free_vars(e) and not any(v in ir.free_vars(ld.index) for ld in _loads(e)):
            return True
        if isinstance(e, ir.Load):
            return id(e) in hoisted
        if isinstance(e, ir.BinOp) and (e.op in _ARITH or e.op in ("min", "max")) and e.dtype.startswith("float"):
            return self._native(e.a, v, hoist) and self._native(e.b, v, hoist)
        if isinstance(e, ir.Call) and e.fn in ("fma", "exp", "log", "sqrt", "tanh", "fabs", "rint"):
            return all(self._native(a, v, hoist) for a in e.args)
        return False

    def native_vector(self, e: ir.Expr, v: ir.Var, n: int, vt: str, top: bool = True) -> str:
        if v not in ir.free_vars(e) and not any(v in ir.free_vars(ld.index) for ld in _loads(e)):
            return f"(({vt})({self.expr(e)}))" if top else self.expr(e)   # scalars widen in OpenCL arithmetic
        if isinstance(e, ir.Load):
            return self.lane_loads[id(e)]
        if isinstance(e, ir.Call):
            return f"{e.fn}({', '.join(self.native_vector(a, v, n, vt, top=True) for a in e.args)})"
        a, b = self.native_vector(e.a, v, n, vt, False), self.native_vector(e.b, v, n, vt, False)
        return f"{self.d.minmax(e.op, e.dtype)}({a}, {b})" if e.op in ("min", "max") else f"({a} {e.op} {b})"
