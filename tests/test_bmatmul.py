"""bfloat16 products (`precision="bf16"`): rounding to bfloat16 (to nearest, ties to even) the same
in numpy, the interpreter and compiled code; the bmatmul op against its reference on the x86
target's registers (vdpbf16ps where the CPU has AVX512-BF16, the pairs decoded where it does
not) and AMX tiles (tdpbf16ps); the bf16 pass and `compile_model(..., precision="bf16")`."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from checks import built_here, run_built, save_onnx

import tunekit
from tunekit import te
from tunekit.errors import ArgumentError
from tunekit.ir import interp
from tunekit.ops.bmatmul import pack_data, pack_weights, unpack

llvm = pytest.importorskip("llvmlite.binding")
from tunekit_plugins.targets.llvm.cpu import X86Target  # noqa: E402

RNG = np.random.default_rng(5)
FEATURES = {f for f, on in llvm.get_host_cpu_features().items() if on}
#: float32 values whose bfloat16 rounding is a tie (half-way: to the even one) or just off one
TIES = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F808001, 0x3F807FFF, 0x00000000, 0x7F7F0000],
                np.uint32).view(np.float32)


def _bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 as float32, half to even, by way of float64 arithmetic (independent)."""
    out = []
    for v in x.astype(np.float64).ravel():
        if v == 0:
            out.append(0.0)
            continue
        e = np.floor(np.log2(abs(v)))
        step = 2.0 ** (e - 7)   # bfloat16: 8 significant bits
        q = v / step
        r = np.floor(q)
        r = r + 1 if q - r > 0.5 or (q - r == 0.5 and r % 2) else r
        out.append(r * step)
    return np.array(out, np.float32).reshape(x.shape)


def test_rounding_to_bfloat16_is_to_nearest_with_ties_to_even_everywhere():
    lo, hi = TIES, TIES[::-1].copy()
    want = pack_data(np.stack([lo, hi], 1))[:, 0]
    assert np.array_equal(unpack(want[:, None], 1), np.stack([_bf16(lo), _bf16(hi)], 1))
    assert unpack(want[:1, None], 1)[0, 0] == np.float32(1.0) and unpack(want[1:2, None], 1)[0, 0] == 1.015625
    L, H = te.placeholder(lo.shape, "lo"), te.placeholder(hi.shape, "hi")
    P = te.compute(lo.shape, lambda i: te.bf16x2(L[i], H[i]), name="p")
    assert np.array_equal(te.evaluate([L, H, P], [lo, hi])[0], want)
    s = te.create_schedule(P)
    program = te.lower(s, [L, H, P], "pairs")
    out = np.zeros(lo.shape, np.int32)
    interp.run(program, lo, hi, out)
    assert np.array_equal(out, want)
    target = X86Target()
    for vectorized in (False, True):
        s = te.create_schedule(P)
        if vectorized:
            s[P].vectorize(P.op.axis[0])
        arrays = [tunekit.empty(lo.shape, dt) for dt in ("float32", "float32", "int32")]
        arrays[0][...], arrays[1][...] = lo, hi
        target.load(target.build(te.lower(s, [L, H, P], "pairs")))(*arrays)
        assert np.array_equal(arrays[2], want)


def _case(M, N, K, bias=False):
    a, b = RNG.standard_normal((M, K)).astype(np.float32), RNG.standard_normal((K, N)).astype(np.float32)
    ins = [pack_data(a), pack_weights(b)] + ([RNG.standard_normal(N).astype(np.float32)] if bias else [])
    want = _bf16(a).astype(np.float64) @ _bf16(b) + (ins[2] if bias else 0)
    return ins, want


@pytest.mark.parametrize("mcpu", ["", "skylake-avx512"])   # the host's features; a CPU without AVX512-BF16
def test_bmatmul_matches_its_reference_on_registers(mcpu):
    M, N, K = 6, 48, 40
    task = tunekit.Task("bmatmul", dict(M=M, N=N, K=K, bias=True, activation="relu"))
    ins, want = _case(M, N, K, bias=True)
    want = np.maximum(want, 0)
    np.testing.assert_allclose(task.op.reference(*ins, **task.args)[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(te.evaluate(task.op.compute(**task.args), ins)[0], want, rtol=1e-4, atol=1e-4)
    target = X86Target(X86Target.Options(mcpu=mcpu))
    ts = task.bind(target)
    for index in [ts.space.default(), *(int(i) for i in RNG.integers(0, ts.space.size, 3))]:
        if not ts.space.valid(index):
            continue
        program = ts.program(index)
        if not mcpu and "avx512bf16" in FEATURES and "range(16):  # vectorized" in str(program):
            assert "vdpbf16ps" in target.assembly(program)
        if mcpu:
            assert "vdpbf16ps" not in target.assembly(program)
        if (artifact := built_here(target, program)) is None:
            continue
        np.testing.assert_allclose(run_built(target, artifact, ins, (M, N)), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"config {index}")


@pytest.mark.skipif(not {"amx-tile", "amx-bf16"} <= FEATURES, reason="the CPU has no AMX bfloat16 tiles")
def test_bmatmul_on_amx_tiles_matches_its_reference():
    M, N, K = 32, 64, 96
    target = X86Target()
    ts = tunekit.Task("bmatmul", dict(M=M, N=N, K=K)).bind(target)
    ins, want = _case(M, N, K)
    tiled = [i for i in range(ts.space.size) if ts.space.valid(i) and ts.space.get(i)["amx"]]
    assert tiled and ts.space.default() in tiled
    for index in tiled[::max(1, len(tiled) // 4)]:
        program = ts.program(index)
        assert "tdpbf16ps" in target.assembly(program)
        np.testing.assert_allclose(run_built(target, target.build(program), ins, (M, N)), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"config {index}")


def _mlp(path: str) -> str:
    from onnx import TensorProto, helper
    w1, w2 = RNG.standard_normal((64, 32)).astype(np.float32), RNG.standard_normal((32, 16)).astype(np.float32)
    b1 = RNG.standard_normal(32).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return save_onnx(path, nodes, {"x": ((2, 8, 64), TensorProto.FLOAT)}, {"y": ((2, 8, 16), TensorProto.FLOAT)},
                     {"w1": w1, "w2": w2, "b1": b1})


def test_compile_model_in_bf16_runs_the_products_as_bmatmul_within_bfloat16_error(tmp_path):
    pytest.importorskip("onnx")
    path = _mlp(str(tmp_path / "mlp.onnx"))
    x = RNG.standard_normal((2, 8, 64)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: default configs
        f32 = tunekit.compile_model(path, target="x86")
        bf16 = tunekit.compile_model(path, target="x86", precision="bf16")
    assert [n.op for n in bf16.graph.nodes].count("bmatmul") == 2
    assert "bmatmul" not in {n.op for n in f32.graph.nodes}
    want, got = f32(x)[0], bf16(x)[0]
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 1e-4 < err < 2e-2   # bfloat16's 8 bits, not float32's: not the float32 result, and close to it
    with pytest.raises(ArgumentError, match="precision 'fp8'"):
        tunekit.compile_model(path, target="x86", precision="fp8")


def test_a_recipe_model_entry_tunes_the_bf16_tasks(tmp_path):
    pytest.importorskip("onnx")
    from tunekit.recipe.model import TaskSpec
    path = _mlp(str(tmp_path / "mlp.onnx"))
    spec = TaskSpec.model_validate({"model": path, "precision": "bf16"})
    spec.on_target(X86Target())
    assert {t.op.name for t in spec.tasks()} >= {"bmatmul"}
    with pytest.raises(Exception, match="precision"):
        TaskSpec.model_validate({"op": "matmul", "args": {"M": 2, "N": 2, "K": 2}, "precision": "bf16"})


def test_bf16_on_a_cpu_without_a_bfloat16_dot_instruction_says_so(tmp_path):
    pytest.importorskip("onnx")
    from tunekit.deploy.network import load_graph
    from tunekit.deploy.plan import NetworkPlan
    graph = load_graph(_mlp(str(tmp_path / "mlp.onnx")))
    plain = X86Target(X86Target.Options(mcpu="skylake-avx512"))
    assert plain.network_choices().bf16_dot == ""
    with pytest.warns(UserWarning, match="no bfloat16 dot instruction .* decode their pairs"):
        NetworkPlan(graph, plain, precision="bf16")
    if "avx512bf16" in FEATURES:
        assert X86Target().network_choices().bf16_dot in ("vdpbf16ps", "tdpbf16ps")


def test_tunekit_run_in_bf16_tells_the_difference_from_onnxruntime(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from tunekit.cli import main as cli
    path = _mlp(str(tmp_path / "mlp.onnx"))
    assert cli.main(["run", path, "--repeat", "1", "--precision", "bf16"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "bmatmul" in out and "outputs match onnxruntime (max error" in out and "within 0.05" in out
