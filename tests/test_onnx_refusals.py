"""Models the ONNX frontend refuses up front, with an error that names the file and the node
and says what to do: quantized models, as onnxruntime's own quantization tools write them."""
from __future__ import annotations

import logging
import re
import warnings

import numpy as np
import pytest
from conftest import require

import tunekit
from tunekit.errors import ModelError

onnx = require("onnx")
quantization = require("onnxruntime.quantization")
pytest.importorskip("llvmlite")   # the x86 target
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(5)
#: the nodes onnxruntime's quantization tools add that compute on integers
QUANTIZED = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
             "QLinearConv", "QLinearMatMul"}


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self):
        self.feeds = iter([{"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)} for _ in range(2)])

    def get_next(self):
        return next(self.feeds, None)


def _float_model(path: str) -> None:
    """A small float32 model: Conv, Relu, Flatten, MatMul and Add (a linear layer)."""
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc.weight"], ["m"], name="fc"),
             helper.make_node("Add", ["m", "fc.bias"], ["y"], name="fc.add")]
    inits = {"conv.weight": RNG.standard_normal((4, 3, 3, 3)), "conv.bias": RNG.standard_normal(4),
             "fc.weight": RNG.standard_normal((4 * 6 * 6, 5)) * 0.1, "fc.bias": RNG.standard_normal(5)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("how", ["static QDQ", "static QOperator", "dynamic"])
def test_a_model_quantized_by_onnxruntime_is_refused_up_front_naming_its_first_quantized_node(tmp_path, how):
    src, path = str(tmp_path / "float.onnx"), str(tmp_path / "quantized.onnx")
    _float_model(src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)   # its advice to pre-process the model first
        try:
            if how == "dynamic":
                quantization.quantize_dynamic(src, path)
            else:
                fmt = quantization.QuantFormat.QDQ if how == "static QDQ" else quantization.QuantFormat.QOperator
                quantization.quantize_static(src, path, _Calibration(), quant_format=fmt)
        finally:
            logging.disable(logging.NOTSET)
    first = next(n for n in onnx.load(path).graph.node if n.op_type in QUANTIZED)
    says = (rf"^{re.escape(path)}: node {re.escape(repr(first.name))} \({first.op_type}\) is not supported: the model "
            r"is quantized \(this is the first of \d+ quantized nodes\).*not run quantized models yet.*give tunekit "
            r"the float32 model")
    with pytest.raises(ModelError, match=says):
        tunekit.extract_tasks(path)
    with pytest.raises(ModelError, match=says):
        tunekit.compile_model(path, target="x86")
