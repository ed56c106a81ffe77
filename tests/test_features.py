"""Feature kinds: fixed lengths, invariance to loop variable names, and the
relation features of a hand-computed program."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

import tunekit
from tunekit import features, ir
from tunekit.errors import TunekitError
from tunekit.testing import NullTarget


def _task_space(M=16, N=16, K=16):
    return tunekit.Task("matmul", {"M": M, "N": N, "K": K}, template="null-matmul").bind(NullTarget())


def _valid(ts):
    return [i for i in range(ts.size) if ts.space.valid(i)]


@pytest.mark.parametrize("kind", ["knob", "flatten", "relation", "curve"])
def test_fixed_length_within_a_task(null_target_plugin, kind):
    ts = _task_space()
    lengths = {len(ts.features(i, kind)) for i in _valid(ts)}
    assert len(lengths) == 1
    assert all(ts.features(i, kind).dtype == np.float32 for i in _valid(ts)[:5])


def test_relation_has_one_length_for_every_task(null_target_plugin):
    names = features.feature_names("relation")
    for shape in [(16, 16, 16), (8, 32, 4), (1, 4, 4)]:
        ts = _task_space(*shape)
        assert len(ts.features(_valid(ts)[0], "relation")) == len(names)
    assert features.feature_names("curve") == names


def test_curve_is_relation(null_target_plugin):
    ts = _task_space()
    for i in _valid(ts)[:10]:
        np.testing.assert_array_equal(ts.features(i, "curve"), ts.features(i, "relation"))


@pytest.mark.parametrize("kind", ["flatten", "relation"])
def test_different_configs_give_different_features(null_target_plugin, kind):
    ts = _task_space()
    valid = _valid(ts)
    vectors = {ts.features(i, kind).tobytes() for i in valid}
    assert len(vectors) == len(valid)


def _renamed(program: ir.Program) -> ir.Program:
    """The same program with every loop variable renamed."""
    loops = []

    class V(ir.Visitor):
        def visit_For(self, node):
            loops.append(node.var)
            self.generic_visit(node)
    V().visit(program.body)
    mapping = {v: ir.Var(f"zz{k}_{v.name}_renamed", v.dtype) for k, v in enumerate(loops)}
    return ir.Program(program.name, program.params, ir.substitute(program.body, mapping))


@pytest.mark.parametrize("kind", ["flatten", "relation"])
def test_invariant_to_loop_variable_names(null_target_plugin, kind):
    ts = _task_space()
    for i in random.Random(0).sample(_valid(ts), 10):
        p = ts.program(i)
        q = _renamed(p)
        assert repr(q) != repr(p)
        np.testing.assert_array_equal(features.program_features(q, kind), features.program_features(p, kind))


def test_knob_features_are_log2_splits_and_one_hot(null_target_plugin):
    ts = _task_space()
    space = ts.space
    i = _valid(ts)[7]
    cfg = space.get(i)
    f = ts.features(i, "knob")
    expect = [math.log2(x) for x in cfg["tile_i"]] + [math.log2(x) for x in cfg["tile_j"]]
    expect += [1.0 if v == cfg["annotate"] else 0.0 for v in space.knobs[2].values]
    np.testing.assert_allclose(f, expect)


def test_unknown_kind_names_the_kinds(null_target_plugin):
    ts = _task_space()
    with pytest.raises(TunekitError, match="available: knob, flatten, relation, curve"):
        ts.features(0, "ast")


def _tiny_program() -> ir.Program:
    """for i in range(4):            # serial
         for j in range(8):          # vectorized
           C[i*8 + j] = A[i*8 + j] + B[j]        (float32)"""
    A, B, C = ir.Buffer("A", (32,), "float32"), ir.Buffer("B", (8,), "float32"), ir.Buffer("C", (32,), "float32")
    i, j = ir.Var("i"), ir.Var("j")
    store = ir.Store(C, i * 8 + j, ir.Load(A, i * 8 + j) + ir.Load(B, j))
    body = ir.For(i, 4, ir.SERIAL, ir.For(j, 8, ir.VECTORIZED, store))
    return ir.Program("tiny", [A, B, C], body)


def test_relation_values_of_a_tiny_program():
    # Hand analysis. Loops (outer, inner): i (4 iterations), j (8, vectorized).
    # Buffer slots: 0 = C (stored), 1 = A, 2 = B (loaded, in order of appearance).
    # Per loop k, Z_k for each buffer (log2): touched bytes T, reuse, accesses, -log2(entries), stride:
    #   C: j: T=5 (8 floats), reuse 0, count 3, entries -2, stride log2(1+4)
    #      i: T=7 (32 floats), reuse 0, count 5, entries 0, stride log2(1+32)
    #   B: j: T=5, reuse 0, count 3;  i: T=5 (B[j] does not move with i), reuse 2, count 5, stride 0
    # sub-nest iterations (log2): j 3, i 5; vectorized column, log2(1 + extent): j log2(9), i 0.
    f = dict(zip(features.feature_names("relation"), features.program_features(_tiny_program(), "relation")))
    # R(reuse | bytes < beta): no loop of B touches under 32 bytes; both do under 64
    assert f["buf2.reuse|bytes<2^5"] == 0 and f["buf2.reuse|bytes<2^6"] == 2
    assert f["buf0.reuse|bytes<2^8"] == 0
    # R(count | bytes < beta) and R(entries | bytes < beta) of C: only j fits in 64 bytes, both in 256
    assert f["buf0.count|bytes<2^6"] == 3 and f["buf0.count|bytes<2^8"] == 5
    assert f["buf0.entries|bytes<2^6"] == -2 and f["buf0.entries|bytes<2^8"] == 0
    # R(vectorized | iterations < beta): strict threshold, so j (2^3 iterations) counts from 2^5
    assert f["vectorized|iters<2^3"] == 0 and f["parallel|iters<2^25"] == 0
    assert f["vectorized|iters<2^5"] == pytest.approx(math.log2(9))
    assert f["buf2.stride|iters<2^5"] == pytest.approx(math.log2(5))
    assert f["buf0.stride|iters<2^7"] == pytest.approx(math.log2(33))
    assert f["buf0.bytes|iters<2^7"] == 7 and f["buf2.bytes|iters<2^7"] == 5
    assert f["buf3.reuse|bytes<2^30"] == 0   # no fourth buffer
    assert [f[g] for g in ("log2_executions", "loops", "buf0_log2_bytes", "buf1_log2_bytes", "buf2_log2_bytes",
                           "other_log2_executions", "stores")] == [5, 2, 7, 7, 5, 0, 1]


def test_flatten_values_of_a_tiny_program():
    # per loop: log2 extent, depth, one-hot(serial, parallel, vectorized, unrolled, thread),
    # log2 top-down, log2 bottom-up; then per buffer (A, B, C): T, count, reuse, log2(1 + stride bytes)
    f = features.program_features(_tiny_program(), "flatten").reshape(2, -1)
    np.testing.assert_allclose(f[0, :9], [2, 0, 1, 0, 0, 0, 0, 2, 5])
    np.testing.assert_allclose(f[1, :9], [3, 1, 0, 0, 1, 0, 0, 5, 3])
    np.testing.assert_allclose(f[0, 9:], [7, 5, 0, math.log2(33), 5, 5, 2, 0, 7, 5, 0, math.log2(33)], rtol=1e-6)
    np.testing.assert_allclose(f[1, 9:], [5, 3, 0, math.log2(5)] * 3, rtol=1e-6)


def test_feature_matrix_batches_each_task_through_its_extractor(null_target_plugin):
    """`tunekit.feature_matrix` gives the same rows as the candidates' own vectors, and
    hands each task's uncached program-feature configs to its extractor in one call."""
    a, b = _task_space(16, 16, 16), _task_space(32, 16, 16)
    calls = []

    def extractor(ts, indices, kind):
        calls.append((ts, list(indices), kind))
        return [features.extract(ts, i, kind) for i in indices]
    a.extractor = b.extractor = extractor
    ia, ib = _valid(a)[:20], _valid(b)[:5]
    cands = a.candidates(ia) + b.candidates(ib) + a.candidates(ia[:3])   # repeats are extracted once
    x = tunekit.feature_matrix(cands, "relation")
    assert [(ts, kind) for ts, _, kind in calls] == [(a, "relation")]   # b: too few to send out
    assert calls[0][1] == ia
    fresh = _task_space(16, 16, 16), _task_space(32, 16, 16)
    want = [features.extract(fresh[0], i, "relation") for i in ia] + \
           [features.extract(fresh[1], i, "relation") for i in ib] + \
           [features.extract(fresh[0], i, "relation") for i in ia[:3]]
    np.testing.assert_array_equal(x, np.stack(want))
    tunekit.feature_matrix(a.candidates(ia), "relation")          # all cached now: no call
    tunekit.feature_matrix(a.candidates(_valid(a)[:40]), "knob")  # knob features need no lowering
    assert len(calls) == 1
    knob = tunekit.feature_matrix(a.candidates(ia[:2]), "knob", width=3)
    assert knob.shape == (2, 3) and knob.dtype == np.float32
    wide = tunekit.feature_matrix(a.candidates(ia[:2]), "knob", width=len(a.features(ia[0])) + 2)
    assert (wide[:, -2:] == 0).all()


def test_relation_sees_an_outer_unrolled_loop_under_a_longer_inner_one():
    # C[i*8 + j] += A[j] over i (3) and j (8, unrolled): unrolling i as well makes a 24-fold body,
    # which a per-loop max of the annotated extents read as the 8-fold one (20% apart on C10's nchwc space)
    def program(outer_kind):
        A, C = ir.Buffer("A", (8,), "float32"), ir.Buffer("C", (24,), "float32")
        i, j = ir.Var("i"), ir.Var("j")
        store = ir.Store(C, i * 8 + j, ir.Load(C, i * 8 + j) + ir.Load(A, j))
        return ir.Program("p", [A, C], ir.For(i, 3, outer_kind, ir.For(j, 8, ir.UNROLLED, store)))
    names = features.feature_names("relation")
    serial, unrolled = (dict(zip(names, features.program_features(program(k), "relation")))
                        for k in (ir.SERIAL, ir.UNROLLED))
    assert serial["unrolled|iters<2^5"] == pytest.approx(math.log2(9))
    assert unrolled["unrolled|iters<2^5"] == pytest.approx(math.log2(9) + 2)   # log2(1 + 3) more
