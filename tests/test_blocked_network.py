"""Blocked activations through a network (`tunekit.graph.blocking`): on x86 the convs and
pools of a model pass NCHW{lanes}c tensors from layer to layer with weights blocked
at compile time, NCHW{lanes/2}c where only half a vector divides the channels; a
tensor stays NCHW where it must (the model's inputs and feature-map outputs, channel
counts that neither block divides); the outputs match onnxruntime either way, and
the tasks extracted are the ones the model runs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from checks import translated

import tunekit
from tunekit.deploy.plan import NetworkPlan
from tunekit.graph.blocking import block_activations, plan_blocks

pytest.importorskip("onnx")
from test_onnx import RNG, conv, conv_bn_relu, helper, model, pool_and_head, reference, weight


@pytest.fixture(scope="module")
def x86():
    pytest.importorskip("llvmlite")
    return tunekit.registry().component("target", "x86")()


def compiled(path, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # no records: default configs
        return tunekit.compile_model(path, target=target)


def layouts(graph) -> list[str]:
    return [n.args.get("layout", "NCHW") + ("<" + n.args["data_layout"] if "data_layout" in n.args else "")
            for n in graph.nodes]


def test_layers_pass_blocked_tensors_and_match_onnxruntime(tmp_path, x86):
    b = x86.network_choices().channel_block
    assert b == x86.device().lanes("float32")
    path = pool_and_head(tmp_path / "m.onnx", 2 * b)   # conv, max pool, average pool, global pool, gemm
    net = compiled(path, x86)
    blk = f"NCHW{b}c"
    # the first conv reads the NCHW input; the gemm reads the 1x1 global pool, the same bytes in both layouts
    assert layouts(net.graph) == [f"{blk}<NCHW", blk, blk, blk, "NCHW"]
    assert net.graph.constants[net.graph.nodes[0].inputs[1]].shape == (2, 3, 3, 3, b)   # blocked once, here
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-5)
    tasks = tunekit.extract_tasks(path, target=x86)
    assert [t.args.get("layout", "NCHW") for t, _ in tasks] == [blk, blk, blk, blk, "NCHW"]
    assert {t.key for t, _ in tasks} == {tunekit.Task(n.op, n.args).anchor().key for n in net.graph.nodes}


def test_feature_map_outputs_and_odd_channel_counts_stay_nchw(tmp_path, x86):
    path = conv_bn_relu(tmp_path / "a.onnx")        # its output is the conv's feature map
    assert layouts(compiled(path, x86).graph) == ["NCHW"]
    b = x86.network_choices().channel_block
    odd = b // 2 + 1                                 # not a whole number of blocks, nor of half blocks
    nodes = [conv("x", "c1", "w1"), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2", pads=0), helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             conv("r2", "d", "wd", group=2 * b), helper.make_node("GlobalAveragePool", ["d"], ["y"], name="gap")]
    path = model(tmp_path / "b.onnx", nodes, [weight("w1", odd, 3, 3, 3), weight("w2", 2 * b, odd, 1, 1),
                                              weight("wd", 2 * b, 1, 3, 3)], [1, 3, 9, 9], [1, 2 * b, 1, 1])
    net = compiled(path, x86)
    blk = f"NCHW{b}c"
    assert layouts(net.graph) == ["NCHW", f"{blk}<NCHW", blk, blk]
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-5)


def test_channels_of_half_a_block_pass_in_half_blocks(tmp_path, x86):
    # MobileNet-v2's 24 channels where the vector is 16: a conv writes blocks of b/2, the next
    # reads them into blocks of b, and the depthwise conv and residual between stay in b/2
    b = x86.network_choices().channel_block
    h = b // 2 * 3                                   # 1.5 vectors: half blocks only
    nodes = [conv("x", "c1", "w1"), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2", pads=0),
             conv("c2", "d", "wd", group=h), helper.make_node("Add", ["d", "c2"], ["s"], name="add"),
             conv("s", "c3", "w3", pads=0), helper.make_node("GlobalAveragePool", ["c3"], ["y"], name="gap")]
    path = model(tmp_path / "h.onnx", nodes, [weight("w1", b, 3, 3, 3), weight("w2", h, b, 1, 1),
                                              weight("wd", h, 1, 3, 3), weight("w3", 2 * b, h, 1, 1)],
                 [1, 3, 9, 9], [1, 2 * b, 1, 1])
    net = compiled(path, x86)
    blk, half = f"NCHW{b}c", f"NCHW{b // 2}c"
    assert layouts(net.graph) == [f"{blk}<NCHW", f"{half}<{blk}", half, f"{blk}<{half}", blk]
    assert net.graph.nodes[2].args["residual"]
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-5)


def test_a_dense_reads_a_flattened_feature_map_blocked_with_its_weights_permuted(tmp_path, x86):
    # the DQN's head: conv -> conv -> Flatten -> Gemm; the convs stay blocked, and the Gemm's
    # weights follow the blocked order of the elements it reads
    b = x86.network_choices().channel_block
    nodes = [conv("x", "c1", "w1", stride=2), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2", pads=0), helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], name="flat", axis=1),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], name="fc", transB=1)]
    path = model(tmp_path / "d.onnx", nodes, [weight("w1", b, 4, 3, 3), weight("w2", 2 * b, b, 3, 3),
                                              weight("fc", 10, 2 * b * 3 * 3), weight("fcb", 10)],
                 [1, 4, 10, 10], [1, 10])
    net = compiled(path, x86)
    blk = f"NCHW{b}c"
    assert layouts(net.graph) == [f"{blk}<NCHW", blk, "NCHW"]
    assert net.graph.nodes[2].inputs[1].endswith(blk)     # the permuted weights
    x = RNG.standard_normal((1, 4, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-4)


def test_a_residual_read_in_nchw_keeps_its_conv_nchw(tmp_path):
    from test_onnx import residual_block
    graph = translated(residual_block(tmp_path / "m.onnx"))
    # the second conv adds the NCHW input x and is the output: neither conv can pass a blocked tensor
    shapes = NetworkPlan(graph, tunekit.registry().component("target", "x86")()).shapes(graph)
    assert layouts(block_activations(graph, plan_blocks(graph, 4, shapes, {"conv2d"}))) == ["NCHW", "NCHW"]
    assert layouts(graph) == ["NCHW", "NCHW"]       # the pass returns a new graph


def test_targets_without_blocked_templates_keep_nchw(tmp_path):
    from fakes import FakeGpu
    assert FakeGpu().network_choices().channel_block == 0
