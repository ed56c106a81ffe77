"""MobileNet-v2's inverted residuals as one `mbconv` kernel (`tunekit.ops.mbconv`): [1x1 conv
+ bias + relu6 ->] 3x3 depthwise (padding 1) + bias + relu6 -> 1x1 conv + bias [+ the chain's
input], each inner tensor read by the next layer only, the chain's input and output in one
block, where the target declares it (`NetworkChoices.mbconv`)."""
from __future__ import annotations

from tunekit.graph import Graph, Node
from tunekit.ops import layout as layouts

from .alternative import Alternative


class MbConv(Alternative):
    name = "mbconv"

    def matches(self, graph: Graph, choices) -> dict[str, list[Node]]:
        if not choices.mbconv:
            return {}
        producer = {n.output: n for n in graph.nodes}
        readers = {name: len(r) for name, r in graph.readers().items()}
        found = {}
        for c in graph.nodes:
            d = producer.get(c.inputs[0]) if _conv1x1(c, "none") else None
            if not (d and d.op == "depthwise_conv2d" and readers[d.output] == 1 and (d.args["R"], d.args["S"]) == (3, 3)
                    and tuple(d.args["padding"]) == (1, 1) and tuple(d.args["dilation"]) == (1, 1)
                    and d.args["stride"][0] == d.args["stride"][1] in (1, 2) and d.args.get("bias")
                    and d.args.get("activation") == "relu6"):
                continue
            e = producer.get(d.inputs[0])
            nodes = [e, d, c] if _conv1x1(e, "relu6") and readers[e.output] == 1 and not e.args.get("residual") \
                else [d, c]
            first = nodes[0]
            block = layouts.block_of(first.args.get("data_layout") or first.args.get("layout"))
            if (not block or layouts.block_of(c.args.get("layout")) != block or d.args["C"] % block
                    or c.args.get("residual") and c.inputs[-1] != first.inputs[0]):
                continue
            if all(w in graph.constants for n in nodes for w in (_nchw(n.inputs[1]), n.inputs[2])):
                found[c.output] = nodes
        return found

    def candidates(self, nodes: list[Node], choices) -> list[tuple[str, dict]]:
        first, d, c = nodes[0], nodes[-2], nodes[-1]
        a, block = first.args, layouts.block_of(first.args.get("data_layout") or first.args.get("layout"))
        return [("mbconv", dict(N=a["N"], C=a["C"], H=a["H"], W=a["W"], E=d.args["C"], K_out=c.args["K_out"],
                                expand=len(nodes) == 3, stride=d.args["stride"][0],
                                residual=bool(c.args.get("residual")), layout=layouts.blocked(block),
                                dtype=a["dtype"]))]

    def inputs(self, nodes: list[Node], args: dict, rw) -> list[str]:
        b, out = layouts.block_of(args["layout"]), [nodes[0].inputs[0]]
        for n in nodes:   # each weight blocked for the chain's block, then its bias
            transform = layouts.depthwise_weight if n.op == "depthwise_conv2d" else layouts.conv_weight
            out += [rw.derived(_nchw(n.inputs[1]), layouts.blocked(b), transform, b), n.inputs[2]]
        return out


def _conv1x1(n: Node | None, activation: str) -> bool:
    return (n is not None and n.op == "conv2d" and (n.args["R"], n.args["S"]) == (1, 1)
            and tuple(n.args["stride"]) == (1, 1) and tuple(n.args["padding"]) == (0, 0)
            and n.args.get("groups", 1) == 1 and n.args.get("bias") and n.args.get("activation") == activation)


def _nchw(weight: str) -> str:
    """A weight blocked by the channel-blocking pass ("name:NCHW{b}c") by its original name."""
    return weight.rsplit(":", 1)[0]
