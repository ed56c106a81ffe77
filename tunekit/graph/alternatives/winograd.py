"""Winograd F(m x m, 3 x 3) for blocked 3x3 stride-1 convolutions (`tunekit.ops.winograd`),
at each output tile the target declares (`NetworkChoices.winograd_tiles`)."""
from __future__ import annotations

from tunekit.graph import Graph, Node
from tunekit.ops import layout as layouts
from tunekit.ops import winograd

from .alternative import Alternative


class Winograd(Alternative):
    name = "winograd"

    def matches(self, graph: Graph, choices) -> dict[str, list[Node]]:
        return {n.output: [n] for n in graph.nodes if _applies(n)} if choices.winograd_tiles else {}

    def candidates(self, nodes: list[Node], choices) -> list[tuple[str, dict]]:
        return [("conv2d_winograd", {**nodes[0].args, "tile": m}) for m in choices.winograd_tiles]

    def inputs(self, nodes: list[Node], args: dict, rw) -> list[str]:
        (data, weight, *rest), m = nodes[0].inputs, args["tile"]
        return [data, rw.derived(weight, f"winograd{m}", _weights, m, layouts.block_of(args["layout"])), *rest]


def _applies(node: Node) -> bool:
    a = node.args
    return (node.op == "conv2d" and bool(layouts.block_of(a.get("layout")))
            and bool(layouts.block_of(a.get("data_layout") or a["layout"])) and (a["R"], a["S"]) == (3, 3)
            and tuple(a.get("stride", (1, 1))) == (1, 1) and tuple(a.get("dilation", (1, 1))) == (1, 1))


def _weights(w, m: int, b: int):
    """numpy: blocked conv2d weights as Winograd F(m x m, 3 x 3)'s U (`tunekit.ops.winograd`)."""
    return winograd.transform_weights(layouts.conv_weight_oihw(w, b), m, b)
