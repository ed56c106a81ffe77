"""The graph tuner's dynamic program over channel blocks, on toy cost tables."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from tunekit.graph import Node
from tunekit.graph.layout_search import choose_blocks


def _node(out, *inputs, op="conv2d"):
    return Node(op, {}, list(inputs), out, out)


def _brute_force(nodes, options, cost):
    names = list(options)
    best = (math.inf, None)
    for combo in itertools.product(*(options[t] for t in names)):
        blocks = dict(zip(names, combo))
        total = sum(cost(n, {t: blocks[t] for t in [*n.inputs, n.output] if t in blocks}) for n in nodes)
        best = min(best, (total, blocks), key=lambda v: v[0])
    return best


def test_a_chain_takes_the_cheapest_path_not_each_layers_cheapest_block():
    # conv1 -> conv2 -> conv3: each layer's cheapest given its input (16, 16, then 5.0) sums to 7.0
    nodes = [_node("a", "x"), _node("b", "a"), _node("c", "b")]
    options = {"a": (16, 8), "b": (16, 8), "c": (16, 8)}
    table = {("a", (16,)): 1.0, ("a", (8,)): 1.1,
             ("b", (16, 16)): 1.0, ("b", (16, 8)): 2.0, ("b", (8, 16)): 1.5, ("b", (8, 8)): 1.2,
             ("c", (16, 16)): 5.0, ("c", (16, 8)): 5.0, ("c", (8, 16)): 1.0, ("c", (8, 8)): 1.0}

    def cost(node, blocks):
        return table[node.output, tuple(blocks[t] for t in [*node.inputs, node.output] if t in blocks)]
    blocks, total = choose_blocks(nodes, options, cost)
    assert blocks == {"a": 8, "b": 8, "c": 16} and total == pytest.approx(1.1 + 1.2 + 1.0)


def test_a_residual_add_that_needs_equal_blocks_is_honoured():
    # a -> b -> c(+a): c must write the block a has
    nodes = [_node("a", "x"), _node("b", "a"), _node("c", "b", "a")]
    options = {t: (16, 8) for t in "abc"}

    def cost(node, blocks):
        if node.output == "c" and blocks["a"] != blocks["c"]:
            return math.inf
        table = {"a": {16: 3.0, 8: 1.0}, "b": {16: 1.0, 8: 1.0}, "c": {16: 1.0, 8: 2.5}}
        return table[node.output][blocks[node.output]]
    blocks, total = choose_blocks(nodes, options, cost)
    assert blocks["a"] == blocks["c"] and total == pytest.approx(min(3 + 1 + 1, 1 + 1 + 2.5))


@pytest.mark.parametrize("seed", range(12))
def test_random_tables_on_branching_graphs_match_exhaustive_search(seed):
    rng = random.Random(seed)
    # a stem, then blocks whose output adds a skip from their input (MobileNet/ResNet-like), some branches wider
    nodes, prev, k = [_node("t0", "x")], "t0", 1
    while len(nodes) < 7:
        if rng.random() < 0.5:
            nodes += [_node(f"t{k}", prev), _node(f"t{k + 1}", f"t{k}", prev)]
            prev, k = f"t{k + 1}", k + 2
        else:
            nodes.append(_node(f"t{k}", prev))
            prev, k = f"t{k}", k + 1
    options = {n.output: tuple(rng.sample([4, 8, 16], rng.choice([1, 2, 3]))) for n in nodes}
    memo = {}

    def cost(node, blocks):
        key = (node.output, tuple(sorted(blocks.items())))
        if key not in memo:
            memo[key] = math.inf if rng.random() < 0.1 else rng.uniform(0.1, 2.0)
        return memo[key]
    want_total, _ = _brute_force(nodes, options, cost)
    blocks, total = choose_blocks(nodes, options, cost)
    assert total == pytest.approx(want_total)
    got = sum(cost(n, {t: blocks[t] for t in [*n.inputs, n.output] if t in blocks}) for n in nodes)
    assert got == pytest.approx(want_total)


def test_with_no_finite_choice_every_tensor_keeps_its_first_option():
    nodes = [_node("a", "x"), _node("b", "a")]
    blocks, total = choose_blocks(nodes, {"a": (16, 8), "b": (8, 16)}, lambda n, b: math.inf)
    assert blocks == {"a": 16, "b": 8} and math.isinf(total)


def _x86_target():
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("compiles for the x86 host")
    pytest.importorskip("llvmlite")
    import tunekit
    return tunekit.registry().component("target", "x86")()


def _network(tmp_path):
    pytest.importorskip("onnx")
    from test_onnx import conv, helper, model, weight
    # conv 3 -> 16 (+ relu), conv 1x1 16 -> 32, conv 32 -> 16 + the first conv's output, global pool
    nodes = [conv("x", "c1", "w1"), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2", pads=0), conv("c2", "c3", "w3"),
             helper.make_node("Add", ["c3", "r1"], ["s"], name="add"),
             helper.make_node("GlobalAveragePool", ["s"], ["y"], name="gap")]
    return model(tmp_path / "l.onnx", nodes, [weight("w1", 16, 3, 3, 3), weight("w2", 32, 16, 1, 1),
                                              weight("w3", 16, 32, 3, 3)], [1, 3, 9, 11], [1, 16, 1, 1])


def test_the_graph_tuner_lists_every_block_a_layer_may_take(tmp_path):
    import tunekit
    tgt = _x86_target()
    b = tgt.network_choices().channel_block
    plain = {(t.op.name, t.args.get("layout"), t.args.get("data_layout")) for t, _ in
             tunekit.extract_tasks(_network(tmp_path), target=tgt)}
    searched = {(t.op.name, t.args.get("layout"), t.args.get("data_layout")) for t, _ in
                tunekit.extract_tasks(_network(tmp_path), target=tgt, search_layouts=True)}
    assert plain < searched
    # the 1x1 conv in every pair of blocks of its data and output
    assert {(d, k) for op, k, d in searched if op == "conv2d" and k and (k, d) != (f"NCHW{b}c", None)} >= {
        (None, f"NCHW{b // 2}c"), (f"NCHW{b // 2}c", f"NCHW{b}c")}


@pytest.mark.parametrize("half", [False, True], ids=["rule", "half-block-middle"])
def test_the_graph_tuners_choice_runs_and_matches_onnxruntime(tmp_path, monkeypatch, half):
    import numpy as np
    from checks import compiled_with_costs
    from test_onnx import reference

    tgt = _x86_target()
    b = tgt.network_choices().channel_block
    want = {16: b, 32: b // 2 if half else b}   # the block each tensor's records favour, by channels

    def seconds(task):   # the favoured block's records at 1 ms, the others at 2 ms
        k = int(task.args["layout"][4:-1])
        return 1e-3 if want[task.args.get("K_out", task.args.get("C"))] == k else 2e-3
    path = _network(tmp_path)
    net = compiled_with_costs(path, tgt, tmp_path, monkeypatch, seconds)
    got = {n.output: n.args.get("layout") for n in net.graph.nodes if n.op == "conv2d"}
    assert list(got.values()) == [f"NCHW{b}c", f"NCHW{want[32]}c", f"NCHW{b}c"]
    x = np.random.default_rng(0).standard_normal((1, 3, 9, 11)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-4)


def test_a_layout_search_goes_with_a_model_only():
    import tunekit
    from tunekit.errors import RecipeError
    with pytest.raises(RecipeError, match=r"tasks\[0\]\.layouts: goes with model"):
        tunekit.tune([{"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "layouts": "search"}], target="x86", trials=1)
