"""Loop IR: the program a template lowers to and a target compiles.

The node classes here and `Visitor`/`Mutator` are part of the plugin contract: a
third-party target consumes them. Changes that break consumers bump `VERSION`.

Expressions are immutable trees. Integer expressions index buffers (row-major,
flattened by lowering); every node carries a `dtype` string ("int32", "float32",
"bool", ...). Python operators build expressions: `+ - * / // %` and `< <= > >=`
(`==`/`!=` keep identity semantics so nodes can be dict keys; use `eq`/`ne`).

What a code generator can rely on:
- Index arithmetic is `INDEX` (int64). `//` and `%` floor (Python semantics:
  -7 // 2 == -4, -7 % 2 == 1); C's `/` and `%` truncate, so emit floor division
  unless both operands are known non-negative. `/` on integers is built as `//`;
  a `BinOp` with op "/" is always a float division.
- A `For` runs `var` over `range(extent)`, starting at 0; `extent` is a Python
  int, or an index expression of the program's `sizes` (`tunekit.ir.sizes`): never of
  loop variables. Vectorized, unrolled and tensorized loops have int extents.
- `Select` must not perform the loads of the side not taken; `IfThenElse` guards
  tails of uneven splits and padding.
- A `Program`'s `params` are the kernel's buffers in call order (the op's inputs,
  then its outputs), each a flat, C-contiguous, row-major array of `Buffer.dtype`
  with `Buffer.shape` (whose dimensions may be products of sizes); its `sizes`, the
  symbolic sizes it reads, follow them as int64 arguments in that order; the kernel
  writes outputs in place and returns nothing. A CPU kernel receives one pointer per
  param, aligned to 64 bytes when the caller uses `tunekit.empty` (the runner always does). `Allocate` scopes say where
  temporaries live ("global": heap or stack, "shared": GPU block memory,
  "local": registers).
- `Program.attrs` is free-form metadata; the built-in lowering leaves it empty,
  and a target must not require any key in it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VERSION = 2   # 2: symbolic sizes (For extents and parameter shapes of SizeVars, Program.sizes)

INDEX = "int64"


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


class Expr:
    """Base of every expression node."""

    dtype: str

    def __add__(self, o): return binop("+", self, o)
    def __radd__(self, o): return binop("+", o, self)
    def __sub__(self, o): return binop("-", self, o)
    def __rsub__(self, o): return binop("-", o, self)
    def __mul__(self, o): return binop("*", self, o)
    def __rmul__(self, o): return binop("*", o, self)
    def __truediv__(self, o): return binop("/", self, o)
    def __rtruediv__(self, o): return binop("/", o, self)
    def __floordiv__(self, o): return binop("//", self, o)
    def __rfloordiv__(self, o): return binop("//", o, self)
    def __mod__(self, o): return binop("%", self, o)
    def __neg__(self): return binop("-", const(0, self.dtype), self)
    def __lt__(self, o): return binop("<", self, o)
    def __le__(self, o): return binop("<=", self, o)
    def __gt__(self, o): return binop(">", self, o)
    def __ge__(self, o): return binop(">=", self, o)
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        from .printer import expr_str
        return expr_str(self)


@dataclass(eq=False, repr=False)
class Var(Expr):
    """A scalar variable: a loop variable or a symbolic parameter."""
    name: str
    dtype: str = INDEX


@dataclass(eq=False, repr=False)
class Const(Expr):
    """A literal of `dtype`."""
    value: Any
    dtype: str


@dataclass(eq=False, repr=False)
class BinOp(Expr):
    """`a op b`. op: + - * / // % min max (arithmetic, result dtype of a),
    < <= > >= == != (result bool), and or (on bool). `//` and `%` floor."""
    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(eq=False, repr=False)
class Select(Expr):
    """`t if cond else f`. A target must not perform the loads of the side not taken
    (padding reads out of bounds on the other side)."""
    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@dataclass(eq=False, repr=False)
class Cast(Expr):
    a: Expr
    dtype: str


@dataclass(eq=False, repr=False)
class Call(Expr):
    """A pure intrinsic: exp, log, sqrt, tanh, fabs, fma(a, b, c) of floats; dot4_u8s8(a, b) of two
    int32 each holding four bytes (little-endian, a's unsigned, b's signed): the int32 sum of their
    four byte products (the dot instruction of 8-bit inference: VNNI's vpdpbusd per lane)."""
    fn: str
    args: tuple
    dtype: str


@dataclass(eq=False, repr=False)
class Load(Expr):
    """`buffer[index]` with a flat element index."""
    buffer: Buffer
    index: Expr

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


@dataclass(eq=False)
class Buffer:
    """A named array: a kernel parameter (scope "global") or an allocation
    ("global", "shared" for GPU block memory, "local" for registers)."""
    name: str
    shape: tuple
    dtype: str
    scope: str = "global"

    @property
    def size(self):
        """The number of elements: an int, or an expression of sizes."""
        out = 1
        for d in self.shape:
            out = out * d
        return out

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"


class Stmt:
    """Base of every statement node."""

    def __repr__(self) -> str:
        from .printer import stmt_str
        return stmt_str(self)


SERIAL, PARALLEL, VECTORIZED, UNROLLED, THREAD, TENSORIZED = \
    "serial", "parallel", "vectorized", "unrolled", "thread", "tensorized"


@dataclass(eq=False, repr=False)
class For(Stmt):
    """`for var in range(extent)`. kind: serial | parallel (across cores) |
    vectorized (SIMD lanes) | unrolled | thread (bound to the GPU axis `tag`, e.g.
    "blockIdx.x", "threadIdx.y", "vthread") | tensorized (the nest from here inward runs as the
    target's instruction `tag`, e.g. "amx"; as plain loops where nothing knows it). The loop starts at 0."""
    var: Var
    extent: Any      # int, or an index expression of sizes
    kind: str
    body: Stmt
    tag: str | None = None


@dataclass(eq=False, repr=False)
class Store(Stmt):
    """`buffer[index] = value`."""
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False, repr=False)
class Allocate(Stmt):
    """Allocate `buffer` (its scope says where) for the duration of `body`."""
    buffer: Buffer
    body: Stmt


@dataclass(eq=False, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(eq=False, repr=False)
class Seq(Stmt):
    stmts: list


@dataclass(eq=False, repr=False)
class Barrier(Stmt):
    """Synchronize the threads of a block ("shared") before going on."""
    scope: str = "shared"


@dataclass(eq=False, repr=False)
class Program:
    """A kernel: `params` are its buffers in call order (op inputs, then outputs), `sizes` the
    symbolic sizes (`SizeVar`s) its shapes and loops read, passed after them."""
    name: str
    params: list
    body: Stmt
    attrs: dict = field(default_factory=dict)
    sizes: list = field(default_factory=list)

    def __repr__(self) -> str:
        from .printer import program_str
        return program_str(self)


# ---- construction helpers (constant folding keeps lowered programs readable)

def const(value, dtype: str | None = None) -> Const:
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else INDEX if isinstance(value, int) else "float32"
    return Const(value, dtype)


def as_expr(x, dtype: str | None = None) -> Expr:
    if isinstance(x, Expr):
        return x
    # an int of sizes (`sizes.SymInt`) is its expression
    return x.expr if type(x) not in (int, float, bool) and hasattr(x, "expr") else const(x, dtype)


_CMP = {"<", "<=", ">", ">=", "==", "!="}
_PY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
       "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max,
       "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
       ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
       "and": lambda a, b: a and b, "or": lambda a, b: a or b, "/": lambda a, b: a / b}


def binop(op: str, a, b) -> Expr:
    """Build `a op b`, folding constants and trivial identities."""
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype if isinstance(b, Expr) and not isinstance(a, bool) else None)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype if not isinstance(b, bool) else None)
    if op == "/" and _is_int(a.dtype):
        op = "//"
    ca, cb = isinstance(a, Const), isinstance(b, Const)
    if ca and cb and not (op in ("//", "%", "/") and b.value == 0):
        v = _PY[op](a.value, b.value)
        return Const(v, "bool" if op in _CMP else a.dtype)
    if op == "+":
        if cb and b.value == 0: return a
        if ca and a.value == 0: return b
    elif op == "-":
        if cb and b.value == 0: return a
    elif op == "*":
        if cb and b.value == 1: return a
        if ca and a.value == 1: return b
        if _is_int(a.dtype) and ((cb and b.value == 0) or (ca and a.value == 0)):
            return Const(0, a.dtype)
    elif op in ("//",):
        if cb and b.value == 1: return a
    elif op == "%":
        if cb and b.value == 1: return Const(0, a.dtype)
    elif op == "and":
        if ca: return b if a.value else a
        if cb: return a if b.value else b
    elif op == "or":
        if ca: return a if a.value else b
        if cb: return b if b.value else a
    return BinOp(op, a, b, "bool" if op in _CMP else a.dtype)


def min_(a, b): return binop("min", a, b)
def max_(a, b): return binop("max", a, b)
def eq(a, b): return binop("==", a, b)
def ne(a, b): return binop("!=", a, b)
def and_(a, b): return binop("and", a, b)
def or_(a, b): return binop("or", a, b)


def select(cond, t, f) -> Expr:
    t = as_expr(t, f.dtype if isinstance(f, Expr) else None)
    f = as_expr(f, t.dtype)
    if isinstance(cond, Const):
        return t if cond.value else f
    return Select(cond, t, f, t.dtype)


def cast(a, dtype: str) -> Expr:
    a = as_expr(a)
    if a.dtype == dtype:
        return a
    if isinstance(a, Const):
        return Const(int(a.value) if _is_int(dtype) else float(a.value), dtype)
    return Cast(a, dtype)


def seq(*stmts) -> Stmt:
    flat = [x for s in stmts if s is not None for x in (s.stmts if isinstance(s, Seq) else [s])]
    return flat[0] if len(flat) == 1 else Seq(flat)
