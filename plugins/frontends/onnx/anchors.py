"""The ONNX nodes that become tunekit's own ops, which have hand templates (Conv, a Gemm or
MatMul of constant weights, the pools), with BatchNormalization folded into the conv or
dense before it and a bias add, residual add and ReLU/Clip(0, 6) fused into its epilogue."""
from __future__ import annotations

import numpy as np

from tunekit.graph import Node

from .context import attrs_of


class Fused:
    """A conv or dense being built up: its anchor args and what the following nodes fuse into it."""

    def __init__(self, op, args, data, weight, bias, output, n):
        self.op, self.args, self.data, self.weight, self.bias = op, args, data, weight, bias
        self.residual, self.output, self.name, self.kind = None, output, n.name, n.op_type

    def node(self) -> Node:
        args = {**self.args, "bias": self.bias is not None, "residual": self.residual is not None}
        inputs = [self.data, self.weight, *(t for t in (self.bias, self.residual) if t is not None)]
        return Node(self.op, args, inputs, self.output, self.name, kind=self.kind)


class Plain:
    """An op with no epilogue (pooling)."""

    def __init__(self, op, args, inputs, output, n):
        self.output = output
        self._node = Node(op, args, inputs, output, n.name, kind=n.op_type)

    def node(self) -> Node:
        return self._node


class Anchors:
    """Makes anchor items for `cv` (the converter: its constants, shapes, uses and items)."""

    def __init__(self, cv):
        self.cv = cv

    def make(self, n):
        """The anchor item of node `n`, or None if `n` is not one (then it is lowered to te)."""
        cv = self.cv
        if n.op_type == "Conv" and n.input[1] in cv.consts and len(cv.shapes[n.input[0]]) == 4:
            return self.conv(n)
        if n.op_type in ("Gemm", "MatMul") and n.input[1] in cv.consts and cv.consts[n.input[1]].ndim == 2:
            return self.dense(n)
        if n.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool") and len(cv.shapes[n.input[0]]) == 4:
            return getattr(self, n.op_type.lower())(n)
        return None

    def conv(self, n):
        cv, a = self.cv, attrs_of(n)
        x, w = n.input[0], n.input[1]
        N, C, H, W = cv.shapes[x]
        K, Cg, R, S = cv.consts[w].shape
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
        if bias is not None and bias not in cv.consts:
            raise cv.fail(n, "its bias is not a constant")
        return Fused(op, {**args, "activation": "none"}, x, w, bias, n.output[0], n)

    def dense(self, n):
        """A Gemm (transA 0, alpha = beta = 1, a constant bias of [N]) or a MatMul of constant
        [K, N] weights, its data's leading axes read as rows; else None (lowered to te)."""
        cv, a = self.cv, attrs_of(n)
        x, w = n.input[0], n.input[1]
        shape = cv.shapes[x]
        if n.op_type == "Gemm":
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1 or a.get("beta", 1.0) != 1:
                return None
            weight = cv.consts[w] if a.get("transB", 0) else cv.consts[w].T   # [out, in]
        else:
            if len(shape) < 2:
                return None
            weight = cv.consts[w].T
        # the data's rows: its shape may be that of the tensor a Reshape or Flatten aliases ([M, K, 1, 1], [1, M, K])
        M = int(np.prod(shape)) // weight.shape[1]
        bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
        if bias is not None and (bias not in cv.consts or cv.consts[bias].size != weight.shape[0]):
            return None
        return self.linear(n, x, M, w, weight, cv.const(bias + "/flat", cv.consts[bias].reshape(-1)) if bias else None,
                           n.output[0])

    def linear(self, n, x: str, M: int, name: str, weight: np.ndarray, bias: str | None, out: str) -> Fused:
        """x [M, K] times constant `weight` [N, K] (named `name`): a matmul of the weight stored
        [K, N] (the dense-rows pass makes one of few rows a dense on targets that say so)."""
        N, K = weight.shape
        args = dict(M=M, N=N, K=K, dtype="float32", activation="none")
        return Fused("matmul", args, x, self.cv.const(name + "/kn", weight.T), bias, out, n)

    def _pool_args(self, n, a: dict) -> dict:
        N, C, H, W = self.cv.shapes[n.input[0]]
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(n.output) > 1 or a.get("ceil_mode", 0) or pads[:2] != pads[2:] or \
                a.get("auto_pad", "NOTSET") != "NOTSET":
            raise self.cv.fail(n, "only floor mode with symmetric explicit padding and one output")
        (R, S) = a["kernel_shape"]
        return dict(N=N, C=C, H=H, W=W, R=R, S=S, stride=tuple(a.get("strides", [1, 1])), padding=tuple(pads[:2]),
                    dilation=tuple(a.get("dilations", [1, 1])), dtype="float32")

    def maxpool(self, n):
        return Plain("max_pool2d", self._pool_args(n, attrs_of(n)), [n.input[0]], n.output[0], n)

    def averagepool(self, n):
        a = attrs_of(n)
        args = self._pool_args(n, a)
        if args.pop("dilation") != (1, 1):
            raise self.cv.fail(n, "AveragePool with dilations")
        args["count_include_pad"] = bool(a.get("count_include_pad", 0))
        return Plain("avg_pool2d", args, [n.input[0]], n.output[0], n)

    def globalaveragepool(self, n):
        N, C, H, W = self.cv.shapes[n.input[0]]
        return Plain("global_avg_pool2d", dict(N=N, C=C, H=H, W=W, dtype="float32"), [n.input[0]], n.output[0], n)

    # --- epilogues -------------------------------------------------------------------------------------------

    def epilogue(self, n) -> bool:
        """Fuse node `n` (BatchNormalization, Add, Relu, Clip) into the conv or dense whose output
        it alone reads, if it fits that epilogue; return whether it did."""
        cv = self.cv
        if n.op_type not in ("BatchNormalization", "Add", "Relu", "Clip"):
            return False
        # an Add fuses into the later of its two producers, so that the other operand is computed before it
        ins = n.input if n.op_type == "Add" else n.input[:1]
        cands = [f for i in ins if isinstance(f := cv.made.get(i), Fused) and cv.consumers.get(i, 0) == 1]
        if not cands:
            return False
        f = max(cands, key=cv.items.index)
        fits = {"BatchNormalization": self.batchnorm, "Add": self.residual, "Relu": self.relu,
                "Clip": self.clip}[n.op_type](n, f)
        if fits:
            del cv.made[f.output]
            f.output = n.output[0]
            cv.made[f.output] = f
        return fits

    def batchnorm(self, n, f: Fused) -> bool:
        cv = self.cv
        if f.residual is not None or f.args["activation"] != "none" or any(i not in cv.consts for i in n.input[1:]):
            return False
        k, shift = batchnorm_factors(cv, n)
        w = cv.consts[f.weight].astype(np.float64)
        # per output channel (OIHW), or feature ([out, in]; a matmul's [in, out])
        w = w * k if f.op == "matmul" else w * k.reshape(-1, *[1] * (w.ndim - 1))
        b = cv.consts[f.bias].astype(np.float64) if f.bias else np.zeros_like(k)
        f.weight = cv.const(f.weight + "/bn", w)
        f.bias = cv.const(n.output[0] + "/bias", b * k + shift)
        return True

    def residual(self, n, f: Fused) -> bool:
        cv = self.cv
        other = n.input[1] if n.input[0] == f.output else n.input[0]
        shape = cv.shapes[f.output]
        if f.residual is not None or f.args["activation"] != "none":
            return False
        if other in cv.consts and _per_channel(cv.consts[other].shape, shape, 1 if "conv" in f.op else -1):
            extra = cv.consts[other].reshape(-1).astype(np.float64)
            b = cv.consts[f.bias].astype(np.float64) if f.bias else 0
            f.bias = cv.const(n.output[0] + "/bias", b + extra)
            return True
        if _same_rows(cv.shapes.get(other), shape, f.op) and cv.position(other) < cv.items.index(f):
            f.residual = other   # computed before the conv runs
            return True
        return False

    def relu(self, n, f: Fused) -> bool:
        if f.args["activation"] != "none":
            return False
        f.args["activation"] = "relu"
        return True

    def clip(self, n, f: Fused) -> bool:
        cv, a = self.cv, attrs_of(n)

        def bound(k: int, attr: str):   # an input (opset 11 on: a constant), else the attribute
            if len(n.input) <= k or not n.input[k]:
                return a.get(attr)
            return cv.consts[n.input[k]].item() if n.input[k] in cv.consts else "data"
        if (bound(1, "min"), bound(2, "max")) != (0, 6) or f.args["activation"] != "none":
            return False
        f.args["activation"] = "relu6"
        return True


def _same_rows(other: tuple | None, shape: tuple, op: str) -> bool:
    """Whether a residual of shape `other` adds element for element to an output of `shape`: the
    same shape, or for a matmul or dense ([M, N] rows) the same rows in another shape (GPT-2's
    Gemm output is reshaped to [1, T, N] before its residual Add)."""
    if other == shape:
        return True
    return other is not None and op in ("matmul", "dense") and other[-1] == shape[-1] and \
        int(np.prod(other)) == int(np.prod(shape))


def _per_channel(const_shape: tuple, shape: tuple, axis: int) -> bool:
    """Whether a constant of `const_shape` broadcast to `shape` varies along `axis` alone (a bias)."""
    if len(const_shape) > len(shape):
        return False
    padded = (1,) * (len(shape) - len(const_shape)) + tuple(const_shape)
    axis %= len(shape)
    return all(d == (shape[axis] if k == axis else 1) for k, d in enumerate(padded))


def batchnorm_factors(cv, n) -> tuple[np.ndarray, np.ndarray]:
    """(k, shift) per channel of BatchNormalization node `n` of constants: y = x * k + shift."""
    scale, bias, mean, var = (cv.consts[i].astype(np.float64) for i in n.input[1:5])
    k = scale / np.sqrt(var + attrs_of(n).get("epsilon", 1e-5))
    return k, bias - mean * k
