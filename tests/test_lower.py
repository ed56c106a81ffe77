"""Schedules lowered to loop IR compute what the tensor expression says (checked in
the reference interpreter)."""
import numpy as np
import pytest

from tunekit import te
from tunekit.errors import ScheduleError
from tunekit.ir import interp
from tunekit.ops.matmul import compute as matmul


def run(s, tensors, *arrays):
    p = te.lower(s, tensors)
    interp.run(p, *arrays)
    return p


def mats(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((M, K), np.float32), rng.random((K, N), np.float32), np.zeros((M, N), np.float32)


@pytest.mark.parametrize("factor", [1, 3, 4, 10, 16])
def test_split_reorder_with_tails(factor):
    A, B, C = matmul(10, 7, 5)
    s = te.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, ii = s[C].split(i, factor)
    ko, ki = s[C].split(k, nparts=2)
    s[C].reorder(ko, io, j, ki, ii)
    s[C].vectorize(ii)
    a, b, c = mats(10, 7, 5)
    run(s, [A, B, C], a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_fuse_parallel_cache_write_compute_at():
    A, B, C = matmul(12, 20, 6)
    s = te.create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    s[CC].compute_at(s[C], f)
    p = run(s, [A, B, C], *(arrs := mats(12, 20, 6)))
    a, b, c = arrs
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert "C_local = alloc(float32, [4, 8]" in str(p)   # only the tile's region


def test_padding_inline_and_compute_at():
    X = te.placeholder((1, 2, 6, 6), "X")
    W = te.placeholder((3, 2, 3, 3), "W")
    P = te.compute((1, 2, 8, 8), lambda n, c, h, w: te.if_then_else(
        te.tensor.all_(h >= 1, h < 7, w >= 1, w < 7), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, ry, rx = te.reduce_axis(2, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    O = te.compute((1, 3, 6, 6), lambda n, f, y, x: te.sum(P[n, rc, y + ry, x + rx] * W[f, rc, ry, rx],
                                                           axis=[rc, ry, rx]), name="O")
    rng = np.random.default_rng(0)
    x, w = rng.random((1, 2, 6, 6), np.float32), rng.random((3, 2, 3, 3), np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.einsum("chwrs,fcrs->fhw", np.lib.stride_tricks.sliding_window_view(xp[0], (3, 3), axis=(1, 2)), w)[None]
    for mode in ("inline", "at"):
        s = te.create_schedule(O)
        if mode == "inline":
            s[P].compute_inline()
        else:
            yo, yi = s[O].split(O.op.axis[2], 4)
            s[P].compute_at(s[O], yo)
        o = np.zeros((1, 3, 6, 6), np.float32)
        run(s, [X, W, O], x, w, o)
        np.testing.assert_allclose(o, ref, rtol=1e-5)


def test_max_reduction():
    A = te.placeholder((5, 9), "A")
    k = te.reduce_axis(9, "k")
    M = te.compute((5,), lambda i: te.max(A[i, k], axis=k), name="M")
    s = te.create_schedule(M)
    s[M].split(k, 4)
    a = np.random.default_rng(1).standard_normal((5, 9)).astype(np.float32)
    m = np.zeros(5, np.float32)
    run(s, [A, M], a, m)
    np.testing.assert_allclose(m, a.max(1))


def test_misuse_is_a_clear_error():
    A, B, C = matmul(4, 4, 4)
    s = te.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, 2)
    with pytest.raises(ScheduleError, match="not a current loop"):
        s[C].split(i, 2)
    with pytest.raises(ScheduleError, match="not adjacent"):
        s[C].fuse(io, j)
    with pytest.raises(ScheduleError, match="reduction cannot be inlined"):
        s[C].compute_inline()


def test_packed_layout_indices_simplify_and_region_shrinks():
    M = N = K = 32
    A, B = te.placeholder((M, K), "A"), te.placeholder((K, N), "B")
    Bp = te.compute((N // 16, K, 16), lambda jo, k, ji: B[k, jo * 16 + ji], name="Bp")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * Bp[j // 16, k, j % 16], axis=k), name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, 16)
    s[C].reorder(jo, i, k, ji)
    s[Bp].compute_at(s[C], jo)
    a, b, c = mats(M, N, K)
    p = run(s, [A, B, C], a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    text = str(p)
    assert "Bp = alloc(float32, [1, 32, 16]" in text      # one panel per column tile
    assert "//" not in text and "%" not in text           # (16*jo + ji) // 16 -> jo


def test_visitor_dispatch_follows_each_class_and_node_mro():
    """Visitors look their methods up once per (visitor class, node class); a subclass
    that overrides a method, or a node type seen first by the base, still dispatches right."""
    from tunekit import ir
    x, y = ir.Var("x"), ir.Var("y")
    e = (x + y) * 2

    class Names(ir.Visitor):
        def __init__(self):
            self.seen = []

        def visit_Expr(self, node):
            self.seen.append(type(node).__name__)
            self.generic_visit(node)

    class Ops(Names):
        def visit_BinOp(self, node):
            self.seen.append(node.op)
            self.generic_visit(node)

    for _ in range(2):   # the second pass runs from the tables filled by the first
        base, sub = Names(), Ops()
        base.visit(e)
        sub.visit(e)
        assert base.seen == ["BinOp", "BinOp", "Var", "Var", "Const"]
        assert sub.seen == ["*", "+", "Var", "Var", "Const"]

    class Swap(ir.Mutator):
        def visit_Var(self, v):
            return y if v is x else x
    assert ir.expr_str(Swap().visit(e)) == ir.expr_str((y + x) * 2)
    assert ir.free_vars(e) == {x, y} and ir.free_vars(x) == {x}
