"""The epilogue pass: what follows a conv, dense or matmul folds into it. A BatchNormalization
of constants folds into its weights and bias, an added per-channel constant into its bias, an
added tensor of its rows computed before it becomes its residual, and ReLU or Clip(0, 6) its
activation, each only where the op's output has no other reader. A reshape of a tensor that no
te call computes is an alias: its readers read that tensor's bytes (so what follows a reshaped
output, GPT-2's Gemm then its residual Add, folds too). A BatchNormalization after a
scale-and-shift te call (a transposed conv's interleave) folds into its scale and shift."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tunekit.graph import Graph, Node, resolve

#: the ops whose epilogue takes a bias, a residual and an activation (`tunekit.ops.epilogue`)
ANCHORS = frozenset({"conv2d", "depthwise_conv2d", "group_conv2d", "dense", "matmul"})


def fuse_epilogues(graph: Graph) -> Graph:
    """Return `graph` with epilogues fused and reshapes of op outputs aliased (see the module's
    doc); `graph` itself is not changed."""
    consts, uses, alias = dict(graph.constants), graph.uses(), {}
    nodes: list[Node] = []
    made: dict[str, Node] = {}          # tensor -> the node (of `nodes`) that writes it
    at: dict[int, int] = {}             # id of a node of `nodes` -> its position (a lookup, not a scan)

    def const(key: str, value) -> str:
        consts[key] = np.ascontiguousarray(value, np.float32)
        return key

    def position(t: str) -> int:
        return at[id(made[t])] if t in made else -1

    for node in graph.nodes:
        node = replace(node, inputs=[resolve(alias, i) for i in node.inputs])
        call, x = node.call, node.inputs[0] if node.inputs else ""
        if call and call.reshape and not (made.get(x) and made[x].call):
            alias[node.output] = x   # its readers are now the input's
            uses[x] = uses.get(x, 0) - 1 + uses.get(node.output, 0)
            continue
        pattern = call.pattern if call else ()
        ins = node.inputs if pattern[:1] == ("add",) else node.inputs[:1]
        cands = [f for i in ins if (f := made.get(i)) and not f.call and f.op in ANCHORS and uses.get(i) == 1]
        f = max(cands, key=lambda c: at[id(c)], default=None)
        if f is not None and _fits(node, f, pattern, graph, consts, const, position):
            _renamed(made, f, node.output)
            continue
        p = made.get(x)
        if (pattern[:1] == ("batch_norm",) and p and p.call and p.call.pattern == ("scale_shift",)
                and uses.get(x) == 1 and all(i in consts for i in node.inputs[1:5])):
            k, shift = batchnorm_factors(consts, node)
            scale, old = (consts[i].astype(np.float64) for i in p.inputs[-2:])
            p.inputs[-2:] = [const(f"{node.output}/scale:tunekit", scale * k),
                             const(f"{node.output}/shift:tunekit", old * k + shift)]
            _renamed(made, p, node.output)
            continue
        at[id(node)] = len(nodes)
        nodes.append(node)
        made[node.output] = node
    return replace(graph, constants=consts, nodes=nodes, outputs=[resolve(alias, o) for o in graph.outputs])


def _renamed(made: dict, node: Node, output: str) -> None:
    del made[node.output]
    node.output = output
    made[output] = node


def _fits(n: Node, f: Node, pattern: tuple, graph: Graph, consts: dict, const, position) -> bool:
    """Fold te call `n` into the epilogue of op node `f` (a copy the pass owns) if it fits."""
    a, kind = f.args, pattern[:1]
    if not kind or a.get("activation", "none") != "none":
        return False
    if kind == ("relu",) or kind == ("clip",) and pattern[1:] == (0, 6):   # after a residual too
        f.args = {**a, "activation": "relu" if kind == ("relu",) else "relu6"}
        return True
    if a.get("residual"):
        return False
    if kind == ("batch_norm",) and all(i in consts for i in n.inputs[1:5]):
        k, shift = batchnorm_factors(consts, n)
        w = consts[f.inputs[1]].astype(np.float64)
        # per output channel (OIHW), or feature ([out, in]; a matmul's [in, out])
        w = w * k if f.op == "matmul" else w * k.reshape(-1, *[1] * (w.ndim - 1))
        b = consts[f.inputs[2]].astype(np.float64) if a.get("bias") else np.zeros_like(k)
        f.inputs = [f.inputs[0], const(f"{f.inputs[1]}/bn:tunekit", w),
                    const(f"{n.output}/bias:tunekit", b * k + shift)]
        f.args = {**a, "bias": True}
        return True
    if kind != ("add",):
        return False
    other = n.inputs[1] if n.inputs[0] == f.output else n.inputs[0]
    shape = graph.shapes[f.output]
    if other in consts and _per_channel(consts[other].shape, shape, 1 if "conv" in f.op else -1):
        b = consts[f.inputs[2]].astype(np.float64) if a.get("bias") else 0
        f.inputs = [*f.inputs[:2], const(f"{n.output}/bias:tunekit", b + consts[other].reshape(-1).astype(np.float64))]
        f.args = {**a, "bias": True}
        return True
    if _same_rows(graph.shapes.get(other), shape, f.op) and position(other) < position(f.output):
        f.inputs, f.args = [*f.inputs, other], {**a, "residual": True}   # computed before the op runs
        return True
    return False


def _same_rows(other: tuple | None, shape: tuple, op: str) -> bool:
    """Whether a residual of shape `other` adds element for element to an output of `shape`: the
    same shape, or for a matmul or dense ([M, N] rows) the same rows in another shape (GPT-2's
    Gemm output is reshaped to [1, T, N] before its residual Add)."""
    return other == shape or other is not None and op in ("matmul", "dense") and other[-1] == shape[-1] and \
        int(np.prod(other)) == int(np.prod(shape))


def _per_channel(const_shape: tuple, shape: tuple, axis: int) -> bool:
    """Whether a constant of `const_shape` broadcast to `shape` varies along `axis` alone (a bias)."""
    if len(const_shape) > len(shape):
        return False
    padded = (1,) * (len(shape) - len(const_shape)) + tuple(const_shape)
    axis %= len(shape)
    return all(d == (shape[axis] if k == axis else 1) for k, d in enumerate(padded))


def batchnorm_factors(consts: dict, n: Node) -> tuple[np.ndarray, np.ndarray]:
    """(k, shift) per channel of BatchNormalization node `n` of constants: y = x * k + shift."""
    scale, bias, mean, var = (consts[i].astype(np.float64) for i in n.inputs[1:5])
    k = scale / np.sqrt(var + n.call.pattern[1])
    return k, bias - mean * k
