"""PyTorch CPU eager on an ONNX file: the graph's nodes run in order as
torch.nn.functional calls on the file's own weights (what a PyTorch model with
these layers does in eager mode: BatchNormalization is its own op, not folded).
Covers the ops of examples/networks.py and examples/small_net.py."""
from __future__ import annotations

import numpy as np


def torch_model(path: str):
    """Return (fn, input shape): fn(x: np.ndarray) -> list of np.ndarray outputs."""
    import onnx
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper

    model = onnx.load(path)
    g = model.graph
    consts = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in g.initializer}
    inputs = [i for i in g.input if i.name not in consts]
    shape = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim]

    def attrs(node) -> dict:
        return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    def pads(a: dict) -> tuple:
        p = a.get("pads", [0, 0, 0, 0])
        if p[0] != p[2] or p[1] != p[3]:
            raise NotImplementedError("asymmetric padding")
        return (p[0], p[1])

    def run(node, v):
        a, x = attrs(node), [v[n] if n else None for n in node.input]
        op = node.op_type
        if op == "Conv":
            return F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, tuple(a.get("strides", (1, 1))), pads(a),
                            tuple(a.get("dilations", (1, 1))), a.get("group", 1))
        if op == "BatchNormalization":
            return F.batch_norm(x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5))
        if op == "Relu":
            return F.relu(x[0])
        if op == "Clip":
            lo = float(x[1]) if len(x) > 1 and x[1] is not None else a.get("min")
            hi = float(x[2]) if len(x) > 2 and x[2] is not None else a.get("max")
            return torch.clamp(x[0], lo, hi)
        if op == "Add":
            return x[0] + x[1]
        if op == "MaxPool":
            return F.max_pool2d(x[0], tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), pads(a))
        if op == "AveragePool":
            return F.avg_pool2d(x[0], tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), pads(a))
        if op == "GlobalAveragePool":
            return F.adaptive_avg_pool2d(x[0], 1)
        if op == "Flatten":
            return torch.flatten(x[0], a.get("axis", 1))
        if op == "Reshape":
            return x[0].reshape(tuple(int(d) for d in x[1]))
        if op == "Gemm":
            b = x[1].t() if a.get("transB", 0) else x[1]
            out = a.get("alpha", 1.0) * (x[0] @ b)
            return out + a.get("beta", 1.0) * x[2] if len(x) > 2 else out
        raise NotImplementedError(f"{path}: node {node.name!r} ({op}) has no torch mapping in bench/torch_onnx.py")

    def fn(x: np.ndarray) -> list[np.ndarray]:
        with torch.inference_mode():
            v = dict(consts)
            v[inputs[0].name] = torch.from_numpy(x)
            for node in g.node:
                v[node.output[0]] = run(node, v)
            return [v[o.name].numpy() for o in g.output]
    return fn, shape
