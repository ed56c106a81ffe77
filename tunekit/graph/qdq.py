"""The QDQ pass: a quantized model's QDQ convolutions, products and max pools as tunekit's int8
ops, channels last. A quantizing exporter (onnxruntime's quantize_static) writes each quantized
convolution as dequantize(x) -> conv(dequantize(w), dequantize(b)) -> quantize; where x is 8-bit
with one scale and zero point, w int8 constants (zero point 0, one scale or one per output
channel), b absent or int32 on the scale x_scale * w_scale, and the quantize the conv's only
reader, the four run as one `qconv2d` (a depthwise conv as one `qdepthwise_conv2d`, a matmul as
one `qmatmul`), requantized in its output stage: onnxruntime's own fusion,
QLinearConv. int8 data is read by qconv2d and qmatmul as uint8, 128 more. A max pool between a
dequantize and a quantize of the same scale and zero point takes the 8-bit values themselves.

A frontend hands the pass the te calls of quantize and dequantize (patterns ("quantize",) and
("dequantize",): data, then constant scale and zero point) and the integers of each constant it
dequantized while loading (`Graph.quantized`).

The convolutions' data and outputs are channels last ([N, H, W, C]), each such tensor a twin of
the model's NCHW one. The te calls between them that compute each element alone (quantize,
dequantize, add, relu, clip, their constants of one element) run on the twins as they lie; a
twin is transposed back to NCHW only where another node reads it, and an NCHW tensor to channels
last only where one of these reads it (for a qconv2d four channels a word, the channels padded to
a multiple of 4 with the zero point)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tunekit.graph import Graph, Node, TeCall
from tunekit.ops.qconv2d import pack_weights
from tunekit.ops.qmatmul import pack_weights as pack_matrix
from tunekit.topi import quantize as q
from tunekit.topi.elementwise import ident

EIGHT_BIT = ("uint8", "int8")
#: the te calls that compute each element alone: they run on twins as they lie
ELEMENTWISE = {"quantize", "dequantize", "add", "relu", "clip"}
#: the ops folded, with the axis of their weights' output channels (a matmul's weights are [K, N])
FOLDED = {"conv2d": 0, "depthwise_conv2d": 0, "matmul": 1, "max_pool2d": None}


def fold_qdq(graph: Graph) -> Graph:
    """Return `graph` with its QDQ convolutions, products and max pools as int8 ops, channels last
    (see the module's doc); `graph` itself is not changed."""
    return _Fold(graph).run() if graph.quantized else graph


def _pattern(node: Node | None) -> str:
    return node.call.pattern[0] if node is not None and node.call and node.call.pattern else ""


class _Fold:
    def __init__(self, graph: Graph):
        self.g, self.consts = graph, dict(graph.constants)
        self.shapes, self.dtypes = dict(graph.shapes), dict(graph.dtypes)
        self.twin: dict[str, str] = {}     # an NCHW tensor -> its channels-last twin
        self.nchw: set[str] = set()         # the twins' NCHW tensors made so far
        self.nodes: list[Node] = []
        producer, readers, outputs = {n.output: n for n in graph.nodes}, graph.readers(), set(graph.outputs)
        self.matched = {n.output: m for n in graph.nodes if n.op in FOLDED and not n.call and n.output not in outputs
                        and (m := self._match(n, producer.get(n.inputs[0]), readers.get(n.output, []))) is not None}
        # a dequantize read only by the folded nodes (they read its input)
        self.skip = {m["q"].output for m in self.matched.values()} | {
            n.output for n in graph.nodes if _pattern(n) == "dequantize" and n.output not in outputs
            and (rs := readers.get(n.output)) and all(r.output in self.matched for r, _ in rs)}

    def _params(self, node: Node, dtype: str) -> tuple[float, int] | None:
        """The one-element scale and zero point (of `dtype`; absent: 0) of quantize or dequantize `node`."""
        scale, zero = (self.consts.get(i) if i else None for i in (*node.inputs[1:3], "")[:2])
        if scale is None or scale.size != 1 or scale.dtype != np.float32 or zero is not None and (
                zero.size != 1 or str(zero.dtype) != dtype) or len(node.inputs) > 2 and node.inputs[2] and zero is None:
            return None
        return float(scale.reshape(())), int(zero.reshape(())) if zero is not None else 0

    def _match(self, n: Node, d: Node | None, rs: list) -> dict | None:
        """What folds op node `n` into an int8 op (see the module's doc), or None."""
        if not (_pattern(d) == "dequantize" and self.dtypes.get(d.inputs[0]) in EIGHT_BIT and len(rs) == 1
                and _pattern(rs[0][0]) == "quantize"):
            return None
        x, quant = d.inputs[0], rs[0][0]
        xp, yp = self._params(d, self.dtypes[x]), self._params(quant, self.dtypes[quant.output])
        if xp is None or yp is None:
            return None
        if n.op == "max_pool2d":   # (quantizing is monotonic)
            return dict(x=x, q=quant) if xp == yp and self.dtypes[quant.output] == self.dtypes[x] else None
        axis, a = FOLDED[n.op], n.args
        w = self.g.quantized.get(n.inputs[1])
        if w is None or n.op == "matmul" and a["K"] % 4:   # (the dot takes four k at once)
            return None
        wq, ws, wz, w_axis = w
        if wq.dtype != np.int8 or wq.ndim != (4 if axis == 0 else 2) or wz is not None and wz.any() or \
                ws.size not in (1, wq.shape[axis]) or ws.size > 1 and w_axis % wq.ndim != axis:
            return None
        wq = np.moveaxis(wq, axis, 0)   # output channels first
        scales = (np.float32(xp[0]) * ws.astype(np.float32).reshape(-1)).astype(np.float32)
        bias = np.zeros(wq.shape[0], np.int64)
        if a.get("bias"):
            bq, bs, bz, _ = self.g.quantized.get(n.inputs[2], (None,) * 4)
            if bq is None or bq.dtype != np.int32 or bz is not None and bz.any() or \
                    not np.allclose(bs.reshape(-1), scales, rtol=1e-5, atol=0):
                return None
            bias = np.broadcast_to(bq.reshape(-1).astype(np.int64), bias.shape)
        return dict(x=x, x_zero=xp[1], w=wq, bias=bias, q=quant, out_dtype=self.dtypes[quant.output], zero=yp[1],
                    scale=np.broadcast_to(scales / np.float32(yp[0]), bias.shape))

    def run(self) -> Graph:
        for n in self.g.nodes:
            self._visit(n)
        for o in self.g.outputs:
            self._nchw(o)
        return replace(self.g, constants=self.consts, nodes=self.nodes, shapes=self.shapes, dtypes=self.dtypes)

    def _visit(self, n: Node) -> None:
        if n.output in self.skip:
            return
        if (m := self.matched.get(n.output)) is not None:
            return getattr(self, f"_{n.op}")(n, m)
        data = [i for i in n.inputs if i and i not in self.consts]
        shape = self.g.shapes.get(data[0], ()) if data else ()
        if _pattern(n) in ELEMENTWISE and any(i in self.twin for i in data) and len(shape) == 4 and \
                shape[1] % 4 == 0 and all(self.g.shapes.get(i) == shape for i in data) and \
                all(self.consts[i].size == 1 for i in n.inputs if i in self.consts):
            # (an NCHW input of these channels is made channels last: the conv that reads it may share it)
            inputs = [self._channels_last(i, shape[1]) if i in data else i for i in n.inputs]
            out = self._name(n.output, self.shapes[inputs[0]], self.dtypes[n.output])
            call = replace(n.call, shapes=[self.shapes[i] if i else () for i in inputs])
            self.nodes.append(replace(n, inputs=inputs, output=out, call=call))
            return
        for i in data:
            self._nchw(i)
        self.nodes.append(n)

    def _const(self, name: str, value, dtype: str = "float32") -> str:
        key = f"{name}:qdq"
        self.consts[key] = np.ascontiguousarray(value, dtype)
        return key

    def _name(self, name: str, shape: tuple, dtype: str) -> str:
        """Declare `name`'s channels-last twin, of `shape` and `dtype`."""
        twin = self.twin[name] = f"{name}/nhwc"
        self.shapes[twin], self.dtypes[twin] = shape, dtype
        return twin

    def _call(self, op: str, kind: str, name: str, x: str, out: str, fn, moves: bool = True) -> None:
        """Append the te call writing `fn(x's te tensor, name)` to `out`."""
        call = TeCall(lambda values, outside: fn(values[0], ident(name)), [self.shapes[x]],
                      "injective" if moves else "reduction", moves)
        self.nodes.append(Node(op, {}, [x], out, name, kind, call=call))

    def _out(self, n: Node, m: dict, dtype: str) -> str:
        """The twin of the output of `n`'s quantize, which the int8 op writes ([N, OH, OW, K])."""
        N, K, OH, OW = self.g.shapes[n.output]
        return self._name(m["q"].output, (N, OH, OW, K), dtype)

    def _conv2d(self, n: Node, m: dict) -> None:
        a, w, x = n.args, m["w"], m["x"]
        N, C, H, W = self.shapes[x]
        C4 = -(-C // 4) * 4
        # int8 data is read as uint8, 128 more (its bits with the sign bit flipped), and so its zero point
        shift = 128 if self.dtypes[x] == "int8" else 0
        x0 = m["x_zero"] + shift
        if x in self.twin and self.shapes[self.twin[x]][-1] == C4:
            data = self._unsigned(self.twin[x]) if shift else self.twin[x]
        else:
            data = self._channels_last(x, C4, x0, words=True, shift=shift)
        w = np.pad(w, ((0, 0), (0, C4 - C), (0, 0), (0, 0)))    # the padded channels weigh nothing
        K, _, R, S = w.shape
        args = dict(N=N, H=H, W=W, C=C4, K_out=K, R=R, S=S, stride=a["stride"], padding=a["padding"],
                    dilation=a["dilation"], out_dtype=m["out_dtype"], zero=m["zero"], pad_value=x0)
        inputs = [data, self._const(f"{n.inputs[1]}/qconv", pack_weights(w), "int32"),
                  self._const(f"{n.output}/offset", m["bias"] - x0 * w.astype(np.int64).sum((1, 2, 3)), "int32"),
                  self._const(f"{n.output}/scale", m["scale"])]
        self.nodes.append(Node("qconv2d", args, inputs, self._out(n, m, m["out_dtype"]), n.name, n.kind))

    def _depthwise_conv2d(self, n: Node, m: dict) -> None:
        a, w, x = n.args, m["w"], m["x"]
        N, C, H, W = self.shapes[x]
        _, _, R, S = w.shape
        args = dict(N=N, H=H, W=W, C=C, R=R, S=S, stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                    dtype=self.dtypes[x], out_dtype=m["out_dtype"], zero=m["zero"], pad_value=m["x_zero"])
        inputs = [self._channels_last(x, C), self._const(f"{n.inputs[1]}/rsc", w[:, 0].transpose(1, 2, 0), "int32"),
                  self._const(f"{n.output}/offset", m["bias"] - m["x_zero"] * w.astype(np.int64).sum((1, 2, 3)),
                              "int32"), self._const(f"{n.output}/scale", m["scale"])]
        self.nodes.append(Node("qdepthwise_conv2d", args, inputs, self._out(n, m, m["out_dtype"]), n.name, n.kind))

    def _matmul(self, n: Node, m: dict) -> None:
        """A qmatmul whose data's zero point (a constant here) goes into the column sums with the bias,
        its run-time zero point 1: acc - 1 * (x0 * sums - bias)."""
        w, a, out = m["w"].T, m["x"], m["q"].output          # [K, N]
        shift = 128 if self.dtypes[a] == "int8" else 0
        self._nchw(a)
        a = self._unsigned(a) if shift else a
        (K, N) = w.shape
        sums = (m["x_zero"] + shift) * w.astype(np.int64).sum(0) - m["bias"]
        inputs = [a, self._const(f"{n.inputs[1]}/dot4", pack_matrix(w), "int32"),
                  self._const(f"{out}/sums", sums, "int32"), self._const(f"{out}/a0", 1, "uint8"),
                  self._const(f"{out}/scale", m["scale"])]
        args = dict(M=n.args["M"], N=N, K=K, out_dtype=m["out_dtype"], zero=m["zero"])
        self.nodes.append(Node("qmatmul", args, inputs, out, n.name, n.kind))

    def _max_pool2d(self, n: Node, m: dict) -> None:
        a, x = n.args, m["x"]
        data, out = self._channels_last(x, self.shapes[x][1]), self._out(n, m, self.dtypes[x])
        self._call("maxpool", n.kind, n.name or n.output, data, out, lambda t, name: q.max_pool_channels_last(
            t, (a["R"], a["S"]), a["stride"], a["padding"], a["dilation"], name), moves=False)

    def _channels_last(self, name: str, C4: int, pad: int = 0, words: bool = False, shift: int = 0) -> str:
        """The channels-last twin of NCHW `name` with C4 channels (padded with `pad`); with `words` (the
        data of a qconv2d), its 8-bit values plus `shift` four channels per int32, [N, H, W, C4/4]
        ([N, H, W] for one word a pixel: the transpose runs in vectors along the rows)."""
        if name in self.twin and self.shapes[self.twin[name]][-1] == C4:
            return self.twin[name]
        self._nchw(name)
        N, C, H, W = self.shapes[name]
        out = f"{name}/nhwc{C4}{'w' if words else ''}"
        if out not in self.shapes:
            self.shapes[out], self.dtypes[out] = ((N, H, W, *([C4 // 4] if C4 > 4 else [])), "int32") if words \
                else ((N, H, W, C4), self.dtypes[name])
            self._call("transpose", "Transpose", f"{name}_nhwc", name, out,
                       lambda t, nm: q.packed_words(t, C4, pad, shift, nm) if words else
                       q.channels_last(t, C4, pad, nm))
        return out

    def _unsigned(self, name: str) -> str:
        """int8 `name` as uint8, 128 more."""
        out = f"{name}/u8"
        if out not in self.shapes:
            self.shapes[out], self.dtypes[out] = self.shapes[name], "uint8"
            self._call("cast", "Cast", f"{name}_u8", name, out, q.to_unsigned)
        return out

    def _nchw(self, name: str) -> None:
        """Make NCHW `name` from its twin, where it has one and it is not made yet."""
        if name in self.twin and name not in self.nchw:
            self.nchw.add(name)
            self._call("transpose", "Transpose", f"{name}_nchw", self.twin[name], name, q.channels_first)
