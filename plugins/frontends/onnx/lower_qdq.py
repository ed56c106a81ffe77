"""QDQ convolutions as tunekit's int8 ops, channels last. onnxruntime's quantize_static writes each
quantized Conv as DequantizeLinear(x) -> Conv(DequantizeLinear(w), DequantizeLinear(b)) ->
QuantizeLinear; where x is 8-bit with one scale and zero point, w int8 constants (zero point 0,
one scale or one per output channel), b absent or int32 on the scale x_scale * w_scale, and the
QuantizeLinear the Conv's only reader, the four run as one `qconv2d` (a depthwise Conv as one
`qdepthwise_conv2d`), requantized in its output stage: onnxruntime's own fusion, QLinearConv.
int8 data is read by qconv2d as uint8, 128 more. A MaxPool between a DequantizeLinear and a
QuantizeLinear of the same scale and zero point takes the 8-bit values themselves.

Their data and outputs are channels last ([N, H, W, C]), each such tensor a twin of the model's
NCHW one. The nodes between them that compute each value alone (QuantizeLinear, DequantizeLinear
of one scale, Add of equal shapes, Relu, Clip) run on the twins as they lie; a twin is transposed
back to NCHW only where another node reads it, and an NCHW tensor to channels last only where one
of these reads it (for a qconv2d four channels a word, the channels padded to a multiple of 4
with the zero point)."""
from __future__ import annotations

import numpy as np

from tunekit.graph import Node
from tunekit.ops.conv2d import out_size
from tunekit.ops.qconv2d import pack_weights
from tunekit.ops.qmatmul import pack_weights as pack_matrix
from tunekit.topi import quantize as q

from .context import attrs_of
from .lowerings import LOWERINGS

EIGHT_BIT = ("uint8", "int8")
#: the nodes that compute each element alone (on per-tensor quantization parameters)
ELEMENTWISE = {"QuantizeLinear", "DequantizeLinear", "Add", "Relu", "Clip"}


class ChannelsLast:
    """The QDQ convolutions of ONNX graph `g` (translated by `cv`, a `_Converter`) and their twins.

    Args:
        cv: the converter (its constants, shapes, dtypes; it adds the nodes).
        g: the ONNX graph.
        dequantized: the constants folded from a DequantizeLinear, each with that node.
    """

    def __init__(self, cv, g, dequantized: dict):
        self.cv, self.dequantized = cv, dequantized
        self.twin: dict[str, str] = {}        # an NCHW tensor -> its channels-last twin
        self.nchw: set[str] = set()            # the twins' NCHW tensors made so far
        producer = {o: n for n in g.node for o in n.output}
        readers: dict[str, list] = {}
        for n in g.node:
            for i in dict.fromkeys(n.input):
                readers.setdefault(i, []).append(n)
        outputs = {o.name for o in g.output}
        # nodes by their first output (protobuf hands out a new object per access)
        self.convs = {n.output[0]: m for n in g.node if n.op_type == "Conv" and n.output[0] not in outputs
                      and (m := self._match(n, producer, readers)) is not None}
        self.pools = {n.output[0]: m for n in g.node if n.op_type == "MaxPool" and n.output[0] not in outputs
                      and (m := self._match_pool(n, producer, readers)) is not None}
        self.products = {n.output[0]: m for n in g.node if n.op_type in ("Gemm", "MatMul") and n.output[0] not in
                         outputs and (m := self._match_product(n, producer, readers)) is not None}
        found = [self.convs, self.pools, self.products]
        folded = {k for f in found for k in f}
        # a DequantizeLinear read only by the folded nodes (they read its input)
        self.skip = {m["q"].output[0] for f in found for m in f.values()} | {
            d.output[0] for d in g.node if d.op_type == "DequantizeLinear" and d.output[0] not in outputs
            and (rs := readers.get(d.output[0])) and all(r.output[0] in folded for r in rs)}

    def _scalar(self, name: str, dtypes=("uint8",)):
        """Constant `name` of one element and one of `dtypes`, or None ("" reads as a zero of the first)."""
        if not name:
            return np.zeros((), dtypes[0])
        v = self.cv.constants.get(name)
        return v.reshape(()) if v is not None and v.size == 1 and str(v.dtype) in dtypes else None

    def _match_product(self, n, producer: dict, readers: dict) -> dict | None:
        """A QDQ Gemm or MatMul of 2-D data and int8 constant weights as a qmatmul, or None."""
        a, gemm = attrs_of(n), n.op_type == "Gemm"
        if len(self.cv.shapes.get(n.input[0], ())) != 2 or gemm and (
                a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0):
            return None
        m = self._match(n, producer, readers, columns=0 if gemm and a.get("transB", 0) else 1)
        return m if m is not None and m["w"].shape[1] % 4 == 0 else None   # (the dot takes four k at once)

    def _match(self, n, producer: dict, readers: dict, columns: int | None = None) -> dict | None:
        """What folds conv `n` into a qconv2d (see the module's doc), or None; with `columns` (the axis of
        the weights' output columns), Gemm or MatMul `n` into a qmatmul."""
        cv, d, q = self.cv, producer.get(n.input[0]), readers.get(n.output[0], [])
        w = self.dequantized.get(n.input[1])
        attrs = attrs_of(n) if columns is None else {}
        pads, group = attrs.get("pads", [0, 0, 0, 0]), attrs.get("group", 1)
        if not (d is not None and d.op_type == "DequantizeLinear" and cv.dtypes.get(d.input[0]) in EIGHT_BIT
                and len(q) == 1 and q[0].op_type == "QuantizeLinear" and w is not None and (columns is not None or (
                    attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and len(pads) == 4 and pads[:2] == pads[2:]
                    and len(cv.shapes.get(n.input[0], ())) == 4
                    and (group == 1 or group == cv.shapes[n.input[0]][1] == cv.shapes[n.output[0]][1])))):
            return None   # (a conv, or a depthwise one: a group per channel)
        q = q[0]
        x_scale = self._scalar(d.input[1], ("float32",))
        x_zero = self._scalar(d.input[2] if len(d.input) > 2 else "", (cv.dtypes[d.input[0]],))
        y_scale = self._scalar(q.input[1], ("float32",))
        y_zero = self._scalar(q.input[2] if len(q.input) > 2 else "", ("uint8", "int8"))
        wq, ws, wz = (cv.constants.get(k) if k else None for k in w[:3])
        axis = columns or 0   # the output channels' (a conv's 0: [K, C, R, S])
        if any(v is None for v in (x_scale, x_zero, y_scale, y_zero, wq, ws)) or wq.dtype != np.int8 or \
                wq.ndim != (4 if columns is None else 2) or wz is not None and wz.any() or \
                ws.size not in (1, wq.shape[axis]) or ws.size > 1 and w[3] % wq.ndim != axis:
            return None
        wq = np.moveaxis(wq, axis, 0)   # output channels first
        scales = (np.float32(x_scale) * ws.astype(np.float32).reshape(-1)).astype(np.float32)
        bias = np.zeros(wq.shape[0], np.int64)
        if len(n.input) > 2 and n.input[2]:
            b = self.dequantized.get(n.input[2])
            bq, bs = (cv.constants.get(b[k]) if b and b[k] else None for k in (0, 1))
            if bq is None or bq.dtype != np.int32 or b[2] and cv.constants[b[2]].any() or \
                    not np.allclose(bs.reshape(-1), scales, rtol=1e-5, atol=0):
                return None
            bias = np.broadcast_to(bq.reshape(-1).astype(np.int64), bias.shape)
        return dict(x=d.input[0], x_zero=int(x_zero), w=wq, bias=bias, q=q, out_dtype=str(y_zero.dtype),
                    zero=int(y_zero), scale=np.broadcast_to(scales / np.float32(y_scale), bias.shape),
                    depthwise=group > 1)

    def _match_pool(self, n, producer: dict, readers: dict) -> dict | None:
        """A MaxPool of DequantizeLinear(x) read only by a QuantizeLinear of the same scale and zero point:
        the max of the uint8 values themselves (quantizing is monotonic); or None."""
        d, q, attrs = producer.get(n.input[0]), readers.get(n.output[0], []), attrs_of(n)
        pads = attrs.get("pads", [0, 0, 0, 0])
        if not (d is not None and d.op_type == "DequantizeLinear" and self.cv.dtypes.get(d.input[0]) in EIGHT_BIT
                and len(q) == 1 and q[0].op_type == "QuantizeLinear" and len(n.output) == 1
                and not attrs.get("ceil_mode", 0) and attrs.get("auto_pad", "NOTSET") == "NOTSET"
                and len(pads) == 4 and pads[:2] == pads[2:] and len(self.cv.shapes.get(n.input[0], ())) == 4):
            return None
        params = [[self._scalar(k.input[1], ("float32",)), self._scalar(k.input[2] if len(k.input) > 2 else "",
                                                                         (self.cv.dtypes[d.input[0]],))]
                  for k in (d, q[0])]
        same = all(a is not None and b is not None and a == b for a, b in zip(*params))
        return dict(x=d.input[0], q=q[0]) if same else None

    def translate(self, n) -> bool:
        """Add what ONNX node `n` is here: nothing (a folded node), a qconv2d, a node on twins;
        False where the converter translates it (its inputs' NCHW tensors made first)."""
        if n.output[0] in self.skip:
            return True
        if n.output[0] in self.convs:
            self._conv(n, self.convs[n.output[0]])
            return True
        if n.output[0] in self.pools:
            self._pool(n, self.pools[n.output[0]])
            return True
        if n.output[0] in self.products:
            self._product(n, self.products[n.output[0]])
            return True
        ins = [i for i in n.input if i and i not in self.cv.constants]
        if n.op_type in ELEMENTWISE and any(i in self.twin for i in ins) and n.output[0] in self.cv.used and \
                len({self.cv.shapes[i] for i in ins}) == 1 and self.cv.shapes[ins[0]][1] % 4 == 0 and \
                all(self.cv.constants[i].size == 1 for i in n.input if i in self.cv.constants):
            # (an NCHW input of these channels is made channels last: the conv that reads it may share it)
            inputs = [self._channels_last(i, self.cv.shapes[i][1]) if i in ins else i for i in n.input]
            out = self._name(n.output[0], self.cv.shapes[inputs[0]], self.cv.dtypes[n.output[0]])
            node = self.cv.te_call(n.op_type, n.name or n.output[0], inputs, [out], 0, attrs_of(n),
                                   LOWERINGS[n.op_type], self.cv._pattern(n, attrs_of(n)))
            self.cv.add(node, self.cv.shapes[out], self.cv.dtypes[out])
            return True
        for i in ins:
            self._nchw(i)
        return False

    def _name(self, name: str, shape: tuple, dtype: str) -> str:
        """Declare `name`'s channels-last twin, of `shape` and `dtype`."""
        twin = self.twin[name] = f"{name}/nhwc"
        self.cv.shapes[twin], self.cv.dtypes[twin] = shape, dtype
        return twin

    def _conv(self, n, m: dict) -> None:
        cv, attrs, w = self.cv, attrs_of(n), m["w"]
        N, C, H, W = cv.shapes[n.input[0]]
        if m["depthwise"]:
            return self._depthwise(n, m)
        C4 = -(-C // 4) * 4
        # int8 data is read as uint8, 128 more (its bits with the sign bit flipped), and so its zero point
        shift = 128 if cv.dtypes[m["x"]] == "int8" else 0
        x0 = m["x_zero"] + shift
        if m["x"] in self.twin and cv.shapes[self.twin[m["x"]]][-1] == C4:
            data = self._unsigned(self.twin[m["x"]]) if shift else self.twin[m["x"]]
        else:
            data = self._channels_last(m["x"], C4, x0, words=True, shift=shift)
        w = np.pad(w, ((0, 0), (0, C4 - C), (0, 0), (0, 0)))    # the padded channels weigh nothing
        K, _, R, S = w.shape
        window, (OH, OW) = _window(attrs, H, W, R, S)
        args = dict(N=N, H=H, W=W, C=C4, K_out=K, R=R, S=S, **window, out_dtype=m["out_dtype"], zero=m["zero"],
                    pad_value=x0)
        offset = m["bias"] - x0 * w.astype(np.int64).sum((1, 2, 3))
        inputs = [data, cv.const(f"{n.input[1]}/qconv", pack_weights(w), "int32"),
                  cv.const(f"{n.output[0]}/offset", offset, "int32"), cv.const(f"{n.output[0]}/scale", m["scale"])]
        shape = (N, OH, OW, K)
        out = self._name(m["q"].output[0], shape, m["out_dtype"])
        cv.add(Node("qconv2d", args, inputs, out, n.name, "Conv"), shape, m["out_dtype"])

    def _product(self, n, m: dict) -> None:
        """A qmatmul whose data's zero point (a constant here) goes into the column sums with the bias,
        its run-time zero point 1: acc - 1 * (x0 * sums - bias)."""
        cv, w = self.cv, m["w"].T                  # [K, N]
        a, shift = m["x"], 128 if cv.dtypes[m["x"]] == "int8" else 0
        self._nchw(a)
        if shift:
            a = self._unsigned(a)
        (K, N), out = w.shape, m["q"].output[0]
        sums = (m["x_zero"] + shift) * w.astype(np.int64).sum(0) - m["bias"]
        inputs = [a, cv.const(f"{n.input[1]}/dot4", pack_matrix(w), "int32"), cv.const(f"{out}/sums", sums, "int32"),
                  cv.const(f"{out}/a0", 1, "uint8"), cv.const(f"{out}/scale", m["scale"])]
        args = dict(M=int(np.prod(cv.shapes[m["x"]])) // K, N=N, K=K, out_dtype=m["out_dtype"], zero=m["zero"])
        cv.add(Node("qmatmul", args, inputs, out, n.name, n.op_type), cv.shapes[out], m["out_dtype"])

    def _depthwise(self, n, m: dict) -> None:
        cv, attrs, w = self.cv, attrs_of(n), m["w"]
        N, C, H, W = cv.shapes[n.input[0]]
        _, _, R, S = w.shape
        window, (OH, OW) = _window(attrs, H, W, R, S)
        args = dict(N=N, H=H, W=W, C=C, R=R, S=S, **window, dtype=cv.dtypes[m["x"]], out_dtype=m["out_dtype"],
                    zero=m["zero"], pad_value=m["x_zero"])
        inputs = [self._channels_last(m["x"], C), cv.const(f"{n.input[1]}/rsc", w[:, 0].transpose(1, 2, 0), "int32"),
                  cv.const(f"{n.output[0]}/offset", m["bias"] - m["x_zero"] * w.astype(np.int64).sum((1, 2, 3)),
                           "int32"), cv.const(f"{n.output[0]}/scale", m["scale"])]
        shape = (N, OH, OW, C)
        out = self._name(m["q"].output[0], shape, m["out_dtype"])
        cv.add(Node("qdepthwise_conv2d", args, inputs, out, n.name, "Conv"), shape, m["out_dtype"])

    def _pool(self, n, m: dict) -> None:
        attrs = attrs_of(n)
        N, C, H, W = self.cv.shapes[m["x"]]
        data = self._channels_last(m["x"], C)
        R, S = attrs["kernel_shape"]
        window, (OH, OW) = _window(attrs, H, W, R, S)
        shape = (N, OH, OW, C)
        out = self._name(m["q"].output[0], shape, self.cv.dtypes[m["x"]])

        def lower(cx):
            return [q.max_pool_channels_last(cx.tensor(0), (R, S), window["stride"], window["padding"],
                                             window["dilation"], cx.name)]
        self.cv.add(self.cv.te_call("MaxPool", n.name or n.output[0], [data], [out], 0, {}, lower, kind="reduction"),
                    shape, self.cv.dtypes[m["x"]])

    def _channels_last(self, name: str, C4: int, pad: int = 0, words: bool = False, shift: int = 0) -> str:
        """The channels-last twin of NCHW `name` with C4 channels (padded with `pad`); with `words` (the
        data of a qconv2d), its 8-bit values plus `shift` four channels per int32, [N, H, W, C4/4]
        ([N, H, W] for one word a pixel: the transpose runs in vectors along the rows)."""
        if name in self.twin and self.cv.shapes[self.twin[name]][-1] == C4:
            return self.twin[name]
        self._nchw(name)
        N, C, H, W = self.cv.shapes[name]
        out = f"{name}/nhwc{C4}{'w' if words else ''}"
        shape, dtype = ((N, H, W, *([C4 // 4] if C4 > 4 else [])), "int32") if words else \
            ((N, H, W, C4), self.cv.dtypes[name])
        if out not in self.cv.shapes:
            self.cv.shapes[out], self.cv.dtypes[out] = shape, dtype

            def lower(cx):
                x = cx.tensor(0)
                return [q.packed_words(x, C4, pad, shift, cx.name) if words else
                        q.channels_last(x, C4, pad, cx.name)]
            self.cv.add(self.cv.te_call("Transpose", f"{name}_nhwc", [name], [out], 0, {}, lower), shape, dtype)
        return out

    def _unsigned(self, twin: str) -> str:
        """Channels-last int8 `twin` as uint8, 128 more."""
        out = f"{twin}/u8"
        if out not in self.cv.shapes:
            shape = self.cv.shapes[out] = self.cv.shapes[twin]
            self.cv.dtypes[out] = "uint8"
            self.cv.add(self.cv.te_call("Cast", f"{twin}_u8", [twin], [out], 0, {},
                                        lambda cx: [q.to_unsigned(cx.tensor(0), cx.name)]), shape, "uint8")
        return out

    def _nchw(self, name: str) -> None:
        """Make NCHW `name` from its twin, where it has one and it is not made yet."""
        if name not in self.twin or name in self.nchw:
            return
        self.nchw.add(name)
        N, C, H, W = self.cv.shapes[name]

        def lower(cx):
            return [q.channels_first(cx.tensor(0), cx.name)]
        self.cv.add(self.cv.te_call("Transpose", f"{name}_nchw", [self.twin[name]], [name], 0, {}, lower),
                    (N, C, H, W), self.cv.dtypes[name])


def _window(attrs: dict, H: int, W: int, R: int, S: int) -> tuple[dict, tuple[int, int]]:
    """A conv's or pool's stride, padding and dilation (as op args), and its output's height and width."""
    (sh, sw), (dh, dw) = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    ph, pw = attrs.get("pads", [0, 0, 0, 0])[:2]
    return (dict(stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw)),
            (out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)))
