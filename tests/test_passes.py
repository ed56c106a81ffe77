"""The graph passes that fold, merge and fuse what a frontend translated (`tunekit.graph`),
on graphs built by hand: a frontend-neutral check of each pass alone."""
from __future__ import annotations

import numpy as np

from tunekit import te
from tunekit.graph import Graph, Node, TeCall
from tunekit.graph.epilogues import fuse_epilogues
from tunekit.graph.fuse_te import fuse_te
from tunekit.graph.siblings import merge_siblings
from tunekit.topi import elementwise, layout

RNG = np.random.default_rng(0)
F = "float32"


def call(op, inputs, output, shapes, lower, pattern=(), kind="injective", **flags):
    return Node(op, {}, inputs, output, output, op.capitalize(), call=TeCall(lower, shapes, kind, pattern=pattern,
                                                                            **flags))


def unary(fn):
    return lambda values, outside: elementwise.apply(fn, [values[0]], "u")


def conv(x, w, out, **extra):
    args = dict(N=1, C=4, H=6, W=6, K_out=8, R=3, S=3, padding=(1, 1), dtype=F, activation="none", bias=False,
                residual=False, **extra)
    return Node("conv2d", args, [x, w, *([extra and "b"] if extra.get("bias") else [])], out, out, "Conv")


def test_epilogues_fold_a_batchnorm_and_a_relu_into_the_conv_before_them():
    w = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
    bn = {k: RNG.uniform(0.5, 1.5, 8).astype(np.float32) for k in ("s", "t", "m", "v")}
    graph = Graph({"x": ((1, 4, 6, 6), F)}, {"w": w, **bn},
                  [conv("x", "w", "c"),
                   call("batchnormalization", ["c", "s", "t", "m", "v"], "n", [(1, 8, 6, 6)] + [(8,)] * 4, None,
                        ("batch_norm", 1e-5)),
                   call("relu", ["n"], "y", [(1, 8, 6, 6)], None, ("relu",))],
                  ["y"], {"c": (1, 8, 6, 6), "n": (1, 8, 6, 6), "y": (1, 8, 6, 6)})
    out = fuse_epilogues(graph)
    (node,) = out.nodes
    assert (node.op, node.output, node.args["activation"], node.args["bias"]) == ("conv2d", "y", "relu", True)
    k = bn["s"] / np.sqrt(bn["v"] + 1e-5)
    np.testing.assert_allclose(out.constants[node.inputs[1]], w * k[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(out.constants[node.inputs[2]], bn["t"] - bn["m"] * k, rtol=1e-5, atol=1e-7)
    assert [n.op for n in graph.nodes] == ["conv2d", "batchnormalization", "relu"]   # the graph is not changed


def test_epilogues_leave_an_op_whose_output_has_another_reader():
    graph = Graph({"x": ((1, 4, 6, 6), F)}, {"w": np.ones((8, 4, 3, 3), np.float32)},
                  [conv("x", "w", "c"), call("relu", ["c"], "y", [(1, 8, 6, 6)], None, ("relu",))],
                  ["y", "c"], {"c": (1, 8, 6, 6), "y": (1, 8, 6, 6)})
    assert [n.op for n in fuse_epilogues(graph).nodes] == ["conv2d", "relu"]


def test_fuse_te_groups_te_calls_into_one_computation_and_a_lone_reshape_is_an_alias():
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    nodes = [call("exp", ["x"], "e", [(2, 6)], unary("exp")),
             call("relu", ["e"], "r", [(2, 6)], unary("relu")),
             call("reshape", ["x"], "flat", [(2, 6)], lambda v, o: layout.reshape(v[0], (12,), "flat"), moves=True,
                  reshape=True),
             Node("dense", dict(M=1, N=3, K=12, dtype=F), ["flat", "w"], "d", "d", "Gemm")]
    graph = Graph({"x": ((2, 6), F)}, {"w": np.ones((3, 12), np.float32)}, nodes, ["r", "d"],
                  {"x": (2, 6), "e": (2, 6), "r": (2, 6), "flat": (12,), "d": (1, 3)}, dtypes={"x": F, "e": F},
                  frontend="t")
    out = fuse_te(graph)
    assert [(n.op, n.inputs) for n in out.nodes] == [("t_exp_relu", ["x"]), ("dense", ["x", "w"])]
    tensors = te.from_data(out.nodes[0].computation)
    np.testing.assert_allclose(te.evaluate(tensors, [x])[0], np.maximum(np.exp(x), 0), rtol=1e-6)
    alone = fuse_te(graph, group=False)   # each te call a kernel of its own
    assert [n.op for n in alone.nodes] == ["t_exp", "t_relu", "dense"]


def test_merge_siblings_runs_matmuls_of_one_input_as_one_and_slices_their_columns():
    w = {k: RNG.standard_normal((6, n)).astype(np.float32) for k, n in (("wq", 4), ("wk", 4), ("wv", 2))}

    def mm(weight, out, N):
        return Node("matmul", dict(M=3, N=N, K=6, dtype=F, activation="none", bias=False, residual=False),
                    ["x", weight], out, out, "MatMul")
    nodes = [mm("wq", "q", 4), mm("wk", "k", 4), mm("wv", "v", 2),
             *(call("relu", [t], f"{t}r", [(3, n)], unary("relu")) for t, n in (("q", 4), ("k", 4), ("v", 2)))]
    graph = Graph({"x": ((3, 6), F)}, w, nodes, ["qr", "kr", "vr"],
                  {"q": (3, 4), "k": (3, 4), "v": (3, 2), "qr": (3, 4), "kr": (3, 4), "vr": (3, 2)})
    out = merge_siblings(graph)
    assert [n.op for n in out.nodes] == ["matmul", "slice", "slice", "slice", "relu", "relu", "relu"]
    merged = out.nodes[0]
    assert merged.args["N"] == 10 and merged.output == "q/merged" and out.shapes["q/merged"] == (3, 10)
    np.testing.assert_array_equal(out.constants[merged.inputs[1]], np.concatenate([w["wq"], w["wk"], w["wv"]], 1))
    kv = out.nodes[3].call.lower([te.placeholder((3, 10), "m", F)], None)
    assert kv.shape == (3, 2)   # v's columns, the last two
