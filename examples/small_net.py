"""Write a small convolutional network as an ONNX file, with seeded random weights:
a conv-bn-relu stem, a residual block and a depthwise-separable block (ReLU6), the
layer kinds of ResNet and MobileNet. Nothing is downloaded.

    python examples/small_net.py [PATH]      (default: examples/small_net.onnx)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_net(path: str, seed: int = 0, size: int = 56) -> str:
    """Write the network to `path` (input x: 1x3xSIZExSIZE float32) and return the path."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def conv(x, out, cin, cout, k, stride=1, group=1, bias=False):
        w = const(f"{out}.w", rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2 / (cin // group * k * k)))
        ins = [x, w] + ([const(f"{out}.b", rng.normal(0, 0.1, cout))] if bias else [])
        nodes.append(helper.make_node("Conv", ins, [out], name=out, kernel_shape=[k, k], pads=[k // 2] * 4,
                                      strides=[stride] * 2, group=group))
        return out

    def bn(x, out, c):
        p = [const(f"{out}.{n}", v) for n, v in (("scale", rng.uniform(0.5, 1.5, c)), ("shift", rng.normal(0, .1, c)),
                                                 ("mean", rng.normal(0, .1, c)), ("var", rng.uniform(0.5, 1.5, c)))]
        nodes.append(helper.make_node("BatchNormalization", [x, *p], [out], name=out))
        return out

    def op(kind, ins, out):
        nodes.append(helper.make_node(kind, ins, [out], name=out))
        return out

    y = op("Relu", [bn(conv("x", "stem", 3, 16, 3, stride=2), "stem_bn", 16)], "stem_relu")
    r = op("Relu", [bn(conv(y, "res1", 16, 16, 3), "res1_bn", 16)], "res1_relu")
    r = bn(conv(r, "res2", 16, 16, 3), "res2_bn", 16)
    y = op("Relu", [op("Add", [r, y], "res_add")], "res_relu")
    d = conv(y, "dw", 16, 16, 3, stride=2, group=16, bias=True)
    d = op("Clip", [d, const("zero", 0.0), const("six", 6.0)], "dw_relu6")
    y = op("Relu", [conv(d, "pw", 16, 32, 1, bias=True)], "y")
    graph = helper.make_graph(nodes, "small_net",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, size // 4, size // 4])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("small_net.onnx"))
    print(small_net(out))
