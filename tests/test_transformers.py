"""Transformers through the ONNX frontend, against onnxruntime: the patterns BERT's and GPT-2's
exports are made of (attention with a padding mask, a residual Add into LayerNormalization, GELU
by erf and by tanh, GPT-2's QKV Split), written with onnx.helper, and whole small BERT and GPT-2
models exported by examples/transformer_nets.py (they need torch, transformers and onnxscript:
skipped without them, failed under CI=true)."""
from __future__ import annotations

import platform
import warnings

import numpy as np
import pytest
from conftest import require

import tunekit

onnx = require("onnx", "the BERT and GPT-2 claims")
ort = require("onnxruntime", "the BERT and GPT-2 claims")
pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")
import transformer_nets  # noqa: E402  (examples/, on sys.path by conftest.py; imports torch only when used)
from onnx import TensorProto, helper  # noqa: E402
from test_onnx_graphs import I64, F, c, check, groups, save  # noqa: E402  (tests/, on sys.path: no __init__.py)

RNG = np.random.default_rng(13)
T, H, HEADS, D = 16, 64, 4, 16   # tokens, hidden, heads, head size
SIZE = {"layers": 2, "hidden": H, "heads": HEADS, "intermediate": 128, "seq": T}


def x_feed(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def weights(*shape):
    return c(RNG.standard_normal(shape) / np.sqrt(shape[0]))


# --- the patterns, written with onnx.helper --------------------------------------------------------------

def attention_model(tmp_path):
    """One BERT self-attention layer as its export writes it, with the mask from an int64 input."""
    n = helper.make_node
    nodes = []
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}m"]), n("Add", [f"{p}m", f"b{p}"], [f"{p}a"]),
                  n("Reshape", [f"{p}a", "heads"], [f"{p}r"])]
    nodes += [n("Transpose", ["qr"], ["qt"], perm=[0, 2, 1, 3]), n("Transpose", ["kr"], ["kt"], perm=[0, 2, 3, 1]),
              n("Transpose", ["vr"], ["vt"], perm=[0, 2, 1, 3]), n("Mul", ["qt", "scale"], ["qs"]),
              n("MatMul", ["qs", "kt"], ["s"]),
              n("Unsqueeze", ["attention_mask", "ax12"], ["mu"]), n("Cast", ["mu"], ["mb"], to=TensorProto.BOOL),
              n("Where", ["mb", "zero", "neg"], ["madd"]), n("Add", ["s", "madd"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "vt"], ["ctx"]),
              n("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]), n("Reshape", ["ct", "flat"], ["cr"]),
              n("MatMul", ["cr", "wo"], ["om"]), n("Add", ["om", "bo"], ["y"])]
    inits = {f"w{p}": weights(H, H) for p in "qkvo"} | {f"b{p}": c(RNG.standard_normal(H)) for p in "qkvo"}
    inits |= {"heads": c([1, T, HEADS, D], np.int64), "flat": c([1, T, H], np.int64), "scale": c(1 / np.sqrt(D)),
              "ax12": c([1, 2], np.int64), "zero": c(0.0), "neg": c(np.finfo(np.float32).min)}
    inputs = {"x": ([1, T, H], F), "attention_mask": ([1, T], I64)}
    return save(tmp_path, nodes, inputs, {"y": ([1, T, H], F)}, inits)


def test_bert_attention_with_a_padding_mask_matches_onnxruntime(tmp_path):
    path = attention_model(tmp_path)
    x = x_feed(1, T, H)
    ones = np.ones((1, T), np.int64)
    padded = ones.copy()
    padded[:, -3:] = 0
    net = check(path, {"x": x, "attention_mask": ones})
    check(path, {"x": x, "attention_mask": padded})
    # the mask matters (a lowering that dropped it would pass the first check only)
    assert not np.allclose(net(x=x, attention_mask=ones)[0], net(x=x, attention_mask=padded)[0], atol=1e-3)
    # Q, K and V are one panel matmul (N = 3 x 64) with their biases, each read by its consumers as a column
    # range; the scale folds into Q's head transpose; the mask's Cast and Where, K's columns and transpose and
    # the mask's Add are the scores' kernel; V's columns and the context's transpose back and reshape are the
    # indexing of the second batched MatMul
    assert [(node.op, node.kind) for node in net.graph.nodes] == ATTENTION_GROUPS
    assert all(node.args["b_panel"] and node.args["bias"] for node in net.graph.nodes if node.op == "matmul")


def test_a_residual_add_and_layer_norm_are_one_kernel(tmp_path):
    inputs = {"x": ([1, T, H], F), "r": ([1, T, H], F)}
    nodes = [helper.make_node("Add", ["x", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-12)]
    inits = {"g": c(RNG.standard_normal(H)), "b": c(RNG.standard_normal(H))}
    feeds = {"x": x_feed(1, T, H), "r": x_feed(1, T, H)}
    net = check(save(tmp_path, nodes, inputs, {"y": ([1, T, H], F)}, inits), feeds)
    assert groups(net) == ["Add+LayerNormalization"]


def gelu_nodes(kind):
    n = helper.make_node
    if kind == "erf":   # BERT: x * 0.5 * (1 + erf(x / sqrt(2)))
        return [n("Div", ["h", "sqrt2"], ["hs"]), n("Erf", ["hs"], ["e"]), n("Add", ["e", "one"], ["e1"]),
                n("Mul", ["h", "e1"], ["he"]), n("Mul", ["he", "half"], ["y"])], {"sqrt2": c(np.sqrt(2))}
    # GPT-2: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    return [n("Mul", ["h", "half"], ["hh"]), n("Pow", ["h", "three"], ["h3"]), n("Mul", ["h3", "k"], ["h3k"]),
            n("Add", ["h", "h3k"], ["inner"]), n("Mul", ["inner", "s2pi"], ["arg"]), n("Tanh", ["arg"], ["t"]),
            n("Add", ["t", "one"], ["t1"]), n("Mul", ["hh", "t1"], ["y"])], \
        {"three": c(3.0), "k": c(0.044715), "s2pi": c(np.sqrt(2 / np.pi))}


@pytest.mark.parametrize("kind", ["erf", "tanh"])
def test_gelu_after_a_matmul_with_bias_matches_onnxruntime(tmp_path, kind):
    gelu, inits = gelu_nodes(kind)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["h"]), *gelu]
    inits |= {"w": weights(H, 128), "bias": c(RNG.standard_normal(128)), "one": c(1.0), "half": c(0.5)}
    inputs = {"x": ([1, T, H], F)}
    path = save(tmp_path, nodes, inputs, {"y": ([1, T, 128], F)}, inits)
    feeds = {"x": x_feed(1, T, H) * 2}
    net = check(path, feeds)
    y = net(**feeds)[0]
    assert (y < -0.1).any() and (y > 1).any()   # both sides of the curve
    assert [(node.op, node.kind) for node in net.graph.nodes] == GELU_GROUPS[kind]


def test_gpt2_qkv_split_into_heads_matches_onnxruntime(tmp_path):
    n = helper.make_node
    nodes = [n("Split", ["x", "split"], ["q", "k", "v"], axis=2)]
    for p, perm in zip("qkv", ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])):
        nodes += [n("Reshape", [p, "heads"], [f"{p}r"]), n("Transpose", [f"{p}r"], [f"{p}t"], perm=perm)]
    inits = {"split": c([H, H, H], np.int64), "heads": c([1, T, HEADS, D], np.int64)}
    outs = {"qt": ([1, HEADS, T, D], F), "kt": ([1, HEADS, D, T], F), "vt": ([1, HEADS, T, D], F)}
    net = check(save(tmp_path, nodes, {"x": ([1, T, 3 * H], F)}, outs, inits), {"x": x_feed(1, T, 3 * H)})
    assert groups(net) == SPLIT_GROUPS


# --- whole small models --------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["bert", "gpt2"])
def exported(request, tmp_path_factory):
    """(net, path, compiled model): the small network exported and compiled untuned."""
    for module in ("torch", "transformers", "onnxscript"):
        require(module, "the BERT and GPT-2 claims")
    net = request.param
    path = transformer_nets.export(net, str(tmp_path_factory.mktemp(net) / f"{net}.onnx"), 0, **SIZE)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no tuning record.*default config")
        model = tunekit.compile_model(path, target="x86")
    return net, path, model


@pytest.mark.parametrize("mask_tail", [0, 3])
def test_a_small_transformer_matches_onnxruntime(exported, mask_tail):
    net, path, model = exported
    if net == "gpt2" and mask_tail:
        pytest.skip("GPT-2 takes no attention mask")
    feeds = transformer_nets.inputs(net, 0, mask_tail=mask_tail, **SIZE)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = model(**feeds)
    assert len(got) == len(want) == 1
    for g, w in zip(got, want):
        assert g.shape == w.shape == (1, T, H) and np.ptp(w) > 0
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.ptp(w))


def test_every_constant_weight_matmul_runs_the_panel_matmul(exported):
    net, path, model = exported
    graph = onnx.load(path).graph
    consts = {i.name for i in graph.initializer}
    weighted = sum(1 for n in graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in consts)
    # per layer: Q, K, V, the output projection and the MLP's two (GPT-2: Q, K and V are one Gemm)
    assert weighted == {"bert": 6, "gpt2": 4}[net] * SIZE["layers"]
    matmuls = [n for n in model.graph.nodes if n.op == "matmul"]
    # BERT's Q, K and V, which read the same input, run as one matmul of their weights side by side
    assert len(matmuls) == 4 * SIZE["layers"]
    assert sum(n.args["N"] == 3 * SIZE["hidden"] for n in matmuls) == SIZE["layers"]
    assert all(n.args.get("b_panel") for n in matmuls)


def test_the_kernels_per_layer_are_pinned(exported):
    net, _, model = exported
    # BERT: the embedding's Gather+Add+LayerNormalization and the mask's kernel, then 13 per layer;
    # GPT-2: the embedding's Gather+Add and the final LayerNormalization, 13 per layer (its two residual Adds are
    # its projections' epilogues, through the Reshape the exporter puts between them)
    per_layer, other = KERNELS[net]
    assert len(model.graph.nodes) == other + per_layer * SIZE["layers"]


ATTENTION_GROUPS = [("matmul", "MatMul"), ("onnx_slice_reshape_transpose_mul", "Slice+Reshape+Transpose+Mul"),
    ("onnx_cast_where_slice_reshape_transpose_matmul_add", "Cast+Where+Slice+Reshape+Transpose+MatMul+Add"),
    ("onnx_softmax", "Softmax"), ("onnx_slice_reshape_transpose_matmul", "Slice+Reshape+Transpose+MatMul"),
    ("matmul", "MatMul")]
# the bias is the matmul's epilogue; the GELU (reading h twice) is one kernel after it
GELU_GROUPS = {"erf": [("matmul", "MatMul"), ("onnx_div_erf_add_mul", "Div+Erf+Add+Mul")],
               "tanh": [("matmul", "MatMul"), ("onnx_pow_mul_add_tanh", "Pow+Mul+Add+Tanh")]}
SPLIT_GROUPS = ["Split+Reshape+Transpose"] * 3   # each part is one kernel reading the split's slice
KERNELS = {"bert": (13, 2), "gpt2": (13, 2)}


def test_projections_of_one_input_merge_unless_one_is_a_graph_output(tmp_path):
    """Three MatMuls of constant weights reading x (Q, K, V): one matmul, each output a column range
    read by its consumer; a projection that is also a graph output stays a matmul of its own."""
    n = helper.make_node
    inits = {f"w{k}": weights(H, 32 + 16 * k) for k in range(3)} | {f"b{k}": c(RNG.standard_normal(32 + 16 * k))
                                                                  for k in range(3)}
    nodes = [node for k in range(3) for node in (n("MatMul", ["x", f"w{k}"], [f"m{k}"]),
                                                 n("Add", [f"m{k}", f"b{k}"], [f"p{k}"]),
                                                 n("Relu", [f"p{k}"], [f"y{k}"]))]
    outs = {f"y{k}": ([1, T, 32 + 16 * k], F) for k in range(3)}
    feeds = {"x": x_feed(1, T, H)}
    net = check(save(tmp_path, nodes, {"x": ([1, T, H], F)}, outs, inits), feeds)
    mm = [node for node in net.graph.nodes if node.op == "matmul"]
    # Relu fuses into each projection's epilogue, so none is a plain matmul: no merge here
    assert len(mm) == 3
    nodes = [node for k in range(3) for node in (n("MatMul", ["x", f"w{k}"], [f"m{k}"]),
                                                 n("Add", [f"m{k}", f"b{k}"], [f"p{k}"]),
                                                 n("Tanh", [f"p{k}"], [f"y{k}"]))]
    net = check(save(tmp_path, nodes, {"x": ([1, T, H], F)}, outs, inits), feeds)
    assert [node.args["N"] for node in net.graph.nodes if node.op == "matmul"] == [32 + 48 + 64]
    assert groups(net) == ["MatMul"] + ["Slice+Tanh"] * 3
    outs |= {"p1": ([1, T, 48], F)}
    net = check(save(tmp_path, nodes, {"x": ([1, T, H], F)}, outs, inits), feeds)
    assert sorted(node.args["N"] for node in net.graph.nodes if node.op == "matmul") == [48, 32 + 64]


def test_a_residual_after_a_reshaped_gemm_is_its_epilogue(tmp_path):
    """GPT-2's projections: Gemm [T, H] -> Reshape [1, T, H] -> Add of the residual stream: the Add
    is the Gemm's epilogue (the same rows in another shape), not a kernel of its own."""
    n = helper.make_node
    nodes = [n("Reshape", ["x", "flat"], ["x2"]), n("Gemm", ["x2", "w", "bias"], ["g"]),
             n("Reshape", ["g", "back"], ["g3"]), n("Add", ["g3", "r"], ["y"])]
    inits = {"w": weights(H, H), "bias": c(RNG.standard_normal(H)),
             "flat": np.array([T, H], np.int64), "back": np.array([1, T, H], np.int64)}
    inputs = {"x": ([1, T, H], F), "r": ([1, T, H], F)}
    net = check(save(tmp_path, nodes, inputs, {"y": ([1, T, H], F)}, inits),
                {"x": x_feed(1, T, H), "r": x_feed(1, T, H)})
    assert [(node.op, node.args.get("residual")) for node in net.graph.nodes] == [("matmul", True)]
