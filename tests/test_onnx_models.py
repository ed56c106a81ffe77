"""Unusual and malformed ONNX files: Constant nodes are constants (a real exporter's ReLU6 is a
Clip of Constant nodes), and every model error names the file and, where there is one, the
node: files that are not ONNX, non-float32 models, nodes whose sizes an op refuses; through
`tunekit.compile_model`, `tunekit run` and a recipe's `model = ...` task."""
from __future__ import annotations

import platform
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from checks import translated
from conftest import require

import tunekit
from tunekit.cli import main as cli
from tunekit.errors import ModelError, RecipeError

onnx = require("onnx")
pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_onnx import conv, conv_bn_relu, model, reference, weight  # noqa: E402

MODELS = Path(__file__).parent / "models"
RNG = np.random.default_rng(1)


def compiled(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # no records: default configs, said by a warning
        return tunekit.compile_model(str(path))


def assert_matches_onnxruntime(path, net):
    x = RNG.standard_normal(net.graph.inputs["x"][0]).astype(np.float32)
    (y,) = net(x)
    ref = reference(str(path), x)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def constant(name, value=None, **attr):
    """A Constant node: `value` a numpy array, or one of value_float(s)/value_int(s)."""
    if value is not None:
        attr = {"value": numpy_helper.from_array(value, name)}
    return helper.make_node("Constant", [], [name], name=f"make_{name}", **attr)


def clip_of_constants(path):
    """A Conv whose weights (through an Identity, as exporters share initializers), bias add and
    ReLU6 bounds come from Constant nodes (the bounds as a 0-d tensor and as value_float, placed
    after the Conv), an Identity of an activation, then a Reshape whose shape is value_ints."""
    c = 6
    nodes = [constant("w0", (RNG.standard_normal((c, 3, 3, 3)) * 0.5).astype(np.float32)),
             helper.make_node("Identity", ["w0"], ["w"], name="shared_w"),
             conv("x", "c", "w"),
             constant("bias", RNG.standard_normal((c, 1, 1)).astype(np.float32)),
             helper.make_node("Add", ["c", "bias"], ["cb"], name="add_bias"),
             constant("lo", np.array(0, np.float32)), constant("hi", value_float=6.0),
             helper.make_node("Clip", ["cb", "lo", "hi"], ["r6"], name="relu6"),
             helper.make_node("Identity", ["r6"], ["r6_"], name="same"),
             helper.make_node("GlobalAveragePool", ["r6_"], ["g"], name="gap"),
             constant("shape", value_ints=[1, -1]),
             helper.make_node("Reshape", ["g", "shape"], ["y"], name="flat")]
    return model(path, nodes, [], [1, 3, 8, 8], [1, c])


def test_constant_nodes_are_constants_wherever_they_appear(tmp_path):
    path = clip_of_constants(tmp_path / "m.onnx")
    graph = translated(path)
    assert [n.op for n in graph.nodes] == ["conv2d", "global_avg_pool2d"]
    # the Constant weights are constants, the Constant bias fused, the Clip of Constant nodes fused as ReLU6
    assert graph.nodes[0].args["bias"] and graph.nodes[0].args["activation"] == "relu6"
    assert_matches_onnxruntime(path, compiled(path))


def test_an_identity_output_read_twice_keeps_its_conv_from_fusing_what_one_reader_does(tmp_path):
    nodes = [conv("x", "c", "w"), helper.make_node("Identity", ["c"], ["ci"], name="same"),
             helper.make_node("Relu", ["ci"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "ci"], ["y"], name="add")]
    path = model(tmp_path / "m.onnx", nodes, [weight("w", 4, 3, 3, 3)], [1, 3, 8, 8], [1, 4, 8, 8])
    graph = translated(path)   # the ReLU and the Add are one generated kernel
    assert [(n.op, n.args.get("activation")) for n in graph.nodes] == [("conv2d", "none"), ("onnx_relu_add", None)]
    assert_matches_onnxruntime(path, compiled(path))


def test_a_dropout_is_its_input_at_inference(tmp_path):
    nodes = [conv("x", "c", "w"), helper.make_node("Dropout", ["c"], ["d"], name="drop"),
             helper.make_node("Relu", ["d"], ["y"], name="relu")]
    path = model(tmp_path / "m.onnx", nodes, [weight("w", 4, 3, 3, 3)], [1, 3, 8, 8], [1, 4, 8, 8])
    graph = translated(path)
    assert [n.op for n in graph.nodes] == ["conv2d"] and graph.nodes[0].args["activation"] == "relu"
    assert_matches_onnxruntime(path, compiled(path))


@pytest.mark.parametrize("attr, value, expect", [
    ("value_float", 2.5, np.float32(2.5)), ("value_floats", [1.0, 2.0], np.array([1, 2], np.float32)),
    ("value_int", 3, np.int64(3)), ("value_ints", [1, -1], np.array([1, -1], np.int64))])
def test_every_kind_of_constant_value_is_read(attr, value, expect):
    from tunekit_plugins.frontends.onnx.load import constant_value
    got = constant_value(helper.make_node("Constant", [], ["k"], name="k", **{attr: value}), "m.onnx")
    assert got.dtype == expect.dtype and np.array_equal(got, expect)


def test_a_constant_of_strings_is_refused_by_name():
    from tunekit_plugins.frontends.onnx.load import constant_value
    with pytest.raises(ModelError, match=r"m.onnx: node 'k' \(Constant\).*value_strings"):
        constant_value(helper.make_node("Constant", [], ["k"], name="k", value_strings=[b"a"]), "m.onnx")


def check_exported(path):
    """`path` is the TorchScript exporter's tiny MobileNet-v2: every ReLU6 a Clip of Constant nodes,
    a bias shared with another conv through an Identity node."""
    m = onnx.load(str(path))
    made_by = {o: n.op_type for n in m.graph.node for o in n.output}
    clips = [n for n in m.graph.node if n.op_type == "Clip"]
    assert len(clips) == 7 and all(made_by.get(i) == "Constant" for n in clips for i in n.input[1:])
    assert any(made_by.get(n.input[2]) == "Identity" for n in m.graph.node if n.op_type == "Conv")
    graph = translated(path)
    assert [(n.op, n.args.get("activation"), n.args.get("residual")) for n in graph.nodes] == [
        ("conv2d", "relu6", False), ("depthwise_conv2d", "relu6", False), ("conv2d", "none", True),
        ("conv2d", "relu6", False), ("depthwise_conv2d", "relu6", False), ("conv2d", "none", False),
        ("conv2d", "relu6", False), ("depthwise_conv2d", "relu6", False), ("conv2d", "none", True),
        ("conv2d", "relu6", False), ("global_avg_pool2d", None, None), ("dense", "none", False)]
    assert_matches_onnxruntime(path, compiled(path))


def test_the_committed_torch_export_of_a_tiny_mobilenet_v2_runs_and_matches_onnxruntime():
    check_exported(MODELS / "tiny_mobilenet_v2.onnx")     # made by tests/models/make_tiny_mobilenet.py


def test_a_fresh_torch_export_of_a_tiny_mobilenet_v2_runs_and_matches_onnxruntime(tmp_path):
    require("torch", "a fresh torch export of MobileNet-V2")
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_tiny_mobilenet", MODELS / "make_tiny_mobilenet.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # the TorchScript exporter is deprecated (and says so)
        path = maker.make(str(tmp_path / "tm.onnx"), seed=3)
    check_exported(path)


# --- files that are not ONNX models -------------------------------------------------------------------------

def not_onnx(tmp_path, kind) -> str:
    path = tmp_path / "bad.onnx"
    good = Path(conv_bn_relu(tmp_path / "good.onnx")).read_bytes()
    data = {"empty": b"", "truncated": good[: len(good) // 2], "text": b"hello, this is not a model\n",
            "binary": bytes(range(256)) * 4, "zip": b"PK\x03\x04" + bytes(100)}
    if kind == "folder":
        path.mkdir()
    elif kind != "missing":
        path.write_bytes(data[kind])
    return str(path)


KINDS = ["empty", "truncated", "text", "binary", "zip", "folder", "missing"]
SAYS = {"empty": "the file is empty", "folder": "cannot read", "missing": "cannot read"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_that_is_not_an_onnx_model_is_a_model_error_naming_it(tmp_path, kind):
    path = not_onnx(tmp_path, kind)
    with pytest.raises(ModelError) as e:
        tunekit.compile_model(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and SAYS.get(kind, "not an ONNX model") in msg, msg
    assert "\n" not in msg and "DecodeError" not in msg
    if kind not in ("folder", "missing"):
        assert "export" in msg            # what to do next


@pytest.mark.parametrize("kind", ["empty", "truncated", "binary"])
def test_tunekit_run_says_one_error_line_for_a_file_that_is_not_onnx(tmp_path, capsys, kind):
    path = not_onnx(tmp_path, kind)
    assert cli.main(["run", path]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {path}: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def recipe_with_model(tmp_path, model_file: str) -> Path:
    recipe = tmp_path / "net.toml"
    recipe.write_text(f'[target]\nname = "x86"\n\n[[tasks]]\nop = "matmul"\nargs = {{M = 8, N = 8, K = 8}}\n\n'
                      f'[[tasks]]\nmodel = "{model_file}"\n')
    return recipe


@pytest.mark.parametrize("kind", ["truncated", "binary"])
def test_a_recipes_model_task_names_the_recipe_the_field_and_the_model_file(tmp_path, kind):
    path = Path(not_onnx(tmp_path, kind))
    recipe = recipe_with_model(tmp_path, path.name)
    with pytest.raises(RecipeError) as e:
        tunekit.load_recipe(recipe)
    assert str(e.value).startswith(f"{recipe}: tasks[1].model: {path.resolve()}: not an ONNX model"), str(e.value)


# --- models that are not float32 ----------------------------------------------------------------------------

def float16_model(path):
    """conv_bn_relu in float16: its input, output and initializers."""
    m = onnx.load(conv_bn_relu(path))
    for t in m.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in [*m.graph.input, *m.graph.output]:
        v.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.save(m, str(path))
    return str(path)


def half_inside(path):
    """float32 input and output, but a tensor inside is cast to float16 and back."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], name="to_half", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["f"], name="to_float", to=TensorProto.FLOAT), conv("f", "y", "w")]
    return model(path, nodes, [weight("w", 4, 3, 3, 3)], [1, 3, 8, 8], [1, 4, 8, 8])


def unused_double(path):
    """A float64 initializer (the checker allows one that no node reads)."""
    extra = numpy_helper.from_array(np.ones(4), "extra")
    return model(path, [conv("x", "y", "w")], [weight("w", 4, 3, 3, 3), extra], [1, 3, 8, 8], [1, 4, 8, 8])


def int64_output(path):
    nodes = [conv("x", "c", "w"), helper.make_node("ArgMax", ["c"], ["y"], name="argmax", axis=1, keepdims=1)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 1, 8, 8])],
                              [weight("w", 4, 3, 3, 3)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


@pytest.mark.parametrize("make, says", [
    (float16_model, "input 'x' is float16"),
    (half_inside, r"tensor 'h' of node 'to_half' \(Cast\) is float16"),
    (unused_double, "initializer 'extra' is float64"),
    (int64_output, "output 'y' is int64")])
def test_a_model_that_is_not_float32_is_refused_with_its_dtype(tmp_path, make, says):
    path = make(tmp_path / "m.onnx")
    with pytest.raises(ModelError, match=f"^{re.escape(path)}: {says}; tunekit runs float32 models only"):
        tunekit.deploy.network.load_graph(path)


def test_tunekit_run_refuses_a_float16_model_before_running_it(tmp_path, capsys):
    path = float16_model(tmp_path / "m.onnx")
    assert cli.main(["run", path]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {path}: input 'x' is float16;") and err.count("\n") == 1, err


# --- nodes whose sizes the ops refuse -----------------------------------------------------------------------

def one_conv(path, hw, c=3, k=4):
    return model(path, [conv("x", "y", "w")], [weight("w", k, c, 3, 3)], [1, c, *hw], [1, k, *hw])


@pytest.mark.parametrize("hw, says", [
    ((0, 8), r"args\.H: Input should be greater than or equal to 1 \(got 0\)"),
    ((2**31, 8), r"args\.H: Input should be less than or equal to 2147483647"),
    ((2**31 - 1, 2**31 - 1), "do not fit 64-bit counters")])
def test_a_nodes_bad_sizes_name_the_file_and_the_node(tmp_path, hw, says):
    path = one_conv(tmp_path / "m.onnx", hw)
    with pytest.raises(ModelError, match=rf"^{re.escape(path)}: node 'y' \(Conv\): op 'conv2d': .*{says}"):
        tunekit.extract_tasks(path)


def where(recipe, path) -> str:
    """The start of a recipe error about its model task's file (a regular expression)."""
    return rf"^{re.escape(str(recipe))}: tasks\[1\]\.model: {re.escape(str(Path(path).resolve()))}: "


def test_a_node_whose_arrays_outgrow_the_targets_memory_names_the_file_and_the_node(tmp_path):
    path = one_conv(tmp_path / "m.onnx", (10**6, 10**6))      # 28 TB of arrays
    with pytest.raises(ModelError, match=rf"^{re.escape(path)}: node 'y' \(Conv\): the arrays of conv2d\(.*\) "
                                         "need .* GiB, more than the .* GiB of memory of target 'x86'"):
        compiled(path)
    with pytest.raises(ModelError, match=rf"^{re.escape(path)}: node 'y' \(Conv\): the arrays"):
        tunekit.extract_tasks(path)
    recipe = recipe_with_model(tmp_path, "m.onnx")
    with pytest.raises(RecipeError, match=where(recipe, path) + r"node 'y' \(Conv\): the arrays"):
        tunekit.load_recipe(recipe)


def test_a_recipes_model_task_with_a_zero_sized_node_names_the_recipe_the_field_the_file_and_the_node(tmp_path):
    path = one_conv(tmp_path / "m.onnx", (0, 8))
    recipe = recipe_with_model(tmp_path, "m.onnx")
    with pytest.raises(RecipeError, match=where(recipe, path) + r"node 'y' \(Conv\): op 'conv2d': args\.H"):
        tunekit.load_recipe(recipe)


def test_a_1d_convolution_is_refused_by_name(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv1d", pads=[1, 1])]
    w = numpy_helper.from_array(np.ones((4, 3, 3), np.float32), "w")
    path = model(tmp_path / "m.onnx", nodes, [w], [1, 3, 8], [1, 4, 8])
    with pytest.raises(ModelError, match=rf"^{re.escape(path)}: node 'conv1d' \(Conv\) is not supported: .*2-D"):
        tunekit.deploy.network.load_graph(path)


# --- what the loader checks for every frontend --------------------------------------------------------------

def test_the_loader_names_the_file_and_the_node_for_any_frontends_bad_graph(tmp_path):
    from types import SimpleNamespace

    from tunekit.graph import Graph, Node

    class ToyFrontend(tunekit.Frontend):
        """A third party's frontend: its nodes have names but no `kind`."""
        name, suffixes = "toy", (".toy",)

        def load(self, path):
            args = dict(N=1, C=3, H=0 if "zero" in path else 8, W=8, K_out=4, R=3, S=3, stride=(1, 1),
                        padding=(1, 1), dilation=(1, 1))
            data = "nowhere" if "dangling" in path else "x"
            return Graph({"x": ((1, 3, 8, 8), "float32")}, {"w": np.ones((4, 3, 3, 3), np.float32)},
                         [Node("conv2d", args, [data, "w"], "y", "layer1")], ["y"])

    tunekit.register_plugin(SimpleNamespace(tunekit_frontends=tunekit.hookimpl(lambda: [ToyFrontend])), "toy")
    try:
        assert tunekit.deploy.network.load_graph("fine.toy").source == "fine.toy"
        with pytest.raises(ModelError, match=r"^zero\.toy: node 'layer1' \(conv2d\): op 'conv2d': args\.H"):
            tunekit.deploy.network.load_graph("zero.toy")
        with pytest.raises(ModelError, match=r"^dangling\.toy: node 'layer1' \(conv2d\) reads \['nowhere'\]"):
            tunekit.deploy.network.load_graph("dangling.toy")
    finally:
        tunekit.unregister_plugin("toy")
