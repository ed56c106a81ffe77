"""User computations as tasks (`tunekit.Task.from_compute`): the te description and its
structural hash, the numpy interpreter that is their reference, the computed op, and a
computed task tuned, rebuilt in another process from its spec, and built from records."""
from __future__ import annotations

import importlib
import pickle
import platform

import numpy as np
import pytest
from computations import softmax

import tunekit
from tunekit import ir, te
from tunekit.deploy.kernels import checked_best
from tunekit.errors import ArgumentError, RecipeError, TunekitError
from tunekit.memory import arena
from tunekit.ops.computed import ComputedOp
from tunekit.plugin.registry import task_of
from tunekit.store.database import Database
from tunekit.task import TaskSpec
from tunekit.te.tensor import PlaceholderOp

ON_X86 = platform.machine().lower() in ("x86_64", "amd64")
QUICK = {"repeat": 1, "number": 1, "min_repeat_ms": 0}


def gelu_tanh(x):
    return 0.5 * x * (1.0 + te.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def fused(M, N, K, dtype="float32", names=("A", "W", "b", "C", "out")):
    A = te.placeholder((M, K), names[0], dtype)
    W = te.placeholder((K, N), names[1], dtype)
    b = te.placeholder((N,), names[2], dtype)
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name=names[3])
    out = te.compute((M, N), lambda i, j: gelu_tanh(C[i, j] + b[j]), name=names[4])
    return [A, W, b, out]


def fused_np(A, W, b):
    x = A.astype(np.float64) @ W + b
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def pad_sum(N, P=1):
    """A 3-tap box filter over x padded with zeros: the padding is a guarded load."""
    X = te.placeholder((N,), "X")
    Xp = te.compute((N + 2 * P,), lambda i: te.if_then_else(te.all_(i >= P, i < N + P), X[i - P], 0.0), name="Xp")
    r = te.reduce_axis(3, "r")
    return [X, te.compute((N,), lambda i: te.sum(Xp[i + r], axis=r), name="Y")]


def program_text(tensors) -> str:
    outs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
    return str(te.lower(te.create_schedule(outs), tensors, name="k"))


# -- serialization and the structural hash -------------------------------------------------

@pytest.mark.parametrize("make", [lambda: fused(16, 8, 4), lambda: softmax(4, 8), lambda: pad_sum(10)])
def test_round_trip_lowers_to_the_same_program(make):
    tensors = make()
    data = te.to_data(tensors)
    again = te.from_data(pickle.loads(pickle.dumps(data)))
    assert program_text(again) == program_text(tensors)
    assert te.to_data(again) == data and te.structural_hash(again) == te.structural_hash(tensors)


def test_non_finite_constants_and_casts_round_trip():
    X = te.placeholder((4,), "X")
    Y = te.compute((4,), lambda i: te.if_then_else(X[i] > float("-inf"), ir.cast(X[i], "int32") // 3, -7),
                   name="Y")
    data = te.to_data([X, Y])
    assert "-inf" in str(data) and program_text(te.from_data(data)) == program_text([X, Y])


def test_equal_computations_named_differently_share_the_hash():
    assert te.structural_hash(fused(16, 8, 4)) == te.structural_hash(fused(16, 8, 4, names=("P", "Q", "R", "S", "T")))
    assert te.to_data(fused(16, 8, 4)) != te.to_data(fused(16, 8, 4, names=("P", "Q", "R", "S", "T")))


def test_every_kind_of_change_changes_the_hash():
    def variant(shape=(8, 8), dtype="float32", index=lambda i, j: (i, j), const=2.0, op="*", combiner=te.sum,
                tag="", order=False):
        A = te.placeholder(shape, "A", dtype)
        k = te.reduce_axis(shape[1], "k")
        C = te.compute((shape[0],), lambda i: combiner(A[index(i, k)] * const if op == "*" else A[index(i, k)]
                                                       + const, axis=k), name="C", tag=tag)
        B = te.placeholder((1,), "B", dtype)
        return [B, A, C] if order else [A, B, C]
    base = te.structural_hash(variant())
    changed = [variant(shape=(8, 4)), variant(dtype="float64"), variant(index=lambda i, k: (i, 7 - k)),
               variant(const=3.0), variant(op="+"), variant(combiner=te.max), variant(tag="elemwise"),
               variant(order=True)]
    hashes = [te.structural_hash(v) for v in changed]
    assert base not in hashes and len(set(hashes)) == len(hashes)
    assert te.structural_hash(variant()) == base


def test_from_data_refuses_what_to_data_did_not_write():
    with pytest.raises(TunekitError, match="format"):
        te.from_data({"tensors": []})
    with pytest.raises(TunekitError, match="malformed"):
        te.from_data({"format": 1, "tensors": [{"kind": "compute"}], "axes": [], "params": [0]})


# -- the numpy interpreter -----------------------------------------------------------------

def test_evaluate_matmul_softmax_padding_max_and_broadcast():
    rng = np.random.default_rng(0)
    A, W, b = rng.standard_normal((16, 4)), rng.standard_normal((4, 8)), rng.standard_normal(8)
    args = [a.astype("float32") for a in (A, W, b)]
    (out,) = te.evaluate(fused(16, 8, 4), args)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, fused_np(*args), rtol=1e-5, atol=1e-6)

    X = rng.standard_normal((5, 7)).astype("float32")
    (y,) = te.evaluate(softmax(5, 7), [X])
    e = np.exp(X - X.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6)

    x = rng.standard_normal(10).astype("float32")
    (y,) = te.evaluate(pad_sum(10), [x])
    np.testing.assert_allclose(y, np.convolve(x, np.ones(3), mode="same"), rtol=1e-5, atol=1e-6)

    P = te.placeholder((3, 6, 5), "P")
    r = te.reduce_axis(6, "r")
    M = te.compute((3, 5), lambda i, j: te.max(P[i, r, j], axis=r), name="M")
    v = rng.standard_normal((3, 6, 5)).astype("float32")
    assert np.array_equal(te.evaluate([P, M], [v])[0], v.max(axis=1))

    row, col = te.placeholder((4,), "row"), te.placeholder((6,), "col")
    O = te.compute((4, 6), lambda i, j: row[i] * col[j] + 1.0, name="O")
    a, c = rng.random(4).astype("float32"), rng.random(6).astype("float32")
    np.testing.assert_allclose(te.evaluate([row, col, O], [a, c])[0], np.outer(a, c) + 1, rtol=1e-6)


def test_evaluate_integers_floor_like_python():
    X = te.placeholder((8,), "X", "int32")
    Q = te.compute((8,), lambda i: X[i] // 3 + X[i] % 3 * 10, name="Q")
    x = np.arange(-4, 4, dtype="int32")
    (q,) = te.evaluate([X, Q], [x])
    assert q.dtype == np.int32 and q.tolist() == [v // 3 + v % 3 * 10 for v in x.tolist()]


def test_evaluate_chunks_large_spaces_and_refuses_unguarded_out_of_bounds(monkeypatch):
    ev = importlib.import_module("tunekit.te.evaluate")
    monkeypatch.setattr(ev, "LIMIT", 64)   # every compute and reduction in many small boxes
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype("float32") for s in ((16, 12), (12, 8), (8,))]
    np.testing.assert_allclose(te.evaluate(fused(16, 8, 12), args)[0], fused_np(*args), rtol=1e-5, atol=1e-6)
    X = te.placeholder((4,), "X")
    Y = te.compute((4,), lambda i: X[i + 1], name="Y")
    with pytest.raises(TunekitError, match=r"X\[...\] reads index 4 .* out of bounds; guard the load"):
        te.evaluate([X, Y], [np.zeros(4, "float32")])


# -- the computed op and its task ----------------------------------------------------------

def test_computed_op_counts_flops_and_its_key_is_the_structure():
    task = tunekit.Task.from_compute(fused, dict(M=16, N=8, K=4), name="my_fused_op")
    assert isinstance(task.op, ComputedOp) and task.name == "my_fused_op(M=16, N=8, K=4)"
    assert task.flops == 2 * 16 * 8 * 4 + 16 * 8 * 14 and task.op.reduction_size(**task.args) == 4
    assert task.key == te.structural_hash(fused(16, 8, 4))
    other = tunekit.Task.from_compute(lambda M, N, K: fused(M, N, K, names=("x", "y", "z", "u", "v")),
                                      dict(M=16, N=8, K=4), name="renamed")
    assert other.key == task.key and tunekit.Task.from_compute(fused, dict(M=16, N=8, K=8)).key != task.key
    assert {t.name for t in task.templates} >= {"auto"} and all(t.generic for t in task.templates)


def test_a_spec_carries_the_computation_to_another_process():
    task = tunekit.Task.from_compute(fused, dict(M=16, N=8, K=4), name="my_fused_op")
    spec = pickle.loads(pickle.dumps(task.spec()))
    assert spec.computation is not None and "test_from_compute" not in spec.computation   # data, not code
    again = task_of(spec)
    assert again.key == task.key and again.flops == task.flops and again.op.name == "my_fused_op"
    assert program_text(again.op.compute(**again.args)) == program_text(task.op.compute(**task.args))
    inputs = task.op.random_inputs(task.args, np.random.default_rng(0))
    np.testing.assert_allclose(again.op.reference(*inputs, **again.args)[0], fused_np(*inputs), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.skipif(not ON_X86, reason="runs x86 code")
def test_tuned_on_auto_built_from_records_shared_by_equal_computations(tmp_path):
    pytest.importorskip("llvmlite")
    db = str(tmp_path / "t.db")
    args = dict(M=32, N=16, K=8)
    task = tunekit.Task.from_compute(fused, args, name="my_fused_op", template="auto")
    states = tunekit.tune([task], target="x86", trials=3, database=db, measure=QUICK, tuning={"batch_size": 3})
    assert states[0].done >= 1 and states[0].errors == 0 and states[0].best is not None
    renamed = tunekit.Task.from_compute(lambda M, N, K: fused(M, N, K, names=("x", "y", "z", "u", "v")), args,
                                        name="their_op")
    with tunekit.apply_history_best(db):
        kernel = tunekit.build(renamed, target="x86")
    assert kernel.tuned and kernel.template == "auto"
    store = Database(db, readonly=True)   # `tunekit best` and transfer rebuild the task from the database
    (row,) = store.best()
    assert checked_best(store, row)["checked"] and checked_best(store, row)["template"] == "auto"
    op, row_args, template, _, computation = store.history("x86", row["device"], set())[0]
    assert task_of(TaskSpec(op, tuple(sorted(row_args.items())), template, computation)).key == task.key
    store.close()
    rng = np.random.default_rng(2)
    A, W, b = (tunekit.empty(s) for s in ((32, 8), (8, 16), (16,)))
    A[...], W[...], b[...] = rng.standard_normal((32, 8)), rng.standard_normal((8, 16)), rng.standard_normal(16)
    out = tunekit.empty((32, 16))
    kernel(A, W, b, out)
    np.testing.assert_allclose(out, fused_np(A, W, b), rtol=1e-4, atol=1e-5)


# -- a reduction inside an expression -------------------------------------------------------

def scores(H, N, D):
    """Attention scores as downstream code writes them: the reduction scaled in the same compute."""
    q, k = te.placeholder((H, N, D), "q"), te.placeholder((H, N, D), "k")
    d = te.reduce_axis(D, "d")
    return [q, k, te.compute((H, N, N), lambda h, i, j: te.sum(q[h, i, d] * k[h, j, d], axis=d) * 0.125, name="s")]


def leaky_dense(M, N, K):
    """A reduction deep in its compute's body, read twice: leaky_relu(sum * 0.5 + b)."""
    A, W, b = te.placeholder((M, K), "A"), te.placeholder((K, N), "W"), te.placeholder((N,), "b")
    k = te.reduce_axis(K, "k")

    def y(i, j):
        x = te.sum(A[i, k] * W[k, j], axis=k) * 0.5 + b[j]
        return te.if_then_else(x > 0.0, x, x * 0.1)
    return [A, W, b, te.compute((M, N), y, name="y")]


def row_norm(M, N):
    """Two reductions along a row in one body, under a max: max(x / sum(x * x) - max(x), 0)."""
    x = te.placeholder((M, N), "x")
    k = te.reduce_axis(N, "k")
    return [x, te.compute((M, N), lambda i, j: ir.max_(x[i, j] / te.sum(x[i, k] * x[i, k], axis=k)
                                                       - te.max(x[i, k], axis=k), 0.0), name="y")]


def leaky_np(A, W, b):
    x = A.astype(np.float64) @ W * 0.5 + b
    return np.where(x > 0, x, x * 0.1)


REDUCTION_INSIDE = {
    "scores": (scores, dict(H=2, N=8, D=4), ["s.red"],
               lambda q, k: np.einsum("hid,hjd->hij", q.astype(np.float64), k) * 0.125),
    "leaky_dense": (leaky_dense, dict(M=8, N=16, K=4), ["y.red"], leaky_np),
    "row_norm": (row_norm, dict(M=4, N=8), ["y.red", "y.red1"],
                 lambda x: np.maximum(x / (x.astype(np.float64) ** 2).sum(1, keepdims=True)
                                      - x.max(1, keepdims=True), 0.0)),
}


@pytest.mark.parametrize("case", list(REDUCTION_INSIDE))
def test_a_reduction_inside_an_expression_is_computed_in_a_stage_of_its_own(case):
    fn, args, stages, want = REDUCTION_INSIDE[case]
    task = tunekit.Task.from_compute(fn, args, name=case)
    out = task.op.compute(**task.args)[-1]
    reductions = [t for t in out.op.inputs if not isinstance(t.op, PlaceholderOp)]
    assert [t.name for t in reductions] == stages and all(t.op.reduce_axis for t in reductions)
    assert not out.op.reduce_axis
    assert task_of(pickle.loads(pickle.dumps(task.spec()))).key == task.key
    inputs = task.op.random_inputs(task.args, np.random.default_rng(3))
    np.testing.assert_allclose(task.op.reference(*inputs, **task.args)[0], want(*inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not ON_X86, reason="runs x86 code")
@pytest.mark.parametrize("case", list(REDUCTION_INSIDE))
def test_a_reduction_inside_an_expression_builds_and_tunes(case, tmp_path):
    pytest.importorskip("llvmlite")
    fn, args, _, want = REDUCTION_INSIDE[case]
    task = tunekit.Task.from_compute(fn, args, name=case)
    ((shape, dtype),) = task.op.output_shapes(task.args)
    *inputs, out = arena([*task.op.random_inputs(task.args, np.random.default_rng(4)), np.zeros(shape, dtype)])
    tunekit.build(task, target="x86")(*inputs, out)   # no records: the default config
    np.testing.assert_allclose(out, want(*inputs), rtol=1e-4, atol=1e-5)
    states = tunekit.tune([task], target="x86", trials=3, database=str(tmp_path / "t.db"), measure=QUICK,
                          tuning={"batch_size": 3})
    assert states[0].done >= 1 and states[0].errors == 0 and states[0].best is not None


def test_a_reduction_that_cannot_be_a_stage_of_its_own_is_refused():
    def nested(N=4):
        x = te.placeholder((N, N), "x")
        k, m = te.reduce_axis(N, "k"), te.reduce_axis(N, "m")
        return [x, te.compute((N,), lambda i: te.sum(x[i, k] * te.sum(x[k, m], axis=m), axis=k) * 2.0, name="t")]

    def stray_axis(N=4):
        x = te.placeholder((N, N), "x")
        k = te.reduce_axis(N, "k")
        return [x, te.compute((N,), lambda i: te.sum(x[i, k], axis=k) + x[k, i], name="u")]
    with pytest.raises(ArgumentError, match="compute 't': a reduction inside another's .* te.compute of its own"):
        tunekit.Task.from_compute(nested)
    with pytest.raises(ArgumentError, match="compute 'u': reduction axis 'k' is used outside .* own te.reduce_axis"):
        tunekit.Task.from_compute(stray_axis)


# -- errors --------------------------------------------------------------------------------

def test_clear_errors_for_bad_computations():
    A = te.placeholder((4,), "A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    cases = [
        (dict(fn=lambda: [A, B], name="Bad-Name"), ArgumentError, "computation name 'Bad-Name'"),
        (dict(fn=lambda: [A, B]), ArgumentError, "'<lambda>'.*name="),
        (dict(fn=lambda: [A, B], name="matmul"), ArgumentError, "installed op"),
        (dict(fn=lambda n: [A, B], name="f", args={"n": [1, 2]}), ArgumentError, "args.n: must be a JSON scalar"),
        (dict(fn=lambda n: [A, B], name="f", args={"n": float("nan")}), ArgumentError, "args.n"),
        (dict(fn=lambda: [A, B], name="f", outputs=0), ArgumentError, "outputs must be a positive int"),
        (dict(fn=lambda: 1 / 0, name="f"), TunekitError, "failed when called with {}: ZeroDivisionError"),
        (dict(fn=lambda: B, name="f"), TunekitError, "returned a Tensor; return a list"),
        (dict(fn=lambda: [A, "B"], name="f"), TunekitError, "returned a str at position 1"),
        (dict(fn=lambda: [B, B], name="f"), TunekitError, "tensor 0 .B. is computed.*pass outputs=2"),
        (dict(fn=lambda: [B, A], name="f"), TunekitError, "tensor 1 .A. is a placeholder.*put the inputs first"),
        (dict(fn=lambda: [A, B], name="f", outputs=2), TunekitError, "tensor 0 .A. is a placeholder"),
        (dict(fn=lambda: [A, B, B], name="f", outputs=2), TunekitError, "tensor B is returned twice"),
        (dict(fn=lambda: [B], name="f"), TunekitError, "read placeholder A, which is not among"),
        (dict(fn=lambda: [A, B], name="f", outputs=3), TunekitError, "fewer than its 3 output"),
    ]
    for kw, exc, msg in cases:
        fn = kw.pop("fn")
        with pytest.raises(exc, match=msg):
            tunekit.Task.from_compute(fn, kw.pop("args", None), **kw)
    task = tunekit.Task.from_compute(lambda: [A, B], name="f")
    with pytest.raises(ArgumentError, match="a Task holds its args"):
        tunekit.build(task, {"n": 1})


def test_a_recipe_names_a_computation_by_module_and_function(tmp_path):
    (tmp_path / "user_ops.py").write_text(
        "from tunekit import te\n"
        "def scale(N, s=2.0):\n"
        "    A = te.placeholder((N,), 'A')\n"
        "    return [A, te.compute((N,), lambda i: A[i] * s, name='B')]\n")
    path = tmp_path / "r.toml"
    path.write_text('[[tasks]]\ncompute = "user_ops:scale"\nargs = { N = 64 }\nname = "scale_it"\n')
    (task,) = tunekit.load_recipe(path).task_objects()
    assert task.name == "scale_it(N=64)" and task.key == te.structural_hash(
        [A := te.placeholder((64,), "A"), te.compute((64,), lambda i: A[i] * 2.0)])
    bad = ['compute = "user_ops:nothere"', 'compute = "no_such_pkg.mod:f"', 'compute = "user_ops"',
           'compute = "user_ops:scale"\nargs = { N = [1] }', 'compute = "user_ops:scale"\nname = "Bad"',
           'op = "matmul"\nname = "x"']
    path.write_text("".join(f"[[tasks]]\n{b}\n" for b in bad))
    with pytest.raises(RecipeError) as e:
        tunekit.load_recipe(path)
    lines = str(e.value).splitlines()
    assert lines[0] == f"{path}: tasks[0].compute: module 'user_ops' has no attribute 'nothere'"
    assert lines[1].startswith(f"{path}: tasks[1].compute: cannot import module 'no_such_pkg.mod'")
    assert lines[2] == f"{path}: tasks[2].compute: expected \"package.module:function\""
    assert lines[3].startswith(f"{path}: tasks[3].args: computation 'scale': args.N: must be a JSON scalar")
    assert lines[4].startswith(f"{path}: tasks[4].name: computation name 'Bad'")
    assert lines[5].startswith(f"{path}: tasks[5].name: goes with compute")
