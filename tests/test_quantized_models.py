"""Models quantized by onnxruntime's own tools (static QDQ with per-channel weights, static
QOperator, dynamic) run through the ONNX frontend and match onnxruntime on the same file: every
output within one quantization step of it; a quantized node tunekit does not read is named."""
from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import require

import tunekit
from tunekit.deploy.plan import passes_without
from tunekit.errors import ModelError

onnx = require("onnx")
ort = require("onnxruntime")
quantization = require("onnxruntime.quantization")
pytest.importorskip("llvmlite")   # the x86 target
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(5)
SHAPE = (1, 4, 6, 6)


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self):
        self.feeds = iter([{"x": RNG.standard_normal(SHAPE).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.feeds, None)


def _float_model(path: str) -> None:
    """A small float32 model: Conv, Relu, a depthwise Conv added back (a residual), the global
    average pool, Flatten, MatMul and Add (a linear layer)."""
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "dw.weight", "dw.bias"], ["d"], name="dw", pads=[1, 1, 1, 1], group=8),
             helper.make_node("Add", ["r", "d"], ["s"], name="residual"),
             helper.make_node("GlobalAveragePool", ["s"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc.weight"], ["m"], name="fc"),
             helper.make_node("Add", ["m", "fc.bias"], ["y"], name="fc.add")]
    inits = {"conv.weight": RNG.standard_normal((8, 4, 3, 3)) * 0.3, "conv.bias": RNG.standard_normal(8) * 0.1,
             "dw.weight": RNG.standard_normal((8, 1, 3, 3)) * 0.3, "dw.bias": RNG.standard_normal(8) * 0.1,
             "fc.weight": RNG.standard_normal((8, 5)), "fc.bias": RNG.standard_normal(5)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _quantized(tmp_path, how: str) -> str:
    src, path = str(tmp_path / "float.onnx"), str(tmp_path / f"{how.replace(' ', '_')}.onnx")
    _float_model(src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)   # its advice to pre-process the model first
        try:
            if how == "dynamic":
                quantization.quantize_dynamic(src, path)
            else:
                fmt = quantization.QuantFormat.QDQ if how == "static QDQ" else quantization.QuantFormat.QOperator
                unsigned = quantization.QuantType.QUInt8 if "uint8" in how else quantization.QuantType.QInt8
                quantization.quantize_static(src, path, _Calibration(), quant_format=fmt, activation_type=unsigned,
                                             per_channel=how == "static QDQ")
        finally:
            logging.disable(logging.NOTSET)
    return path


@pytest.mark.parametrize("how,ops,dot", [
    ("static QDQ", {"QuantizeLinear", "DequantizeLinear"}, True),
    ("static QOperator", {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QLinearMatMul"}, True),
    ("static QOperator uint8", {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QLinearMatMul"}, True),
    ("dynamic", {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"}, True)])
def test_a_model_quantized_by_onnxruntime_matches_onnxruntime_within_one_quantization_step(tmp_path, how, ops, dot):
    """`dot`: its product of 8-bit data and int8 weights runs as qmatmul (the dot instruction; int8 data
    through a te call that makes it uint8): the QDQ MatMul too, its data's constant zero point and the
    bias in the column sums. A static model's convolutions run as qconv2d, the QOperator form's too
    (read as the QDQ form it computes)."""
    path = _quantized(tmp_path, how)
    model = onnx.load(path)
    assert ops <= {n.op_type for n in model.graph.node}, "the quantizer wrote another form: the test reads nothing"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no tuning records: default configs
        net = tunekit.compile_model(path, target="x86")
    assert ("qmatmul" in {n.op for n in net.graph.nodes}) == dot
    if how.startswith("static"):   # the convolution and the depthwise one in int8, none in float (QOperator too)
        assert "qconv2d" in {n.op for n in net.graph.nodes} and not {"conv2d", "depthwise_conv2d"} & \
            {n.op for n in net.graph.nodes}
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    # one step of the output: the scale it is dequantized with (a dynamic model's output is float)
    step = float(scales["y_scale"]) if "y_scale" in scales else 1e-5
    for _ in range(3):
        x = RNG.standard_normal(SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(net(x)[0], want, rtol=1e-5, atol=step * 1.01)


def test_a_quantized_node_tunekit_does_not_read_is_named_with_its_domain(tmp_path):
    path = str(tmp_path / "sigmoid.onnx")
    scalar = lambda name, v, t: numpy_helper.from_array(np.array(v, t), name)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("QLinearSigmoid", ["q", "s", "z", "s", "z"], ["qs"], name="sig", domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["qs", "s", "z"], ["y"], name="dq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [scalar("s", 0.1, np.float32), scalar("z", 3, np.uint8)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("com.microsoft", 1)]), path)
    with pytest.raises(ModelError, match=rf"^{re.escape(path)}: 1 node\(s\) of types tunekit does not read .*'sig' "
                                         r"\(QLinearSigmoid, domain com.microsoft\)"):
        tunekit.compile_model(path, target="x86")


def test_tunekit_run_tells_a_quantized_output_s_difference_from_onnxruntime_in_steps(tmp_path, capsys):
    from tunekit.cli import main as cli
    path = _quantized(tmp_path, "static QDQ")
    assert cli.main(["run", path, "--repeat", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    step = float(numpy_helper.to_array(next(t for t in onnx.load(path).graph.initializer if t.name == "y_scale")))
    assert re.search(rf"output 'y' \(quantized, step {step:.3g}\): largest difference from onnxruntime "
                     r"[01]\.\d\d steps; 0\.00% of its values differ by more than one step", out), out


def _cnn(path: str, shape=(1, 3, 12, 12)) -> None:
    """A small float32 CNN of ResNet's kinds: Conv (3 input channels, as an image's) and ReLU, MaxPool, a
    residual block (Conv, Add, ReLU), a strided 1x1 Conv, GlobalAveragePool, Flatten, Gemm."""
    conv = lambda i, o, **a: helper.make_node("Conv", [i, f"{o}.w", f"{o}.b"], [o], name=o, **a)
    nodes = [conv("x", "c1", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
             helper.make_node("MaxPool", ["r1"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             conv("p", "c2", pads=[1, 1, 1, 1]), helper.make_node("Add", ["c2", "p"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r2"], name="r2"), conv("r2", "c3", strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["c3"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1)]
    inits = {"c1.w": RNG.standard_normal((8, 3, 3, 3)) * 0.4, "c1.b": RNG.standard_normal(8) * 0.1,
             "c2.w": RNG.standard_normal((8, 8, 3, 3)) * 0.2, "c2.b": RNG.standard_normal(8) * 0.1,
             "c3.w": RNG.standard_normal((16, 8, 1, 1)) * 0.4, "c3.b": RNG.standard_normal(16) * 0.1,
             "fc.w": RNG.standard_normal((5, 16)) * 0.3, "fc.b": RNG.standard_normal(5) * 0.1}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_qdq_convolutions_run_as_int8_convolutions_channels_last_and_match_onnxruntime(tmp_path):
    """The QDQ pass: each QDQ Conv is one qconv2d, the Gemm a qmatmul; the max pool takes the uint8 values
    themselves; the residual Add runs on the channels-last tensors; NCHW again only for the global pool.
    Without the pass the same file runs in float32 on the dequantized weights."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    from quantized_nets import quantize
    src, path = str(tmp_path / "cnn.onnx"), str(tmp_path / "cnn_int8.onnx")
    _cnn(src)
    feeds = lambda seed: {"x": np.random.default_rng(seed).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    quantize(src, path, feeds, samples=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no tuning records: default configs
        net = tunekit.compile_model(path, target="x86")
        floats = tunekit.compile_model(path, target="x86", passes=passes_without(["qdq"]))
    assert "conv2d" in {n.op for n in floats.graph.nodes} and not {"qconv2d", "qmatmul"} & \
        {n.op for n in floats.graph.nodes}
    ops = [n.op for n in net.graph.nodes]
    assert ops.count("qconv2d") == 3 and "onnx_maxpool" in ops and "max_pool2d" not in ops, ops
    assert "qmatmul" in ops and "dense" not in ops, ops   # the Gemm (transB) too
    transposes = [n for n in net.graph.nodes if "transpose" in n.op]
    assert len(transposes) == 2, [n.op for n in transposes]   # the image in, the last conv's output out
    # the graph as written (DequantizeLinear, float Conv, QuantizeLinear): onnxruntime's fused int8 kernels
    # saturate u8*s8 pairs in int16 (vpmaddubsw) on a CPU without VNNI: 38 output steps off on a Zen 3
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, plain, providers=["CPUExecutionProvider"])
    step = float(numpy_helper.to_array(next(t for t in onnx.load(path).graph.initializer if t.name == "y_scale")))
    for seed in (11, 12, 13):
        x = feeds(seed)["x"]
        want = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(net(x)[0], want, rtol=0, atol=step * 1.01)
        np.testing.assert_allclose(floats(x)[0], want, rtol=0, atol=step * 1.01)
