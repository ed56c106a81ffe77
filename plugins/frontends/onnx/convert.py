"""ONNX -> tunekit graph: BatchNormalization folded into the conv (or Gemm) before it,
the bias add, residual add and ReLU/Clip(0, 6) after it fused into its epilogue."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tunekit.errors import ModelError
from tunekit.graph import Graph, Node

SUPPORTED = "Conv (any group), Gemm, MaxPool, AveragePool, GlobalAveragePool, Flatten, Reshape (to [N, -1]), " \
            "Identity, Dropout (inference: its input), Constant; and after a Conv or Gemm: BatchNormalization, " \
            "Add (bias or residual), Relu, Clip(0, 6)"


_REDO = "export the model to ONNX again (e.g. with torch.onnx.export)"
#: the element types a tensor that is not data may have (shapes, indices, masks: a Reshape's shape)
_NOT_DATA = {TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL}


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


def _dtype_name(elem_type: int) -> str:
    names = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.STRING: "string"}
    return names.get(elem_type) or TensorProto.DataType.Name(elem_type).lower()


def _node(n) -> str:
    return f"node {n.name or n.output[0]!r} ({n.op_type})"


def _load(path: str):
    """The checked ONNX model at `path` with every tensor's shape inferred."""
    import onnx
    from google.protobuf.message import DecodeError
    try:
        with open(path, "rb") as f:
            empty = not f.read(1)
    except OSError as e:
        raise ModelError(f"{path}: cannot read the file: {e.strerror or e}") from None
    if empty:
        raise ModelError(f"{path}: the file is empty (0 bytes), not an ONNX model; {_REDO}")
    try:
        model = onnx.load(path)
    except DecodeError:
        raise ModelError(f"{path}: not an ONNX model: it does not decode as one (the file is corrupt, truncated "
                         f"or in another format); {_REDO}") from None
    except Exception as e:   # external data that cannot be read, or what else the onnx package raises
        raise ModelError(f"{path}: cannot read it as an ONNX model ({type(e).__name__}: "
                         f"{' '.join(str(e).split())}); {_REDO}") from None
    if not model.ir_version:   # protobuf decodes some other files to an empty model
        raise ModelError(f"{path}: not an ONNX model: it holds no ONNX version or graph (the file is corrupt, "
                         f"truncated or in another format); {_REDO}")
    try:
        onnx.checker.check_model(model)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ModelError(f"{path}: not a valid ONNX model: {' '.join(str(e).split())}; {_REDO} (a truncated or "
                         "edited file fails these checks)") from None


def _check_dtypes(g, path: str) -> None:
    """Refuse a model whose data is not float32 (inputs, outputs, weights, any tensor a node makes),
    naming the first such tensor; int64/int32/bool tensors (shapes, indices) may appear inside."""
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.value_info, *g.output]}
    inits = {t.name for t in g.initializer}
    found = [(f"input {v.name!r}", types[v.name], True) for v in g.input if v.name not in inits]
    found += [(f"initializer {t.name!r}", t.data_type, False) for t in g.initializer]
    found += [(f"tensor {o!r} of {_node(n)}", types[o], False) for n in g.node for o in n.output if o in types]
    found += [(f"output {v.name!r}", types[v.name], True) for v in g.output]
    for what, elem_type, data in found:
        if elem_type != TensorProto.FLOAT and (data or elem_type not in _NOT_DATA):
            raise ModelError(f"{path}: {what} is {_dtype_name(elem_type)}; tunekit runs float32 models only for now: "
                             "export the model in float32 (in PyTorch: model.float() before torch.onnx.export)")


def constant_value(n, path: str) -> np.ndarray:
    """The value of the Constant node `n` (a tensor, or value_float(s) / value_int(s))."""
    from onnx import numpy_helper
    a = {x.name: x for x in n.attribute}
    if "value" in a:
        return numpy_helper.to_array(a["value"].t)
    if "value_float" in a:
        return np.float32(a["value_float"].f)
    if "value_floats" in a:
        return np.array(a["value_floats"].floats, np.float32)
    if "value_int" in a:
        return np.int64(a["value_int"].i)
    if "value_ints" in a:
        return np.array(a["value_ints"].ints, np.int64)
    raise ModelError(f"{path}: {_node(n)} is not supported: a Constant of {', '.join(a) or 'no value'} (supported: "
                     "value, value_float(s), value_int(s))")


#: the node types read at all (whether one fits where it is is checked while building)
KNOWN = {"Conv", "Gemm", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape", "Identity", "Dropout",
         "Constant",
         "BatchNormalization", "Add", "Relu", "Clip"}


def _check_ops(model, path: str) -> None:
    """Raise one ModelError naming every node of a type tunekit does not read (not just the first)."""
    bad = [n for n in model.graph.node if n.op_type not in KNOWN or n.domain not in ("", "ai.onnx")]
    if bad:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")
        names = "; ".join(f"{n.name or n.output[0]!r} ({n.op_type}{f', domain {n.domain}' if n.domain else ''})"
                          for n in bad)
        raise ModelError(f"{path}: {len(bad)} node(s) of types tunekit does not read (opset {opset}): {names} "
                         f"(supported: {SUPPORTED})")


def convert(path: str) -> Graph:
    """Read the ONNX model at `path` into a Graph (see `tunekit.frontends.Frontend.load`)."""
    from onnx import numpy_helper
    model = _load(path)
    g = model.graph
    _check_dtypes(g, path)
    _check_ops(model, path)
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    # a Constant node is a constant wherever it appears (an exporter's Clip bounds, weights, shapes)
    consts.update({n.output[0]: constant_value(n, path) for n in g.node if n.op_type == "Constant"})
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
        if n.op_type != "Constant":
            b.add(n)
    return Graph(inputs, b.consts, [f.node() for f in b.nodes], [b.name(o.name) for o in g.output], shapes,
                 [shapes[o.name] for o in g.output])


class _Fused:
    """A conv or dense being built up: its anchor args and what the following nodes fuse into it."""

    def __init__(self, op, args, data, weight, bias, output, n):
        self.op, self.args, self.data, self.weight, self.bias = op, args, data, weight, bias
        self.residual, self.output, self.name, self.kind = None, output, n.name, n.op_type

    def node(self) -> Node:
        args = {**self.args, "bias": self.bias is not None, "residual": self.residual is not None}
        inputs = [self.data, self.weight, *(t for t in (self.bias, self.residual) if t is not None)]
        return Node(self.op, args, inputs, self.output, self.name, kind=self.kind)


class _Plain:
    """An op with no epilogue (pooling)."""

    def __init__(self, op, args, inputs, output, n):
        self.node = lambda: Node(op, args, inputs, output, n.name, kind=n.op_type)


class _Builder:
    def __init__(self, path, consts, shapes, uses):
        self.path, self.consts, self.shapes, self.uses = path, dict(consts), shapes, uses
        self.nodes: list = []
        self.by_output: dict[str, _Fused] = {}
        self.alias: dict[str, str] = {}   # Flatten/Reshape outputs: the same bytes under another shape

    def name(self, tensor: str) -> str:
        return self.alias.get(tensor, tensor)

    def fail(self, n, why: str = "") -> ModelError:
        return ModelError(f"{self.path}: {_node(n)} is not supported{': ' + why if why else ''} (supported: "
                          f"{SUPPORTED})")

    def const(self, name: str, value: np.ndarray) -> str:
        key = f"{name}:tunekit"
        self.consts[key] = np.ascontiguousarray(value, np.float32)
        return key

    def add(self, n) -> None:
        n = _Renamed(n, self.name)
        own = {"Conv": self.conv, "Gemm": self.gemm, "MaxPool": self.maxpool, "AveragePool": self.avgpool,
               "GlobalAveragePool": self.global_average, "Flatten": self.flatten, "Reshape": self.flatten,
               "Identity": self.identity, "Dropout": self.dropout}
        try:
            self._add(n, own)
        except (KeyError, ValueError, IndexError, TypeError) as e:   # what the checks below did not foresee
            raise self.fail(n, f"tunekit cannot read it ({type(e).__name__}: {e})") from e

    def _add(self, n, own: dict) -> None:
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
        if len(self.shapes[x]) != 4 or self.consts[w].ndim != 4:
            raise self.fail(n, f"only 2-D convolutions (of 4-D NCHW inputs) are supported; its input is "
                            f"{len(self.shapes[x])}-D")
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
        f = _Fused(op, {**args, "activation": "none"}, x, w, bias, n.output[0], n)
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
                   self.const(bias + "/flat", self.consts[bias].reshape(-1)) if bias else None, n.output[0], n)
        self.nodes.append(f)
        self.by_output[f.output] = f

    def _nchw(self, n) -> tuple:
        if len(self.shapes[n.input[0]]) != 4:
            raise self.fail(n, f"only 2-D pooling (of 4-D NCHW inputs) is supported; its input is "
                            f"{len(self.shapes[n.input[0]])}-D")
        return self.shapes[n.input[0]]

    def _pool_args(self, n, a: dict) -> dict:
        N, C, H, W = self._nchw(n)
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(n.output) > 1 or a.get("ceil_mode", 0) or pads[:2] != pads[2:] or \
                a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise self.fail(n, "only floor mode with symmetric explicit padding and one output")
        (R, S) = a["kernel_shape"]
        return dict(N=N, C=C, H=H, W=W, R=R, S=S, stride=tuple(a.get("strides", [1, 1])), padding=tuple(pads[:2]),
                    dilation=tuple(a.get("dilations", [1, 1])), dtype="float32")

    def maxpool(self, n) -> None:
        self.nodes.append(_Plain("max_pool2d", self._pool_args(n, _attrs(n)), [n.input[0]], n.output[0], n))

    def avgpool(self, n) -> None:
        a = _attrs(n)
        args = self._pool_args(n, a)
        if args.pop("dilation") != (1, 1):
            raise self.fail(n, "AveragePool with dilations")
        args["count_include_pad"] = bool(a.get("count_include_pad", 0))
        self.nodes.append(_Plain("avg_pool2d", args, [n.input[0]], n.output[0], n))

    def global_average(self, n) -> None:
        N, C, H, W = self._nchw(n)
        self.nodes.append(_Plain("global_avg_pool2d", dict(N=N, C=C, H=H, W=W, dtype="float32"), [n.input[0]],
                                 n.output[0], n))

    def flatten(self, n) -> None:
        shape, out = self.shapes[n.input[0]], self.shapes[n.output[0]]
        if len(out) != 2 or out[0] != shape[0]:
            raise self.fail(n, f"only a reshape to [N, -1] (here {list(shape)} -> {list(out)})")
        self.identity(n)   # the same bytes: no copy

    def identity(self, n) -> None:
        """`n`'s output is its input (exporters emit Identity nodes for shared initializers)."""
        self.alias[n.output[0]] = n.input[0]
        # the input's readers are now also the output's (so that what it alone reads is still known)
        self.uses[n.input[0]] = self.uses.get(n.input[0], 0) - 1 + self.uses.get(n.output[0], 0)

    def dropout(self, n) -> None:
        """At inference a Dropout passes its input through; its mask output has no meaning."""
        if len(n.output) > 1 and n.output[1] and self.uses.get(n.output[1], 0):
            raise self.fail(n, "its mask output is read; export the model in eval mode")
        self.identity(n)

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

        def bound(k: int, attr: str):   # an input (opset 11 on: an initializer or a Constant node), else the attribute
            if len(n.input) <= k or not n.input[k]:
                return a.get(attr)
            if n.input[k] not in self.consts:
                raise self.fail(n, f"its {attr} is not a constant")
            return self.consts[n.input[k]].item()
        lo, hi = bound(1, "min"), bound(2, "max")
        if (lo, hi) != (0, 6) or f.args["activation"] != "none":
            raise self.fail(n, f"Clip({lo}, {hi}); only Clip(0, 6) (ReLU6) is fused")
        f.args["activation"] = "relu6"


class _Renamed:
    """An ONNX node whose inputs are read through the alias table (Flatten outputs are their inputs)."""

    def __init__(self, node, name):
        self._node, self.input = node, [name(i) for i in node.input]

    def __getattr__(self, attr):
        return getattr(self._node, attr)
