"""ONNX -> tunekit graph, one node per ONNX node (the core's passes then fold, merge and fuse
them: `tunekit.deploy.plan`):
- Conv, a Gemm or MatMul of constant weights, the pools: tunekit's own ops, which have hand
  templates (`anchors.py`);
- LSTM: its kernels (`lower_lstm.py`); a ConvTranspose of constant weights: its phases and
  their interleave (`lower_conv_transpose.py`);
- any other node: a te call of `tunekit.topi` per output read (`lowerings.py`), which the
  passes recognize by its pattern (an Add, a ReLU, a Clip, a BatchNormalization, a
  QuantizeLinear or DequantizeLinear) and group into kernels by its kind;
- a constant folded from a DequantizeLinear (a QDQ model's weights): its integers, which the
  QDQ pass reads (`Graph.quantized`, `tunekit.graph.qdq`).
"""
from __future__ import annotations

from tunekit.errors import ModelError
from tunekit.graph import Graph, Node, TeCall, resolve
from tunekit.graph.builder import GraphBuilder

from . import lower_conv_transpose, lower_lstm
from .anchors import Anchors
from .context import ONNX_DTYPES, NodeContext, attrs_of
from .load import check_dtypes, load, node_name
from .lower_quantized import qmatmul_nodes
from .lowerings import KINDS, LOWERINGS
from .qoperator import QOPERATORS

ANCHORS = {"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool"}
#: the node types read at all (whether one fits where it is is checked while building)
#: (Constant nodes are folded at load, the QOperator nodes read as QDQ ones)
KNOWN = ANCHORS | set(LOWERINGS) | {"LSTM"} | set(QOPERATORS)
#: nodes whose output is their input's bytes in another shape (an alias unless fused)
RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
#: nodes that only move data (free to inline into a contraction's operand)
MOVES = RESHAPES | {"Transpose", "Slice", "Gather", "Expand", "Concat", "Split", "Cast", "Pad"}


def _check_ops(model, path: str) -> None:
    """Raise one ModelError naming every node of a type tunekit does not read (not just the first)."""
    bad = [n for n in model.graph.node if n.op_type not in KNOWN or n.domain not in ("", "ai.onnx")]
    if bad:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")
        names = "; ".join(f"{n.name or n.output[0]!r} ({n.op_type}{f', domain {n.domain}' if n.domain else ''})"
                          for n in bad)
        raise ModelError(f"{path}: {len(bad)} node(s) of types tunekit does not read (opset {opset}): {names} "
                         f"(supported: {', '.join(sorted(KNOWN))})")


def _shape(value_info, path: str) -> tuple:
    dims = value_info.type.tensor_type.shape.dim
    if names := [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]:
        raise ModelError(f"{path}: tensor {value_info.name!r} has symbolic dimensions {names}; export the model "
                         "with fixed sizes (batch 1, 224x224)")
    return tuple(int(d.dim_value) for d in dims)


def convert(path: str, dims: dict | None = None) -> Graph:
    """Read the ONNX model at `path` into a Graph (see `tunekit.frontends.Frontend.load`)."""
    model, consts, dequantized = load(path, dims)
    g = model.graph
    check_dtypes(g, path)
    _check_ops(model, path)
    cv = _Converter(path, consts)
    for v in [*g.input, *g.value_info, *g.output]:
        if v.name not in cv.constants:
            cv.shapes[v.name] = _shape(v, path)
            cv.dtypes[v.name] = ONNX_DTYPES[v.type.tensor_type.elem_type]
    cv.used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    cv.quantized = {name: (cv.constants[i], cv.constants[s], cv.constants[z] if z else None, axis)
                    for name, (i, s, z, axis) in dequantized.items()}
    for n in g.node:
        cv.translate(n)
    inputs = [v.name for v in g.input if v.name not in cv.constants]
    # token ids: the vocabulary a Gather indexes (through reshapes of the input)
    source = {n.output[0]: n.input[0] for n in g.node if n.op_type in RESHAPES}
    bounds = {resolve(source, n.input[1]): cv.shapes[n.input[0]][attrs_of(n).get("axis", 0)] for n in g.node
              if n.op_type == "Gather" and resolve(source, n.input[1]) in inputs}
    graph = cv.graph(inputs, [o.name for o in g.output], bounds)
    # an output dequantized with one scale: its step (a quantized model's accuracy is told in steps)
    graph.output_steps = {n.output[0]: float(cv.constants[n.input[1]].reshape(())) for n in g.node
                          if n.op_type == "DequantizeLinear" and n.output[0] in graph.outputs
                          and n.input[1] in cv.constants and cv.constants[n.input[1]].size == 1}
    return graph


class _Converter(GraphBuilder):
    def __init__(self, path: str, consts: dict):
        super().__init__(path, consts, "onnx")
        self.used: set[str] = set()           # the tensors some node or the graph's outputs read
        self.anchors = Anchors(self)

    def fail(self, n, why: str) -> ModelError:
        return ModelError(f"{self.source}: {node_name(n)} is not supported: {why}")

    def te_call(self, op_type: str, name: str, inputs: list[str], outputs: list[str], k: int, attrs: dict, fn,
                pattern: tuple = (), kind: str | None = None) -> Node:
        """The te call computing output `k` of a node by `fn(NodeContext)` (a lowering; `kind`: how it
        may be grouped, by default its type's)."""
        shapes, dtypes = [self.shapes[o] for o in outputs], [self.dtypes[o] for o in outputs]

        def lower(values, outside):
            return fn(NodeContext(op_type, name, attrs, values, shapes, dtypes, outside, self.source))[k]
        call = TeCall(lower, [self.shapes[i] if i else () for i in inputs], kind or KINDS.get(op_type, "injective"),
                      op_type in MOVES, op_type in RESHAPES, pattern)
        return Node(op_type.lower(), {}, list(inputs), outputs[k], name, op_type, call=call)

    def translate(self, n) -> None:
        """Add the nodes of ONNX node `n`."""
        try:
            self._add(n)
        except (KeyError, ValueError, IndexError, TypeError) as e:   # what the checks did not foresee
            raise self.fail(n, f"tunekit cannot read it ({type(e).__name__}: {e})") from e

    def _add(self, n) -> None:
        if n.op_type in ANCHORS and (node := self.anchors.make(n)) is not None:
            return self.add(node, self.shapes[n.output[0]])
        if n.op_type == "MatMulInteger" and (nodes := qmatmul_nodes(self, n)) is not None:
            for node in nodes:
                self.add(node, self.shapes[node.output], self.dtypes[node.output])
            return None
        if n.op_type == "LSTM":
            return lower_lstm.expand(self, n)
        if n.op_type == "ConvTranspose" and lower_conv_transpose.applies(self, n):
            return lower_conv_transpose.expand(self, n)
        if n.op_type not in LOWERINGS:   # an anchor's type, but not a form the anchor takes
            raise self.fail(n, "only 2-D convolutions (of 4-D NCHW inputs) of constant weights" if n.op_type == "Conv"
                            else "only 2-D pooling (of 4-D NCHW inputs)")
        if n.op_type == "Dropout" and len(n.output) > 1 and n.output[1] in self.used:
            raise self.fail(n, "its mask output is read; export the model in eval mode")
        attrs = attrs_of(n)
        for k, o in enumerate(n.output):
            if o and o in self.used:
                self.add(self.te_call(n.op_type, n.name or n.output[0], list(n.input), list(n.output), k, attrs,
                                           LOWERINGS[n.op_type], self._pattern(n, attrs)), self.shapes[o],
                              self.dtypes[o])

    def _pattern(self, n, attrs: dict) -> tuple:
        """What the passes may recognize `n` as (`tunekit.graph.TeCall.pattern`)."""
        if n.op_type in ("Add", "Relu"):
            return (n.op_type.lower(),)
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            return (n.op_type[:-6].lower(),)
        if n.op_type == "BatchNormalization":
            return ("batch_norm", attrs.get("epsilon", 1e-5))
        if n.op_type != "Clip":
            return ()

        def bound(k: int, attr: str):   # an input (opset 11 on: a constant), else the attribute
            if len(n.input) <= k or not n.input[k]:
                return attrs.get(attr)
            return self.constants[n.input[k]].item() if n.input[k] in self.constants else "data"
        return "clip", bound(1, "min"), bound(2, "max")
