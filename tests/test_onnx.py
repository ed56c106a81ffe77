"""ONNX models built here with onnx.helper (seeded random weights) compile to plans of
tunekit kernels and match onnxruntime: conv+bn+relu, a residual block, a depthwise
block with ReLU6; unsupported nodes and wrong inputs are clear errors."""
from __future__ import annotations

import platform
import warnings

import numpy as np
import pytest
from checks import translated
from conftest import require

import tunekit
from tunekit.errors import ArgumentError, ModelError

onnx = require("onnx")
pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)


def weight(name, *shape, scale=0.3):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def conv(x, out, w, b=None, pads=1, group=1, stride=1):
    ins = [x, w] + ([b] if b else [])
    return helper.make_node("Conv", ins, [out], name=out, pads=[pads] * 4, strides=[stride] * 2, group=group)


def batchnorm(x, out, c):
    inits = [numpy_helper.from_array(v.astype(np.float32), f"{out}.{k}") for k, v in
             (("s", RNG.uniform(0.5, 1.5, c)), ("b", RNG.normal(0, 0.1, c)), ("m", RNG.normal(0, 0.1, c)),
              ("v", RNG.uniform(0.5, 1.5, c)))]
    return helper.make_node("BatchNormalization", [x] + [i.name for i in inits], [out], name=out), inits


def model(path, nodes, inits, in_shape, out_shape, out="y"):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, str(path))
    return str(path)


def conv_bn_relu(path):
    bn, bn_inits = batchnorm("c", "bn", 8)
    return model(path, [conv("x", "c", "w"), bn, helper.make_node("Relu", ["bn"], ["y"], name="relu")],
                 [weight("w", 8, 3, 3, 3)] + bn_inits, [1, 3, 12, 12], [1, 8, 12, 12])


def residual_block(path):
    bn1, i1 = batchnorm("c1", "bn1", 8)
    bn2, i2 = batchnorm("c2", "bn2", 8)
    nodes = [conv("x", "c1", "w1"), bn1, helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2", "b2"), bn2, helper.make_node("Add", ["bn2", "x"], ["sum"], name="add"),
             helper.make_node("Relu", ["sum"], ["y"], name="relu2")]
    return model(path, nodes, [weight("w1", 8, 8, 3, 3), weight("w2", 8, 8, 3, 3), weight("b2", 8)] + i1 + i2,
                 [1, 8, 10, 10], [1, 8, 10, 10])


def depthwise_block(path):
    lo, hi = numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")
    nodes = [conv("x", "d", "wd", "bd", group=8, stride=2),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"], name="relu6"),
             conv("d6", "y", "wp", "bp", pads=0)]
    return model(path, nodes, [weight("wd", 8, 1, 3, 3, scale=2.0), weight("bd", 8), weight("wp", 16, 8, 1, 1),
                               weight("bp", 16), lo, hi], [1, 8, 14, 14], [1, 16, 7, 7])


def reference(path, x):
    ort = require("onnxruntime")
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("make", [conv_bn_relu, residual_block, depthwise_block])
def test_small_networks_match_onnxruntime(tmp_path, make):
    path = make(tmp_path / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # no records: default configs, said by a warning
        net = tunekit.compile_model(path, target="x86")
    x = RNG.standard_normal(net.graph.inputs["x"][0]).astype(np.float32)
    (y,) = net(x)
    np.testing.assert_allclose(y, reference(path, x), rtol=1e-4, atol=1e-4)
    (again,) = net(x)                        # buffers are reused; results are fresh arrays
    np.testing.assert_array_equal(y, again)


def test_fusion_and_task_extraction(tmp_path):
    path = residual_block(tmp_path / "m.onnx")
    graph = translated(path)
    assert [(n.op, n.args["bias"], n.args["residual"], n.args["activation"]) for n in graph.nodes] == [
        ("conv2d", True, False, "relu"), ("conv2d", True, True, "relu")]     # BN folded, Add and Relu fused
    tasks = tunekit.extract_tasks(path)
    assert len(tasks) == 1 and tasks[0][1] == 2 and "bias" not in tasks[0][0].args   # one anchor task, twice


def test_a_partly_tuned_model_warns_about_its_fallback_kernels(tmp_path):
    path = depthwise_block(tmp_path / "m.onnx")
    db = str(tmp_path / "t.db")
    (first, _), (second, _) = tunekit.extract_tasks(path)
    tunekit.tune([first], trials=2, database=db, measure={"repeat": 1, "min_repeat_ms": 1})
    with pytest.warns(UserWarning, match="1 of the network's 2 tasks have no tuning record.*conv2d"):
        net = tunekit.compile_model(path, target="x86", database=db)
    assert net.fallback == [second.name]
    x = RNG.standard_normal((1, 8, 14, 14)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-4)
    assert [r["tuned"] for r in net.profile(repeat=2)] == [True, False]
    with pytest.raises(ArgumentError, match=r"input 'x' must be a float32 array of shape \[1, 8, 14, 14\]"):
        net(x[:, :4])


def test_a_profile_times_each_layer_alone_and_within_whole_runs(tmp_path, monkeypatch):
    """A layer's "seconds" are its runs one after another (as tuning times it), its "in_run"
    its time after the layers before it in whole runs of the network: here the layers
    advance the clock by a different amount in each situation."""
    import types

    import tunekit.runtime.model as runtime_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: default configs
        net = tunekit.compile_model(depthwise_block(tmp_path / "m.onnx"))
    now, last = [0.0], [None]

    def layer(k):
        def call():   # alone (right after itself) k + 1 seconds; after another layer 5 times that
            now[0] += (1.0 if last[0] == k else 5.0) * (k + 1)
            last[0] = k
        return call
    net.calls = [layer(k) for k in range(len(net.calls))]
    monkeypatch.setattr(runtime_model, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    rows = net.profile(repeat=3)
    assert len(rows) == 2
    assert [(r["seconds"], r["in_run"]) for r in rows] == [(1.0, 5.0), (2.0, 10.0)]


def test_unsupported_nodes_are_named_all_at_once(tmp_path):
    nodes = [conv("x", "c", "w"), helper.make_node("Hardmax", ["c"], ["s"], name="hard1", axis=1),
             helper.make_node("Softsign", ["s"], ["g"], name="gate"),
             helper.make_node("Sign", ["g"], ["y"], name="sign")]
    path = model(tmp_path / "m.onnx", nodes, [weight("w", 4, 3, 3, 3)], [1, 3, 8, 8], [1, 4, 8, 8])
    with pytest.raises(ModelError, match=r"m.onnx: 3 node\(s\) of types tunekit does not read \(opset \d+\): "
                                         r"'hard1' \(Hardmax\); 'gate' \(Softsign\); 'sign' \(Sign\) \(supported: "
                                         r"Abs, Add, "):
        tunekit.compile_model(path)
    with pytest.raises(ModelError, match="no frontend reads .pt files"):
        tunekit.compile_model(str(tmp_path / "m.pt"))


def test_a_recipe_tunes_a_models_tasks_weighted_and_tunekit_run_runs_it(tmp_path, capsys):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tunekit.cli import main as cli
    examples = Path(__file__).parent.parent / "examples"
    subprocess.run([sys.executable, str(examples / "small_net.py"), str(tmp_path / "small_net.onnx")], check=True,
                   capture_output=True)
    recipe = tmp_path / "small_net.toml"
    shutil.copy(examples / "small_net.toml", recipe)
    r = tunekit.load_recipe(recipe)
    tasks = r.task_objects()
    assert [t.weight for t in tasks] == [1, 2, 1, 1] and len({t.key for t in tasks}) == 4
    text = recipe.read_text().replace("trials = 32", "trials = 3").replace('"xgboost"', '"random"')
    text += "\n[measure]\nnumber = 1\nrepeat = 1\nmin_repeat_ms = 0\n"   # each of ~30 configs timed once
    recipe.write_text(text.replace('path = "small_net.db"', f'path = "{tmp_path / "small_net.db"}"'))
    assert cli.main(["tune", str(recipe)]) == 0
    summary = capsys.readouterr().out
    assert "network: " in summary and "ms estimated" in summary
    assert cli.main(["run", str(tmp_path / "small_net.onnx"), "--database", str(tmp_path / "small_net.db"),
                     "--repeat", "2"]) == 0
    out, err = capsys.readouterr()
    assert "ms per run" in out and "outputs match onnxruntime" in out and "fallback" not in out and err == ""
    assert "ms in runs" in out and " ms in runs (the gap: " in out   # each layer alone and within runs


def pool_and_head(path, c: int = 8):
    nodes = [conv("x", "c", "w", "b"), helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["p"], ["a"], name="avg", kernel_shape=[2, 2], strides=[1, 1]),
             helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat", axis=1),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], name="fc", transB=1)]
    return model(path, nodes, [weight("w", c, 3, 3, 3), weight("b", c), weight("fc", 10, c), weight("fcb", 10)],
                 [1, 3, 16, 16], [1, 10])


def test_pooling_flatten_and_gemm_match_onnxruntime(tmp_path):
    path = pool_and_head(tmp_path / "m.onnx")
    graph = translated(path)
    assert [n.op for n in graph.nodes] == ["conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "dense"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(path)
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    (y,) = net(x)
    assert y.shape == (1, 10)
    np.testing.assert_allclose(y, reference(path, x), rtol=1e-4, atol=1e-5)


def grouped_and_padded(path):
    """A grouped conv (4 groups), padded average pools counting the padding or not, and a
    Gemm with [in, out] weights (transB = 0) followed by a ReLU."""
    nodes = [conv("x", "g", "wg", "bg", group=4), helper.make_node("Relu", ["g"], ["r"], name="relu"),
             helper.make_node("AveragePool", ["r"], ["a"], name="avg_excl", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["a"], ["b"], name="avg_incl", kernel_shape=[3, 2], strides=[1, 1],
                              pads=[1, 0, 1, 0], count_include_pad=1),
             helper.make_node("Flatten", ["b"], ["f"], name="flat", axis=1),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["z"], name="fc"),
             helper.make_node("Relu", ["z"], ["y"], name="fc_relu")]
    return model(path, nodes, [weight("wg", 16, 2, 3, 3), weight("bg", 16), weight("fc", 16 * 5 * 4, 12),
                               weight("fcb", 12)], [1, 8, 9, 9], [1, 12])


def test_grouped_conv_padded_average_pools_and_gemm_match_onnxruntime(tmp_path):
    path = grouped_and_padded(tmp_path / "m.onnx")
    graph = translated(path)
    assert [(n.op, n.args.get("groups"), n.args.get("count_include_pad")) for n in graph.nodes] == [
        ("group_conv2d", 4, None), ("avg_pool2d", None, False), ("avg_pool2d", None, True), ("dense", None, None)]
    assert graph.nodes[-1].args["activation"] == "relu" and graph.nodes[-1].args["bias"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(path)
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    (y,) = net(x)
    np.testing.assert_allclose(y, reference(path, x), rtol=1e-4, atol=1e-5)


def _networks():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("networks", Path(__file__).parent.parent / "examples" / "networks.py")
    networks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(networks)
    return networks


@pytest.mark.parametrize("exporter", ["onnx", "torch"])
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_resnet18_and_mobilenet_v2_run_and_match_onnxruntime(tmp_path, name, exporter):
    """Both ways examples/networks.py writes them: onnx.helper, and torch.onnx.export of the torch.nn module."""
    if exporter == "torch":
        require("torch", "the torch exports of ResNet-18 and MobileNet-V2")
    path = getattr(_networks(), name)(str(tmp_path / f"{name}.onnx"), size=64, exporter=exporter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(path)
    x = RNG.standard_normal((1, 3, 64, 64)).astype(np.float32)
    (y,) = net(x)
    ref = reference(path, x)
    assert y.shape == (1, 1000)
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_the_torch_modules_and_both_onnx_files_of_a_network_compute_the_same(tmp_path, name):
    """examples/networks.py: the torch.nn module, its torch.onnx export and the onnx.helper file (written
    without PyTorch) have the same layers and weights (bench/e2e.py times the module against the file)."""
    torch = require("torch", "the torch modules of ResNet-18 and MobileNet-V2")
    require("onnxruntime")
    networks = _networks()
    x = RNG.standard_normal((1, 3, 64, 64)).astype(np.float32)
    with torch.inference_mode():
        want = getattr(networks, f"{name}_module")()(torch.from_numpy(x)).numpy()
    for exporter in ("torch", "onnx"):
        path = getattr(networks, name)(str(tmp_path / f"{name}-{exporter}.onnx"), size=64, exporter=exporter)
        np.testing.assert_allclose(reference(path, x), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
