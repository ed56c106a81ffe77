"""ONNX -> tunekit graph. Each node becomes, in order:
- an anchor: a conv, a dense of constant weights or a pool, tunekit's own ops with hand
  templates (`anchors.py`), with BatchNormalization, a bias, a residual add and ReLU/Clip(0, 6)
  fused into its epilogue (matmuls of one input, as Q, K and V, then merged into one);
- an alias: a reshape-like node of a tensor that is not fused (the same bytes);
- the LSTM's kernels (`lower_lstm.py`);
- or a te lowering (`lowerings.py`), grouped with its neighbours into one kernel by the
  fusion pass (`fuse.py`), whose computation is tuned through the generated spaces.
"""
from __future__ import annotations

import copy

import numpy as np

from tunekit import te, topi
from tunekit.errors import ModelError
from tunekit.graph import Graph, Node

from . import lower_conv_transpose, lower_layout, lower_lstm
from .anchors import Anchors, Fused, batchnorm_factors
from .context import ONNX_DTYPES, attrs_of
from .fuse import RESHAPES, TeItem, fuse, group_name, group_tensors
from .load import check_dtypes, load, node_name
from .lowerings import KINDS, LOWERINGS

ANCHORS = {"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool"}
#: the node types read at all (whether one fits where it is is checked while building)
KNOWN = ANCHORS | set(LOWERINGS) | {"LSTM"}   # (Constant nodes are folded at load)


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
    if any(not d.HasField("dim_value") for d in dims):
        names = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
        raise ModelError(f"{path}: tensor {value_info.name!r} has symbolic dimensions {names}; export the model "
                         "with fixed sizes (batch 1, 224x224)")
    return tuple(int(d.dim_value) for d in dims)


def convert(path: str) -> Graph:
    """Read the ONNX model at `path` into a Graph (see `tunekit.frontends.Frontend.load`)."""
    model, consts = load(path)
    g = model.graph
    check_dtypes(g, path)
    _check_ops(model, path)
    cv = _Converter(path, consts)
    for v in [*g.input, *g.value_info, *g.output]:
        if v.name not in cv.consts:
            cv.shapes[v.name] = _shape(v, path)
            cv.dtypes[v.name] = ONNX_DTYPES[v.type.tensor_type.elem_type]
    for n in g.node:
        for i in set(n.input):
            cv.consumers[i] = cv.consumers.get(i, 0) + 1
    for o in g.output:
        cv.consumers[o.name] = cv.consumers.get(o.name, 0) + 1
    for n in g.node:
        cv.add(n)
    inputs = {v.name: (cv.shapes[v.name], cv.dtypes[v.name]) for v in g.input if v.name not in cv.consts}
    return cv.graph(inputs, [o.name for o in g.output])


class _Converter:
    def __init__(self, path: str, consts: dict):
        self.path, self.consts = path, consts
        self.shapes: dict[str, tuple] = {k: v.shape for k, v in consts.items()}
        self.dtypes: dict[str, str] = {}
        self.consumers: dict[str, int] = {}   # tensor -> how many nodes (and graph outputs) read it
        self.items: list = []                 # anchors, te items and fixed nodes, in execution order
        self.made: dict[str, object] = {}     # tensor -> the item that writes it
        self.alias: dict[str, str] = {}       # reshape-like outputs that are their input's bytes
        self.views: dict[str, tuple] = {}
        self.anchors = Anchors(self)

    # --- what the parts share ------------------------------------------------------------------------------

    def name(self, tensor: str) -> str:
        while tensor in self.alias:
            tensor = self.alias[tensor]
        return tensor

    def dtype(self, tensor: str) -> str:
        return str(self.consts[tensor].dtype) if tensor in self.consts else self.dtypes[tensor]

    def position(self, tensor: str) -> int:
        """Where in `items` `tensor` is written (-1: an input or constant)."""
        item = self.made.get(self.name(tensor))
        return self.items.index(item) if item is not None else -1

    def fail(self, n, why: str) -> ModelError:
        return ModelError(f"{self.path}: {node_name(n)} is not supported: {why}")

    def const(self, name: str, value: np.ndarray) -> str:
        key = f"{name}:tunekit"
        self.consts[key] = np.ascontiguousarray(value, np.float32)
        self.shapes[key] = self.consts[key].shape
        return key

    def add_item(self, item, output: str, shape: tuple, dtype: str) -> None:
        self.items.append(item)
        self.made[output] = item
        self.shapes.setdefault(output, shape)
        self.dtypes.setdefault(output, dtype)

    # --- nodes -------------------------------------------------------------------------------------------------

    def add(self, n) -> None:
        n = _Renamed(n, self.name)
        try:
            self._add(n)
        except (KeyError, ValueError, IndexError, TypeError) as e:   # what the checks did not foresee
            raise self.fail(n, f"tunekit cannot read it ({type(e).__name__}: {e})") from e

    def _add(self, n) -> None:
        if n.op_type in ANCHORS and (item := self.anchors.make(n)) is not None:
            return self.add_item(item, n.output[0], self.shapes[n.output[0]], "float32")
        if self.anchors.epilogue(n) or self._fold_batchnorm(n):
            return
        if n.op_type in RESHAPES and not isinstance(self.made.get(n.input[0]), TeItem):
            return self._alias(n)
        if n.op_type == "LSTM":
            return lower_lstm.expand(self, n)
        if n.op_type == "ConvTranspose" and lower_conv_transpose.applies(self, n):
            return lower_conv_transpose.expand(self, n)
        if n.op_type not in LOWERINGS:   # an anchor's type, but not a form the anchor takes
            raise self.fail(n, "only 2-D convolutions (of 4-D NCHW inputs) of constant weights" if n.op_type == "Conv"
                            else "only 2-D pooling (of 4-D NCHW inputs)")
        attrs = attrs_of(n)
        used = [k for k, o in enumerate(n.output) if o and self.consumers.get(o)]
        for i in set(n._node.input) if len(used) > 1 else ():   # one item per output: each reads the inputs
            self.consumers[i] += len(used) - 1
        for k, o in enumerate(n.output):
            if k in used:   # its inputs as named (an alias's shape is its own)
                item = TeItem(n.op_type, n.name or n.output[0], attrs, list(n._node.input), list(n.output), k,
                              LOWERINGS[n.op_type], KINDS[n.op_type])
                self.add_item(item, o, self.shapes[o], self.dtypes[o])

    def _fold_batchnorm(self, n) -> bool:
        """Fold a BatchNormalization of constants into the per-channel scale and shift of the
        transposed convolution whose output it alone reads (`lower_conv_transpose`)."""
        p = self.made.get(n.input[0]) if n.op_type == "BatchNormalization" else None
        if not (isinstance(p, TeItem) and p.fn is lower_conv_transpose.interleave
                and self.consumers.get(p.output) == 1 and all(i in self.consts for i in n.input[1:5])):
            return False
        k, shift = batchnorm_factors(self, n)
        old_scale, old_shift = (self.consts[i].astype(np.float64) for i in p.inputs[-2:])
        p.inputs[-2:] = [self.const(f"{n.output[0]}/scale", old_scale * k),
                         self.const(f"{n.output[0]}/shift", old_shift * k + shift)]
        del self.made[p.output]
        p.outputs, p.output = [n.output[0]], n.output[0]
        self.made[p.output] = p
        return True

    def _alias(self, n) -> None:
        """`n`'s output is its input's bytes (exporters emit Identity nodes for shared initializers)."""
        if n.op_type == "Dropout" and len(n.output) > 1 and self.consumers.get(n.output[1]):
            raise self.fail(n, "its mask output is read; export the model in eval mode")
        self.alias[n.output[0]] = n.input[0]
        # the input's readers are now also the output's (so that what it alone reads is still known)
        self.consumers[n.input[0]] = self.consumers.get(n.input[0], 0) - 1 + self.consumers.get(n.output[0], 0)

    # --- the graph ---------------------------------------------------------------------------------------------

    def _merge_siblings(self, outputs: list[str]) -> None:
        """Matmuls of constant weights that read the same data (a transformer's Q, K and V
        projections) become one matmul of their weights side by side: one kernel, one pass
        over the data, N = the sum. Each one's output is a column range of it, read in place
        by its consumers (a Slice item, fused into them)."""
        groups: dict[tuple, list[Fused]] = {}
        for it in self.items:
            if isinstance(it, Fused) and it.op == "matmul" and it.residual is None and it.args["activation"] == "none":
                groups.setdefault((it.data, it.args["M"], it.args["K"], it.bias is not None), []).append(it)
        # an output that stays a tensor of its own (a graph output, an anchor's input) is not merged
        kept = set(outputs) | {i for it in self.items if not isinstance(it, TeItem) for i in it.node().inputs}
        for (*_, has_bias), sib in groups.items():
            sib = [f for f in sib if f.output not in kept]
            if len(sib) < 2:
                continue
            at = min(self.items.index(f) for f in sib)
            merged = copy.copy(sib[0])
            merged.output = out = f"{sib[0].output}/merged"
            merged.args = {**sib[0].args, "N": sum(f.args["N"] for f in sib)}
            merged.weight = self.const(out + "/kn", np.concatenate([self.consts[f.weight] for f in sib], axis=1))
            merged.bias = self.const(out + "/bias", np.concatenate([self.consts[f.bias] for f in sib])) \
                if has_bias else None
            self.items = [it for it in self.items if it not in sib]
            self.items.insert(at, merged)
            self.made[out], self.consumers[out] = merged, len(sib)
            self.shapes[out], self.dtypes[out] = (*self.shapes[sib[0].output][:-1], merged.args["N"]), "float32"
            start, k = 0, at + 1
            for f in sib:
                item = TeItem("Slice", f.name, {}, [out], [f.output], 0, _columns(start, f.args["N"]), "injective")
                self.items.insert(k, item)
                self.made[f.output], k, start = item, k + 1, start + f.args["N"]
                # a reshape of it was an alias (of an anchor's output); now it reshapes a te item
                for a in [a for a, base in self.alias.items() if base == f.output]:
                    del self.alias[a]
                    self.consumers[f.output] += 1 - self.consumers.get(a, 0)
                    self.items.insert(k, TeItem("Reshape", a, {}, [f.output], [a], 0, lower_layout.reshape,
                                                "injective"))
                    self.made[a], k = self.items[k], k + 1

    def graph(self, inputs: dict, outputs: list[str]) -> Graph:
        self._merge_siblings([self.name(o) for o in outputs])
        fuse(self.items, self.made, self.consumers)
        for it in self.items:   # a reshape-like node left alone is an alias after all
            if isinstance(it, TeItem) and it.root is it and it.members == [it] and it.op_type in RESHAPES:
                self.alias[it.output] = self.name(it.inputs[0])
        nodes = []
        for it in self.items:
            if not isinstance(it, TeItem):
                node = it.node()
            elif it.root is it and it.output not in self.alias:
                reads, tensors = group_tensors(self, it)
                node = Node(group_name(it), {}, reads, it.output, it.name,
                            "+".join(dict.fromkeys(m.op_type for m in it.members)), computation=te.to_data(tensors))
            else:
                continue
            node.inputs = [self.name(i) for i in node.inputs]
            nodes.append(node)
        bounds = {self.name(it.inputs[1]): self.shapes[it.inputs[0]][it.attrs.get("axis", 0)]
                  for it in self.items if isinstance(it, TeItem) and it.op_type == "Gather"
                  and self.name(it.inputs[1]) in inputs}
        constants = {k: v.astype(np.uint8) if v.dtype == bool else v for k, v in self.consts.items()}
        shapes = {**self.shapes, **{name: shape for name, (shape, _) in inputs.items()}}
        return Graph(inputs, constants, nodes, [self.name(o) for o in outputs], shapes,
                     [self.shapes[o] for o in outputs], views=self.views, input_bounds=bounds)


def _columns(start: int, width: int):
    """The lowering of columns [start, start + width) of a tensor's last axis."""
    return lambda cx: [topi.layout.columns(cx.tensor(0), start, width, "columns")]


class _Renamed:
    """An ONNX node whose inputs are read through the alias table (Flatten outputs are their inputs)."""

    def __init__(self, node, name):
        self._node, self.input = node, [name(i) for i in node.input]

    def __getattr__(self, attr):
        return getattr(self._node, attr)
