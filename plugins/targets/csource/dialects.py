"""The two C dialects the GPU source emitter writes: CUDA C and OpenCL C.

A dialect knows the spelling of everything that differs: scalar and vector
types, kernel signatures, thread indices, barriers, block-shared arrays, vector
loads/stores, float literals and math functions.
"""
from __future__ import annotations

import math
from typing import ClassVar

from tunekit.errors import BuildError

_FLOAT_FNS = {"exp", "log", "sqrt", "tanh", "fabs", "rint", "fma"}


class Dialect:
    name: str
    types: ClassVar[dict[str, str]]
    vector_widths: tuple[int, ...]
    barrier: str
    long_suffix: str

    def scalar(self, dtype: str) -> str:
        """The C type of `dtype` (BuildError when the dialect has none)."""
        try:
            return self.types[dtype]
        except KeyError:
            raise BuildError(f"{self.name}: no C type for dtype {dtype!r} "
                             f"(supported: {', '.join(sorted(self.types))})") from None

    def vector(self, dtype: str, n: int) -> str | None:
        """The n-wide vector type of `dtype`, or None when there is none."""
        raise NotImplementedError

    def lane(self, n: int, i: int) -> str:
        raise NotImplementedError

    def vload(self, vtype: str, n: int, ptr: str) -> str:
        raise NotImplementedError

    def vstore(self, vtype: str, n: int, ptr: str, value: str) -> str:
        raise NotImplementedError

    def float_const(self, value: float, dtype: str) -> str:
        if math.isnan(value):
            return self._nan(dtype)
        if math.isinf(value):
            return ("-" if value < 0 else "") + self._inf(dtype)
        text = repr(float(value))
        return text + "f" if dtype == "float32" else text

    def minmax(self, op: str, dtype: str) -> str:
        if not dtype.startswith("float"):
            return op
        return "f" + op + ("f" if self.name == "cuda" and dtype == "float32" else "")

    def call(self, fn: str, dtype: str) -> str:
        if fn not in _FLOAT_FNS:
            raise BuildError(f"{self.name}: unknown intrinsic {fn!r} (known: {', '.join(sorted(_FLOAT_FNS))})")
        return fn + "f" if self.name == "cuda" and dtype == "float32" else fn

    def extensions(self, dtypes: set[str]) -> list[str]:
        return []

    def bits(self, x: str, to_float: bool = False) -> str:
        """The bits of float32 `x` as an unsigned int (`to_float`: the other way)."""
        raise NotImplementedError


class Cuda(Dialect):
    name = "cuda"
    types: ClassVar[dict[str, str]] = {"float32": "float", "float64": "double", "int8": "signed char", "int16": "short",
             "int32": "int", "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
             "uint32": "unsigned int", "uint64": "unsigned long long", "bool": "bool"}
    vector_widths = (2, 4)
    barrier = "__syncthreads();"
    long_suffix = "LL"
    _VEC: ClassVar[dict[str, str]] = {"float32": "float", "int32": "int"}

    def head(self, name: str, params: list[str], block: tuple) -> str:
        threads = block[0] * block[1] * block[2]
        return f'extern "C" __global__ void __launch_bounds__({threads}) {name}({", ".join(params)})'

    def param(self, ctype: str, name: str, const: bool) -> str:
        return f"{'const ' if const else ''}{ctype}* __restrict__ {name}"

    def builtin(self, tag: str) -> str:
        return f"(int){tag}"

    def shared(self, ctype: str, name: str, size: int) -> str:
        return f"__shared__ __align__(16) {ctype} {name}[{size}];"

    def vector(self, dtype, n):
        return f"{self._VEC[dtype]}{n}" if dtype in self._VEC and n in self.vector_widths else None

    def lane(self, n, i):
        return "." + "xyzw"[i]

    def vload(self, vtype, n, ptr):
        return f"*(const {vtype}*)({ptr})"

    def vstore(self, vtype, n, ptr, value):
        return f"*({vtype}*)({ptr}) = {value};"

    def _inf(self, dtype):
        return "__longlong_as_double(0x7ff0000000000000LL)" if dtype == "float64" else "__int_as_float(0x7f800000)"

    def bits(self, x, to_float=False):
        return f"__uint_as_float({x})" if to_float else f"__float_as_uint({x})"

    def _nan(self, dtype):
        return "__longlong_as_double(0x7ff8000000000000LL)" if dtype == "float64" else "__int_as_float(0x7fc00000)"


class OpenCL(Dialect):
    name = "opencl"
    types: ClassVar[dict[str, str]] = {
        "float32": "float", "float64": "double", "float16": "half", "int8": "char", "int16": "short",
        "int32": "int", "int64": "long", "uint8": "uchar", "uint16": "ushort", "uint32": "uint",
        "uint64": "ulong", "bool": "uchar"}   # bool is no kernel-argument type in OpenCL C
    vector_widths = (2, 4, 8, 16)
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    long_suffix = "L"

    def head(self, name: str, params: list[str], block: tuple) -> str:
        return (f"__kernel __attribute__((reqd_work_group_size({block[0]}, {block[1]}, {block[2]}))) "
                f"void {name}({', '.join(params)})")

    def param(self, ctype: str, name: str, const: bool) -> str:
        return f"__global {'const ' if const else ''}{ctype}* restrict {name}"

    def builtin(self, tag: str) -> str:
        kind, axis = tag.split(".")
        fn = "get_local_id" if kind == "threadIdx" else "get_group_id"
        return f"(int){fn}({'xyz'.index(axis)})"

    def shared(self, ctype: str, name: str, size: int) -> str:
        return f"__local {ctype} {name}[{size}] __attribute__((aligned(16)));"

    def vector(self, dtype, n):
        return f"{self.scalar(dtype)}{n}" if n in self.vector_widths and dtype != "bool" else None

    def lane(self, n, i):
        return ".s" + "0123456789abcdef"[i]

    def vload(self, vtype, n, ptr):
        return f"vload{n}(0, {ptr})"

    def vstore(self, vtype, n, ptr, value):
        return f"vstore{n}({value}, 0, {ptr});"

    def bits(self, x, to_float=False):
        return f"as_float({x})" if to_float else f"as_uint({x})"

    def _inf(self, dtype):
        return "INFINITY"

    def _nan(self, dtype):
        return "NAN"

    def extensions(self, dtypes):
        return [f"#pragma OPENCL EXTENSION cl_khr_{ext} : enable"
                for dtype, ext in (("float64", "fp64"), ("float16", "fp16")) if dtype in dtypes]


DIALECTS = {"cuda": Cuda(), "opencl": OpenCL()}

#: identifiers a generated name must not take (C keywords, builtins of either dialect)
RESERVED = frozenset("""
auto barrier blockDim blockIdx bool break case char clamp class const __constant constant continue cross
default delete do dot double else enum event_t exp expf extern fabs fabsf false float float16 float2 float4
float8 floor floorf fma fmaf fmax fmaxf fmin fminf for get_global_id get_group_id get_local_id __global global
goto gridDim half if image2d_t inline int int2 int4 __kernel kernel __local local log logf long main max min
mix namespace new operator __private private read_only register restrict return sampler_t select short signed
size_t sizeof sqrt sqrtf static struct switch tanh tanhf template this threadIdx true typedef typename uchar
uint ulong union unsigned ushort using vload16 vload2 vload4 vload8 void volatile vstore16 vstore2 vstore4
vstore8 warpSize while write_only
""".split())
