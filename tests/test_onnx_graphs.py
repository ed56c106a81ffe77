"""General ONNX graphs through `tunekit.compile_model`, against onnxruntime: every node type
the frontend lowers to te compiles inside a whole model; the fusion pass groups what it
should (a chain after a contraction, elementwise producers into a reduction, a Transpose
into a MatMul's indexing); constants and shape arithmetic fold at load; integer inputs;
views (an LSTM's steps)."""
from __future__ import annotations

import json
import platform
import warnings

import numpy as np
import pytest
from checks import save_onnx, translated
from conftest import require

import tunekit

onnx = require("onnx")
ort = require("onnxruntime")
pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(3)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def save(tmp_path, nodes, inputs, outputs, inits=(), opset=17):
    """Write a model of `nodes` (`checks.save_onnx`) as m.onnx in `tmp_path`."""
    return save_onnx(str(tmp_path / "m.onnx"), nodes, inputs, outputs, inits, opset)


def feeds_of(inputs):
    return {k: RNG.integers(0, 5, s).astype(np.int64) if t == I64 else RNG.standard_normal(s).astype(np.float32)
            for k, (s, t) in inputs.items()}


def check(path, feeds, rtol=1e-4):
    """Compile `path`, run it on `feeds` by name and positionally, compare with onnxruntime; the net."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: default configs
        net = tunekit.compile_model(path)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for got in (net(**feeds), net(*feeds.values())):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(np.abs(w).max(), 1e-6))
    return net


def groups(net) -> list[str]:
    return [n.kind for n in net.graph.nodes]


def c(value, dtype=np.float32):
    return np.asarray(value, dtype)


# --- every lowered node type inside a model -----------------------------------------------------------------

X = {"x": ([2, 3, 4], F)}
UNARY = ["Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu", "Neg", "Abs"]


def test_elementwise_nodes_compile_in_one_model(tmp_path):
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Add", ["a", "one"], ["p"])]   # p > 0
    outs = {}
    for op in UNARY:
        nodes.append(helper.make_node(op, ["p"], [op]))
        outs[op] = ([2, 3, 4], F)
    nodes += [helper.make_node("LeakyRelu", ["x"], ["leaky"], alpha=0.2),
              helper.make_node("Clip", ["x", "lo", ""], ["clip"]),
              helper.make_node("Pow", ["p", "two"], ["pow"]),
              helper.make_node("Div", ["x", "p"], ["div"]), helper.make_node("Sub", ["x", "row"], ["sub"]),
              helper.make_node("Mul", ["x", "row"], ["mul"]),
              helper.make_node("Less", ["x", "row"], ["less"]), helper.make_node("Not", ["less"], ["more"]),
              helper.make_node("Where", ["more", "x", "row"], ["where"]),
              helper.make_node("Cast", ["less"], ["cast"], to=F),
              helper.make_node("Equal", ["x", "x"], ["eq"]), helper.make_node("Cast", ["eq"], ["eqf"], to=F),
              helper.make_node("Greater", ["x", "zero"], ["gt"]), helper.make_node("Cast", ["gt"], ["gti"], to=I64),
              helper.make_node("Cast", ["gti"], ["gtf"], to=F),
              helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"])]
    outs.update({k: ([2, 3, 4], F) for k in ["leaky", "clip", "pow", "div", "sub", "mul", "where", "cast", "eqf",
                                             "gtf", "bn"]})
    inits = {"one": c(1.0), "lo": c(-0.5), "two": c(2.0), "zero": c(0.0), "row": c(RNG.standard_normal(4)),
             "s": c(RNG.uniform(0.5, 1, 3)), "b": c(RNG.standard_normal(3)), "m": c(RNG.standard_normal(3)),
             "v": c(RNG.uniform(0.5, 1, 3))}
    check(save(tmp_path, nodes, X, outs, inits), feeds_of(X))


def test_reductions_and_normalizations_compile(tmp_path):
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], keepdims=1),
             helper.make_node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0),
             helper.make_node("ReduceMax", ["x"], ["max"], axes=[1], keepdims=0),
             helper.make_node("Softmax", ["x"], ["soft"], axis=-1),
             helper.make_node("LogSoftmax", ["x"], ["logsoft"], axis=1),
             helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5)]
    outs = {"mean": ([2, 3, 1], F), "sum": ([2, 3], F), "max": ([2, 4], F), "soft": ([2, 3, 4], F),
            "logsoft": ([2, 3, 4], F), "ln": ([2, 3, 4], F)}
    inits = {"axes": c([2], np.int64), "g": c(RNG.standard_normal(4)), "b": c(RNG.standard_normal(4))}
    check(save(tmp_path, nodes, X, outs, inits), feeds_of(X))


def test_layout_nodes_compile(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["rr"]),
             helper.make_node("Flatten", ["x"], ["f"], axis=2), helper.make_node("Exp", ["f"], ["fe"]),
             helper.make_node("Unsqueeze", ["x", "ax0"], ["u"]), helper.make_node("Squeeze", ["u", "ax0"], ["sq"]),
             helper.make_node("Neg", ["sq"], ["sqn"]),
             helper.make_node("Concat", ["x", "x", "x"], ["cat"], axis=-1),
             helper.make_node("Split", ["cat", "parts"], ["s0", "s1"], axis=2),
             helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["sl"]),
             helper.make_node("Expand", ["col", "eshape"], ["ex"]),
             helper.make_node("Gather", ["x", "idx"], ["ga"], axis=1),
             helper.make_node("Pad", ["x", "pads", "pv"], ["pad"], mode="constant")]
    outs = {"rr": ([4, 6], F), "fe": ([6, 4], F), "sqn": ([2, 3, 4], F), "s0": ([2, 3, 5], F), "s1": ([2, 3, 7], F),
            "sl": ([2, 3, 2], F), "ex": ([2, 3, 4], F), "ga": ([2, 2, 2, 4], F), "pad": ([2, 5, 4], F)}
    inits = {"shape": c([4, -1], np.int64), "ax0": c([0], np.int64), "parts": c([5, 7], np.int64),
             "starts": c([-1], np.int64), "ends": c([-2**63], np.int64), "axes": c([2], np.int64),
             "steps": c([-2], np.int64), "col": c(RNG.standard_normal((3, 1))), "eshape": c([2, 3, 4], np.int64),
             "idx": c([[0, 2], [-1, 1]], np.int64), "pads": c([0, 1, 0, 0, 1, 0], np.int64), "pv": c(0.5)}
    check(save(tmp_path, nodes, X, outs, inits), feeds_of(X))


def test_matmul_gemm_and_conv_transpose_compile(tmp_path):
    inputs = {"a": ([2, 1, 3, 4], F), "b": ([5, 4, 6], F), "z": ([1, 8, 3, 3], F)}
    nodes = [helper.make_node("MatMul", ["a", "b"], ["mm"]),
             helper.make_node("Gemm", ["g2", "g2", "gc"], ["gemm"], transA=1, alpha=0.5, beta=2.0),
             helper.make_node("ConvTranspose", ["z", "wt", "bt"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1])]
    inputs["g2"] = ([3, 3], F)
    outs = {"mm": ([2, 5, 3, 6], F), "gemm": ([3, 3], F), "ct": ([1, 4, 6, 6], F)}
    inits = {"gc": c(RNG.standard_normal(3)), "wt": c(RNG.standard_normal((8, 4, 4, 4)) * 0.3),
             "bt": c(RNG.standard_normal(4))}
    check(save(tmp_path, nodes, inputs, outs, inits), feeds_of(inputs))


# --- fusion ---------------------------------------------------------------------------------------------------

def test_a_gelu_chain_fuses_into_the_matmul_that_produces_it(tmp_path):
    inputs = {"x": ([4, 8], F), "y": ([8, 16], F)}
    nodes = [helper.make_node("MatMul", ["x", "y"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["hs"]), helper.make_node("Erf", ["hs"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["he"]),
             helper.make_node("Mul", ["he", "half"], ["out"])]
    inits = {"bias": c(RNG.standard_normal(16)), "sqrt2": c(np.sqrt(2)), "one": c(1.0), "half": c(0.5)}
    net = check(save(tmp_path, nodes, inputs, {"out": ([4, 16], F)}, inits), feeds_of(inputs))
    # h is read twice (by Div and Mul): the matmul + bias is one kernel, the GELU after it another
    assert groups(net) == ["MatMul+Add", "Div+Erf+Add+Mul"]


def test_a_transpose_feeding_a_matmul_is_its_indexing_and_the_scale_and_mask_its_output_stage(tmp_path):
    inputs = {"q": ([2, 8, 4], F), "k": ([2, 8, 4], F)}
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1)]
    inits = {"scale": c(0.5), "mask": c(np.triu(np.full((8, 8), -1e4), 1))}
    net = check(save(tmp_path, nodes, inputs, {"p": ([2, 8, 8], F)}, inits), feeds_of(inputs))
    assert groups(net) == ["Transpose+MatMul+Mul+Add", "Softmax"]   # one reduction per kernel


def test_a_residual_add_fuses_into_the_layer_norm_after_it(tmp_path):
    inputs = {"x": ([4, 16], F), "r": ([4, 16], F)}
    nodes = [helper.make_node("Add", ["x", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1)]
    inits = {"g": c(RNG.standard_normal(16)), "b": c(RNG.standard_normal(16))}
    net = check(save(tmp_path, nodes, inputs, {"y": ([4, 16], F)}, inits), feeds_of(inputs))
    assert groups(net) == ["Add+LayerNormalization"]


def test_a_strided_conv_transpose_is_a_convolution_per_phase_and_a_batchnorm_folds_into_it(tmp_path):
    inputs = {"z": ([1, 8, 4, 4], F)}
    nodes = [helper.make_node("ConvTranspose", ["z", "w"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["t", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    inits = {"w": c(RNG.standard_normal((8, 4, 4, 4)) * 0.3), "s": c(RNG.uniform(0.5, 1, 4)),
             "b": c(RNG.standard_normal(4)), "m": c(RNG.standard_normal(4)), "v": c(RNG.uniform(0.5, 1.5, 4))}
    net = check(save(tmp_path, nodes, inputs, {"y": ([1, 4, 8, 8], F)}, inits), feeds_of(inputs))
    # four phase kernels (stride 2 x 2), then the interleave with the BatchNorm's scale and shift and the ReLU
    assert groups(net) == ["ConvTranspose"] * 4 + ["ConvTranspose+Relu"]


@pytest.mark.parametrize("rows, op", [(4, "dense"), (32, "matmul")])
def test_a_matmul_of_constant_weights_runs_a_hand_op_with_its_bias_and_batchnorm_fused(tmp_path, rows, op):
    inputs = {"x": ([rows, 8], F)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["bias", "mm"], ["h"]),
             helper.make_node("BatchNormalization", ["h", "s", "b", "m", "v"], ["y"])]
    inits = {"w": c(RNG.standard_normal((8, 16))), "bias": c(RNG.standard_normal(16)),
             "s": c(RNG.uniform(0.5, 1, 16)), "b": c(RNG.standard_normal(16)), "m": c(RNG.standard_normal(16)),
             "v": c(RNG.uniform(0.5, 1.5, 16))}
    net = check(save(tmp_path, nodes, inputs, {"y": ([rows, 16], F)}, inits), feeds_of(inputs))
    assert [(n.op, n.args["bias"]) for n in net.graph.nodes] == [(op, True)]


def test_a_conv_keeps_its_hand_epilogue_and_a_residual_computed_after_it_is_not_fused(tmp_path):
    inputs = {"x": ([1, 4, 6, 6], F)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["x"], ["g"]),   # computed after the conv in the file's order
             helper.make_node("Add", ["c", "g"], ["y"])]
    inits = {"w": c(RNG.standard_normal((4, 4, 3, 3)) * 0.3)}
    net = check(save(tmp_path, nodes, inputs, {"y": ([1, 4, 6, 6], F)}, inits), feeds_of(inputs))
    assert [n.op for n in net.graph.nodes][0] == "conv2d" and not net.graph.nodes[0].args["residual"]


# --- folding, integer inputs -----------------------------------------------------------------------------------

def test_shape_arithmetic_folds_and_a_token_input_gathers_an_embedding(tmp_path):
    """An exporter's Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain, ConstantOfShape and
    Range fold at load; token ids (int64) index a constant embedding; two inputs of two dtypes."""
    inputs = {"ids": ([3, 5], I64), "x": ([3, 5, 8], F)}
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),                          # [3, 5, 8]
             helper.make_node("Shape", ["e"], ["shp"]), helper.make_node("Gather", ["shp", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["xr"]),                         # [3, 40]
             helper.make_node("Reshape", ["e", "shape"], ["er"]),
             helper.make_node("ConstantOfShape", ["shape2"], ["ones"], value=numpy_helper.from_array(c([1.0]))),
             helper.make_node("Range", ["r0", "r40", "r1"], ["rng"]),
             helper.make_node("Cast", ["rng"], ["rngf"], to=F),
             helper.make_node("Add", ["xr", "er"], ["s"]), helper.make_node("Mul", ["s", "ones"], ["sm"]),
             helper.make_node("Add", ["sm", "rngf"], ["y"])]
    inits = {"emb": c(RNG.standard_normal((7, 8))), "zero": c(0, np.int64), "ax0": c([0], np.int64),
             "minus1": c([-1], np.int64), "shape2": c([3, 40], np.int64), "r0": c(0, np.int64),
             "r40": c(40, np.int64), "r1": c(1, np.int64)}
    path = save(tmp_path, nodes, inputs, {"y": ([3, 40], F)}, inits)
    graph = tunekit.deploy.network.load_graph(path)
    assert graph.inputs == {"ids": ((3, 5), "int64"), "x": ((3, 5, 8), "float32")}
    assert graph.input_bounds == {"ids": 7}
    check(path, feeds_of(inputs))


def test_tunekit_run_feeds_named_inputs_and_token_ids_within_the_vocabulary(tmp_path, capsys):
    from tunekit.cli import main as cli
    inputs = {"ids": ([4], I64), "x": ([4, 3], F)}
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]), helper.make_node("Add", ["e", "x"], ["y"])]
    path = save(tmp_path, nodes, inputs, {"y": ([4, 3], F)}, {"emb": c(RNG.standard_normal((9, 3)))})
    np.save(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    assert cli.main(["run", path, "--input", f"x={tmp_path / 'x.npy'}", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "ms per run" in out and "outputs match onnxruntime" in out
    assert cli.main(["run", path, "--input", str(tmp_path / "x.npy")]) == 1
    assert "the model has 2 inputs (ids, x); give each as --input NAME=FILE.npy" in capsys.readouterr().err


# --- the LSTM ---------------------------------------------------------------------------------------------------

def test_an_lstm_runs_as_one_projection_and_one_step_task_through_views(tmp_path):
    T, B, I, H = 5, 2, 6, 4
    inputs = {"x": ([T, B, I], F)}
    w, r = RNG.standard_normal((1, 4 * H, I)) * 0.5, RNG.standard_normal((1, 4 * H, H)) * 0.5
    inits = {"W": c(w), "R": c(r), "B": c(RNG.standard_normal((1, 8 * H))), "h0": c(RNG.standard_normal((1, B, H))),
             "c0": c(RNG.standard_normal((1, B, H)))}
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=H)]
    outs = {"y": ([T, 1, B, H], F), "yh": ([1, B, H], F), "yc": ([1, B, H], F)}
    path = save(tmp_path, nodes, inputs, outs, inits)
    check(path, feeds_of(inputs))
    tasks = tunekit.extract_tasks(path)
    assert [(t.op.name, n) for t, n in tasks][:2] == [("dense", 1), ("lstm_step", T)]


@pytest.mark.parametrize("attrs, w_shape, z_shape, out_shape, last", [
    (dict(strides=[3, 2], pads=[1, 0, 2, 1], output_padding=[1, 1]), (3, 2, 4, 3), (1, 3, 5, 4), (1, 2, 14, 9), False),
    # channels innermost: 6 channels, 5 columns a phase
    (dict(strides=[3, 2], pads=[1, 0, 2, 1], output_padding=[1, 1]), (3, 6, 4, 3), (1, 3, 5, 4), (1, 6, 14, 9), True),
    (dict(strides=[1, 1], pads=[1, 1, 1, 1]), (3, 2, 3, 3), (1, 3, 5, 4), (1, 2, 5, 4), False),
    (dict(strides=[4, 4]), (2, 3, 2, 2), (1, 2, 3, 3), (1, 3, 10, 10), True)])   # taps shorter than the stride: zeros
def test_conv_transpose_phases_on_odd_shapes(tmp_path, attrs, w_shape, z_shape, out_shape, last):
    inputs = {"z": (list(z_shape), F)}
    nodes = [helper.make_node("ConvTranspose", ["z", "w", "b"], ["y"], **attrs)]
    inits = {"w": c(RNG.standard_normal(w_shape)), "b": c(RNG.standard_normal(w_shape[1]))}
    net = check(save(tmp_path, nodes, inputs, {"y": (list(out_shape), F)}, inits), feeds_of(inputs))
    # a phase vectorizes its innermost axis: channels where there are as many as its columns or more
    phases = [n for n in net.graph.nodes if n.op == "onnx_conv_transpose_phase"]
    assert phases and all(net.graph.shapes[n.output][-1 if last else 1] == out_shape[1] for n in phases)


@pytest.mark.parametrize("batch, cin, cout, kernel, pads, strides, output_padding", [
    (1, 8, 4, (4, 4), [0, 0, 0, 0], [1, 1], None),   # DCGAN's first layer: the whole kernel out
    (2, 3, 5, (4, 4), [1, 1, 1, 1], [1, 1], None),
    (1, 8, 2, (3, 5), [1, 0, 0, 1], [2, 2], [1, 1]),   # as many rows and columns out as the kernel's, shifted
    (2, 16, 3, (4, 4), [1, 1, 1, 1], [3, 3], [2, 2]),
    (1, 3, 6, (3, 5), [0, 2, 1, 0], [2, 1], [1, 0]),
    (2, 4, 4, (4, 4), [0, 0, 1, 1], [2, 2], [1, 1]),
    (1, 5, 3, (4, 4), [2, 0, 0, 0], [2, 2], [0, 1]),   # output_padding past the kernel: zeros
    (2, 3, 2, (3, 5), [0, 0, 0, 0], [2, 2], [1, 1])])
def test_a_one_pixel_conv_transpose_is_a_dense_of_its_kernel_window(tmp_path, batch, cin, cout, kernel, pads, strides,
                                                                    output_padding):
    """A ConvTranspose of a 1x1 input is a dense (`lower_conv_transpose`'s one-pixel path) whose
    output is the window of the kernel that the begin pads start and the output size spans."""
    inputs = {"z": ([batch, cin, 1, 1], F)}
    attrs = dict(pads=pads, strides=strides, **({"output_padding": output_padding} if output_padding else {}))
    nodes = [helper.make_node("ConvTranspose", ["z", "w", "b"], ["y"], name="up", **attrs)]
    inits = {"w": c(RNG.standard_normal((cin, cout, *kernel))), "b": c(RNG.standard_normal(cout))}
    out = [batch, cout, *(e + p - b - f for e, p, b, f in zip(kernel, output_padding or [0, 0], pads[:2], pads[2:]))]
    net = check(save(tmp_path, nodes, inputs, {"y": (out, F)}, inits), feeds_of(inputs))
    assert [node.op for node in net.graph.nodes][0] == "dense" and net.graph.nodes[0].output == "up/dense"
    assert not [node for node in net.graph.nodes if node.op == "onnx_conv_transpose_phase"]


@pytest.mark.parametrize("device", ["avx512", "gpu"])
def test_every_fused_group_of_a_model_runs_generated_configs_in_the_interpreter(tmp_path, device):
    """The te of each group the frontend makes (a GELU chain after a MatMul, a transposed MatMul
    with its scale and mask, a residual add into a LayerNorm, a ConvTranspose's phases and
    interleave, an LSTM step), scheduled by random configs of its generated space, in the
    reference interpreter against te.evaluate."""
    from test_auto import DEVICES, check_configs
    T, B, H = 2, 1, 4
    inputs = {"x": ([4, 8], F), "k": ([2, 4, 8], F), "z": ([1, 3, 3, 3], F), "seq": ([T, B, 8], F)}
    nodes = [helper.make_node("MatMul", ["x", "x8"], ["h"]), helper.make_node("Erf", ["h"], ["e"]),
             helper.make_node("Mul", ["h", "e"], ["gelu"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["kt", "k"], ["s"]), helper.make_node("Mul", ["s", "half"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("Add", ["gelu", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "b"], ["ln"], axis=-1),
             helper.make_node("ConvTranspose", ["z", "wt"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["ct"], ["ctr"]),
             helper.make_node("LSTM", ["seq", "W", "R"], ["y"], hidden_size=H)]
    outs = {"p": ([2, 8, 8], F), "ln": ([4, 8], F), "ctr": ([1, 2, 6, 6], F), "y": ([T, 1, B, H], F)}
    inits = {"x8": c(RNG.standard_normal((8, 8))), "half": c(0.5), "g": c(RNG.standard_normal(8)),
             "b": c(RNG.standard_normal(8)), "wt": c(RNG.standard_normal((3, 2, 4, 4))),
             "W": c(RNG.standard_normal((1, 4 * H, 8))), "R": c(RNG.standard_normal((1, 4 * H, H)))}
    graph = translated(save(tmp_path, nodes, inputs, outs, inits))
    seen = set()
    for node in [n for n in graph.nodes if n.computation is not None]:
        task = tunekit.deploy.plan.computed(node.op, json.dumps(node.computation, sort_keys=True))
        if task.key not in seen:
            seen.add(task.key)
            check_configs(task.op, task.args, DEVICES[device], n=2)
    assert len(seen) >= 8
