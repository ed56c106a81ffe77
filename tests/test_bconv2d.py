"""bfloat16 convolutions (`precision="bf16"`): the bconv2d op against an independent numpy
convolution of the rounded data and weights, on the x86 target's registers (vdpbf16ps where the
CPU has AVX512-BF16, the pairs decoded where it does not) and on AMX tiles over flat pixels
(tdpbf16ps); the bf16-convs pass in `compile_model(..., precision="bf16")`."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from checks import built_here, run_built, save_onnx

import tunekit
from tunekit.errors import ArgumentError
from tunekit.ops import layout as layouts
from tunekit.ops.bconv2d import pack_weights, rounded

llvm = pytest.importorskip("llvmlite.binding")
from tunekit_plugins.targets.llvm.cpu import X86Target  # noqa: E402

RNG = np.random.default_rng(11)
FEATURES = {f for f, on in llvm.get_host_cpu_features().items() if on}


def _case(args: dict):
    """Inputs (blocked float32 data, packed weights, bias) and the wanted output: the convolution of the
    data and weights rounded to bfloat16, in float64 by sliding windows, plus the bias, relu'd."""
    N, C, H, W, K, R, S, p = (args[k] for k in ("N", "C", "H", "W", "K_out", "R", "S", "padding"))
    b, db = layouts.block_of(args["layout"]), layouts.block_of(args.get("data_layout") or args["layout"])
    x, w = RNG.standard_normal((N, C, H, W)).astype(np.float32), RNG.standard_normal((K, C, R, S)).astype(np.float32)
    bias = RNG.standard_normal(K).astype(np.float32)
    xp = np.pad(rounded(x).astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    OH, OW = H + 2 * p - R + 1, W + 2 * p - S + 1
    want = sum(np.einsum("nchw,kc->nkhw", xp[:, :, r:r + OH, s:s + OW], rounded(w)[:, :, r, s])
               for r in range(R) for s in range(S))
    want = np.maximum(want + bias[:, None, None], 0)
    ins = [layouts.to_blocked(x, db), pack_weights(layouts.conv_weight(w, b)), bias]
    return ins, layouts.to_blocked(want, b)


CASES = [dict(N=1, C=32, H=7, W=6, K_out=32, R=3, S=3, padding=1, layout="NCHW16c"),
         dict(N=1, C=16, H=5, W=9, K_out=16, R=1, S=1, padding=0, layout="NCHW16c", data_layout="NCHW8c"),
         dict(N=1, C=4, H=6, W=6, K_out=16, R=3, S=3, padding=1, layout="NCHW16c", data_layout="NCHW")]


@pytest.mark.parametrize("mcpu", ["", "skylake-avx512"])   # the host's features; a CPU without AVX512-BF16
@pytest.mark.parametrize("case", CASES, ids=["3x3", "1x1-data-in-8s", "nchw-data"])
def test_bconv2d_matches_the_convolution_of_the_rounded_values_on_registers(mcpu, case):
    args = {**case, "bias": True, "activation": "relu"}
    task = tunekit.Task("bconv2d", args)
    ins, want = _case(args)
    np.testing.assert_allclose(task.op.reference(*ins, **task.args)[0], want, rtol=1e-5, atol=1e-5)
    target = X86Target(X86Target.Options(mcpu=mcpu))
    ts = task.bind(target)
    registers = [i for i in range(ts.space.size) if ts.space.valid(i) and not ts.space.get(i)["amx"]]
    for index in [registers[0], *(registers[int(i)] for i in RNG.integers(0, len(registers), 2))]:
        program = ts.program(index)
        asm = target.assembly(program)
        assert ("vdpbf16ps" in asm) == (not mcpu and "avx512bf16" in FEATURES) and "tdpbf16ps" not in asm
        if (artifact := built_here(target, program)) is None:
            continue
        np.testing.assert_allclose(run_built(target, artifact, ins, want.shape), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"config {index}")


@pytest.mark.skipif(not {"amx-tile", "amx-bf16"} <= FEATURES, reason="the CPU has no AMX bfloat16 tiles")
@pytest.mark.parametrize("case", CASES[:2], ids=["3x3", "1x1-data-in-8s"])
def test_bconv2d_on_amx_tiles_over_flat_pixels_matches(case):
    args = {**case, "C": 32, "bias": True, "activation": "relu"}
    target = X86Target()
    ts = tunekit.Task("bconv2d", args).bind(target)
    ins, want = _case(args)
    tiled = [i for i in range(ts.space.size) if ts.space.valid(i) and ts.space.get(i)["amx"]]
    assert ts.space.default() in tiled and len(tiled) == 4   # one kernel per block of pixels
    for index in tiled:
        program = ts.program(index)
        assert "tdpbf16ps" in target.assembly(program)
        got = run_built(target, target.build(program), ins, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"config {index}")


def test_strided_or_narrow_convolutions_offer_no_tiles():
    target = X86Target()
    for change in ({"stride": 2}, {"C": 16}):
        ts = tunekit.Task("bconv2d", {**CASES[0], **change}).bind(target)
        assert all(not ts.space.get(i)["amx"] for i in range(ts.space.size))


def test_bconv2d_takes_channels_in_pairs_and_a_blocked_layout():
    with pytest.raises(ArgumentError, match="pairs"):
        tunekit.Task("bconv2d", {**CASES[0], "C": 5, "data_layout": "NCHW"})
    with pytest.raises(ArgumentError, match="blocked layout"):
        tunekit.Task("bconv2d", {**CASES[0], "layout": "NCHW"})


def _cnn(path: str) -> str:
    """A 3-channel image -> conv 3x3 (16) -> relu -> conv 3x3 (32, padded) + bias -> relu -> global average
    pool (so that the activations between are blocked)."""
    from onnx import TensorProto, helper
    w1, w2 = (RNG.standard_normal(shape).astype(np.float32) for shape in ((16, 3, 3, 3), (32, 16, 3, 3)))
    b2 = RNG.standard_normal(32).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["y"])]
    return save_onnx(path, nodes, {"x": ((1, 3, 12, 12), TensorProto.FLOAT)},
                     {"y": ((1, 32, 1, 1), TensorProto.FLOAT)}, {"w1": w1, "w2": w2, "b2": b2})


def test_compile_model_in_bf16_runs_the_blocked_convolutions_as_bconv2d(tmp_path):
    pytest.importorskip("onnx")
    path = _cnn(str(tmp_path / "cnn.onnx"))
    x = RNG.standard_normal((1, 3, 12, 12)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: default configs
        f32 = tunekit.compile_model(path, target="x86")
        bf16 = tunekit.compile_model(path, target="x86", precision="bf16")
    ops = [n.op for n in bf16.graph.nodes]
    assert ops.count("bconv2d") == 1 and ops.count("conv2d") == 1   # the 3-channel first layer stays float32
    assert "bconv2d" not in {n.op for n in f32.graph.nodes}
    want, got = f32(x)[0], bf16(x)[0]
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 1e-4 < err < 2e-2   # bfloat16's 8 bits, not float32's: not the float32 result, and close to it
