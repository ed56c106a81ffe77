"""What the LLVM backend supports: dtypes and their LLVM types, intrinsics, and the
up-front check that rejects programs a CPU cannot run (GPU constructs)."""
from __future__ import annotations

import functools
import re

from llvmlite import ir as ll

from tunekit import ir
from tunekit.errors import BuildError

I1, I8, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(32), ll.IntType(64)
PTR = ll.PointerType()
VOID = ll.VoidType()
FAST = ("contract",)
INTRINSICS = {"exp": 1, "log": 1, "sqrt": 1, "tanh": 1, "fabs": 1, "rint": 1, "fma": 3, "dot4_u8s8": 2, "bf16x2": 2,
              "dot2_bf16": 2}
_FLOATS = {"float16": ll.HalfType(), "float32": ll.FloatType(), "float64": ll.DoubleType()}


def is_float(dtype: str) -> bool:
    return dtype in _FLOATS


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint")


@functools.cache
def value_type(dtype: str) -> ll.Type:
    """The LLVM type of a value of `dtype` (bool is i1)."""
    if dtype == "bool":
        return I1
    if dtype in _FLOATS:
        return _FLOATS[dtype]
    m = re.fullmatch(r"u?int(8|16|32|64)", dtype)
    if m:
        return ll.IntType(int(m.group(1)))
    raise BuildError(f"llvm codegen: unsupported dtype {dtype!r}")


def mem_type(dtype: str) -> ll.Type:
    """The LLVM type of an element of a `dtype` buffer (bool is stored as i8)."""
    return I8 if dtype == "bool" else value_type(dtype)


def float_bits(t: ll.Type) -> int:
    return {ll.HalfType: 16, ll.FloatType: 32, ll.DoubleType: 64}[type(t)]


def elem_bytes(dtype: str) -> int:
    t = mem_type(dtype)
    return t.width // 8 if isinstance(t, ll.IntType) else float_bits(t) // 8


def type_suffix(t: ll.Type) -> str:
    """Overload suffix of an intrinsic name: f32, v16f32, i64, v8p0 ..."""
    if isinstance(t, ll.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ll.PointerType):
        return "p0"
    return t.intrinsic_name


def check_supported(program: ir.Program) -> None:
    """Reject what a CPU cannot run before generating anything."""
    class V(ir.Visitor):
        def visit_Barrier(self, node):
            raise BuildError(f"{program.name}: barrier({node.scope!r}) is a GPU construct; a CPU target "
                             "cannot build it (use a CPU template without shared-memory staging)")

        def visit_For(self, node):
            if node.kind == ir.THREAD:
                raise BuildError(f"{program.name}: loop {node.var.name} is bound to {node.tag}; "
                                 "GPU thread loops cannot be built for a CPU target")
            if node.kind not in (ir.SERIAL, ir.PARALLEL, ir.VECTORIZED, ir.UNROLLED, ir.TENSORIZED):
                raise BuildError(f"{program.name}: unknown loop kind {node.kind!r} on {node.var.name}")
            self.generic_visit(node)

        def visit_Call(self, node):
            if node.fn not in INTRINSICS:
                raise BuildError(f"{program.name}: unknown intrinsic {node.fn}() "
                                 f"(supported: {', '.join(sorted(INTRINSICS))})")
            if len(node.args) != INTRINSICS[node.fn]:
                raise BuildError(f"{program.name}: {node.fn}() takes {INTRINSICS[node.fn]} arguments, "
                                 f"got {len(node.args)}")
            if not is_float(node.dtype) and node.fn not in ("dot4_u8s8", "bf16x2"):
                raise BuildError(f"{program.name}: {node.fn}() on {node.dtype} is not supported (floats only)")
            self.generic_visit(node)
    V().visit(program.body)
