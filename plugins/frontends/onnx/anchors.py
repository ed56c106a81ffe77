"""The ONNX nodes that become tunekit's own ops, which have hand templates: Conv, a Gemm or
MatMul of constant weights (a matmul, with its bias), the pools (the epilogue pass folds what
follows them into them: `tunekit.graph.epilogues`)."""
from __future__ import annotations

import numpy as np

from tunekit.graph import Node

from .context import attrs_of


class Anchors:
    """Makes anchor items for `cv` (the converter: its constants, shapes, uses and items)."""

    def __init__(self, cv):
        self.cv = cv

    def make(self, n) -> Node | None:
        """The op node of ONNX node `n`, or None if `n` is not one (then it is a te call)."""
        cv = self.cv
        if n.op_type == "Conv" and n.input[1] in cv.constants and len(cv.shapes[n.input[0]]) == 4:
            return self.conv(n)
        if n.op_type in ("Gemm", "MatMul") and n.input[1] in cv.constants and cv.constants[n.input[1]].ndim == 2:
            return self.dense(n)
        if n.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool") and len(cv.shapes[n.input[0]]) == 4:
            return getattr(self, n.op_type.lower())(n)
        return None

    def conv(self, n):
        cv, a = self.cv, attrs_of(n)
        x, w = n.input[0], n.input[1]
        N, C, H, W = cv.shapes[x]
        K, Cg, R, S = cv.constants[w].shape
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise cv.fail(n, "auto_pad SAME is not supported; export with explicit pads")
        if pads[:2] != pads[2:]:
            raise cv.fail(n, f"asymmetric padding {pads}")
        common = dict(N=N, C=C, H=H, W=W, R=R, S=S, stride=tuple(a.get("strides", [1, 1])),
                      padding=tuple(pads[:2]), dilation=tuple(a.get("dilations", [1, 1])), dtype="float32")
        group = a.get("group", 1)
        if group == 1:
            op, args = "conv2d", {**common, "K_out": K}
        elif group == C == K and Cg == 1:
            op, args = "depthwise_conv2d", common
        else:
            op, args = "group_conv2d", {**common, "K_out": K, "groups": group}
        bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
        if bias is not None and bias not in cv.constants:
            raise cv.fail(n, "its bias is not a constant")
        return _epilogued(op, args, [x, w, *([bias] if bias else [])], n.output[0], n)

    def dense(self, n):
        """A Gemm (transA 0, alpha = beta = 1, a constant bias of [N]) or a MatMul of constant
        [K, N] weights, its data's leading axes read as rows; else None (lowered to te)."""
        cv, a = self.cv, attrs_of(n)
        x, w = n.input[0], n.input[1]
        shape = cv.shapes[x]
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1 or a.get("beta", 1.0) != 1 or \
                n.op_type == "MatMul" and len(shape) < 2:   # (a MatMul has no attributes)
            return None
        weight = cv.constants[w] if a.get("transB", 0) else cv.constants[w].T   # [out, in]
        # the data's rows: its shape may be that of the tensor a Reshape or Flatten aliases ([M, K, 1, 1], [1, M, K])
        M = int(np.prod(shape)) // weight.shape[1]
        bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
        if bias is not None and (bias not in cv.constants or cv.constants[bias].size != weight.shape[0]):
            return None
        if bias is not None and bias in cv.quantized:   # (the QDQ pass reads a quantized model's integers)
            bq, bs, bz, _ = cv.quantized[bias]
            cv.quantized[f"{bias}/flat:tunekit"] = (bq.reshape(-1), bs, bz, 0)
        bias = cv.const(bias + "/flat", cv.constants[bias].reshape(-1)) if bias else None
        node = self.linear(n, x, M, w, weight, bias, n.output[0])
        if w in cv.quantized:   # the integers as the weights are stored, [K, N]
            wq, ws, wz, axis = cv.quantized[w]
            t = bool(a.get("transB", 0))
            cv.quantized[node.inputs[1]] = (wq.T if t else wq, ws, wz, 1 - axis % 2 if t else axis % 2)
        return node

    def linear(self, n, x: str, M: int, name: str, weight: np.ndarray, bias: str | None, out: str) -> Node:
        """x [M, K] times constant `weight` [N, K] (named `name`): a matmul of the weight stored
        [K, N] (the dense-rows pass makes one of few rows a dense on targets that say so)."""
        N, K = weight.shape
        args = dict(M=M, N=N, K=K, dtype="float32")
        return _epilogued("matmul", args, [x, self.cv.const(name + "/kn", weight.T), *([bias] if bias else [])], out, n)

    def _pool_args(self, n, a: dict) -> dict:
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(n.output) > 1 or a.get("ceil_mode", 0) or pads[:2] != pads[2:] or \
                a.get("auto_pad", "NOTSET") != "NOTSET":
            raise self.cv.fail(n, "only floor mode with symmetric explicit padding and one output")
        (R, S) = a["kernel_shape"]
        return dict(zip("NCHW", self.cv.shapes[n.input[0]]), R=R, S=S, stride=tuple(a.get("strides", [1, 1])),
                    padding=tuple(pads[:2]), dilation=tuple(a.get("dilations", [1, 1])), dtype="float32")

    def maxpool(self, n):
        return Node("max_pool2d", self._pool_args(n, attrs_of(n)), [n.input[0]], n.output[0], n.name, n.op_type)

    def averagepool(self, n):
        a = attrs_of(n)
        args = self._pool_args(n, a)
        if args.pop("dilation") != (1, 1):
            raise self.cv.fail(n, "AveragePool with dilations")
        args["count_include_pad"] = bool(a.get("count_include_pad", 0))
        return Node("avg_pool2d", args, [n.input[0]], n.output[0], n.name, n.op_type)

    def globalaveragepool(self, n):
        args = dict(zip("NCHW", self.cv.shapes[n.input[0]]), dtype="float32")
        return Node("global_avg_pool2d", args, [n.input[0]], n.output[0], n.name, n.op_type)


def _epilogued(op: str, args: dict, inputs: list[str], output: str, n) -> Node:
    """The node of an op that takes an epilogue: its bias if it has one (inputs[2]), none else yet."""
    return Node(op, {**args, "activation": "none", "bias": len(inputs) > 2, "residual": False}, inputs, output,
                n.name, n.op_type)
