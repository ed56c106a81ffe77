"""qconv2d, the int8 convolution on the dot instruction, channels last: its computation, its
numpy reference and its compiled x86 kernels agree with a plain integer convolution of the data
less its zero point (padding reading that zero point), plus the bias, requantized; where the CPU
has VNNI the kernel uses vpdpbusd."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import tunekit
from tunekit import te
from tunekit.errors import ArgumentError
from tunekit.ops.qconv2d import pack_weights

llvm = pytest.importorskip("llvmlite.binding")
from tunekit_plugins.targets.llvm.cpu import X86Target  # noqa: E402

RNG = np.random.default_rng(11)


def _case(H, W, C, K, R, S, stride, pad, x0=37, zero=3, out_dtype="uint8"):
    """The op's args, inputs and the wanted output, computed from OIHW weights by plain loops."""
    x8, w8 = RNG.integers(0, 256, (1, H, W, C)).astype(np.uint8), RNG.integers(-128, 128, (K, C, R, S)).astype(np.int8)
    bias = RNG.integers(-5000, 5000, K)
    xp = np.pad(x8.astype(np.int64) - x0, ((0, 0), (pad, pad), (pad, pad), (0, 0)))   # zero after the zero point
    OH, OW = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    acc = np.zeros((1, OH, OW, K), np.int64)
    for r in range(R):
        for s in range(S):
            window = xp[:, r:r + stride * (OH - 1) + 1:stride, s:s + stride * (OW - 1) + 1:stride]
            acc += window @ w8[:, :, r, s].T.astype(np.int64)
    scale = (RNG.uniform(0.8, 1.2, K) * 100 / acc.std()).astype(np.float32)   # some outputs saturate
    lo, hi = (0, 255) if out_dtype == "uint8" else (-128, 127)
    want = np.clip(np.rint((acc + bias).astype(np.float32) * scale) + zero, lo, hi).astype(out_dtype)
    offset = (bias - x0 * w8.astype(np.int64).sum((1, 2, 3))).astype(np.int32)
    args = dict(N=1, H=H, W=W, C=C, K_out=K, R=R, S=S, stride=stride, padding=pad, out_dtype=out_dtype, zero=zero,
                pad_value=x0)
    return args, [x8.view(np.int32), pack_weights(w8), offset, scale], want


def _runs_exactly(target, program, ins: list, want: np.ndarray, index: int) -> None:
    """`program` compiled for `target` gives `want` on `ins`, every value."""
    arrays = [tunekit.empty(x.shape, x.dtype) for x in [*ins, want]]
    for array, value in zip(arrays, ins):
        array[...] = value
    target.load(target.build(program))(*arrays)
    assert np.array_equal(arrays[-1], want), f"config {index}"


def test_weights_pack_four_channels_of_an_output_channel_per_int32():
    w8 = RNG.integers(-128, 128, (5, 8, 3, 2)).astype(np.int8)
    packed = pack_weights(w8)
    assert packed.shape == (3, 2, 2, 5) and packed.dtype == np.int32
    assert packed[2, 1, 1, 4].tobytes() == w8[4, 4:8, 2, 1].tobytes()


@pytest.mark.parametrize("shape,out", [((8, 8, 8, 32, 3, 3, 1, 1), {}), ((9, 9, 12, 48, 3, 3, 2, 1), {}),
                                       ((6, 6, 4, 16, 1, 1, 1, 0), dict(out_dtype="int8", zero=-5)),
                                       ((11, 11, 4, 64, 7, 7, 2, 3), {})])
def test_qconv2d_computes_the_requantized_integer_convolution(shape, out):
    args, ins, want = _case(*shape, **out)
    lo, hi = np.iinfo(want.dtype).min, np.iinfo(want.dtype).max
    assert (want == lo).any() and (want == hi).any() and ((want > lo) & (want < hi)).mean() > 0.3   # saturates too
    task = tunekit.Task("qconv2d", args)
    assert np.array_equal(task.op.reference(*ins, **task.args)[0], want)
    if shape[0] < 10:   # the te computation through the interpreter (slow: small shapes only)
        assert np.array_equal(te.evaluate(task.op.compute(**task.args), ins)[0], want)
    target = X86Target()
    ts = task.bind(target)
    features = llvm.get_host_cpu_features()
    for index in [ts.space.default(), *(int(i) for i in RNG.integers(0, ts.space.size, 3))]:
        if not ts.space.valid(index):
            continue
        program = ts.program(index)
        if (features.get("avx512vnni") or features.get("avxvnni")) and \
                re.search(r"range\((16|32|48|64)\):  # vectorized\n.*dot4_u8s8", str(program)):
            assert "vpdpbusd" in target.assembly(program)
        _runs_exactly(target, program, ins, want, index)


def test_qconv2d_takes_channels_in_fours():
    with pytest.raises(ArgumentError, match="C = 6 is not a multiple of 4"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tunekit.Task("qconv2d", dict(N=1, H=4, W=4, C=6, K_out=8, R=3, S=3))


AMX = {"amx-tile", "amx-int8"} <= {f for f, on in llvm.get_host_cpu_features().items() if on}


@pytest.mark.skipif(not AMX, reason="the CPU has no AMX tiles (amx-tile, amx-int8)")
def test_amx_configs_run_the_convolution_on_tiles_over_flat_pixels_and_match():
    """Stride 1, channels in 64s, output channels in 16s: the space offers tiles, untuned too; rows of
    10 padded pixels (8 + 2) are not a multiple of a tile's 16, the pixels past each row are dropped."""
    args, ins, want = _case(8, 8, 64, 32, 3, 3, 1, 1)
    target = X86Target()
    ts = tunekit.Task("qconv2d", args).bind(target)
    tiled = [i for i in range(ts.space.size) if ts.space.valid(i) and ts.space.get(i)["amx"]]
    assert tiled and ts.space.default() in tiled
    for index in tiled:
        program = ts.program(index)
        assert "tdpbusd" in target.assembly(program)
        _runs_exactly(target, program, ins, want, index)


def test_strided_or_narrow_convolutions_offer_no_tiles():
    for shape in [(9, 9, 64, 32, 3, 3, 2, 1), (8, 8, 32, 32, 3, 3, 1, 1), (8, 8, 64, 24, 1, 1, 1, 0)]:
        args, _, _ = _case(*shape)
        ts = tunekit.Task("qconv2d", args).bind(X86Target())
        assert {ts.space.get(i)["amx"] for i in range(ts.space.size)} == {0}


@pytest.mark.parametrize("dtype,stride", [("uint8", 1), ("int8", 2)])
def test_qdepthwise_conv2d_computes_each_channel_s_requantized_integer_convolution(dtype, stride):
    C, H, W, x0 = 40, 9, 10, (7 if dtype == "uint8" else -6)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    x8 = RNG.integers(lo, hi + 1, (1, H, W, C)).astype(dtype)
    w8 = RNG.integers(-128, 128, (3, 3, C)).astype(np.int64)
    bias = RNG.integers(-2000, 2000, C)
    xp = np.pad(x8.astype(np.int64) - x0, ((0, 0), (1, 1), (1, 1), (0, 0)))
    OH, OW = (H - 1) // stride + 1, (W - 1) // stride + 1
    acc = sum(xp[:, r:r + stride * (OH - 1) + 1:stride, s:s + stride * (OW - 1) + 1:stride] * w8[r, s]
              for r in range(3) for s in range(3))
    scale = (RNG.uniform(0.8, 1.2, C) * 100 / acc.std()).astype(np.float32)
    want = np.clip(np.rint((acc + bias).astype(np.float32) * scale) + 3, 0, 255).astype(np.uint8)
    offset = (bias - x0 * w8.sum((0, 1))).astype(np.int32)
    args = dict(N=1, H=H, W=W, C=C, R=3, S=3, stride=stride, padding=1, dtype=dtype, zero=3, pad_value=x0)
    ins = [x8, w8.astype(np.int32), offset, scale]
    task = tunekit.Task("qdepthwise_conv2d", args)
    assert np.array_equal(task.op.reference(*ins, **task.args)[0], want)
    target = X86Target()
    ts = task.bind(target)
    assert ts.template.name == "rows"
    for index in [ts.space.default(), *(int(i) for i in RNG.integers(0, ts.space.size, 3))]:
        if not ts.space.valid(index):
            continue
        _runs_exactly(target, ts.program(index), ins, want, index)
