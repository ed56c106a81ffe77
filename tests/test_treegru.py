"""The treegru cost model: gradient check, the CostModel contract, learning on NullTarget, a tuning run."""
from __future__ import annotations

import random

import numpy as np
import pytest
from tunekit_plugins.models.treegru import TreeGRUModel
from tunekit_plugins.models.treegru import network as tg

import tunekit
from tunekit.testing import NULL_PLUGIN_NAME, NullTarget, null_plugin, simulated_trials
from tunekit.testing.contract import CostModelContract


@pytest.fixture
def null():
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    yield
    tunekit.unregister_plugin(NULL_PLUGIN_NAME)


@pytest.mark.parametrize("loss", [tg.rank_loss, tg.mse_loss])
def test_gradient_matches_finite_differences(loss):
    rng = np.random.default_rng(0)
    dim = tg.input_dim()

    def tree(parent):
        return tg.Tree(rng.normal(size=(len(parent), dim)), np.asarray(parent, np.int64))

    # a 3-level tree with a node of two children, a chain, two roots, an empty program
    trees = [tree([-1, 0, 1, 1, 0]), tree([-1, 0]), tree([-1, -1, 1]),
             tg.Tree(np.zeros((0, dim)), np.zeros(0, np.int64))]
    net = tg.TreeGRU(dim, 5, 3, rng)
    net.mean, net.scale = rng.normal(size=dim) * 0.1, np.abs(rng.normal(size=dim)) + 0.5
    for k in net.p:
        net.p[k] = net.p[k] + rng.normal(size=net.p[k].shape) * 0.3
    batch = tg.Batch(trees, dim)
    y, groups = np.array([0.3, 1.0, 0.5, 0.1]), np.zeros(4, np.int64)
    _, dscore = loss(net.forward(batch, keep=True), y, groups)
    grads = net.backward(batch, dscore)
    eps = 1e-6
    for name, value in net.p.items():
        flat, num = value.reshape(-1), np.zeros(value.size)
        for i in range(value.size):
            old = flat[i]
            flat[i] = old + eps
            up = loss(net.forward(batch), y, groups)[0]
            flat[i] = old - eps
            down = loss(net.forward(batch), y, groups)[0]
            flat[i] = old
            num[i] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grads[name].reshape(-1), num, rtol=1e-5, atol=1e-8, err_msg=name)


def test_tree_encoding_follows_the_loop_nest(null):
    ts = tunekit.Task("matmul", {"M": 16, "N": 16, "K": 16}, template="null-matmul").bind(NullTarget())
    cand = ts.candidates([ts.space.sample(random.Random(0), 1)[0]])[0]
    t = tg.tree_of(cand)
    assert t.x.shape[1] == tg.input_dim() and len(t.x) == len(t.parent) > 0
    assert (t.parent < np.arange(len(t.parent))).all()                      # preorder
    assert (t.height[t.parent[t.parent >= 0]] > t.height[t.parent >= 0]).all()
    extents = tunekit.features.LoopNest(cand.program).extent
    np.testing.assert_array_equal(t.x[:, 0], np.log2([max(1, e) for e in extents]))
    assert tg.tree_of(cand) is t                                            # cached


class TestTreeGRUContract(CostModelContract):
    model_class = TreeGRUModel


@pytest.mark.parametrize("objective", ["rank", "regression"])
def test_learns_from_null_target(null, objective):
    ts = tunekit.Task("matmul", {"M": 64, "N": 64, "K": 64}, template="null-matmul").bind(NullTarget())
    valid = [i for i in range(ts.size) if ts.space.valid(i)]
    rng = random.Random(0)
    train = rng.sample(valid, 60)
    test = [i for i in valid if i not in set(train)][:300]
    model = TreeGRUModel(TreeGRUModel.Options(objective=objective))
    model.fit(simulated_trials(ts, train))
    scores = model.predict(ts.candidates(test))
    costs = np.array([t.cost for t in simulated_trials(ts, test)])
    rank = lambda x: np.argsort(np.argsort(x))
    assert np.corrcoef(rank(scores), rank(-costs))[0, 1] > 0.5


def test_transfer_adds_local_to_global(null):
    other = tunekit.Task("matmul", {"M": 32, "N": 64, "K": 16}, template="null-matmul").bind(NullTarget())
    ts = tunekit.Task("matmul", {"M": 64, "N": 64, "K": 64}, template="null-matmul").bind(NullTarget())
    model = TreeGRUModel(TreeGRUModel.Options(epochs=5, min_steps=30))
    model.fit_history(simulated_trials(other, other.space.sample(random.Random(1), 40)))
    cands = ts.candidates(ts.space.sample(random.Random(3), 10))
    g = model.predict(cands)
    model.fit(simulated_trials(ts, ts.space.sample(random.Random(2), 20)))
    np.testing.assert_allclose(model.predict(cands), g + model._score(model._local, [tg.tree_of(c) for c in cands]))


def test_save_load_keeps_options_and_rejects_other_files(tmp_path):
    model = TreeGRUModel(TreeGRUModel.Options(hidden=8, slots=2))
    path = tmp_path / "m.npz"
    model.save(str(path))
    fresh = TreeGRUModel()
    fresh.load(str(path))
    assert fresh.options.hidden == 8 and fresh.options.slots == 2
    (tmp_path / "bad").write_text("{}")
    with pytest.raises(tunekit.errors.TunekitError):
        fresh.load(str(tmp_path / "bad"))


def test_tuning_run_with_treegru(tmp_path, null):
    st = tunekit.tune([{"op": "matmul", "args": {"M": 16, "N": 16, "K": 16}, "template": "null-matmul"}],
                      target="null", model="treegru", explorer="annealing", trials=16,
                      database=str(tmp_path / "t.db"), tuning={"batch_size": 4})[0]
    assert [b[0] for b in st.batches] == [4, 4, 4, 4]
