"""What a frontend fills as it translates a model into a Graph, node by node."""
from __future__ import annotations

import numpy as np

from tunekit.graph import Graph, Node


class GraphBuilder:
    """A Graph being translated: its tensors' shapes and dtypes, constants, nodes and views.

    Args:
        source: the model file (for messages).
        constants: the model's constant tensors by name (weights, values folded at load).
        frontend: the frontend's name (the te-fusion pass names its groups "{frontend}_{ops}").
    """

    def __init__(self, source: str, constants: dict[str, np.ndarray], frontend: str = ""):
        self.source, self.constants, self.frontend = source, constants, frontend
        self.shapes: dict[str, tuple] = {k: v.shape for k, v in constants.items()}
        self.dtypes: dict[str, str] = {k: str(v.dtype) for k, v in constants.items()}
        self.nodes: list[Node] = []
        self.views: dict[str, tuple] = {}
        self.quantized: dict[str, tuple] = {}   # (`Graph.quantized`)

    def const(self, name: str, value, dtype: str = "float32") -> str:
        """Add `value` as a constant of `dtype` named after `name` ("{name}:tunekit"); return its name."""
        key = f"{name}:tunekit"
        self.constants[key] = np.ascontiguousarray(value, dtype)
        self.shapes[key], self.dtypes[key] = self.constants[key].shape, dtype
        return key

    def add(self, node: Node, shape: tuple, dtype: str = "float32") -> None:
        """Append `node`, its output of `shape` and `dtype` (unless the model declared them)."""
        self.nodes.append(node)
        self.shapes.setdefault(node.output, shape)
        self.dtypes.setdefault(node.output, dtype)

    def view(self, name: str, base: str, offset: int, shape: tuple) -> None:
        """Make tensor `name` the `shape` elements of `base` from element `offset` on, in place."""
        self.views[name] = (base, offset, shape)
        self.shapes[name] = shape

    def graph(self, inputs: list[str], outputs: list[str], input_bounds: dict | None = None) -> Graph:
        """Return the Graph with these inputs and outputs (declared tensors, by name, in order)."""
        return Graph({k: (self.shapes[k], self.dtypes[k]) for k in inputs}, self.constants, self.nodes, outputs,
                     self.shapes, [self.shapes[o] for o in outputs], source=self.source, views=self.views,
                     input_bounds=input_bounds or {}, dtypes=self.dtypes, frontend=self.frontend,
                     quantized=self.quantized)
