"""tunekit.topi, the frontend-neutral op library: its operators computed by te.evaluate match
numpy, invalid parameters are ArgumentErrors; and the ONNX frontend only translates: no file
of it builds a te computation or a loop-IR expression (it calls tunekit.topi for them)."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tunekit import te, topi
from tunekit.errors import ArgumentError

ONNX_FRONTEND = Path(__file__).resolve().parent.parent / "plugins" / "frontends" / "onnx"
#: what a translator may use of tunekit.te: the type of what it hands on, and the serialization of a kernel
TE_ALLOWED = {"Tensor", "to_data"}
RNG = np.random.default_rng(5)


def builds_te(path: Path) -> list[str]:
    """Return "file:line: what" for each te computation or loop-IR expression `path` builds or imports
    the means to build (te.compute, te.reduce_axis, te.sum, ... and anything of tunekit.ir)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        what = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "ir" or (node.value.id == "te" and node.attr not in TE_ALLOWED):
                what = f"{node.value.id}.{node.attr}"
        elif isinstance(node, ast.ImportFrom):
            names = {a.name for a in node.names}
            module = node.module or ""
            if (module == "tunekit" and "ir" in names or module == "tunekit.te" and names - TE_ALLOWED
                    or module.startswith(("tunekit.te.", "tunekit.ir"))):
                what = f"from {module} import {', '.join(sorted(names))}"
        elif isinstance(node, ast.Import) and any(a.name.startswith(("tunekit.ir", "tunekit.te.")) for a in node.names):
            what = f"import {', '.join(a.name for a in node.names)}"
        if what:
            found.append(f"{path}:{node.lineno}: {what}")
    return found


def test_the_onnx_frontend_builds_no_te_computation():
    files = sorted(ONNX_FRONTEND.glob("**/*.py"))
    assert files
    found = [f for path in files for f in builds_te(path)]
    assert not found, "the ONNX frontend builds te itself; call tunekit.topi:\n" + "\n".join(found)


def test_the_check_names_the_file_and_line_of_what_builds_te(tmp_path):
    bad = tmp_path / "lower_bad.py"
    bad.write_text("from tunekit import ir, te\n\n\ndef lower(x: te.Tensor):\n"
                   "    k = te.reduce_axis(3, 'k')\n    return te.compute((2,), lambda i: te.sum(x[i, k], axis=k) + "
                   "ir.const(1.0))\n")
    assert builds_te(bad) == [f"{bad}:1: from tunekit import ir, te", f"{bad}:5: te.reduce_axis",
                              f"{bad}:6: te.compute", f"{bad}:6: te.sum", f"{bad}:6: ir.const"]


def run(out, *inputs):
    """The value of te tensor `out` computed from the placeholders `inputs` ((tensor, array) pairs)."""
    return te.evaluate([*(t for t, _ in inputs), out], [a for _, a in inputs])[0]


def data(*shape, name="x", dtype="float32"):
    a = RNG.standard_normal(shape).astype(dtype)
    return te.placeholder(shape, name, dtype), a


@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_and_log_softmax(axis):
    x, a = data(2, 5, 3)
    e = np.exp(a - a.max(axis, keepdims=True))
    want = e / e.sum(axis, keepdims=True)
    np.testing.assert_allclose(run(topi.reduce.softmax(x, axis, "s"), (x, a)), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(topi.reduce.softmax(x, axis, "ls", log=True), (x, a)), np.log(want), rtol=1e-5,
                               atol=1e-5)


def test_layer_norm_over_the_trailing_axes():
    (x, a), (g, ga), (b, ba) = data(2, 3, 4), data(3, 4, name="g"), data(4, name="b")
    mean, var = a.mean((1, 2), keepdims=True), a.var((1, 2), keepdims=True)
    got = run(topi.reduce.layer_norm(x, g, b, 1, 1e-5, "ln"), (x, a), (g, ga), (b, ba))
    np.testing.assert_allclose(got, (a - mean) / np.sqrt(var + 1e-5) * ga + ba, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind, fn", [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("axes, keep", [([0, -1], True), ([1], False), (None, False)])
def test_reductions(kind, fn, axes, keep):
    x, a = data(2, 3, 4)
    out = topi.reduce.reduction(x, kind, axes, keep, "r")
    want = fn(a, axis=None if axes is None else tuple(axes), keepdims=keep)
    np.testing.assert_allclose(run(out, (x, a)), want, rtol=1e-5, atol=1e-6)


def test_a_binary_op_broadcasts_its_inputs():
    (x, a), (y, b) = data(2, 1, 4), data(3, 1, name="y")
    out = topi.elementwise.apply("sub", [x, y], "d")
    assert out.shape == (2, 3, 4)
    np.testing.assert_allclose(run(out, (x, a), (y, b)), a - b)
    with pytest.raises(ArgumentError, match="do not broadcast"):
        topi.elementwise.apply("add", [x, te.placeholder((3, 2), "z")], "e")


def test_transpose():
    x, a = data(2, 3, 4)
    np.testing.assert_array_equal(run(topi.layout.transpose(x, [2, 0, 1], "t"), (x, a)), a.transpose(2, 0, 1))
    with pytest.raises(ArgumentError, match=r"perm \[0, 0, 1\] is not a permutation of the 3 axes"):
        topi.layout.transpose(x, [0, 0, 1], "t")


def test_gather_by_data_by_constants_stepping_evenly_and_by_loaded_constants():
    x, a = data(3, 5)
    idx = np.array([[4, -1], [0, -5]], "int64")
    i = te.placeholder(idx.shape, "i", "int64")
    np.testing.assert_array_equal(run(topi.layout.gather(x, i, 1, "g"), (x, a), (i, idx)), np.take(a, idx, axis=1))
    steps = np.array([[-5, -4], [-3, -2]])   # 0, 1, 2, 3: index arithmetic, nothing loaded
    even = topi.layout.gather(x, steps, 1, "g", lambda: pytest.fail("constant indices that step evenly were loaded"))
    assert even.op.inputs == [x]
    np.testing.assert_array_equal(run(even, (x, a)), np.take(a, steps, axis=1))
    uneven = topi.layout.gather(x, idx, 1, "g", lambda: i)
    np.testing.assert_array_equal(run(uneven, (x, a), (i, idx)), np.take(a, idx, axis=1))
    with pytest.raises(ArgumentError, match=r"outside \[-5, 5\) for axis 1"):
        topi.layout.gather(x, np.array([5]), 1, "g")
    with pytest.raises(ArgumentError, match="axis 2 is out of range for an input of rank 2"):
        topi.layout.gather(x, i, 2, "g")


@pytest.mark.parametrize("mode, np_mode", [("constant", "constant"), ("edge", "edge"), ("reflect", "reflect"),
                                           ("wrap", "wrap")])
def test_pad(mode, np_mode):
    x, a = data(3, 4)
    got = run(topi.layout.pad(x, [2, 1, 1, 3], mode, 1.5, "p"), (x, a))
    extra = {"constant_values": 1.5} if mode == "constant" else {}
    np.testing.assert_array_equal(got, np.pad(a, [(2, 1), (1, 3)], np_mode, **extra))


def test_pad_refuses_what_it_cannot_do():
    x = te.placeholder((3, 4), "x")
    with pytest.raises(ArgumentError, match="mode 'symmetric'"):
        topi.layout.pad(x, [0, 0, 0, 0], "symmetric", 0, "p")
    with pytest.raises(ArgumentError, match="3 pads for 2 axes"):
        topi.layout.pad(x, [1, 1, 1], "constant", 0, "p")
    with pytest.raises(ArgumentError, match="must be smaller"):
        topi.layout.pad(x, [3, 0, 0, 0], "reflect", 0, "p")


@pytest.mark.parametrize("a_shape, b_shape", [((2, 1, 3, 4), (5, 4, 6)), ((4,), (4, 5)), ((3, 4), (4,))])
def test_matmul_as_numpy(a_shape, b_shape):
    (x, a), (y, b) = data(*a_shape), data(*b_shape, name="y")
    np.testing.assert_allclose(run(topi.linear.matmul(x, y, "mm"), (x, a), (y, b)), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ArgumentError, match="do not multiply"):
        topi.linear.matmul(x, te.placeholder((3, 3), "z"), "mm")


def test_the_names_given_are_the_tensors_names():
    x = te.placeholder((2, 3), "x")
    out = topi.reduce.softmax(x, -1, "node_1")
    assert out.name == "node_1" and {t.name for t in out.op.inputs} >= {"node_1_exp", "node_1_sum"}


def test_the_onnx_frontend_imports_no_graph_pass():
    """The frontend translates; folding, merging and fusing are the core's passes (`tunekit.graph.*`)."""
    found = []
    for path in sorted(ONNX_FRONTEND.glob("**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            module = getattr(node, "module", None) or ""
            if isinstance(node, ast.ImportFrom) and module.startswith(("tunekit.graph.", "tunekit.deploy")) \
                    and module != "tunekit.graph.builder":   # (what a frontend fills; no pass)
                found.append(f"{path}:{node.lineno}: from {node.module} import ...")
    assert not found, "the ONNX frontend runs a pass itself:\n" + "\n".join(found)
