"""The xgboost and lightgbm cost models: the contract, the rank loss (Eq. 2),
acquisition functions and transfer (Eq. 4), on NullTarget's simulated costs."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pydantic
import pytest
from tunekit_plugins.models.gbt_common import PairwiseRankLoss, labels
from tunekit_plugins.models.lightgbm import LightGBMModel
from tunekit_plugins.models.xgboost import XGBoostModel

import tunekit
from tunekit.testing import NullTarget, simulated_trials
from tunekit.testing.contract import CostModelContract

MODELS = [XGBoostModel, LightGBMModel]


class TestXGBoostRank(CostModelContract):
    model_class = XGBoostModel


class TestXGBoostRegression(CostModelContract):
    model_class = XGBoostModel

    def make_options(self):
        return XGBoostModel.Options(objective="regression", features="relation")


class TestXGBoostEnsembleUCB(CostModelContract):
    model_class = XGBoostModel

    def make_options(self):
        return XGBoostModel.Options(objective="regression", ensemble=3, acquisition="ucb", features="flatten")


class TestLightGBMRank(CostModelContract):
    model_class = LightGBMModel


class TestLightGBMRegression(CostModelContract):
    model_class = LightGBMModel

    def make_options(self):
        return LightGBMModel.Options(objective="regression", features="relation")


class TestLightGBMEnsembleEI(CostModelContract):
    model_class = LightGBMModel

    def make_options(self):
        return LightGBMModel.Options(objective="regression", ensemble=3, acquisition="ei")


@pytest.fixture(params=MODELS, ids=lambda c: c.name)
def model_class(request, null_target_plugin):
    reason = request.param.available()
    if reason:
        pytest.skip(reason)
    return request.param


def _task_space(M=32, N=32, K=32):
    return tunekit.Task("matmul", {"M": M, "N": N, "K": K}, template="null-matmul").bind(NullTarget())


def _valid(ts):
    return [i for i in range(ts.size) if ts.space.valid(i)]


def _spearman(scores, costs) -> float:
    rank = lambda x: np.argsort(np.argsort(x))
    return float(np.corrcoef(rank(np.asarray(scores)), rank(-np.asarray(costs)))[0, 1])


@pytest.fixture
def split(null_target_plugin):
    """A 32^3 matmul task: 40 measured trials and the other valid configs with their costs."""
    ts = _task_space()
    valid = _valid(ts)
    train = random.Random(0).sample(valid, 40)
    test = [i for i in valid if i not in set(train)]
    return ts, simulated_trials(ts, train), ts.candidates(test), [t.cost for t in simulated_trials(ts, test)]


def test_pairwise_rank_loss_is_eq2_with_its_gradient():
    rng = np.random.default_rng(0)
    y = np.array([0.0, 0.5, 1.0, 0.5, 0.2])
    f = rng.normal(size=5)
    loss = PairwiseRankLoss(y, np.zeros(5, np.int64), rng, max_pairs=100)
    pairs = [(i, j) for i in range(5) for j in range(5) if y[i] > y[j]]
    expect = np.mean([np.log1p(np.exp(-(f[i] - f[j]))) for i, j in pairs])
    assert loss.loss(f) == pytest.approx(expect)
    grad, hess = loss.grad_hess(f)
    eps = 1e-6
    numeric = [(loss.loss(f + eps * e) - loss.loss(f - eps * e)) / (2 * eps) * len(pairs) for e in np.eye(5)]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)
    assert np.all(hess > 0)


def test_pairs_stay_inside_groups():
    y = np.array([1.0, 0.0, 1.0, 0.0])
    loss = PairwiseRankLoss(y, np.array([0, 0, 1, 1]), np.random.default_rng(0), max_pairs=100)
    assert sorted(zip(loss.hi.tolist(), loss.lo.tolist())) == [(0, 1), (2, 3)]


def test_labels_are_normalized_throughput_failed_zero(split):
    _, trials, _, _ = split
    trials[0].costs, trials[0].error = [], "build error"
    y = labels(trials)
    assert y[0] == 0 and y.max() == 1.0 and np.all(y[1:] > 0)


def test_rank_loss_decreases_with_rounds(model_class, split):
    _, trials, _, _ = split
    trials = trials[:30]   # too few to hold any out: every round is trained
    pair_loss = PairwiseRankLoss(labels(trials), np.zeros(30, np.int64), np.random.default_rng(0), 10_000)
    losses = [pair_loss.loss(np.zeros(30))]
    for rounds in (1, 10, 50):
        model = model_class(model_class.Options(num_boost_round=rounds))
        model.fit(trials)
        losses.append(pair_loss.loss(model.predict([t.candidate for t in trials])))
    assert losses[0] == pytest.approx(np.log(2))
    assert all(a > b for a, b in itertools.pairwise(losses)), losses


@pytest.mark.parametrize("objective", ["rank", "regression"])
def test_predicted_order_follows_true_order(model_class, split, objective):
    _, trials, unseen, costs = split
    model = model_class(model_class.Options(objective=objective))
    model.fit(trials)
    assert _spearman(model.predict(unseen), costs) > 0.8


def test_failed_trials_count_as_slow(model_class, split):
    _, trials, _, _ = split
    fastest = sorted(trials, key=lambda t: t.cost)[:5]
    for t in fastest:
        t.costs, t.error = [], "run error"
    model = model_class(model_class.Options())
    model.fit(trials)
    scores = model.predict([t.candidate for t in trials])
    failed = np.array([t in fastest for t in trials])
    assert scores[failed].mean() < np.median(scores[~failed])


def test_same_seed_same_predictions(model_class, split):
    _, trials, unseen, _ = split
    a, b = (model_class(model_class.Options(objective="regression", ensemble=3, seed=3)) for _ in range(2))
    a.fit(trials), b.fit(trials)
    np.testing.assert_array_equal(a.predict(unseen), b.predict(unseen))


@pytest.mark.parametrize("bad", [{"acquisition": "ei"}, {"acquisition": "ucb", "ensemble": 4},
                                 {"acquisition": "ei", "objective": "regression"},
                                 {"acquisition": "ucb", "objective": "regression", "ensemble": 1}])
@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.name)
def test_ei_ucb_need_regression_and_an_ensemble(cls, bad):
    with pytest.raises(pydantic.ValidationError, match="objective='regression' and ensemble >= 2"):
        cls.Options(**bad)


def test_acquisition_error_in_a_recipe():
    with pytest.raises(tunekit.errors.RecipeError, match="model.*acquisition 'ucb' needs an uncertainty"):
        tunekit.Recipe.from_dict({"tasks": [{"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}}],
                                  "model": {"name": "xgboost", "acquisition": "ucb"}})


def test_ucb_and_ei_read_the_ensemble_spread(model_class, split):
    _, trials, unseen, _ = split
    scores = {}
    for acq in ("mean", "ucb", "ei"):
        model = model_class(model_class.Options(objective="regression", ensemble=4, acquisition=acq, kappa=2.0))
        model.fit(trials)
        scores[acq] = model.predict(unseen)
    spread = scores["ucb"] - scores["mean"]
    assert np.all(spread >= 0) and spread.max() > 0
    assert np.all(scores["ei"] >= 0)


def _history(shapes):
    out = []
    for shape in shapes:
        ts = _task_space(*shape)
        out += simulated_trials(ts, _valid(ts))
    return out


def test_transfer_from_other_workloads(model_class, split):
    _, trials, unseen, costs = split
    history = _history([(64, 16, 32), (16, 64, 64), (128, 32, 16)])
    model = model_class(model_class.Options())
    model.fit_history(history)
    assert _spearman(model.predict(unseen), costs) > 0.8    # the global model alone, before any local trial
    few = trials[:8]
    model.fit(few)                                           # f = f_global + f_local (Eq. 4)
    local_only = model_class(model_class.Options())
    local_only.fit(few)
    assert _spearman(model.predict(unseen), costs) > _spearman(local_only.predict(unseen), costs) + 0.1


def test_save_load_with_history(model_class, split, tmp_path):
    _, trials, unseen, _ = split
    model = model_class(model_class.Options(objective="regression", ensemble=2, acquisition="ucb"))
    model.fit_history(_history([(64, 16, 32)]))
    model.fit(trials)
    model.save(str(tmp_path / "m.json"))
    fresh = model_class(model_class.Options())
    fresh.load(str(tmp_path / "m.json"))
    assert fresh.options == model.options
    np.testing.assert_array_equal(fresh.predict(unseen), model.predict(unseen))


def test_load_rejects_another_models_file(tmp_path):
    XGBoostModel(XGBoostModel.Options()).save(str(tmp_path / "m.json"))
    with pytest.raises(tunekit.errors.TunekitError, match="not a saved 'lightgbm' cost model"):
        LightGBMModel(LightGBMModel.Options()).load(str(tmp_path / "m.json"))


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.name)
def test_available_names_the_extra(cls, monkeypatch):
    import builtins
    real = builtins.__import__
    lib = cls.name

    def fake(name, *a, **k):
        if name == lib:
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    assert cls.available() == f"{lib} is not installed (pip install tunekit[{lib}])"


def test_a_space_without_knobs_leaves_nothing_to_learn(model_class, null_target_plugin):
    from tunekit.ops.matmul import compute
    from tunekit.task import Task

    def fixed(cfg, device, M, N, K, dtype="float32"):
        *ins, C = compute(M, N, K, dtype)
        return tunekit.te.create_schedule(C), [*ins, C]
    template = tunekit.Template("matmul", "fixed", ("null",), fixed)
    ts = Task(tunekit.registry().op("matmul"), {"M": 4, "N": 4, "K": 4}, templates=[template]).bind(NullTarget())
    assert ts.size == 1
    model = model_class()
    model.fit(simulated_trials(ts, [0]))
    assert model.predict(ts.candidates([0])).tolist() == [0.0]
