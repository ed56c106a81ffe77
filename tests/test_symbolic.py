"""Symbolic sizes through te, lowering, the interpreter and the LLVM code generator: one
kernel for every size in its range, checked against numpy at odd sizes, sizes below one
vector and the largest bound, compiled and interpreted."""
from __future__ import annotations

import platform

import numpy as np
import pytest

from tunekit import ir, te
from tunekit.errors import ScheduleError
from tunekit.ir import interp

pytest.importorskip("llvmlite")
from tunekit_plugins.targets.llvm.cpu import X86Target

needs_x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="runs x86 code")
SIZES = (1, 3, 7, 16, 37, 64)      # 64 is the bound; 1 and 3 are below one vector


@pytest.fixture(scope="module")
def x86():
    return X86Target()


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _run_both(target, program, fn_of_size, sizes=SIZES, rtol=1e-5, atol=1e-5):
    """For each size: make (inputs, expected) with `fn_of_size`, run the compiled kernel and the
    interpreter on them, and compare both with numpy."""
    kernel = target.load(target.build(program))
    for m in sizes:
        inputs, expected = fn_of_size(m)
        outs = [np.full(e.shape, np.nan, e.dtype) for e in expected]
        kernel(*inputs, *outs)
        ref = [np.full(e.shape, np.nan, e.dtype) for e in expected]
        interp.run(program, *inputs, *ref)
        for o, r, e in zip(outs, ref, expected):
            np.testing.assert_allclose(o, e, rtol=rtol, atol=atol, err_msg=f"compiled, size {m}")
            np.testing.assert_allclose(r, e, rtol=rtol, atol=atol, err_msg=f"interpreted, size {m}")
    return kernel


def _matmul(M, N, K):
    A = te.placeholder((M, K), "A")
    B = te.placeholder((K, N), "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@needs_x86
def test_matmul_with_symbolic_rows_tiled_vectorized_parallel(x86):
    m = ir.size_var("m", 1, 64)
    A, B, C = _matmul(m, 40, 24)
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    s[C].parallel(io)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    s[CL].reorder(k, ci, cj)
    s[CL].vectorize(cj)
    program = te.lower(s, [A, B, C], "mm_sym")
    assert [v.name for v in program.sizes] == ["m"]
    b = _rand(24, 40, seed=1)
    _run_both(x86, program, lambda n: ([a := _rand(n, 24), b], [a @ b]), rtol=1e-4, atol=1e-4)


@needs_x86
def test_reduction_over_a_symbolic_extent(x86):
    # a softmax row sum: the reduction runs over the symbolic length, the rows are symbolic too
    n = ir.size_var("n", 1, 64)
    X = te.placeholder((n, n), "X")
    k = te.reduce_axis(n, "k")
    S = te.compute((n,), lambda i: te.sum(te.exp(X[i, k]), axis=k), name="S")
    Y = te.compute((n, n), lambda i, j: te.exp(X[i, j]) / S[i], name="Y")
    s = te.create_schedule(Y)
    yo, yi = s[Y].split(Y.op.axis[1], 8)
    s[Y].vectorize(yi)
    s[Y].parallel(Y.op.axis[0])
    program = te.lower(s, [X, Y], "softmax_sym")

    def case(m):
        x = _rand(m, m, seed=m)
        e = np.exp(x)
        return [x], [e / e.sum(1, keepdims=True)]
    _run_both(x86, program, case)


@needs_x86
def test_fused_symbolic_and_static_axes(x86):
    b, s_ = ir.size_var("batch", 1, 4), ir.size_var("seq", 1, 33)
    X = te.placeholder((b, s_, 12), "X")
    Y = te.compute((b, s_, 12), lambda i, j, c: te.fabs(X[i, j, c]) + 1.0, name="Y")
    s = te.create_schedule(Y)
    f = s[Y].fuse(*Y.op.axis)
    fo, fi = s[Y].split(f, 16)
    s[Y].parallel(fo)
    s[Y].vectorize(fi)
    program = te.lower(s, [X, Y], "abs_sym")
    assert [v.name for v in program.sizes] == ["batch", "seq"]
    kernel = x86.load(x86.build(program))
    for shape in [(1, 1, 12), (3, 5, 12), (4, 33, 12), (2, 17, 12)]:
        x = _rand(*shape)
        y, r = np.zeros_like(x), np.zeros_like(x)
        kernel(x, y)
        interp.run(program, x, r)
        np.testing.assert_allclose(y, np.abs(x) + 1, rtol=1e-6)
        np.testing.assert_allclose(r, np.abs(x) + 1, rtol=1e-6)


@needs_x86
def test_bound_call_passes_the_sizes(x86):
    m = ir.size_var("m", 1, 64)
    A, B, C = _matmul(m, 8, 8)
    s = te.create_schedule(C)
    program = te.lower(s, [A, B, C], "mm_bind")
    kernel = x86.load(x86.build(program))
    a, b = _rand(5, 8), _rand(8, 8, seed=2)
    c = np.zeros((5, 8), np.float32)
    kernel.bind(a, b, c)()
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@needs_x86
def test_sizes_out_of_range_or_disagreeing_are_clear_errors(x86):
    m = ir.size_var("m", 2, 16)
    A, B, C = _matmul(m, 8, 8)
    program = te.lower(te.create_schedule(C), [A, B, C], "mm_err")
    kernel = x86.load(x86.build(program))
    b = _rand(8, 8)
    for call in (kernel, lambda *a: interp.run(program, *a)):
        with pytest.raises(ir.SizeError, match=r"size 'm' = 17 is out of its range 2\.\.16"):
            call(_rand(17, 8), b, np.zeros((17, 8), np.float32))
        with pytest.raises(ir.SizeError, match=r"size 'm' = 1 is out of its range"):
            call(_rand(1, 8), b, np.zeros((1, 8), np.float32))
        with pytest.raises(ir.SizeError, match="'m' is 5 in one array and 6 in another"):
            call(_rand(5, 8), b, np.zeros((6, 8), np.float32))


def test_schedule_and_declaration_errors():
    with pytest.raises(ir.SizeError, match="bounds"):
        ir.size_var("n", 5, 2)
    n = ir.size_var("n", 1, 8)
    X = te.placeholder((n,), "X")
    Y = te.compute((n,), lambda i: X[i] + 1.0, name="Y")
    s = te.create_schedule(Y)
    with pytest.raises(ScheduleError, match="symbolic; split it by a factor"):
        s[Y].split(Y.op.axis[0], nparts=2)
    i = ir.Var("i")
    with pytest.raises(Exception, match="expression of sizes"):
        te.placeholder((i,), "Z")


def test_printed_program_shows_the_sizes():
    n = ir.size_var("n", 1, 512)
    X = te.placeholder((n, 4), "X")
    Y = te.compute((n, 4), lambda i, j: X[i, j] * 3.0, name="Y")
    s = te.create_schedule(Y)
    s[Y].split(Y.op.axis[0], 8)
    text = str(te.lower(s, [X, Y], "k"))
    assert "n: 1..512" in text and "range((n + 7) // 8)" in text and "< n" in text


@needs_x86
def test_rfactor_of_a_symbolic_reduction(x86):
    # the lanes past the extent add the combiner's identity: a sum and a max over a symbolic length
    n = ir.size_var("n", 1, 64)
    X = te.placeholder((3, n), "X")
    k, k2 = te.reduce_axis(n, "k"), te.reduce_axis(n, "k2")
    S = te.compute((3,), lambda i: te.sum(X[i, k], axis=k), name="S")
    M = te.compute((3,), lambda i: te.max(X[i, k2], axis=k2), name="M")
    s = te.create_schedule([S, M])
    for t in (S, M):
        rf = s.rfactor(t, t.op.reduce_axis[0], 8)
        s[rf].vectorize(s[rf].op.axis[-1])
    program = te.lower(s, [X, S, M], "rf_sym")
    _run_both(x86, program, lambda m: ([x := _rand(3, m, seed=m)], [x.sum(1), x.max(1)]), rtol=1e-5, atol=1e-5)
