"""ResNet-18 and MobileNet-v2 (batch 1, float32, NCHW) as ONNX files with seeded random
weights, built with onnx.helper: the architectures of the papers, nothing downloaded.

    python examples/networks.py resnet18|mobilenet_v2 PATH [SIZE]
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Net:
    def __init__(self, seed: int):
        self.rng, self.inits, self.nodes, self.k = np.random.default_rng(seed), [], [], 0

    def const(self, value) -> str:
        self.k += 1
        name = f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def node(self, kind, ins, **attrs) -> str:
        self.k += 1
        out = f"{kind.lower()}{self.k}"
        self.nodes.append(helper.make_node(kind, ins, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act="relu"):
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))
        y = self.node("Conv", [x, self.const(w)], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride] * 2,
                      group=group)
        c = cout
        y = self.node("BatchNormalization", [y, self.const(self.rng.uniform(0.5, 1.0, c)),
                                             self.const(self.rng.normal(0, 0.05, c)),
                                             self.const(self.rng.normal(0, 0.05, c)),
                                             self.const(self.rng.uniform(0.8, 1.2, c))])
        if act == "relu":
            return self.node("Relu", [y])
        if act == "relu6":
            return self.node("Clip", [y, self.const(0.0), self.const(6.0)])
        return y

    def head(self, x, cin, classes=1000):
        y = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        w = self.rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)
        return self.node("Gemm", [y, self.const(w), self.const(self.rng.normal(0, 0.01, classes))], transB=1)

    def save(self, out, path, size, classes=1000):
        graph = helper.make_graph(self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, 3, size, size])],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])], self.inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        return path


def resnet18(path: str, size: int = 224, seed: int = 0) -> str:
    """ResNet-18: a 7x7 stem, max pooling, four stages of two basic blocks, a classifier."""
    n = _Net(seed)
    x = n.conv_bn("x", 3, 64, 7, stride=2)
    x = n.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for b in range(2):
            s = stride if b == 0 else 1
            y = n.conv_bn(n.conv_bn(x, cin, cout, 3, stride=s), cout, cout, 3, act=None)
            short = n.conv_bn(x, cin, cout, 1, stride=s, act=None) if (s, cin) != (1, cout) else x
            x, cin = n.node("Relu", [n.node("Add", [y, short])]), cout
    return n.save(n.head(x, 512), path, size)


def mobilenet_v2(path: str, size: int = 224, seed: int = 0) -> str:
    """MobileNet-v2: inverted residual blocks (expand 1x1, depthwise 3x3, project 1x1), ReLU6."""
    n = _Net(seed)
    x, cin = n.conv_bn("x", 3, 32, 3, stride=2, act="relu6"), 32
    for t, c, reps, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                               (6, 160, 3, 2), (6, 320, 1, 1)):
        for r in range(reps):
            s, hidden = stride if r == 0 else 1, cin * t
            y = n.conv_bn(x, cin, hidden, 1, act="relu6") if t != 1 else x
            y = n.conv_bn(y, hidden, hidden, 3, stride=s, group=hidden, act="relu6")
            y = n.conv_bn(y, hidden, c, 1, act=None)
            x, cin = (n.node("Add", [y, x]) if s == 1 and cin == c else y), c
    x = n.conv_bn(x, cin, 1280, 1, act="relu6")
    return n.save(n.head(x, 1280), path, size)


if __name__ == "__main__":
    make = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}[sys.argv[1]]
    print(make(sys.argv[2], *(int(a) for a in sys.argv[3:4])))
