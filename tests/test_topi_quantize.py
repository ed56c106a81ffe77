"""`tunekit.topi.quantize` against numpy, compiled for the CPU through the generated template:
exact for integer results, rounding ties included (half to even, as ONNX and numpy's rint)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from tunekit_plugins.targets.csource import emit
from tunekit_plugins.targets.opencl.target import OpenCLTarget

import tunekit
from tunekit import te
from tunekit.ir import interp
from tunekit.topi import quantize as q

pytest.importorskip("llvmlite")   # the x86 target
RNG = np.random.default_rng(11)


def _run(fn, inputs: list[np.ndarray], outputs: int = 1) -> list[np.ndarray]:
    """fn's computation compiled for x86 (a default config), run on `inputs`; its outputs."""
    task = tunekit.Task.from_compute(lambda: fn(), {}, name="quantized", outputs=outputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no record: a default config
        kernel = tunekit.build(task, target="x86")
    tensors = fn()
    args = [tunekit.empty(t.shape, t.dtype) for t in tensors]
    for arg, value in zip(args, inputs):
        arg[...] = value
    kernel(*args)
    return args[len(inputs):]


def _ties(shape) -> np.ndarray:
    """float32 values, a third of them exact halves (ties) of either sign."""
    x = (RNG.standard_normal(shape) * 40).astype(np.float32)
    halves = RNG.random(shape) < 0.3
    x[halves] = np.round(x[halves]) + 0.5
    return x


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantize_rounds_half_to_even_and_saturates_per_channel(dtype):
    x, s = _ties((6, 40)), np.where(np.arange(40) < 20, 1.0, 0.5).astype(np.float32)
    z = RNG.integers(-10, 10, 40).astype(dtype) if dtype == "int8" else RNG.integers(100, 140, 40).astype(dtype)
    X, S, Z = te.placeholder(x.shape, "x"), te.placeholder(s.shape, "s"), te.placeholder(z.shape, "z", dtype)
    got = _run(lambda: [X, S, Z, q.quantize(X, S, Z, 1, dtype, "q")], [x, s, z])[0]
    want = np.clip(np.rint(x / s) + z.astype(np.int32), *q.RANGES[dtype]).astype(dtype)
    assert got.dtype == dtype and np.array_equal(got, want)
    assert np.array_equal(q.quantize_array(x, s, z, 1), want)
    assert (got == q.RANGES[dtype][0]).any() and (got == q.RANGES[dtype][1]).any()   # it saturated


def test_dequantize_and_requantize_per_tensor_and_per_channel():
    qv, s, z = RNG.integers(-128, 128, (5, 8)).astype(np.int8), np.float32(0.25), np.int8(-3)
    Q, S, Z = te.placeholder(qv.shape, "q", "int8"), te.placeholder((), "s"), te.placeholder((), "z", "int8")
    got = _run(lambda: [Q, S, Z, q.dequantize(Q, S, Z, 1, "d")], [qv, np.array(s), np.array(z)])[0]
    assert np.array_equal(got, (qv.astype(np.float32) + 3) * 0.25)
    acc = RNG.integers(-5000, 5000, (5, 8)).astype(np.int32)
    acc[0, :4] = [10, 30, -10, -30]   # times 0.05: ties 0.5, 1.5, -0.5, -1.5
    m = np.full(8, 0.05, np.float32)
    m[4:] = 0.01
    A, M = te.placeholder(acc.shape, "acc", "int32"), te.placeholder(m.shape, "m")
    got = _run(lambda: [A, M, q.requantize(A, M, None, 1, "int8", "r")], [acc, m])[0]
    want = np.clip(np.rint(acc.astype(np.float32) * m), -128, 127).astype(np.int8)
    assert np.array_equal(got, want) and list(got[0, :4]) == [0, 2, 0, -2]


def test_dynamic_quantize_chooses_scale_and_zero_point_from_the_range():
    x = (RNG.standard_normal((4, 30)) * 3 + 1).astype(np.float32)
    X = te.placeholder(x.shape, "x")
    y, scale, zero = _run(lambda: [X, *q.dynamic_quantize(X, "y")], [x], outputs=3)
    lo, hi = min(0.0, x.min()), max(0.0, x.max())
    want_scale = np.float32((hi - lo) / 255)
    want_zero = np.uint8(np.clip(np.rint(-lo / want_scale), 0, 255))
    assert scale == want_scale and zero == want_zero
    assert np.array_equal(y, np.clip(np.rint(x / want_scale) + want_zero, 0, 255).astype(np.uint8))


def test_matmul_integer_accumulates_in_int32_less_the_zero_points():
    a, b = RNG.integers(0, 256, (2, 16, 64)).astype(np.uint8), RNG.integers(-128, 128, (64, 24)).astype(np.int8)
    za, zb = np.array(131, np.uint8), RNG.integers(-5, 5, 24).astype(np.int8)
    A, B = te.placeholder(a.shape, "a", "uint8"), te.placeholder(b.shape, "b", "int8")
    ZA, ZB = te.placeholder((), "za", "uint8"), te.placeholder(zb.shape, "zb", "int8")
    got = _run(lambda: [A, B, ZA, ZB, q.matmul_integer(A, B, ZA, ZB, "mm")], [a, b, za, zb])[0]
    want = (a.astype(np.int64) - 131) @ (b.astype(np.int64) - zb)
    assert got.dtype == np.int32 and np.array_equal(got, want)   # 64 * 255 * 133 overflows 16 bits


@pytest.mark.parametrize("group,stride", [(1, 1), (8, 2)])
def test_conv_integer_pads_with_the_zero_point(group, stride):
    x = RNG.integers(0, 256, (1, 8, 9, 9)).astype(np.uint8)
    w = RNG.integers(-128, 128, (8, 8 // group, 3, 3)).astype(np.int8)
    X, W = te.placeholder(x.shape, "x", "uint8"), te.placeholder(w.shape, "w", "int8")
    Z = te.placeholder((), "zx", "uint8")
    got = _run(lambda: [X, W, Z, q.conv_integer(X, W, Z, None, "c", (stride, stride), (1, 1, 1, 1), None, group)],
               [x, w, np.array(7, np.uint8)])[0]
    xp = np.pad(x.astype(np.int64) - 7, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cg, kg = 8 // group, 8 // group
    want = np.zeros(got.shape, np.int64)
    for k in range(8):
        c0 = k // kg * cg
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                patch = xp[0, c0:c0 + cg, i * stride:i * stride + 3, j * stride:j * stride + 3]
                want[0, k, i, j] = (patch * w[k].astype(np.int64)).sum()
    assert np.array_equal(got, want)


def test_to_unsigned_adds_128_to_int8_data():
    x = np.arange(-128, 128, dtype=np.int8).reshape(16, 16)
    X = te.placeholder(x.shape, "x", "int8")
    got = _run(lambda: [X, q.to_unsigned(X, "u")], [x])[0]
    assert got.dtype == np.uint8 and np.array_equal(got, (x.astype(np.int32) + 128).astype(np.uint8))


def test_rint_rounds_ties_to_even_in_numpy_the_interpreter_and_compiled_code():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, -3.7, 7.0, 1e6 + 0.5], np.float32)
    want = np.rint(x)
    X = te.placeholder(x.shape, "x")
    R = te.compute(x.shape, lambda i: te.rint(X[i]), name="r")
    assert np.array_equal(te.evaluate([X, R], [x])[0], want)
    program = te.lower(te.create_schedule(R), [X, R], "rint")
    out = np.zeros_like(x)
    interp.run(program, x, out)
    assert np.array_equal(out, want)
    assert np.array_equal(_run(lambda: [X, R], [x])[0], want)
    s = te.create_schedule(R)
    bx, tx = s[R].split(R.op.axis[0], 5)
    s[R].bind(bx, "blockIdx.x")
    s[R].bind(tx, "threadIdx.x")
    gpu = te.lower(s, [X, R], "rounded")
    assert "rintf(x[" in emit(gpu, "cuda").code and "rint(x[" in emit(gpu, "opencl").code
    if OpenCLTarget.available() is None:   # PoCL on this CPU, or a GPU
        out = np.zeros_like(x)
        OpenCLTarget().load(OpenCLTarget().build(gpu))(x, out)
        assert np.array_equal(out, want)
