"""ONNX -> tunekit graph: BatchNormalization folded into the conv (or Gemm) before it,
the bias add, residual add and ReLU/Clip(0, 6) after it fused into its epilogue."""
from __future__ import annotations

import numpy as np

from tunekit.errors import ModelError
from tunekit.graph import Graph, Node

SUPPORTED = "Conv (any group), Gemm, MaxPool, AveragePool, GlobalAveragePool, Flatten, Reshape (to [N, -1]); " \
            "and after a Conv or Gemm: BatchNormalization, Add (bias or residual), Relu, Clip(0, 6)"


def _attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _shape(value_info, path: str) -> tuple:
    dims = value_info.type.tensor_type.shape.dim
    if any(not d.HasField("dim_value") for d in dims):
        names = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
        raise ModelError(f"{path}: tensor {value_info.name!r} has symbolic dimensions {names}; export the model "
                         "with fixed sizes (batch 1, 224x224)")
    return tuple(int(d.dim_value) for d in dims)


def convert(path: str) -> Graph:
    """Read the ONNX model at `path` into a Graph (see `tunekit.frontends.Frontend.load`)."""
    import onnx
    from onnx import numpy_helper
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except (OSError, onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ModelError(f"{path}: not a valid ONNX model: {e}") from None
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = {v.name: _shape(v, path) for v in [*g.input, *g.value_info, *g.output] if v.name not in consts}
    shapes.update({k: v.shape for k, v in consts.items()})
    inputs = {v.name: (shapes[v.name], "float32") for v in g.input if v.name not in consts}
    uses: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    for o in g.output:
        uses[o.name] = uses.get(o.name, 0) + 1
    b = _Builder(path, consts, shapes, uses)
    for n in g.node:
        b.add(n)
    graph = Graph(inputs, b.consts, [f.node() for f in b.nodes], [b.name(o.name) for o in g.output], shapes,
                  [shapes[o.name] for o in g.output])
    graph.check()
    return graph


class _Fused:
    """A conv or dense being built up: its anchor args and what the following nodes fuse into it."""

    def __init__(self, op, args, data, weight, bias, output, name):
        self.op, self.args, self.data, self.weight, self.bias = op, args, data, weight, bias
        self.residual, self.output, self.name = None, output, name

    def node(self) -> Node:
        args = {**self.args, "bias": self.bias is not None, "residual": self.residual is not None}
        inputs = [self.data, self.weight, *(t for t in (self.bias, self.residual) if t is not None)]
        return Node(self.op, args, inputs, self.output, self.name)


class _Plain:
    """An op with no epilogue (pooling)."""

    def __init__(self, op, args, inputs, output, name):
        self.node = lambda: Node(op, args, inputs, output, name)


class _Builder:
    def __init__(self, path, consts, shapes, uses):
        self.path, self.consts, self.shapes, self.uses = path, dict(consts), shapes, uses
        self.nodes: list = []
        self.by_output: dict[str, _Fused] = {}
        self.alias: dict[str, str] = {}   # Flatten/Reshape outputs: the same bytes under another shape

    def name(self, tensor: str) -> str:
        return self.alias.get(tensor, tensor)

    def fail(self, n, why: str = "") -> ModelError:
        return ModelError(f"{self.path}: node {n.name or n.output[0]!r} ({n.op_type}) is not supported"
                          f"{': ' + why if why else ''} (supported: {SUPPORTED})")

    def const(self, name: str, value: np.ndarray) -> str:
        key = f"{name}:tunekit"
        self.consts[key] = np.ascontiguousarray(value, np.float32)
        return key

    def add(self, n) -> None:
        n = _Renamed(n, self.name)
        own = {"Conv": self.conv, "Gemm": self.gemm, "MaxPool": self.maxpool, "AveragePool": self.avgpool,
               "GlobalAveragePool": self.global_average, "Flatten": self.flatten, "Reshape": self.flatten}
        if n.op_type in own:
            return own[n.op_type](n)
        # an Add fuses into the later of its two producers, so that the other operand is computed before it
        ins = n.input if n.op_type == "Add" else n.input[:1]
        cands = [self.by_output[i] for i in ins if i in self.by_output and self.uses.get(i, 0) == 1]
        f = max(cands, key=self.nodes.index) if cands else self.by_output.get(n.input[0]) if n.input else None
        if f is None or self.uses.get(f.output, 0) != 1:
            raise self.fail(n, "it does not follow a Conv or Gemm whose output it alone reads" if n.op_type in
                            ("BatchNormalization", "Add", "Relu", "Clip") else "")
        {"BatchNormalization": self.batchnorm, "Add": self.residual, "Relu": self.relu,
         "Clip": self.clip}.get(n.op_type, lambda n, f: (_ for _ in ()).throw(self.fail(n)))(n, f)
        del self.by_output[f.output]
        f.output = n.output[0]
        self.by_output[f.output] = f

    def conv(self, n) -> None:
        a = _attrs(n)
        x, w = n.input[0], n.input[1]
        if w not in self.consts:
            raise self.fail(n, "its weights are not a constant")
        N, C, H, W = self.shapes[x]
        weight = self.consts[w]
        K, Cg, R, S = weight.shape
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
            raise self.fail(n, "auto_pad SAME is not supported; export with explicit pads")
        if pads[:2] != pads[2:]:
            raise self.fail(n, f"asymmetric padding {pads}")
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
        if bias is not None and bias not in self.consts:
            raise self.fail(n, "its bias is not a constant")
        f = _Fused(op, {**args, "activation": "none"}, x, w, bias, n.output[0], n.name)
        self.nodes.append(f)
        self.by_output[f.output] = f

    def gemm(self, n) -> None:
        a = _attrs(n)
        x, w = n.input[0], n.input[1]
        shape = self.shapes[n.input[0]]   # [M, K], or [M, K, 1, 1] read through a Flatten
        M, K = shape[0], int(np.prod(shape[1:]))
        if w not in self.consts or a.get("transA", 0) or a.get("alpha", 1.0) != 1 or a.get("beta", 1.0) != 1:
            raise self.fail(n, "only a Gemm of constant weights, transA = 0, alpha = beta = 1")
        weight = self.consts[w] if a.get("transB", 0) else self.consts[w].T   # [out, in]
        bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
        if bias is not None and (bias not in self.consts or self.consts[bias].size != weight.shape[0]):
            raise self.fail(n, "its bias is not a constant of [out] values")
        args = dict(M=M, N=weight.shape[0], K=K, dtype="float32", activation="none")
        f = _Fused("dense", args, x, w if a.get("transB", 0) else self.const(w + "/t", weight),
                   self.const(bias + "/flat", self.consts[bias].reshape(-1)) if bias else None, n.output[0], n.name)
        self.nodes.append(f)
        self.by_output[f.output] = f

    def _pool_args(self, n, a: dict) -> dict:
        N, C, H, W = self.shapes[n.input[0]]
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(n.output) > 1 or a.get("ceil_mode", 0) or pads[:2] != pads[2:] or \
                a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise self.fail(n, "only floor mode with symmetric explicit padding and one output")
        (R, S) = a["kernel_shape"]
        return dict(N=N, C=C, H=H, W=W, R=R, S=S, stride=tuple(a.get("strides", [1, 1])), padding=tuple(pads[:2]),
                    dilation=tuple(a.get("dilations", [1, 1])), dtype="float32")

    def maxpool(self, n) -> None:
        self.nodes.append(_Plain("max_pool2d", self._pool_args(n, _attrs(n)), [n.input[0]], n.output[0], n.name))

    def avgpool(self, n) -> None:
        a = _attrs(n)
        args = self._pool_args(n, a)
        if args.pop("dilation") != (1, 1):
            raise self.fail(n, "AveragePool with dilations")
        args["count_include_pad"] = bool(a.get("count_include_pad", 0))
        self.nodes.append(_Plain("avg_pool2d", args, [n.input[0]], n.output[0], n.name))

    def global_average(self, n) -> None:
        N, C, H, W = self.shapes[n.input[0]]
        self.nodes.append(_Plain("global_avg_pool2d", dict(N=N, C=C, H=H, W=W, dtype="float32"), [n.input[0]],
                                 n.output[0], n.name))

    def flatten(self, n) -> None:
        shape, out = self.shapes[n.input[0]], self.shapes[n.output[0]]
        if len(out) != 2 or out[0] != shape[0]:
            raise self.fail(n, f"only a reshape to [N, -1] (here {list(shape)} -> {list(out)})")
        self.alias[n.output[0]] = n.input[0]   # the same bytes: no copy

    def batchnorm(self, n, f: _Fused) -> None:
        if f.residual is not None or f.args["activation"] != "none" or any(i not in self.consts for i in n.input[1:]):
            raise self.fail(n, "only a BatchNormalization with constant parameters right after a Conv or Gemm is "
                            "folded")
        scale, shift, mean, var = (self.consts[i].astype(np.float64) for i in n.input[1:5])
        k = scale / np.sqrt(var + _attrs(n).get("epsilon", 1e-5))
        w = self.consts[f.weight].astype(np.float64)
        w = w * k.reshape(-1, *[1] * (w.ndim - 1))   # per output channel (OIHW) or feature ([out, in])
        b = self.consts[f.bias].astype(np.float64) if f.bias else np.zeros_like(k)
        f.weight = self.const(f.weight + "/bn", w)
        f.bias = self.const(n.output[0] + "/bias", (b - mean) * k + shift)

    def residual(self, n, f: _Fused) -> None:
        other = n.input[1] if n.input[0] == f.output else n.input[0]
        shape = self.shapes[f.output]
        if other in self.consts and self.consts[other].size == shape[1] and f.residual is None \
                and f.args["activation"] == "none":   # a per-channel constant: a bias
            extra = self.consts[other].reshape(-1).astype(np.float64)
            b = self.consts[f.bias].astype(np.float64) if f.bias else 0
            f.bias = self.const(n.output[0] + "/bias", b + extra)
        elif self.shapes.get(other) == shape and f.residual is None and f.args["activation"] == "none":
            f.residual = other
        else:
            raise self.fail(n, "only a per-channel constant or one tensor of the conv's shape is added")

    def relu(self, n, f: _Fused) -> None:
        if f.args["activation"] != "none":
            raise self.fail(n, "a second activation")
        f.args["activation"] = "relu"

    def clip(self, n, f: _Fused) -> None:
        a = _attrs(n)
        lo = self.consts[n.input[1]].item() if len(n.input) > 1 and n.input[1] else a.get("min")
        hi = self.consts[n.input[2]].item() if len(n.input) > 2 and n.input[2] else a.get("max")
        if (lo, hi) != (0, 6) or f.args["activation"] != "none":
            raise self.fail(n, f"Clip({lo}, {hi}); only Clip(0, 6) (ReLU6) is fused")
        f.args["activation"] = "relu6"


class _Renamed:
    """An ONNX node whose inputs are read through the alias table (Flatten outputs are their inputs)."""

    def __init__(self, node, name):
        self._node, self.input = node, [name(i) for i in node.input]

    def __getattr__(self, attr):
        return getattr(self._node, attr)
