"""matmul with B given in column panels (`b_panel`): the numpy packing and its inverse, the
workload key (b_panel 0 is the plain op), the x86 `packed` template reading packed B (with and
without an epilogue, random configs), which templates serve it, and a model compiled for x86
whose constant weights are packed once (`for_target`), against onnxruntime."""
from __future__ import annotations

import platform
import random
import warnings

import numpy as np
import pytest

import tunekit
from tunekit.errors import ArgumentError, TemplateError
from tunekit.graph import Graph, Node
from tunekit.graph.panels import pack_panels
from tunekit.ops.layout import from_panels, panels
from tunekit.plugin.registry import make_component, registry

ON_X86 = platform.machine().lower() in ("x86_64", "amd64")
needs_x86 = pytest.mark.skipif(not ON_X86, reason="runs x86 code")


def cdiv(a, b):
    return -(-a // b)


# --- the numpy layout --------------------------------------------------------------------------------------

@pytest.mark.parametrize("K, N, nv", [(5, 37, 16), (3, 4, 8), (4, 32, 16), (2, 1, 4)])
def test_panels_round_trip_and_zero_padding(K, N, nv):
    b = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32) + 1.0   # no zeros by chance
    bp = panels(b, nv)
    no = cdiv(N, nv)
    assert bp.shape == (no, K, nv) and bp.dtype == b.dtype and bp.flags.c_contiguous
    for p in range(no):   # panel p holds columns p * nv ... of every row
        cols = b[:, p * nv:(p + 1) * nv]
        np.testing.assert_array_equal(bp[p, :, :cols.shape[1]], cols)
    assert (bp.transpose(1, 0, 2).reshape(K, no * nv)[:, N:] == 0).all()   # the last panel's padding
    back = from_panels(bp, N)
    assert back.shape == (K, N) and back.flags.c_contiguous
    np.testing.assert_array_equal(back, b)


def test_panels_keep_an_integer_dtype():
    b = np.arange(12, dtype=np.int64).reshape(3, 4)
    bp = panels(b, 3)
    assert bp.dtype == np.int64 and bp.shape == (2, 3, 3)
    np.testing.assert_array_equal(bp[1], [[3, 0, 0], [7, 0, 0], [11, 0, 0]])
    np.testing.assert_array_equal(from_panels(bp, 4), b)


# --- the op --------------------------------------------------------------------------------------------------

def test_b_panel_zero_is_the_plain_workload_and_a_panel_width_another():
    plain = tunekit.Task("matmul", dict(M=3, N=4, K=5))
    assert tunekit.Task("matmul", dict(M=3, N=4, K=5, b_panel=0)).key == plain.key
    assert "b_panel" not in tunekit.Task("matmul", dict(M=3, N=4, K=5, b_panel=0)).args
    packed = tunekit.Task("matmul", dict(M=3, N=4, K=5, b_panel=16))
    assert packed.key != plain.key and packed.args["b_panel"] == 16
    assert tunekit.Task("matmul", dict(M=3, N=4, K=5, b_panel=8)).key not in (plain.key, packed.key)
    with pytest.raises(ArgumentError):
        tunekit.Task("matmul", dict(M=3, N=4, K=5, b_panel=-1))


def test_the_op_reads_b_in_panels():
    task = tunekit.Task("matmul", dict(M=3, N=10, K=5, b_panel=4, bias=True, activation="relu"))
    assert task.op.buffers(task.args) == [("A", (3, 5), "float32"), ("B", (3, 5, 4), "float32"),
                                          ("bias", (10,), "float32"), ("C", (3, 10), "float32")]
    rng = np.random.default_rng(1)
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in [(3, 5), (5, 10), (10,)])
    (got,) = task.op.reference(a, panels(b, 4), bias, **task.args)
    np.testing.assert_allclose(got, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-5)
    # te.evaluate of the op's own computation agrees with its reference
    from tunekit import te
    tensors = task.op.compute(**task.args)
    (out,) = te.evaluate(tensors, [a, panels(b, 4), bias])
    np.testing.assert_allclose(out, got, rtol=1e-5, atol=1e-5)


# --- which templates serve it ------------------------------------------------------------------------------

def matmul_templates() -> dict:
    return {t.name: t for t in registry().templates if t.op == "matmul"}


def test_only_templates_with_panels_serve_a_b_panel_task():
    x86 = make_component("target", "x86")
    ts = matmul_templates()
    args = tunekit.Task("matmul", dict(M=8, N=40, K=16, b_panel=32)).args
    plain = tunekit.Task("matmul", dict(M=8, N=40, K=16)).args
    assert ts["packed"].panels and not ts["tiled"].panels
    assert ts["packed"].serves(x86, args) and not ts["tiled"].serves(x86, args)
    assert ts["packed"].serves(x86, plain) and ts["tiled"].serves(x86, plain)
    assert ts["tiled"].serves(x86, {**plain, "b_panel": 0})   # 0: B as it is
    assert ts["tiled"].serves(x86)   # with no args: only the target counts
    task = tunekit.Task("matmul", dict(M=8, N=40, K=16, b_panel=32))
    assert "tiled" not in {t.name for t in task.serving(x86)} and "packed" in {t.name for t in task.serving(x86)}
    with pytest.raises(TemplateError, match="no template 'tiled'"):
        tunekit.Task("matmul", dict(M=8, N=40, K=16, b_panel=32), template="tiled").bind(x86)


# --- the packed template, compiled --------------------------------------------------------------------------

def filled(arrays) -> list[np.ndarray]:
    out = []
    for a in arrays:
        out.append(tunekit.empty(a.shape, a.dtype))
        out[-1][...] = a
    return out


def run_and_compare(kernel_fn, task, inputs) -> None:
    (shape, dtype), = task.op.output_shapes(task.args)
    out = tunekit.empty(shape, dtype)
    out[...] = np.nan
    kernel_fn(*inputs, out)
    (want,) = task.op.reference(*inputs, **task.args)
    rtol, atol = task.op.tolerance(task.args)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)


PACKED_CASES = {   # N not a multiple of nv everywhere: the last panel is padded
    "plain": dict(M=7, N=40, K=12, b_panel=32),
    "bias_relu": dict(M=7, N=40, K=12, b_panel=32, bias=True, activation="relu"),
    "residual_relu6": dict(M=9, N=21, K=70, b_panel=16, residual=True, activation="relu6"),
    "one_panel_wider_than_n": dict(M=1, N=3, K=4, b_panel=32),
    "narrow_panels": dict(M=5, N=20, K=10, b_panel=8),
}


@needs_x86
@pytest.mark.parametrize("case", PACKED_CASES)
def test_packed_template_reads_b_in_panels(case):
    pytest.importorskip("llvmlite")
    args = PACKED_CASES[case]
    k = tunekit.build(tunekit.Task("matmul", args), target="x86")
    assert k.template == "packed"
    nv, N, K = args["b_panel"], args["N"], args["K"]
    assert k.params[1] == ("B", (cdiv(N, nv), K, nv), "float32")
    assert list(k.config["tile_n"]) == [cdiv(N, nv), nv] and k.config["pack_root"] is False
    # random panels, their padding included: a kernel must not let the padding reach C
    inputs = filled(k.task.op.random_inputs(k.task.args, np.random.default_rng(0)))
    assert inputs[1].shape == (cdiv(N, nv), K, nv)
    run_and_compare(k, k.task, inputs)
    # and with B packed as a model's weights are (zero padding), against the plain matmul
    plain = dict(args, b_panel=0)
    b = np.random.default_rng(1).uniform(-1, 1, (K, N)).astype(np.float32)
    inputs[1][...] = panels(b, nv)
    out = tunekit.empty((args["M"], N), "float32")
    k(*inputs, out)
    (want,) = k.task.op.reference(inputs[0], b, *inputs[2:], **plain)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@needs_x86
@pytest.mark.parametrize("args", [dict(M=13, N=37, K=130, b_panel=32),
                                  dict(M=20, N=50, K=33, b_panel=16, bias=True, activation="relu")],
                         ids=["k_blocks", "bias_relu"])
def test_random_configs_of_the_packed_template_with_b_panel(args):
    pytest.importorskip("llvmlite")
    x86 = make_component("target", "x86")
    ts = tunekit.Task("matmul", args, template="packed").bind(x86)
    assert ts.template.name == "packed" and ts.space.size > 1
    inputs = filled(ts.task.op.random_inputs(ts.task.args, np.random.default_rng(2)))
    rng = random.Random(0)
    indices = ts.space.sample(rng, 3) + [rng.randrange(ts.space.size) for _ in range(2)]
    for index in indices:
        cfg = ts.space.get(index)
        assert cfg["tile_n"][1] == args["b_panel"] and not cfg["pack_root"]
        program = ts.program(index)
        assert [tuple(b.shape) for b in program.params][1] == (cdiv(args["N"], args["b_panel"]), args["K"],
                                                               args["b_panel"])
        run_and_compare(x86.load(x86.build(program)), ts.task, inputs)


# --- packing a graph's weights -----------------------------------------------------------------------------------

def mm(a, b, out, M=4, N=10, K=6, **extra):
    return Node("matmul", dict(M=M, N=N, K=K, dtype="float32", **extra), [a, b], out, name=out, kind="MatMul")


def test_pack_panels_packs_each_constant_once_and_leaves_the_graph_alone():
    rng = np.random.default_rng(0)
    w, w2 = rng.standard_normal((6, 10)).astype(np.float32), rng.standard_normal((10, 10)).astype(np.float32)
    graph = Graph({"x": ((4, 6), "float32"), "y": ((6, 10), "float32")}, {"w": w, "w2": w2},
                  [mm("x", "w", "a"), mm("x", "w", "b"), mm("a", "w2", "c", K=10), mm("x", "y", "d"),
                   mm("x", "w", "e", b_panel=4)],
                  ["b", "c", "d", "e"])
    out = pack_panels(graph, 8)
    assert [n.inputs[1] for n in out.nodes] == ["w:panels8", "w:panels8", "w2:panels8", "y", "w"]
    assert [n.args.get("b_panel", 0) for n in out.nodes] == [8, 8, 8, 0, 4]
    assert set(out.constants) == {"w", "w2", "w:panels8", "w2:panels8"}
    np.testing.assert_array_equal(out.constants["w:panels8"], panels(w, 8))
    assert out.constants["w2:panels8"].shape == (2, 10, 8)
    # the input graph is as it was
    assert set(graph.constants) == {"w", "w2"} and [n.inputs[1] for n in graph.nodes] == ["w", "w", "w2", "y", "w"]
    assert "b_panel" not in graph.nodes[0].args
    out.check()


# --- a model compiled for x86 ---------------------------------------------------------------------------------

@needs_x86
def test_a_model_compiled_for_x86_reads_its_constant_matmul_weight_in_panels(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("llvmlite")
    from onnx import TensorProto, helper
    from test_onnx_graphs import save

    from tunekit.deploy.network import load_graph
    from tunekit.deploy.plan import NetworkPlan
    rng = np.random.default_rng(5)
    F = TensorProto.FLOAT
    w, bias = rng.standard_normal((48, 50)).astype(np.float32), rng.standard_normal(50).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    path = save(tmp_path, nodes, {"x": ([32, 48], F)}, {"y": ([32, 50], F)}, {"w": w, "bias": bias})
    assert onnx.load(path).graph.node[0].op_type == "MatMul"

    target = make_component("target", "x86")
    nv = 2 * target.device().lanes("float32")
    assert target.network_choices().panel_width == nv
    graph = load_graph(path)
    (node,) = [n for n in graph.nodes if n.op == "matmul"]
    assert "b_panel" not in node.args and graph.constants[node.inputs[1]].shape == (48, 50)
    packed = NetworkPlan(graph, target).compiled()
    (pnode,) = [n for n in packed.nodes if n.op == "matmul"]
    assert pnode.args["b_panel"] == nv and pnode.args["bias"] and pnode.args["activation"] == "relu"
    bp = packed.constants[pnode.inputs[1]]
    assert bp.shape == (cdiv(50, nv), 48, nv)
    np.testing.assert_array_equal(from_panels(bp, 50), w)
    assert "b_panel" not in node.args   # the loaded graph is not changed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: default configs
        net = tunekit.compile_model(path, target="x86")
    assert [(n.op, n.args.get("b_panel")) for n in net.graph.nodes] == [("matmul", nv)]
    assert [kernel.template for kernel in net.kernels] == ["packed"]
    x = rng.standard_normal((32, 48)).astype(np.float32)
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = net(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (got == 0).any() and (got > 0).any()   # the relu did cut


def test_panel_width_is_two_vectors_on_cpus_and_zero_where_no_template_takes_panels():
    for name in ("x86", "arm-cpu"):
        target = make_component("target", name)
        assert target.network_choices().panel_width == 2 * target.device().lanes("float32")
    assert make_component("target", "cuda").network_choices().panel_width == 0   # no template takes panels there
