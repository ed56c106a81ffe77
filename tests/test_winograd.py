"""Winograd convolution (`tunekit.ops.winograd`, op conv2d_winograd, the CPU template
`winograd`) and a network's choice of it by its records (`tunekit.deploy.algorithms`):
the matrices compute a 3-tap correlation, the op matches a direct conv on odd shapes
(numpy, the interpreter, compiled, with epilogues and a data block that differs), and
a network runs a layer as Winograd exactly when its record beats the direct one's."""
from __future__ import annotations

import platform
import random

import numpy as np
import pytest
from checks import interpreted_and_compiled

import tunekit
from tunekit.errors import ArgumentError
from tunekit.ops import layout as layouts
from tunekit.ops import winograd

RNG = np.random.default_rng(7)
x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")


@pytest.mark.parametrize("m", [2, 4])
def test_the_matrices_compute_a_three_tap_correlation(m):
    bt, g, at = winograd.matrices(m)
    d, w = RNG.standard_normal(m + 2), RNG.standard_normal(3)
    direct = [d[i:i + 3] @ w for i in range(m)]
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), direct, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [2, 4])
def test_transformed_weights_come_back_exactly(m):
    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)
    u = winograd.transform_weights(w, m, 8)
    assert u.shape == (m + 2, m + 2, 2, 8, 8)
    np.testing.assert_allclose(winograd.weights_oihw(u, m), w, atol=1e-6)


def _direct(x, w, b, db, padding, extra=(), **epilogue):
    args = dict(N=x.shape[0], C=x.shape[1], H=x.shape[2], W=x.shape[3], K_out=w.shape[0], R=3, S=3, padding=padding,
                layout=layouts.blocked(b), data_layout=layouts.blocked(db), **epilogue)
    task = tunekit.Task("conv2d", args)
    return task.op.reference(layouts.to_blocked(x, db), layouts.conv_weight(w, b), *extra, **task.args)[0]


CASES = [  # (H, W, C, K, b, db, padding, tile): odd sizes, tails of tiles, a data block other than the output's
    (7, 9, 8, 16, 8, 8, 1, 2), (5, 6, 16, 8, 8, 16, 0, 2), (9, 7, 8, 8, 8, 8, 1, 4), (6, 11, 8, 16, 16, 8, 1, 4)]


@pytest.mark.parametrize("H, W, C, K, b, db, padding, m", CASES)
def test_the_op_matches_a_direct_conv(H, W, C, K, b, db, padding, m):
    x = RNG.standard_normal((1, C, H, W)).astype(np.float32)
    w = RNG.standard_normal((K, C, 3, 3)).astype(np.float32)
    task = tunekit.Task("conv2d_winograd", dict(N=1, C=C, H=H, W=W, K_out=K, R=3, S=3, padding=padding, tile=m,
                                                layout=f"NCHW{b}c", data_layout=f"NCHW{db}c"))
    got = task.op.reference(layouts.to_blocked(x, db), winograd.transform_weights(w, m, b), **task.args)[0]
    np.testing.assert_allclose(got, _direct(x, w, b, db, padding), rtol=1e-4, atol=1e-4)


def _winograd_f32(data: np.ndarray, u: np.ndarray, m: int, drop=None) -> np.ndarray:
    """F(m x m, 3 x 3) on NCHW8c data, padding 1, in float32 as a kernel rounds it; `drop` = (e, nu, c):
    the product of channel c at (e, nu) left out of every tile's sum (a wrong config's output: a loop
    over channels one short)."""
    bt, _, at = (x.astype(np.float32) for x in winograd.matrices(m))
    N, CB, H, W, db = data.shape
    d = np.zeros((N, CB * db, H + m + 2, W + m + 2), np.float32)
    d[:, :, 1:H + 1, 1:W + 1] = data.transpose(0, 1, 4, 2, 3).reshape(N, CB * db, H, W)
    tiles = np.lib.stride_tricks.sliding_window_view(d, (m + 2, m + 2), axis=(2, 3))[:, :, ::m, ::m]
    th, tw = -(-H // m), -(-W // m)
    v = np.einsum("ei,nctwij,vj->evnctw", bt, tiles[:, :, :th, :tw], bt)
    uk = u.transpose(0, 1, 2, 4, 3).reshape(m + 2, m + 2, -1, CB * db)
    if drop is not None:
        e, nu, c = drop
        v[e, nu, :, c] = 0
    mm = np.einsum("evkc,evnctw->nktwev", uk, v)
    y = np.einsum("ye,nktwev,xv->nktywx", at, mm, at).reshape(N, -1, th * m, tw * m)[:, :, :H, :W]
    return y.reshape(N, -1, 8, H, W).transpose(0, 1, 3, 4, 2)


@pytest.mark.parametrize("m, C, H", [(2, 512, 6), (4, 512, 6), (4, 128, 4)])
def test_the_check_fails_a_config_that_drops_one_product_term(m, C, H):
    """The check's tolerance is the transforms' rounding error bound on the data: float32 Winograd passes
    it, and an output with one channel's product left out at any of the alpha x alpha points fails it.
    The tolerance of before (a direct conv's, 10x for F(4x4)) let such an output through."""
    from tunekit.measure.timing import mismatch
    from tunekit.ops.op import Op
    task = tunekit.Task("conv2d_winograd", dict(N=1, C=C, H=H, W=H, K_out=8, R=3, S=3, padding=1, tile=m,
                                                layout="NCHW8c"))
    inputs = task.op.random_inputs(task.args, np.random.default_rng(0))
    ref = task.op.reference(*inputs, **task.args)
    tol = task.op.tolerance(task.args, inputs)
    assert mismatch([_winograd_f32(*inputs, m)], ref, *tol) == ""
    drops = [(e, nu, C - 1) for e in range(m + 2) for nu in range(m + 2)]
    assert all("elements differ" in mismatch([_winograd_f32(*inputs, m, d)], ref, *tol) for d in drops)
    if (m, C, H) == (4, 128, 4):
        rtol, atol = Op.tolerance(task.op, task.args)
        assert any(mismatch([_winograd_f32(*inputs, m, d)], ref, 10 * rtol, 10 * atol) == "" for d in drops)


@pytest.mark.parametrize("args, why", [
    ({"stride": 2}, "stride 1"), ({"R": 5, "S": 5, "padding": 2}, "3x3 kernels"), ({"dilation": 2}, "dilation 1"),
    ({"layout": "NCHW"}, "blocked layouts")])
def test_what_winograd_cannot_run_is_refused_with_the_way_out(args, why):
    base = dict(N=1, C=8, H=8, W=8, K_out=8, R=3, S=3, padding=1, tile=2, layout="NCHW8c")
    with pytest.raises(ArgumentError, match=why):
        tunekit.Task("conv2d_winograd", {**base, **args})


def _target():
    pytest.importorskip("llvmlite")
    return tunekit.registry().component("target", "x86")()


@x86
@pytest.mark.parametrize("epilogue", [{}, {"bias": True, "residual": True, "activation": "relu"}],
                         ids=["plain", "bias+residual+relu"])
@pytest.mark.parametrize("H, W, C, K, b, db, padding, m", CASES[::3] + CASES[2:3])
def test_the_template_matches_numpy_interpreted_and_compiled(H, W, C, K, b, db, padding, m, epilogue):
    tgt = _target()
    args = dict(N=1, C=C, H=H, W=W, K_out=K, R=3, S=3, padding=padding, tile=m, layout=f"NCHW{b}c",
                data_layout=f"NCHW{db}c", **epilogue)
    ts = tunekit.Task("conv2d_winograd", args, template="winograd").bind(tgt)
    picks = {ts.space.get(i)["order"]: i for i in ts.space.sample(random.Random(1), 16)}
    assert sorted(picks) == ["channels", "tiles"]   # both kinds of parallel task
    for index in picks.values():
        interpreted_and_compiled(ts, index, tgt)


def _network(tmp_path):
    pytest.importorskip("onnx")
    from test_onnx import conv, helper, model, weight
    nodes = [conv("x", "c1", "w1"), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2"), helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap")]
    return model(tmp_path / "w.onnx", nodes, [weight("w1", 16, 3, 3, 3), weight("w2", 16, 16, 3, 3)],
                 [1, 3, 10, 10], [1, 16, 1, 1])


@x86
def test_a_network_lists_the_winograd_alternatives_of_its_3x3_convs(tmp_path):
    tasks = tunekit.extract_tasks(_network(tmp_path), target=_target())
    ops = [(t.op.name, t.args.get("tile")) for t, _ in tasks]
    # the first conv reads the NCHW input (3 channels): it has no blocked data, so no Winograd
    assert ops == [("conv2d", None), ("conv2d", None), ("conv2d_winograd", 2), ("conv2d_winograd", 4),
                   ("global_avg_pool2d", None)]


@x86
@pytest.mark.parametrize("winner", [None, 2, 4])
def test_a_layer_runs_winograd_exactly_when_its_record_is_faster(tmp_path, monkeypatch, winner):
    from checks import compiled_with_costs
    from test_onnx import reference
    path = _network(tmp_path)
    # the records' costs: the winner at 1 ms, the others at 2 ms
    net = compiled_with_costs(path, _target(), tmp_path, monkeypatch,
                              lambda task: 1e-3 if task.args.get("tile") == winner else 2e-3)
    ops = [(n.op, n.args.get("tile")) for n in net.graph.nodes]
    assert ops[1] == (("conv2d_winograd", winner) if winner else ("conv2d", None))
    x = RNG.standard_normal((1, 3, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("extra", [{}, {"bias": True, "residual": True, "activation": "relu"},
                                   {"tile": 2, "data_layout": "NCHW8c"}])
def test_the_parameters_are_the_computations_without_building_the_transforms(extra):
    """`buffers` (asked of every variant a network's plan weighs) leaves the transforms' stages out."""
    from tunekit.ops.conv2d_winograd import conv2d_winograd
    from tunekit.ops.op import Op
    args = conv2d_winograd.canonical({"N": 1, "C": 32, "H": 14, "W": 14, "K_out": 32, "R": 3, "S": 3,
                                      "padding": (1, 1), "tile": 4, "layout": "NCHW16c", **extra})
    assert conv2d_winograd.buffers(args) == Op.buffers(conv2d_winograd, args)
