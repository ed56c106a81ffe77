"""A network's inverted-residual chains run as one mbconv kernel when its records say so."""
from __future__ import annotations

import platform

import numpy as np
import pytest

import tunekit

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="compiles for the x86 host")


def _target():
    pytest.importorskip("llvmlite")
    return tunekit.registry().component("target", "x86")()


def _network(tmp_path):
    pytest.importorskip("onnx")
    from test_onnx import conv, helper, model, numpy_helper, weight
    lo, hi = numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")

    def block(x, tag, c, e, k, stride, residual):
        nodes = [conv(x, f"{tag}e", f"{tag}we", f"{tag}be", pads=0),
                 helper.make_node("Clip", [f"{tag}e", "lo", "hi"], [f"{tag}e6"], name=f"{tag}relu6e"),
                 conv(f"{tag}e6", f"{tag}d", f"{tag}wd", f"{tag}bd", group=e, stride=stride),
                 helper.make_node("Clip", [f"{tag}d", "lo", "hi"], [f"{tag}d6"], name=f"{tag}relu6d"),
                 conv(f"{tag}d6", f"{tag}p", f"{tag}wp", f"{tag}bp", pads=0)]
        if residual:
            nodes.append(helper.make_node("Add", [f"{tag}p", x], [f"{tag}out"], name=f"{tag}add"))
        inits = [weight(f"{tag}we", e, c, 1, 1), weight(f"{tag}be", e), weight(f"{tag}wd", e, 1, 3, 3),
                 weight(f"{tag}bd", e), weight(f"{tag}wp", k, e, 1, 1), weight(f"{tag}bp", k)]
        return nodes, inits, f"{tag}out" if residual else f"{tag}p"

    b1, i1, o1 = block("r0", "a", 16, 96, 16, 1, True)
    b2, i2, o2 = block(o1, "b", 16, 96, 32, 2, False)
    nodes = [conv("x", "c0", "w0"), helper.make_node("Relu", ["c0"], ["r0"], name="relu0"), *b1, *b2,
             helper.make_node("GlobalAveragePool", [o2], ["y"], name="gap")]
    return model(tmp_path / "mb.onnx", nodes, [weight("w0", 16, 3, 3, 3), *i1, *i2, lo, hi], [1, 3, 9, 11],
                 [1, 32, 1, 1])


def test_a_network_lists_one_mbconv_task_per_chain(tmp_path):
    tasks = tunekit.extract_tasks(_network(tmp_path), target=_target())
    fused = [t.args for t, _ in tasks if t.op.name == "mbconv"]
    # each tuned without its residual (an epilogue: the fused task's records serve it)
    assert [(a.get("stride", 1), a.get("residual", False), a["E"]) for a in fused] == [(1, False, 96), (2, False, 96)]


@pytest.mark.parametrize("fused_ms", [1.0, 5.0], ids=["fused-faster", "layers-faster"])
def test_a_chain_runs_fused_exactly_when_its_record_beats_its_layers(tmp_path, monkeypatch, fused_ms):
    from checks import compiled_with_costs
    from test_onnx import reference
    path = _network(tmp_path)
    # each layer 1 ms, so a chain's three layers 3 ms
    net = compiled_with_costs(path, _target(), tmp_path, monkeypatch,
                              lambda task: (fused_ms if task.op.name == "mbconv" else 1.0) * 1e-3)
    ops = [n.op for n in net.graph.nodes]
    assert ops.count("mbconv") == (2 if fused_ms < 3 else 0)
    assert ops.count("depthwise_conv2d") == (0 if fused_ms < 3 else 2)
    x = np.random.default_rng(0).standard_normal((1, 3, 9, 11)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-4)
