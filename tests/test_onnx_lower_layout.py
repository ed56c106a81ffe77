"""The te lowerings of ONNX layout nodes, MatMul, Gemm and ConvTranspose: each one-node model
built with onnx.helper, lowered and evaluated with te.evaluate, matches onnx's reference
evaluator (layout ops exactly; ConvTranspose against torch too); a few compile through the
x86 target; what is not supported is a clear error."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from conftest import require

import tunekit
from tunekit import ir, te
from tunekit.errors import ModelError
from tunekit.topi.layout import broadcast_index, broadcast_shape

onnx = require("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from tunekit_plugins.frontends.onnx.context import NodeContext  # noqa: E402
from tunekit_plugins.frontends.onnx.lower_layout import LOWERINGS as LAYOUT  # noqa: E402
from tunekit_plugins.frontends.onnx.lowerings import LINEAR  # noqa: E402

LOWERINGS = {**LAYOUT, **LINEAR}
ON_X86 = platform.machine().lower() in ("x86_64", "amd64")
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min
RNG = np.random.default_rng(0)


def data(*shape, dtype=np.float32):
    return ("data", RNG.standard_normal(shape).astype(dtype))


def const(values, dtype=np.int64):
    return ("const", np.asarray(values, dtype))


def model(op, inputs, attrs, n_out, opset):
    names = [f"in{k}" if v is not None else "" for k, v in enumerate(inputs)]
    node = helper.make_node(op, names, [f"out{k}" for k in range(n_out)], name=f"{op}_node", **attrs)
    feeds = {n: v[1] for n, v in zip(names, inputs) if n and v[0] == "data"}
    inits = [numpy_helper.from_array(v[1], n) for n, v in zip(names, inputs) if n and v[0] == "const"]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                      for n, a in feeds.items()],
        [helper.make_tensor_value_info(f"out{k}", helper.np_dtype_to_tensor_dtype(inputs[0][1].dtype), None)
         for k in range(n_out)], inits)
    return node, feeds, helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def lowered(node, inputs, expected):
    """(placeholders, outputs, arrays fed to the placeholders) of `node` lowered: data inputs
    as placeholders, constants as arrays (a constant the lowering reads as a placeholder too)."""
    holders, feeds, values = [], [], []

    def placeholder(k):
        holders.append(te.placeholder(values[k].shape, f"c{k}", str(values[k].dtype)))
        feeds.append(values[k])
        return holders[-1]
    for k, v in enumerate(inputs):
        if v is not None and v[0] == "data":
            holders.append(te.placeholder(v[1].shape, f"x{k}", str(v[1].dtype)))
            feeds.append(v[1])
        values.append(None if v is None else holders[-1] if v[0] == "data" else v[1])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    cx = NodeContext(node.op_type, node.name, attrs, values, [e.shape for e in expected],
                     [str(e.dtype) for e in expected], placeholder)
    outs = LOWERINGS[node.op_type](cx)
    return holders, outs, feeds


def check(op, inputs, n_out=1, opset=17, tol=0.0, ort=False, **attrs):
    """Lower the one-node model and compare with the reference evaluator (or onnxruntime);
    returns the expected outputs."""
    node, feeds, m = model(op, inputs, attrs, n_out, opset)
    if ort:
        rt = require("onnxruntime")
        expected = rt.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    else:
        expected = ReferenceEvaluator(m).run(None, feeds)
    holders, outs, arrays = lowered(node, inputs, expected)
    got = te.evaluate([*holders, *outs], arrays)
    assert len(got) == n_out
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)
    return expected


LAYOUT_CASES = {
    "transpose": ("Transpose", [data(2, 3, 4)], {"perm": [2, 0, 1]}),
    "transpose_default": ("Transpose", [data(2, 3, 4)], {}),
    "reshape_0_-1": ("Reshape", [data(2, 3, 4), const([0, -1])], {}),
    "reshape_split_merge": ("Reshape", [data(2, 3, 4), const([4, 1, -1, 3])], {}),
    "flatten": ("Flatten", [data(2, 3, 4, 5)], {"axis": 2}),
    "flatten_negative": ("Flatten", [data(2, 3, 4)], {"axis": -1}),
    "squeeze": ("Squeeze", [data(1, 3, 1, 4), const([-2])], {}),
    "unsqueeze": ("Unsqueeze", [data(3, 4), const([0, -1])], {}),
    "concat_3_axis_-1": ("Concat", [data(2, 3), data(2, 1), data(2, 4)], {"axis": -1}),
    "concat_const": ("Concat", [data(2, 3), ("const", np.ones((1, 3), np.float32))], {"axis": 0}),
    "slice_negative_steps": ("Slice", [data(5, 6), const([-1, 1]), const([I64_MIN, I64_MAX]), const([0, -1]),
                                       const([-2, 2])], {}),
    "slice_clamped": ("Slice", [data(4, 5), const([100, -100]), const([0, 3]), const([0, 1]), const([-1, 1])], {}),
    "slice_no_axes": ("Slice", [data(4, 5), const([1]), const([-1])], {}),
    "expand": ("Expand", [data(3, 1), const([2, 1, 4])], {}),
    "tile": ("Tile", [data(2, 3), const([2, 3])], {}),
    "gather_const_2d_axis_1": ("Gather", [data(3, 5, 2), const([[0, 4], [-1, 1]])], {"axis": 1}),
    "gather_const_scalar": ("Gather", [data(3, 5), const(-1)], {"axis": 0}),
    "gather_const_range": ("Gather", [data(3, 5), const([[-5, 1], [2, -2]])], {"axis": 1}),
    "gather_const_reversed": ("Gather", [data(3, 5), const([4, 2, 0])], {"axis": 1}),
    "gather_data_int64": ("Gather", [data(3, 5), ("data", np.array([[4, -1, 0], [-5, 2, 2]], np.int64))],
                          {"axis": 1}),
    "gather_data_int32": ("Gather", [data(4, 2), ("data", np.array([3, -4, 1], np.int32))], {"axis": -2}),
    "pad_value": ("Pad", [data(2, 3), const([1, 0, 2, 1]), ("const", np.array(1.5, np.float32))], {}),
    "pad_zero": ("Pad", [data(2, 3), const([0, 2, 1, 0])], {}),
    "pad_edge": ("Pad", [data(3, 4), const([2, 1, 0, 3])], {"mode": "edge"}),
    "pad_reflect": ("Pad", [data(3, 4), const([2, 1, 1, 3])], {"mode": "reflect"}),
    "identity": ("Identity", [data(2, 3)], {}),
}


@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_layout_ops_match_the_reference_exactly(case):
    op, inputs, attrs = LAYOUT_CASES[case]
    check(op, inputs, **attrs)


@pytest.mark.parametrize("op, inputs, opset, attrs", [
    ("Squeeze", [data(1, 3, 1, 4)], 11, {"axes": [0, 2]}),
    ("Unsqueeze", [data(3, 4)], 11, {"axes": [1]}),
    ("Slice", [data(4, 5)], 9, {"starts": [1], "ends": [-1], "axes": [1]}),
    ("Pad", [data(2, 3)], 10, {"pads": [0, 1, 1, 0], "value": -2.0}),
    ("Pad", [data(3, 4), const([1, 2]), None, const([-1])], 18, {}),
    ("Pad", [data(3, 4), const([0, 1, 2, 6])], 19, {"mode": "wrap"}),
])
def test_older_and_newer_opsets(op, inputs, opset, attrs):
    check(op, inputs, opset=opset, **attrs)


def test_negative_pads_crop():   # the reference evaluator refuses them
    check("Pad", [data(3, 4), const([1, -1, -2, 2]), ("const", np.array(-3.0, np.float32))], ort=True)


@pytest.mark.parametrize("inputs, n_out, opset, attrs", [
    ([data(2, 6), const([1, 3, 2])], 3, 17, {"axis": 1}),
    ([data(7, 2)], 4, 18, {"num_outputs": 4}),
    ([data(2, 6)], 3, 17, {"axis": -1}),
    ([data(5, 2)], 2, 11, {"split": [4, 1]}),
])
def test_split(inputs, n_out, opset, attrs):
    check("Split", inputs, n_out=n_out, opset=opset, **attrs)


def lowered_body(op, inputs, **attrs) -> tuple[int, set]:
    """(how many inputs, which integer and comparison ops) the lowered node's body has."""
    node, feeds, m = model(op, inputs, attrs, 1, 17)
    holders, (out,), _ = lowered(node, inputs, ReferenceEvaluator(m).run(None, feeds))
    ops = set()

    class Ops(ir.Visitor):
        def visit_BinOp(self, node):
            ops.add(node.op)
            self.generic_visit(node)
    Ops().visit(out.op.body)
    return len(holders), ops


def test_index_arithmetic_is_simple_where_shapes_and_indices_allow():
    assert lowered_body("Unsqueeze", [data(3, 4), const([0, 2])])[1] == set()   # size-1 dims only: no div/mod
    assert lowered_body("Squeeze", [data(3, 1, 4), const([1])])[1] == set()
    assert lowered_body("Reshape", [data(6, 4), const([2, 3, 4])])[1] == {"*", "+"}   # a dim split: no div/mod
    assert lowered_body("Gather", [data(3, 5), const([[-5, 1], [2, -2]])], axis=1) == (1, {"*", "+"})   # no load


MATMUL_CASES = {
    "1d_x_2d": [data(4), data(4, 5)],
    "batch_broadcast": [data(2, 1, 3, 4), data(5, 4, 6)],
    "2d_x_1d": [data(3, 4), data(4)],
    "1d_x_1d": [data(4), data(4)],
    "const_weight": [data(2, 3, 4), ("const", RNG.standard_normal((4, 5)).astype(np.float32))],
    "const_lhs": [("const", RNG.standard_normal((3, 4)).astype(np.float32)), data(2, 4, 5)],
}


@pytest.mark.parametrize("case", MATMUL_CASES)
def test_matmul(case):
    check("MatMul", MATMUL_CASES[case], tol=1e-5)


@pytest.mark.parametrize("trans_a, trans_b, alpha, beta, c", [
    (0, 0, 1.0, 1.0, None),
    (1, 0, 0.5, 2.0, (5,)),
    (0, 1, 1.0, -1.0, (3, 1)),
    (1, 1, 2.0, 0.5, (3, 5)),
    (0, 0, 1.0, 1.0, ()),
])
def test_gemm(trans_a, trans_b, alpha, beta, c):
    a, b = data(*((4, 3) if trans_a else (3, 4))), data(*((5, 4) if trans_b else (4, 5)))
    inputs = [a, b] + ([] if c is None else [("const", RNG.standard_normal(c).astype(np.float32))])
    check("Gemm", inputs, tol=1e-5, transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)


CONV_T = {   # x shape, weight shape, attrs, bias
    "dcgan": ((1, 64, 8, 8), (64, 32, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, False),
    "output_padding": ((1, 8, 5, 5), (8, 4, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                    "output_padding": [1, 1]}, True),
    "dilation_2": ((2, 3, 6, 5), (3, 4, 3, 3), {"dilations": [2, 2], "pads": [1, 2, 0, 1]}, True),
    "stride_3_dilation_2": ((1, 3, 4, 5), (3, 2, 3, 2), {"strides": [3, 2], "dilations": [2, 2],
                                                         "pads": [2, 0, 1, 1]}, False),
    "group_2": ((1, 4, 5, 5), (4, 3, 3, 3), {"group": 2, "strides": [2, 1]}, True),
    "1d": ((2, 3, 7), (3, 2, 5), {"strides": [3], "pads": [1, 2]}, False),
}


def torch_conv_transpose(x, w, bias, strides=None, pads=None, dilations=None, group=1, output_padding=None):
    """ConvTranspose by torch in float64: unpadded (torch pads both ends alike), then cropped by
    the pads after output_padding extends it (with zeros: no tap reaches there)."""
    torch = require("torch", "ConvTranspose against torch, for the DCGAN claim")
    sp = x.ndim - 2
    pads, output_padding = pads or [0] * 2 * sp, output_padding or [0] * sp
    full = getattr(torch.nn.functional, f"conv_transpose{sp}d")(
        torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=strides or 1, dilation=dilations or 1,
        groups=group).numpy()
    full = np.pad(full, [(0, 0)] * 2 + [(0, p) for p in output_padding])
    out = full[(..., *(slice(b, n - e) for b, e, n in zip(pads[:sp], pads[sp:], full.shape[2:])))]
    return out if bias is None else out + bias.reshape(-1, *[1] * sp)


def conv_transpose_case(case):
    """(x, weight, bias or None, attrs, inputs for `check`) of CONV_T[case], seeded by the case."""
    xs, ws, attrs, bias = CONV_T[case]
    rng = np.random.default_rng(list(CONV_T).index(case))
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[1] * attrs.get("group", 1)).astype(np.float32) if bias else None
    return x, w, b, attrs, [("data", x), ("const", w)] + ([("const", b)] if bias else [])


@pytest.mark.parametrize("case", CONV_T)
def test_conv_transpose(case):
    *_, attrs, inputs = conv_transpose_case(case)
    check("ConvTranspose", inputs, tol=1e-5, ort="group" in attrs, **attrs)   # the reference: no groups


@pytest.mark.parametrize("case", CONV_T)
def test_conv_transpose_matches_torch(case):
    """The lowering against torch's conv_transpose, a reference apart from onnx's (checked first,
    so a missing torch skips, or under CI fails, before anything passed)."""
    x, w, b, attrs, inputs = conv_transpose_case(case)
    want = torch_conv_transpose(x, w, b, **attrs).astype(np.float32)
    node = model("ConvTranspose", inputs, attrs, 1, 17)[0]
    holders, outs, arrays = lowered(node, inputs, [want])
    (got,) = te.evaluate([*holders, *outs], arrays)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_transpose_multiplies_only_the_taps_that_reach_an_output():
    inputs = [data(1, 64, 8, 8), const(np.zeros((64, 32, 4, 4)), np.float32)]
    node = model("ConvTranspose", inputs, {"strides": [2, 2], "pads": [1, 1, 1, 1]}, 1, 17)[0]
    (out,) = lowered(node, inputs, [np.zeros((1, 32, 16, 16), np.float32)])[1]
    assert [a.extent for a in out.op.reduce_axis] == [64, 2, 2]   # not 64 x 4 x 4


def test_broadcast_helpers():
    assert broadcast_shape((2, 1, 3, 4), (5, 1, 4), ()) == (2, 5, 3, 4)
    assert broadcast_index((5, 1, 4), (2, 5, 3, 4), ("a", "b", "c", "d")) == ("b", 0, "d")
    with pytest.raises(ValueError, match="do not broadcast"):
        broadcast_shape((2, 3), (4, 3))


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("Pad", [data(2, 3), const([0, 3, 0, 0])], {"mode": "reflect"}, "must be smaller"),
    ("Gather", [data(3, 4), const([0, 4])], {"axis": 1}, r"outside \[-4, 4\)"),
    ("ConvTranspose", [data(1, 2, 4, 4), ("const", np.ones((2, 2, 3, 3), np.float32))],
     {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, "explicit pads"),
    ("Slice", [data(4, 5), const([1]), const([3]), ("data", np.array([0], np.int64))], {}, "axes .input 3. must be "
     "a constant"),
])
def test_unsupported_is_a_clear_error(op, inputs, attrs, message):
    node = helper.make_node(op, [f"in{k}" for k in range(len(inputs))], ["out0"], name="n", **attrs)
    values = [te.placeholder(a.shape, "x", str(a.dtype)) if kind == "data" else a for kind, a in inputs]
    cx = NodeContext(op, "n", {a.name: helper.get_attribute_value(a) for a in node.attribute}, values, [(1,)],
                     ["float32"], lambda k: te.placeholder(values[k].shape, "c", str(values[k].dtype)))
    with pytest.raises(ModelError, match=f"node 'n' \\({op}\\) is not supported: .*{message}"):
        LOWERINGS[op](cx)


COMPILED = {
    "t_transpose": ("Transpose", [data(3, 5, 4)], {"perm": [1, 2, 0]}),
    "t_gather": ("Gather", [data(6, 5), ("data", np.array([[4, -1], [0, -6]], np.int64))], {"axis": 0}),
    "t_concat": ("Concat", [data(2, 3), data(2, 1), data(2, 4)], {"axis": -1}),
    "t_matmul": ("MatMul", [data(2, 1, 3, 4), data(5, 4, 6)], {}),
    "t_conv_transpose": ("ConvTranspose", [data(1, 8, 5, 5), ("const", RNG.standard_normal((8, 4, 4, 4))
                                                                 .astype(np.float32))],
                         {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
}


@pytest.mark.skipif(not ON_X86, reason="runs x86 code")
@pytest.mark.parametrize("name", COMPILED)
def test_compiled_through_the_x86_target(name):
    pytest.importorskip("llvmlite")
    op, inputs, attrs = COMPILED[name]
    node, feeds, m = model(op, inputs, attrs, 1, 17)
    expected = ReferenceEvaluator(m).run(None, feeds)
    arrays = lowered(node, inputs, expected)[2]

    def fn():
        holders, outs, _ = lowered(node, inputs, expected)
        return [*holders, *outs]
    kernel = tunekit.build(tunekit.Task.from_compute(fn, {}, name=name), target="x86")
    args = [tunekit.empty(a.shape, a.dtype) for a in arrays]
    for dst, a in zip(args, arrays):
        dst[...] = a
    out = tunekit.empty(expected[0].shape, expected[0].dtype)
    out[...] = np.nan
    kernel(*args, out)
    np.testing.assert_allclose(out, expected[0], rtol=1e-5, atol=1e-5)


# --- GatherND (batch_dims 0) -----------------------------------------------------------------------------------

ND_RNG = np.random.default_rng(11)   # its own: the cases above keep their data


def nd_data(*shape, dtype=np.float32):
    return ("data", ND_RNG.standard_normal(shape).astype(dtype))


def nd_indices(values):
    return ("data", np.asarray(values, np.int64))


GATHER_ND = {   # data, indices; "even": constant rows that step evenly through the data's first r dims
    "even_slices": ([nd_data(4, 5, 3), const([[0, 1], [0, 3], [1, 0], [1, 2]])], "even"),   # flat 1, 3, 5, 7
    "even_negative": ([nd_data(4, 5, 3), const([[0, -4], [0, -2], [-3, 0], [1, -3]])], "even"),   # the same
    "even_reversed_r1": ([nd_data(4, 3), const([[3], [2], [-3], [0]])], "even"),   # step -1
    "even_2d_rows": ([nd_data(3, 4, 2), const([[[0, 0], [0, 1]], [[0, 2], [0, 3]]])], "even"),
    "even_one_row": ([nd_data(3, 4, 2), const([[2, -1]])], "even"),
    "even_single_index_vector": ([nd_data(3, 4, 2), const([1, -1])], "even"),   # indices [r]: one slice
    "even_whole_elements": ([nd_data(3, 4), const([[0, 1], [1, -3], [2, 1]])], "even"),   # r = rank, step 5
    "const_uneven": ([nd_data(4, 5, 2), const([[[0, 4], [-1, 2]], [[2, 0], [3, -5]]])], "const"),
    "const_uneven_r1": ([nd_data(5, 3), const([[4], [-1], [0], [2]])], "const"),   # flat 4, 4, 0, 2
    "const_whole_elements": ([nd_data(3, 4), const([[2, -1], [0, 0], [1, 2]])], "const"),
    "data_slices": ([nd_data(4, 5, 3), nd_indices([[1, -2], [0, 3], [-4, 0]])], "data"),
    "data_r1": ([nd_data(4, 3, 2), nd_indices([[[3], [-1]], [[0], [-4]]])], "data"),
    "data_whole_elements": ([nd_data(3, 4), nd_indices([[[2, -1]], [[0, 3]]])], "data"),
    "data_int64_values": ([("data", np.arange(24, dtype=np.int64).reshape(4, 6)), nd_indices([[-1], [1], [1]])],
                          "data"),
}


@pytest.mark.parametrize("case", GATHER_ND)
def test_gather_nd_matches_the_reference_exactly(case):
    inputs, kind = GATHER_ND[case]
    check("GatherND", inputs)
    check("GatherND", inputs, opset=13)   # batch_dims since 12, the same node
    # constant indices that step evenly are index arithmetic: the data is the only input read
    holders = lowered_body("GatherND", inputs)[0]
    assert holders == (1 if kind == "even" else 2)


def test_gather_nd_matches_onnxruntime():
    inputs, _ = GATHER_ND["data_slices"]
    check("GatherND", inputs, ort=True)
    check("GatherND", GATHER_ND["even_negative"][0], ort=True)
    check("GatherND", inputs, batch_dims=0)   # the default, given


@pytest.mark.parametrize("inputs, attrs, message", [
    ([data(2, 3, 4), const([[1], [0]])], {"batch_dims": 1}, "only batch_dims 0 is supported"),
    ([data(4, 5, 3), const([[0, 5], [1, 1]])], {}, r"outside the data's dims \[4, 5\]"),
    ([data(4, 5, 3), const([[-5, 0]])], {}, r"outside the data's dims \[4, 5\]"),
])
def test_gather_nd_unsupported_is_a_clear_error(inputs, attrs, message):
    test_unsupported_is_a_clear_error("GatherND", inputs, attrs, message)


@pytest.mark.skipif(not ON_X86, reason="runs x86 code")
@pytest.mark.parametrize("case", ["even_negative", "const_uneven", "data_slices", "data_whole_elements"])
def test_gather_nd_compiled_through_the_x86_target(case, monkeypatch):
    monkeypatch.setitem(COMPILED, f"t_gather_nd_{case}", ("GatherND", GATHER_ND[case][0], {}))
    test_compiled_through_the_x86_target(f"t_gather_nd_{case}")


# --- GatherElements of constants folds at load (numpy: onnx.reference's fails past 64 entries) ------------------

def gather_elements_model(data_, index, axis):
    node = helper.make_node("GatherElements", ["d", "i"], ["out"], axis=axis)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("out", onnx.TensorProto.INT64, None)],
                              [numpy_helper.from_array(data_, "d"), numpy_helper.from_array(index, "i")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape, index, axis", [
    ((1, 512), [[0, 1, 2, 3, 100, 511, -1, -512, 7, 7, 300, 64, 65, 255, 256, 1]], 1),
    ((512, 2), [[3, -1], [511, 0], [-512, 70]], 0),
    ((2, 3, 100), [[[99, -100], [5, 64], [-1, 0]], [[0, 1], [98, -99], [70, 70]]], -1),
])
def test_gather_elements_of_constants_folds_on_long_axes(tmp_path, shape, index, axis):
    from tunekit_plugins.frontends.onnx.load import fold
    rt = require("onnxruntime")
    d = np.arange(np.prod(shape), dtype=np.int64).reshape(shape) * 3
    m = gather_elements_model(d, np.asarray(index, np.int64), axis)
    (want,) = rt.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    folded, consts, _ = fold(m, str(tmp_path / "m.onnx"))
    assert len(folded.graph.node) == 0
    assert consts["out"].dtype == np.int64
    np.testing.assert_array_equal(consts["out"], want)


@pytest.mark.parametrize("shape, index", [((2, 70), [[5, -1]]), ((3, 70), [[5, -1], [0, 69]])])
def test_gather_elements_fold_with_indices_shorter_than_the_data_off_the_axis(tmp_path, shape, index):
    from tunekit_plugins.frontends.onnx.load import fold
    rt = require("onnxruntime")
    m = gather_elements_model(np.arange(np.prod(shape), dtype=np.int64).reshape(shape), np.asarray(index, np.int64), 1)
    (want,) = rt.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    np.testing.assert_array_equal(fold(m, str(tmp_path / "m.onnx"))[1]["out"], want)


@pytest.mark.skipif(not ON_X86, reason="runs x86 code")
def test_position_ids_gathered_from_a_long_constant_fold_and_the_model_compiles(tmp_path):
    """A BERT export's position ids: GatherElements of a [1, 512] arange by constant indices,
    then the embedding of those positions added to a graph input; onnxruntime agrees."""
    require("onnxruntime")
    pytest.importorskip("llvmlite")
    from test_onnx_graphs import check as check_model
    from test_onnx_graphs import save
    F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    rng = np.random.default_rng(4)
    inits = {"arange": np.arange(512, dtype=np.int64)[None],
             "pick": np.array([[0, 1, 2, 3, 4, 100, 200, 300, 400, 500, 510, -1, -2, 64, 65, 128]], np.int64),
             "emb": rng.standard_normal((512, 8)).astype(np.float32)}
    nodes = [helper.make_node("GatherElements", ["arange", "pick"], ["pos"], axis=1),   # [1, 16]
             helper.make_node("Gather", ["emb", "pos"], ["pe"]),                       # [1, 16, 8]
             helper.make_node("Add", ["x", "pe"], ["y"]),
             helper.make_node("Add", ["ids", "pos"], ["idp"]),                         # int64, from an input
             helper.make_node("Gather", ["emb", "idp"], ["te"]),
             helper.make_node("Add", ["te", "y"], ["z"])]
    inputs = {"x": ([1, 16, 8], F), "ids": ([1, 16], I64)}
    path = save(tmp_path, nodes, inputs, {"z": ([1, 16, 8], F)}, inits)
    graph = tunekit.deploy.network.load_graph(path)
    assert "GatherElements" not in {n.kind for n in graph.nodes}
    feeds = {"x": rng.standard_normal((1, 16, 8)).astype(np.float32),
             "ids": np.zeros((1, 16), np.int64)}   # ids + positions stay inside the table
    check_model(path, feeds)


def test_gather_elements_fold_of_an_index_out_of_range_names_the_node(tmp_path):
    from tunekit_plugins.frontends.onnx.load import fold

    from tunekit.errors import ModelError
    m = gather_elements_model(np.arange(512, dtype=np.int64)[None], np.array([[600]], np.int64), 1)
    with pytest.raises(ModelError, match=r"GatherElements.*from its constant inputs failed.*\[-512, 512\)"):
        fold(m, str(tmp_path / "m.onnx"))
