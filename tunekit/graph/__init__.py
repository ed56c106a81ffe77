"""Networks as small graphs of tunekit ops: what a frontend makes of a model file,
and what `tunekit.extract_tasks` and `tunekit.compile_model` read.

A `Graph` has named inputs (shape, dtype), constants (numpy arrays: weights and
biases), nodes in execution order and named outputs. Each node is one tunekit op
call with its args, a computation of its own (`Node.computation`: te data, a fused
group of a model's nodes), or, as a frontend translates a model, a te call still to
be grouped into kernels (`Node.call`: a model node as computed by `tunekit.topi`);
its `inputs` name graph inputs, constants or earlier nodes' outputs in the op's
parameter order ("" for an absent optional one), and it writes one tensor, `output`.

A tensor may be a view: a contiguous range of another tensor (its base), read and
written in place (`Graph.views`): a recurrent network's steps write their states
into one tensor of all steps and read their slice of the input projection.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TeCall:
    """A model node as a te computation not yet made a kernel: the te-fusion pass groups these
    into computations (`tunekit.graph.fuse_te`), the other passes recognize them by `pattern`."""
    #: lower(values, outside) -> the output's te tensor; values: per input a te.Tensor (data), a numpy
    #: array (a constant) or None (absent); outside(k): input k read from outside the kernel
    lower: Callable
    #: the shape in which the node reads each input (an alias may hand it the bytes of another shape)
    shapes: list[tuple]
    kind: str = "injective"        #: "injective", "reduction" or "contraction": how it may be grouped
    moves: bool = False            #: it only moves data (free to inline into a contraction's operand)
    reshape: bool = False          #: its output is its input's bytes in another shape (an alias when alone)
    #: what it computes, for the rewrites that recognize it: ("add",), ("relu",), ("clip", lo, hi),
    #: ("batch_norm", epsilon) with inputs x, scale, bias, mean, var, or ("scale_shift",): x * s + t per
    #: channel with s and t its last two inputs
    pattern: tuple = ()


@dataclass
class Node:
    """One op call: `op(**args)` reading `inputs` (tensor names, in the op's parameter order) into `output`."""
    op: str
    args: dict
    inputs: list[str]
    output: str
    name: str = ""          #: the model's name for it (e.g. the ONNX node name), for messages and profiles
    kind: str = ""          #: the model's type for it (e.g. the ONNX op type "Conv"), for messages
    #: te data (`tunekit.te.to_data`: placeholders in `inputs` order, then the output) when the node
    #: computes a computation of its own (then `op` is its name and `args` is empty)
    computation: dict | None = None
    call: TeCall | None = None    #: a te call still to be grouped (then `op` is the model's type, lower case)


def resolve(alias: dict[str, str], name: str) -> str:
    """The tensor whose bytes `name` is, following `alias` (a reshape's output -> its input)."""
    while name in alias:
        name = alias[name]
    return name


@dataclass
class Graph:
    """A network: inputs -> nodes -> outputs, with constant tensors."""
    inputs: dict[str, tuple[tuple, str]]
    constants: dict[str, np.ndarray]
    nodes: list[Node]
    outputs: list[str]
    shapes: dict[str, tuple] = field(default_factory=dict)   #: every tensor's shape (inputs, constants, outputs)
    #: the shape each output is returned in (a node may compute it in another shape of the same size)
    output_shapes: list[tuple] = field(default_factory=list)
    source: str = ""        #: the model file it was read from (load_graph sets it), for messages
    #: tensor -> (base tensor, offset in elements, shape): a view of a contiguous range of its base
    views: dict[str, tuple[str, int, tuple]] = field(default_factory=dict)
    #: integer input -> the bound its values lie below (token ids: the vocabulary they index)
    input_bounds: dict[str, int] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)    #: the dtype of every tensor te calls read
    frontend: str = ""      #: the frontend that translated it: its fused groups are named "{frontend}_{ops}"
    #: output -> its quantization step, for an output a quantized model dequantizes (accuracy is told in steps)
    output_steps: dict[str, float] = field(default_factory=dict)
    #: a constant that is integers dequantized (a quantized model's weights and biases) -> (the integers,
    #: the scale, the zero point or None, the axis of a scale per channel): what the QDQ pass reads
    quantized: dict[str, tuple] = field(default_factory=dict)

    def base(self, name: str) -> str:
        """The tensor whose memory `name` lives in (itself unless it is a view)."""
        return self.views[name][0] if name in self.views else name

    def readers(self) -> dict[str, list[tuple[Node, int]]]:
        """Every tensor's readers: (node, the index of its input that reads it), in node order."""
        found: dict[str, list[tuple[Node, int]]] = {}
        for node in self.nodes:
            for k, name in enumerate(node.inputs):
                found.setdefault(name, []).append((node, k))
        return found

    def uses(self) -> dict[str, int]:
        """How many nodes read each tensor (a node once, however many of its inputs name it), plus one if
        it is an output of the graph."""
        return Counter([*(i for node in self.nodes for i in set(node.inputs) if i), *self.outputs])

    def check(self) -> None:
        """Raise ValueError if a node reads a tensor nothing produced before it (a view is
        there once something wrote its base or a view of it)."""
        known = set(self.inputs) | set(self.constants)
        for node in self.nodes:
            if missing := [i for i in node.inputs if i and self.base(i) not in known]:
                raise ValueError(f"node {node.name or node.output!r} ({node.op}) reads {missing}, which no input, "
                                 "constant or earlier node provides")
            known.add(self.base(node.output))
        if missing := [o for o in self.outputs if o not in known]:
            raise ValueError(f"the graph's outputs {missing} are never computed")
