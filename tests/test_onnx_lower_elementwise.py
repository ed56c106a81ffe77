"""The te lowerings of ONNX elementwise and reduction nodes (the ONNX frontend's translation
to `tunekit.topi`): each one-node model lowered, computed with te.evaluate and compared with
onnx's reference evaluator; a few compiled for x86 through LLVM."""
from __future__ import annotations

import math
import platform

import numpy as np
import pytest
from tunekit_plugins.frontends.onnx.context import NodeContext
from tunekit_plugins.frontends.onnx.lowerings import ELEMENTWISE as EW
from tunekit_plugins.frontends.onnx.lowerings import ELEMENTWISE_KINDS as EW_KINDS
from tunekit_plugins.frontends.onnx.lowerings import REDUCTION_KINDS as RED_KINDS
from tunekit_plugins.frontends.onnx.lowerings import REDUCTIONS as RED

import tunekit
from tunekit import te
from tunekit.errors import ModelError
from tunekit.te.tensor import PlaceholderOp
from tunekit.topi.elementwise import broadcast_load, erf

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

LOWERINGS = {**EW, **RED}
ON_X86 = platform.machine().lower() in ("x86_64", "amd64")
rng = np.random.default_rng(0)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype("float32")


def reference(op, inputs, attrs, const, opset, n_out):
    """The outputs of the one-node model `op` computed by onnx's reference evaluator."""
    names = ["" if a is None else f"in{k}" for k, a in enumerate(inputs)]
    data = [k for k, a in enumerate(inputs) if a is not None and k not in const]
    outs = [f"out{j}" for j in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, name=f"my/{op}", **attrs)], "g",
        [helper.make_tensor_value_info(names[k], helper.np_dtype_to_tensor_dtype(inputs[k].dtype), inputs[k].shape)
         for k in data],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs],
        [numpy_helper.from_array(inputs[k], names[k]) for k in const])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {names[k]: inputs[k] for k in data})


def context(op, inputs, const, expected, attrs=None):
    """A NodeContext of node `op`: placeholders for the data inputs and for the constants of
    more than one element (made as the lowering asks for them), arrays for the constants."""
    holders = {k: te.placeholder(a.shape, f"in{k}", str(a.dtype)) for k, a in enumerate(inputs)
               if a is not None and k not in const}
    values = [holders.get(k, a) for k, a in enumerate(inputs)]

    def placeholder(k):
        return holders.setdefault(k, te.placeholder(inputs[k].shape, f"in{k}", str(inputs[k].dtype)))
    cx = NodeContext(op, f"my/{op}", attrs or {}, values, [e.shape for e in expected],
                     [str(e.dtype) for e in expected], placeholder, "model.onnx")
    return cx, holders


def check(op, inputs, attrs=None, const=(), opset=17, n_out=1, tol=None):
    """Lower node `op` with `inputs` (None: an absent optional input; `const`: the indices of
    the constant ones) and compare te.evaluate of the lowering with onnx's reference."""
    attrs, const = attrs or {}, {k for k in const if k < len(inputs) and inputs[k] is not None}
    expected = reference(op, inputs, attrs, const, opset, n_out)
    cx, holders = context(op, inputs, const, expected, attrs)
    outs = LOWERINGS[op](cx)
    assert len(outs) == n_out
    order = sorted(holders)
    computes = [t for t in outs if not isinstance(t.op, PlaceholderOp)]
    values = dict(zip(computes, te.evaluate([*(holders[k] for k in order), *computes], [inputs[k] for k in order])))
    values.update({holders[k]: inputs[k] for k in order})   # an output that is an input (Identity)
    for t, e in zip(outs, expected):
        assert values[t].shape == e.shape and t.dtype == str(e.dtype)
        if e.dtype.kind == "f":
            np.testing.assert_allclose(values[t], e, **(tol or {"rtol": 1e-5, "atol": 1e-6}))
        else:
            np.testing.assert_array_equal(values[t], e)
    return outs


def lower(op, inputs, attrs=None, const=()):
    """Node `op` lowered: the placeholders of its inputs, in order, and its output."""
    cx, holders = context(op, inputs, set(const), reference(op, inputs, attrs or {}, set(const), 17, 1), attrs)
    (out,) = LOWERINGS[op](cx)
    return [holders[k] for k in sorted(holders)], out


def reading(op, values, like, attrs=None):
    """Node `op` lowered to read te tensors `values`; its output is shaped like array `like`."""
    cx, _ = context(op, [like] * len(values), (), [like], attrs)
    cx.values = values
    (out,) = LOWERINGS[op](cx)
    return out


def where_less(x, y):
    """Where(Less(x, y), x, y): a bool mask made by one node, read by the next."""
    (hx, hy), mask = lower("Less", [x, y])
    assert mask.dtype == "bool"
    return [hx, hy], reading("Where", [mask, hx, hy], x)


def cast_round_trip(x):
    """Cast(Cast(x, int64), float): truncation toward zero."""
    (hx,), ints = lower("Cast", [x], {"to": onnx.TensorProto.INT64})
    return [hx], reading("Cast", [ints], x, {"to": onnx.TensorProto.FLOAT})


BINARY = ["Add", "Sub", "Mul", "Div"]


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("shapes", [((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((5,), (5,))])
def test_broadcast_arithmetic(op, shapes):
    a, b = f32(*shapes[0]), f32(*shapes[1], lo=0.5, hi=2.0)
    check(op, [a, b])


def test_a_constant_operand_is_read_inlined_or_through_a_placeholder():
    check("Mul", [f32(2, 3), np.array(1.5, "float32")], const=[1])
    check("Add", [f32(2, 3), f32(3)], const=[1])


UNARY = {"Sqrt": (0.1, 4), "Reciprocal": (0.5, 3), "Exp": (-3, 3), "Log": (0.1, 4), "Erf": (-5, 5),
         "Tanh": (-4, 4), "Sigmoid": (-10, 10), "Relu": (-2, 2), "Neg": (-2, 2), "Abs": (-2, 2)}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    check(op, [f32(3, 17, lo=UNARY[op][0], hi=UNARY[op][1])], tol={"rtol": 1e-5, "atol": 2e-6})


def test_erf_within_1e_6_of_math_erf():
    grid = np.linspace(-6, 6, 40001)
    x = te.placeholder(grid.shape, "x")
    (got,) = te.evaluate([x, te.compute(x.shape, lambda i: erf(x[i]), name="erf")], [grid])
    want = np.array([math.erf(v) for v in grid])
    assert np.abs(got - want).max() < 2e-7   # float64 evaluation; float32 kernels: test_compiled


@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.2}])
def test_leaky_relu(attrs):
    check("LeakyRelu", [f32(4, 5)], attrs)


@pytest.mark.parametrize("exponent", [2.0, 0.5, 3.0, -1.0, 0.0, -0.5, 1.7])
def test_pow_by_a_constant(exponent):
    lo = 0.2 if exponent != int(exponent) else -2.0
    check("Pow", [f32(3, 4, lo=lo), np.array(exponent, "float32")], const=[1])


def test_pow_by_data_fails_clearly():
    with pytest.raises(ModelError, match=r"'my/Pow' \(Pow\) is not supported: its exponent \(input 1\) must be a "
                                         "constant"):
        check("Pow", [f32(3), f32(3)])


@pytest.mark.parametrize("bounds", [(-0.5, 0.7), (None, 0.7), (-0.5, None), (None, None)])
def test_clip_by_constant_inputs(bounds):
    check("Clip", [f32(3, 5), *(None if b is None else np.array(b, "float32") for b in bounds)], const=[1, 2])


def test_clip_by_attributes_of_opset_6():
    check("Clip", [f32(3, 5)], {"min": -0.3, "max": 1.0}, opset=6)
    check("Clip", [f32(3, 5)], {"max": 1.0}, opset=6)


def test_where_with_a_mask_computed_by_less():
    x, y = f32(2, 3, 4), f32(4)
    holders, out = where_less(x, y)
    np.testing.assert_array_equal(te.evaluate([*holders, out], [x, y])[0], np.where(x < y, x, y))


def test_where_broadcasts_its_three_inputs():
    check("Where", [rng.random((3, 1)) < 0.5, f32(2, 1, 4), f32(4)])


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons(op):
    a = np.round(f32(2, 3, 4))
    check(op, [a, np.round(f32(3, 1))])


@pytest.mark.parametrize("op", ["And", "Or"])
def test_logic(op):
    check(op, [rng.random((2, 3)) < 0.5, rng.random((3,)) < 0.5])


def test_not_and_isnan():
    check("Not", [rng.random((2, 3)) < 0.5])
    check("IsNaN", [np.array([1.0, np.nan, -np.inf, 0.0], "float32")])


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_cast_to_and_from_masks_and_indices(dtype):
    x = np.array([[-2.7, -0.5, 0.0, 0.4, 3.9]], "float32")
    check("Cast", [x], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dtype))})
    back = (x != 0) if dtype == "bool" else np.trunc(x).astype(dtype)
    check("Cast", [back], {"to": onnx.TensorProto.FLOAT})


def test_identity_dropout_and_float_casts_return_their_input():
    x = f32(2, 3)
    for op, attrs in [("Identity", {}), ("Dropout", {}), ("Cast", {"to": onnx.TensorProto.FLOAT})]:
        (out,) = check(op, [x], attrs)
        assert isinstance(out.op, PlaceholderOp)
    out, mask = check("Dropout", [x], n_out=2)
    assert isinstance(out.op, PlaceholderOp) and mask.dtype == "bool"
    cx, _ = context("Dropout", [x, None, np.array(True)], (2,), [x])
    with pytest.raises(ModelError, match="training mode"):
        EW["Dropout"](cx)


def test_batch_normalization_per_channel():
    c = 3
    params = [f32(c), f32(c), f32(c), f32(c, lo=0.1, hi=2)]
    check("BatchNormalization", [f32(2, c, 4, 5), *params], {"epsilon": 1e-3}, const=[1, 2, 3, 4])
    check("BatchNormalization", [f32(2, c), *params], const=[1, 2, 3, 4])


def test_broadcast_load_reads_size_one_dimensions_at_zero():
    t = te.placeholder((3, 1), "t")
    out = te.compute((2, 3, 4), lambda *i: broadcast_load(t, (2, 3, 4), i), name="b")
    a = f32(3, 1)
    np.testing.assert_array_equal(te.evaluate([t, out], [a])[0], np.broadcast_to(a, (2, 3, 4)))


# -- reductions ----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes", [[1], [-1], [0, 2], None])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_with_axes_as_an_input(op, axes, keepdims):
    x = f32(2, 3, 4)
    check(op, [x] if axes is None else [x, np.array(axes, "int64")], {"keepdims": keepdims}, const=[1], opset=18)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
def test_reductions_with_axes_as_an_attribute(op):
    check(op, [f32(2, 3, 4)], {"axes": [-2], "keepdims": 0}, opset=11 if op == "ReduceSum" else 17)


def test_no_axes_with_noop_with_empty_axes_is_the_input():
    (out,) = check("ReduceMean", [f32(2, 3)], {"noop_with_empty_axes": 1}, opset=18)
    assert isinstance(out.op, PlaceholderOp)


def test_bad_reduction_axes_fail_clearly():
    x = f32(2, 3)
    cx, _ = context("ReduceSum", [x, np.array([2])], (1,), [x])
    with pytest.raises(ModelError, match="axis 2 is out of range for its input of 2 dimensions"):
        RED["ReduceSum"](cx)
    cx, _ = context("ReduceSum", [x, x], (), [x])
    with pytest.raises(ModelError, match=r"its axes \(input 1\) must be a constant"):
        RED["ReduceSum"](cx)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((3, 7), -1), ((2, 5, 4), 1), ((6,), 0)])
def test_softmax(op, shape, axis):
    (out,) = check(op, [f32(*shape, lo=-5, hi=5)], {"axis": axis})
    assert out.name == f"my_{op.lower()}" and f"my_{op.lower()}_sum" in {t.name for t in out.op.inputs}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(bias, axis):
    x = f32(2, 3, 8)
    params = [f32(*x.shape[axis:]) for _ in range(2 if bias else 1)]
    check("LayerNormalization", [x, *params], {"axis": axis, "epsilon": 1e-4}, const=[1, 2],
          tol={"rtol": 1e-4, "atol": 1e-5})


def test_layer_normalization_statistics_outputs_fail_clearly():
    x = f32(2, 8)
    cx, _ = context("LayerNormalization", [x, f32(8)], (1,), [x, f32(2, 1), f32(2, 1)])
    with pytest.raises(ModelError, match="outputs Mean and InvStdDev are used; only output Y"):
        RED["LayerNormalization"](cx)


def test_kinds_cover_every_lowering():
    assert set(EW_KINDS) == set(EW) and set(EW_KINDS.values()) == {"injective"}
    assert set(RED_KINDS) == set(RED) and set(RED_KINDS.values()) == {"reduction"}


# -- compiled for x86 ----------------------------------------------------------------------

COMPILED = {   # case: x, g, b -> (the lowering's placeholders, its output), its inputs, the expected output
    "erf": lambda x, g, b: (lower("Erf", [x]), [x], np.vectorize(math.erf)(x)),
    "softmax": lambda x, g, b: (lower("Softmax", [x], {"axis": 1}), [x],
                                reference("Softmax", [x], {"axis": 1}, set(), 17, 1)[0]),
    "layer_norm": lambda x, g, b: (lower("LayerNormalization", [x, g, b], const=[1, 2]), [x, g, b],
                                   reference("LayerNormalization", [x, g, b], {}, {1, 2}, 17, 1)[0]),
    "where_less": lambda x, g, b: (where_less(x, g), [x, g], np.where(x < g, x, g)),
    "cast": lambda x, g, b: (cast_round_trip(x), [x], np.trunc(x)),
}


@pytest.mark.skipif(not ON_X86, reason="runs x86 code")
@pytest.mark.parametrize("case", sorted(COMPILED))
def test_compiled(case):
    pytest.importorskip("llvmlite")
    (holders, out), inputs, want = COMPILED[case](f32(4, 33, lo=-5, hi=5), f32(33), f32(33))
    kernel = tunekit.build(tunekit.Task.from_compute(lambda: [*holders, out], {}, name=f"t_{case}"), target="x86")
    args = [tunekit.empty(a.shape) for a in inputs]
    for a, v in zip(args, inputs):
        a[...] = v
    result = tunekit.empty(out.shape)
    kernel(*args, result)
    np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-6)
