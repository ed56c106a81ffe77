"""The llvm plugin: loop IR -> LLVM -> x86 / aarch64 code, checked against numpy and
the reference interpreter. `python tests/test_llvm_codegen.py [M N K]` prints the
GFLOPS of the hand-scheduled matmul (a sanity check, not a test)."""
from __future__ import annotations

import ctypes
import gc
import mmap
import platform
import sys

import numpy as np
import pydantic
import pytest

pytest.importorskip("llvmlite")

from tunekit_plugins.targets.llvm import vectorize
from tunekit_plugins.targets.llvm.cpu import ArmCpuTarget, KernelArgumentError, KernelLoadError, X86Target

import tunekit
from tunekit import ir, te
from tunekit.errors import BuildError
from tunekit.ir import interp
from tunekit.testing.contract import TargetContract

ON_X86 = platform.machine().lower() in ("x86_64", "amd64")
needs_x86 = pytest.mark.skipif(not ON_X86, reason="runs x86 code")


@pytest.fixture(scope="module")
def x86():
    return X86Target()


# -- schedules ---------------------------------------------------------------------------

def matmul(M, N, K, dtype="float32"):
    A = te.placeholder((M, K), "A", dtype)
    B = te.placeholder((K, N), "B", dtype)
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def matmul_hand_schedule(M=1024, N=1024, K=1024, mr=6, nr=64, kc=256, lanes=16):
    """The register-blocked matmul: C tiled (io, jo, ii, ji) with an mr x nr
    accumulator tile in local memory (cache_write + compute_at), k split for cache
    blocking, the tile's rows unrolled and its columns unrolled x vectorized by `lanes`."""
    A, B, C = matmul(M, N, K)
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, mr, nr)
    s[C].parallel(io)
    jio, jii = s[C].split(ji, lanes)
    s[C].unroll(ii)
    s[C].unroll(jio)
    s[C].vectorize(jii)
    s[CL].compute_at(s[C], jo)
    ci, cj = CL.op.axis
    ko, ki = s[CL].split(CL.op.reduce_axis[0], kc)
    cjo, cji = s[CL].split(cj, lanes)
    s[CL].reorder(ko, ki, ci, cjo, cji)
    s[CL].unroll(ci)
    s[CL].unroll(cjo)
    s[CL].vectorize(cji)
    return te.lower(s, [A, B, C], "matmul_hand")


def _mm_schedules():
    def plain():
        A, B, C = matmul(10, 12, 7)
        return te.create_schedule(C), [A, B, C]

    def split_tails():
        A, B, C = matmul(10, 13, 7)
        s = te.create_schedule(C)
        i, j = C.op.axis
        s[C].split(i, 4)
        s[C].split(j, 5)
        s[C].split(C.op.reduce_axis[0], 3)
        return s, [A, B, C]

    def reorder():
        A, B, C = matmul(10, 12, 7)
        s = te.create_schedule(C)
        i, j = C.op.axis
        s[C].reorder(C.op.reduce_axis[0], j, i)
        return s, [A, B, C]

    def fuse():
        A, B, C = matmul(10, 12, 7)
        s = te.create_schedule(C)
        i, j = C.op.axis
        s[C].fuse(i, j)
        return s, [A, B, C]

    def unroll():
        A, B, C = matmul(10, 12, 7)
        s = te.create_schedule(C)
        i, j = C.op.axis
        jo, ji = s[C].split(j, 4)
        s[C].reorder(i, jo, C.op.reduce_axis[0], ji)
        s[C].unroll(ji)
        s[C].unroll(C.op.reduce_axis[0])
        return s, [A, B, C]

    def vectorize_tail():   # 12 = 8 + 4: the tail lanes are masked
        A, B, C = matmul(10, 12, 7)
        s = te.create_schedule(C)
        i, j = C.op.axis
        jo, ji = s[C].split(j, 8)
        s[C].reorder(i, jo, C.op.reduce_axis[0], ji)
        s[C].vectorize(ji)
        return s, [A, B, C]

    def vectorize_fallback():   # vectorizing the reduction: every lane hits one element
        A, B, C = matmul(10, 12, 7)
        s = te.create_schedule(C)
        s[C].vectorize(C.op.reduce_axis[0])
        return s, [A, B, C]

    def parallel():
        A, B, C = matmul(10, 12, 7)
        s = te.create_schedule(C)
        i, j = C.op.axis
        io, _ = s[C].split(i, 3)
        s[C].parallel(io)
        s[C].parallel(j)    # nested in a parallel loop: runs serially
        return s, [A, B, C]

    def cache_write_compute_at():
        A, B, C = matmul(10, 12, 7)
        s = te.create_schedule(C)
        CL = s.cache_write(C, "local")
        i, j = C.op.axis
        io, jo, _, _ = s[C].tile(i, j, 4, 8)
        s[C].parallel(io)
        s[CL].compute_at(s[C], jo)
        ci, cj = CL.op.axis
        ko, ki = s[CL].split(CL.op.reduce_axis[0], 3)
        s[CL].reorder(ko, ci, ki, cj)
        s[CL].unroll(ci)
        s[CL].vectorize(cj)
        return s, [A, B, C]

    return {f.__name__: f for f in (plain, split_tails, reorder, fuse, unroll, vectorize_tail, vectorize_fallback,
                                    parallel, cache_write_compute_at)}


MM = _mm_schedules()


def conv2d_padded(vectorize_x: bool, pad_at: bool):
    """3x3 conv with padding 1 through an if_then_else stage, inlined or computed at y.o."""
    X = te.placeholder((1, 3, 8, 8), "X")
    W = te.placeholder((4, 3, 3, 3), "W")
    P = te.compute((1, 3, 10, 10), lambda n, c, h, w: te.if_then_else(
        te.tensor.all_(h >= 1, h < 9, w >= 1, w < 9), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, ry, rx = te.reduce_axis(3, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    O = te.compute((1, 4, 8, 8), lambda n, f, y, x: te.sum(P[n, rc, y + ry, x + rx] * W[f, rc, ry, rx],
                                                          axis=[rc, ry, rx]), name="O")
    s = te.create_schedule(O)
    y, x = O.op.axis[2:]
    if pad_at:
        yo, _ = s[O].split(y, 3)
        s[P].compute_at(s[O], yo)
    else:
        s[P].compute_inline()
    if vectorize_x:
        s[O].reorder(*O.op.reduce_axis, x)
        s[O].vectorize(x)
    return te.lower(s, [X, W, O], "conv")


def _conv_ref(x, w):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 4, 8, 8), np.float32)
    for r in range(3):
        for c in range(3):
            out[0] += np.einsum("chw,fc->fhw", xp[0, :, r:r + 8, c:c + 8], w[:, :, r, c])
    return out


def _rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed + len(shape)).random(shape, dtype=np.float64).astype(dtype)


def _check(target, program, inputs, expected, rtol=1e-5, atol=1e-5, interp_too=True):
    """Run `program` compiled and (optionally) interpreted; compare both with `expected`."""
    fn = target.load(target.build(program))
    outs = [np.full(e.shape, np.nan if e.dtype.kind == "f" else -7, e.dtype) for e in expected]
    fn(*inputs, *outs)
    for o, e in zip(outs, expected):
        np.testing.assert_allclose(o, e, rtol=rtol, atol=atol)
    if interp_too:
        ref = [np.zeros(e.shape, e.dtype) for e in expected]
        interp.run(program, *inputs, *ref)
        for o, r in zip(outs, ref):
            np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
    return fn


# -- correctness on x86 ---------------------------------------------------------------------

@needs_x86
@pytest.mark.parametrize("name", list(MM))
def test_matmul_schedules(x86, name):
    s, args = MM[name]()
    p = te.lower(s, args, f"mm_{name}")
    a, b = _rand(*args[0].shape), _rand(*args[1].shape, seed=1)
    _check(x86, p, [a, b], [a @ b])


def test_vectorize_plan_says_why():
    s, args = MM["vectorize_fallback"]()
    p = te.lower(s, args, "mm")
    loops = [n for n in _walk(p.body) if isinstance(n, ir.For) and n.kind == ir.VECTORIZED]
    assert loops and "distinct element per lane" in vectorize.plan(loops[0])
    s, args = MM["vectorize_tail"]()
    loops = [n for n in _walk(te.lower(s, args, "mm").body) if isinstance(n, ir.For) and n.kind == ir.VECTORIZED]
    assert loops and all(vectorize.plan(x) is None for x in loops)


def _walk(node):
    yield node
    for c in ir.children(node):
        yield from _walk(c)


@needs_x86
def test_vectorized_code_is_vector_and_fallback_is_not(x86):
    s, args = MM["vectorize_tail"]()
    text = x86.build(te.lower(s, args, "mm")).meta["llvm_ir"]
    assert "<8 x float>" in text and "llvm.masked.store" in text
    s, args = MM["vectorize_fallback"]()
    assert "<7 x float>" not in x86.build(te.lower(s, args, "mm")).meta["llvm_ir"]


@needs_x86
@pytest.mark.parametrize("n", range(16, 25))
def test_a_guarded_vector_runs_unmasked_while_every_lane_is_in(x86, n):
    # columns of n = 2 or 3 vectors of 8, the last one n % 8 lanes full (none when n is 16 or 24)
    A, B, C = matmul(5, n, 7)
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], 8)
    s[C].reorder(C.op.axis[0], jo, C.op.reduce_axis[0], ji)
    s[C].vectorize(ji)
    p = te.lower(s, [A, B, C], "mm")
    a, b = _rand(5, 7), _rand(7, n, seed=n)
    # B ends at a page boundary: a tail that loaded past its last column would fault
    _check(x86, p, [a, _beside_guard_page(b, after=False)], [a @ b])
    text = x86.build(p).meta["llvm_ir"]
    if n % 8:     # the guard's branch: plain vectors when every lane is in, masked ones in the tail
        assert "llvm.vector.reduce.and" in text and "llvm.masked.store" in text
        assert "store <8 x float>" in text.replace("llvm.masked.store", "")
    else:
        assert "llvm.vector.reduce.and" not in text and "llvm.masked" not in text


@needs_x86
def test_strided_broadcast_and_fused_vector_accesses(x86):
    X, v = te.placeholder((16, 12), "X"), te.placeholder((16,), "v")
    # along j: X[j, i] is strided (gather), v[j] contiguous, X[0, i] the same for every lane
    O = te.compute((12, 16), lambda i, j: X[j, i] * 2.0 + v[j] + X[0, i], name="O")
    F = te.compute((4, 6), lambda i, j: X[i, j] - 1.0, name="F")
    s = te.create_schedule([O, F])
    s[O].vectorize(O.op.axis[1])
    s[F].vectorize(s[F].fuse(*F.op.axis))       # flat index (f // 6) * 6 + f % 6: falls back
    p = te.lower(s, [X, v, O, F], "acc")
    plans = [vectorize.plan(n) for n in _walk(p.body) if isinstance(n, ir.For) and n.kind == ir.VECTORIZED]
    assert plans[0] is None and "distinct element" in plans[1]
    x, vv = _rand(16, 12), _rand(16, seed=5)
    _check(x86, p, [x, vv], [x.T * 2 + vv + x[0][:, None], x[:4, :6] - 1])
    assert "llvm.masked.gather" in x86.build(p).meta["llvm_ir"]


@needs_x86
def test_parallel_uses_libgomp(x86):
    A, B, C = matmul(64, 48, 16)
    s = te.create_schedule(C)
    io, _ = s[C].split(C.op.axis[0], 8)
    s[C].parallel(io)
    art = x86.build(te.lower(s, [A, B, C], "mm_par"))
    assert art.meta["parallel"]
    assert art.meta["llvm_ir"].count('@"GOMP_parallel"(') == 2    # declared once, called once
    a, b = _rand(64, 16), _rand(16, 48, seed=3)
    c = np.zeros((64, 48), np.float32)
    fn = x86.load(art)
    for _ in range(3):
        fn(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def _beside_guard_page(a: np.ndarray, after: bool = True) -> np.ndarray:
    """A copy of `a` right after an inaccessible page (reading before it faults) or, not `after`, right
    before one (reading past its end faults)."""
    page = mmap.PAGESIZE
    size = -(-a.nbytes // page) * page
    m = mmap.mmap(-1, page + size)
    addr = ctypes.addressof((ctypes.c_char * len(m)).from_buffer(m))
    guard, start = (0, page) if after else (size, size - a.nbytes)
    assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(addr + guard), page, 0) == 0    # PROT_NONE
    out = np.frombuffer(m, a.dtype, a.size, offset=start).reshape(a.shape)
    out[...] = a
    return out


@needs_x86
@pytest.mark.parametrize("vectorize_x", [False, True])
@pytest.mark.parametrize("pad_at", [False, True])
def test_padded_conv2d(x86, vectorize_x, pad_at):
    p = conv2d_padded(vectorize_x, pad_at)
    x, w = _rand(1, 3, 8, 8), _rand(4, 3, 3, 3, seed=2)
    # the padding reads X[-9] on the side not taken: it must never be loaded
    _check(x86, p, [_beside_guard_page(x), w], [_conv_ref(x, w)])
    if vectorize_x and not pad_at:    # the padded read is a masked load, never a plain one
        assert "llvm.masked.load" in x86.build(p).meta["llvm_ir"]


@needs_x86
@pytest.mark.parametrize("vec", [False, True])
def test_max_reduction(x86, vec):
    X = te.placeholder((6, 20), "X")
    k = te.reduce_axis(20, "k")
    R = te.compute((6,), lambda i: te.max(X[i, k], axis=k), name="R")
    s = te.create_schedule(R)
    if vec:     # rows as lanes, the reduction outside them
        ko, ki = s[R].split(k, 5)
        s[R].reorder(ko, ki, R.op.axis[0])
        s[R].vectorize(R.op.axis[0])
    x = _rand(6, 20) - 0.5
    _check(x86, te.lower(s, [X, R], "rmax"), [x], [x.max(axis=1)])


@needs_x86
def test_floor_division_and_modulo_of_negatives(x86):
    i = ir.Var("i")
    out_q, out_r = ir.Buffer("Q", (40,), "int64"), ir.Buffer("R", (40,), "int64")
    d = ir.Buffer("D", (1,), "int64")
    den = ir.Load(d, ir.const(0))
    num = i - 20
    body = ir.For(i, 40, ir.SERIAL, ir.seq(
        ir.Store(out_q, i, ir.BinOp("//", num, ir.const(7), "int64") + ir.BinOp("//", num, den, "int64") * 1000),
        ir.Store(out_r, i, ir.BinOp("%", num, ir.const(7), "int64") + ir.BinOp("%", num, den, "int64") * 1000)))
    p = ir.Program("floordiv", [d, out_q, out_r], body)
    fn = x86.load(x86.build(p))
    n = np.arange(40) - 20
    for den_v in (-3, 5):
        q, r = np.zeros(40, np.int64), np.zeros(40, np.int64)
        fn(np.array([den_v], np.int64), q, r)
        np.testing.assert_array_equal(q, n // 7 + (n // den_v) * 1000)
        np.testing.assert_array_equal(r, n % 7 + (n % den_v) * 1000)


@needs_x86
@pytest.mark.parametrize("vec", [False, True])
def test_intrinsics(x86, vec):
    X = te.placeholder((4, 16), "X")
    fns = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "fabs": np.abs}
    def unary(name):
        shift = -0.25 if name in ("tanh", "fabs") else 0.5
        return te.compute((4, 16), lambda i, j: ir.Call(name, (X[i, j] + shift,), "float32"), name=name)
    outs = [unary(name) for name in fns]
    F = te.compute((4, 16), lambda i, j: ir.Call("fma", (X[i, j], X[i, j], ir.const(1.0)), "float32"), name="F")
    outs.append(F)
    s = te.create_schedule(outs)
    if vec:
        for t in outs:
            s[t].vectorize(t.op.axis[1])
    x = _rand(4, 16)
    expected = [f(x - 0.25) if n in ("tanh", "fabs") else f(x + 0.5) for n, f in fns.items()] + [x * x + 1]
    _check(x86, te.lower(s, [X, *outs], "calls"), [x], [e.astype(np.float32) for e in expected],
           rtol=1e-5, atol=1e-6)


@needs_x86
def test_large_temporary_goes_to_the_heap_and_ints_work(x86):
    A = te.placeholder((300, 300), "A", "int32")
    T = te.compute((300, 300), lambda i, j: A[i, j] * 3 - j, name="T")      # 360 KB: malloc, not alloca
    O = te.compute((300, 300), lambda i, j: T[i, j] + T[j, i], name="O")
    s = te.create_schedule(O)
    art = x86.build(te.lower(s, [A, O], "ints"))
    assert '@"aligned_alloc"' in art.meta["llvm_ir"]
    a = np.random.default_rng(0).integers(-1000, 1000, (300, 300)).astype(np.int32)
    o = np.zeros((300, 300), np.int32)
    x86.load(art)(a, o)
    t = a * 3 - np.arange(300, dtype=np.int32)
    np.testing.assert_array_equal(o, t + t.T)


@needs_x86
def test_kernel_argument_errors(x86):
    fn = x86.load(x86.build(te.lower(*MM["plain"](), "mm")))
    a, b, c = _rand(10, 7), _rand(7, 12), np.zeros((10, 12), np.float32)
    fn(a, b, c)
    with pytest.raises(KernelArgumentError, match="takes 3 arrays"):
        fn(a, b)
    with pytest.raises(KernelArgumentError, match=r"argument 1 \(B\).*float32.*got a float64"):
        fn(a, b.astype(np.float64), c)
    with pytest.raises(KernelArgumentError, match="shape"):
        fn(a, b[:, :6].copy(), c)
    with pytest.raises(KernelArgumentError, match="not C-contiguous"):
        fn(a, np.asfortranarray(b), c)
    with pytest.raises(KernelArgumentError, match="list"):
        fn(a, b.tolist(), c)
    with pytest.raises(KernelArgumentError, match="not aligned"):
        fn(a, b, np.zeros(481, np.uint8)[1:].view(np.float32).reshape(10, 12))
    out = np.zeros((3, 10, 12), np.float32)     # a contiguous view at an offset
    fn(a, b, out[1])
    np.testing.assert_allclose(out[1], a @ b, rtol=1e-5)
    assert not out[0].any() and not out[2].any()


@needs_x86
def test_many_loaded_kernels(x86, monkeypatch):
    from tunekit_plugins.targets.llvm import mcjit
    monkeypatch.setattr(mcjit, "_ENGINES_MAX", 2)    # evicting an engine must not free shared LLVM state
    a, b = _rand(10, 7), _rand(7, 12)
    for k, name in enumerate(["plain", "fuse", "unroll", "reorder"]):
        c = np.zeros((10, 12), np.float32)
        x86.load(x86.build(te.lower(*MM[name](), f"mm{k}")))(a, b, c)    # its engine dies after this
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    gc.collect()
    c = np.zeros((10, 12), np.float32)
    x86.load(x86.build(te.lower(*MM["plain"](), "again")))(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


# -- code quality ------------------------------------------------------------------------------

def _has_avx512() -> bool:
    if not ON_X86:
        return False
    from tunekit_plugins.targets.llvm.mcjit import binding
    return bool(binding().get_host_cpu_features().get("avx512f"))


@pytest.mark.skipif(not _has_avx512(), reason="the host has no AVX-512")
def test_vectorized_matmul_uses_zmm_fma(x86):
    asm = x86.assembly(matmul_hand_schedule(96, 128, 64, kc=32))
    fmas = [ln for ln in asm.splitlines() if "vfmadd" in ln and "ps" in ln and "zmm" in ln]
    assert len(fmas) >= 24, "expected the 6x4 zmm accumulator block"
    assert x86.device().vector_bits == 512


def test_arm_builds_neon_object_code():
    arm = ArmCpuTarget()
    p = matmul_hand_schedule(32, 64, 32, mr=4, nr=16, kc=8, lanes=4)
    art = arm.build(p)
    data = art.data
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == 183   # EM_AARCH64
    assert art.meta["triple"].startswith("aarch64")
    asm = arm.assembly(p)
    assert any("fmla" in ln and ".4s" in ln for ln in asm.splitlines())
    assert arm.device().vector_bits == 128 and arm.device().name == "cortex-a72"
    if platform.machine().lower() not in ("aarch64", "arm64"):
        assert "ARM device" in ArmCpuTarget.available()
        with pytest.raises(KernelLoadError, match="ARM device"):
            arm.load(art)


def test_x86_cross_build_for_a_named_cpu():
    t = X86Target(X86Target.Options(mcpu="haswell"))
    assert t.device().vector_bits == 256 and t.device().name == "haswell"
    asm = t.assembly(matmul_hand_schedule(12, 32, 16, kc=4, lanes=8))
    assert "ymm" in asm and "zmm" not in asm


def test_a_kernel_for_features_this_cpu_lacks_is_refused_by_name_not_run(monkeypatch):
    from tunekit.runtime import host
    art = X86Target(X86Target.Options(mcpu="haswell")).build(matmul_hand_schedule(12, 32, 16, kc=4, lanes=8))
    assert "avx2" in art.meta["needs"]
    monkeypatch.setattr(host, "cpu_flags", lambda: frozenset({"sse2", "fma"}))   # a CPU without AVX2
    with pytest.raises(KernelLoadError, match=r"kernel \S+: built for haswell with avx2, which this CPU "
                                              r"lacks; build for this CPU: mcpu = \"\""):
        X86Target(X86Target.Options(mcpu="haswell")).load(art)


# -- unsupported IR ---------------------------------------------------------------------------

def test_barrier_and_thread_loops_are_build_errors(x86):
    buf = ir.Buffer("O", (8,), "float32")
    t = ir.Var("tx")
    thread = ir.Program("k", [buf], ir.For(t, 8, ir.THREAD, ir.Store(buf, t, ir.const(1.0)), "threadIdx.x"))
    with pytest.raises(BuildError, match="threadIdx.x"):
        x86.build(thread)
    barrier = ir.Program("k", [buf], ir.seq(ir.Store(buf, ir.const(0), ir.const(1.0)), ir.Barrier("shared")))
    with pytest.raises(BuildError, match="barrier"):
        x86.build(barrier)
    call = ir.Program("k", [buf], ir.Store(buf, ir.const(0), ir.Call("erf", (ir.const(1.0),), "float32")))
    with pytest.raises(BuildError, match="unknown intrinsic erf"):
        x86.build(call)


# -- the plugin ------------------------------------------------------------------------------

def test_plugin_hooks_and_options():
    from tunekit_plugins.targets import llvm as plugin
    assert plugin.tunekit_targets() == [X86Target, ArmCpuTarget]
    assert X86Target.name == "x86" and ArmCpuTarget.name == "arm-cpu"
    assert X86Target.family == ArmCpuTarget.family == "cpu"
    for cls in (X86Target, ArmCpuTarget):
        for f in cls.Options.model_fields.values():
            assert f.description
    assert ArmCpuTarget.Options().mcpu == "cortex-a72" and ArmCpuTarget.Options().num_threads == 4
    with pytest.raises(pydantic.ValidationError):
        X86Target.Options(mcpus="x")
    assert (X86Target.available() is None) == ON_X86
    d = X86Target().device()
    assert isinstance(d, tunekit.DeviceInfo) and d.family == "cpu" and d.cores >= 1 and d.l1_bytes > 0


def test_available_says_when_llvmlite_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)    # import llvmlite.binding -> ImportError
    for cls in (X86Target, ArmCpuTarget):
        assert "llvmlite is not installed" in cls.available()


class TestX86Contract(TargetContract):
    target_class = X86Target


class TestArmCpuContract(TargetContract):
    target_class = ArmCpuTarget


def test_llvmlite_is_not_imported_by_the_core():
    import subprocess
    code = ("import sys, tunekit, tunekit.te, tunekit.ir, tunekit_plugins.targets.llvm as p; "
            "assert 'llvmlite' not in sys.modules, 'imported'; p.tunekit_targets(); "
            "assert 'llvmlite' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- performance sanity check (not a test) ---------------------------------------------------

def _report(M: int = 1024, N: int = 1024, K: int = 1024) -> None:
    t = X86Target()
    p = matmul_hand_schedule(M, N, K)
    art = t.build(p)
    a, b = _rand(M, K), _rand(K, N, seed=1)
    c = np.zeros((M, N), np.float32)
    t.load(art)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    costs = t.run(art, [a, b, c], tunekit.RunSettings(number=10, repeat=5))
    print(f"matmul {M}x{N}x{K} float32, {t.device().cores} threads: "
          + ", ".join(f"{2 * M * N * K / x / 1e9:.0f}" for x in costs) + " GFLOPS")


if __name__ == "__main__":
    _report(*[int(x) for x in sys.argv[1:4]])


@pytest.mark.parametrize("fn", ["exp", "tanh"])
def test_float32_exp_and_tanh_are_inline_and_accurate(fn):
    """exp and tanh of float32 are emitted inline (so a vector of them is not one libm call
    per lane), within 1e-6 relative error over the float32 range, and 0 below it."""
    from tunekit import te
    n = 4096

    def compute(n):
        x = te.placeholder((n,), "x")
        return [x, te.compute((n,), lambda i: getattr(te, fn)(x[i]), name="y")]
    x = tunekit.empty((n,))
    x[...] = np.linspace(-104, 88, n, dtype=np.float32)
    x[:6] = [0, 1e-8, -1e-8, 0.05, -0.5, -np.inf]
    kernel = tunekit.build(tunekit.Task.from_compute(compute, dict(n=n), name=f"{fn}_f32"), target="x86")
    y = tunekit.empty((n,))
    kernel(x, y)
    want = getattr(np, fn)(x.astype(np.float64))
    big = np.abs(want) > 1e-37
    assert np.all(np.abs(y - want)[big] <= 1e-6 * np.abs(want)[big])
    assert np.all(np.abs(y[~big]) <= 1e-37)
    if fn == "exp":   # below the smallest normal result: 0 (a softmax's division would make it a slow denormal)
        assert np.all(y[x < -87.34] == 0) and np.all(y[x > -87.33] > 0)
