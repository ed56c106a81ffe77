"""The annealing, genetic and grid explorers: the contract, Eq. 3 selection, and
annealing guided by xgboost against random search on NullTarget."""
from __future__ import annotations

import random

import pytest
from tunekit_plugins.explorers.annealing import AnnealingExplorer, select_diverse
from tunekit_plugins.explorers.genetic import GeneticExplorer
from tunekit_plugins.explorers.grid import GridExplorer
from tunekit_plugins.explorers.random import RandomExplorer
from tunekit_plugins.models.random import RandomModel
from tunekit_plugins.models.xgboost import XGBoostModel

import tunekit
from tunekit import te
from tunekit.ops.matmul import compute as matmul_compute
from tunekit.testing import NullTarget, simulated_trials
from tunekit.testing.contract import ExplorerContract


class TestAnnealing(ExplorerContract):
    explorer_class = AnnealingExplorer


class TestAnnealingTopN(ExplorerContract):
    explorer_class = AnnealingExplorer

    def make_options(self):
        return AnnealingExplorer.Options(diversity=0.0, n_chains=4, steps=3, restarts=0)


class TestGenetic(ExplorerContract):
    explorer_class = GeneticExplorer


class TestPlainGenetic(ExplorerContract):
    explorer_class = GeneticExplorer

    def make_options(self):
        return GeneticExplorer.Options(oversample=1, population=8, mutation_prob=0.5)


class TestGrid(ExplorerContract):
    explorer_class = GridExplorer


def _matmul_3level(cfg, device, M, N, K, dtype="float32"):
    """A NullTarget matmul template with a moderately large space (3-level tiles of i
    and j, 2-level k, loop order, vectorize / parallel / unroll switches)."""
    A, B, C = matmul_compute(M, N, K, dtype)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    cfg.define_split("tile_i", i, num_outputs=3)
    cfg.define_split("tile_j", j, num_outputs=3)
    cfg.define_split("tile_k", k, num_outputs=2)
    cfg.define_knob("order", [0, 1, 2, 3])
    for knob in ("vec", "par", "unroll"):
        cfg.define_knob(knob, [False, True])
    cfg.constrain(lambda e: e["tile_j"][-1] > 1 or not e["vec"])
    io, im, ii = cfg["tile_i"].apply(s, C, i)
    jo, jm, ji = cfg["tile_j"].apply(s, C, j)
    ko, ki = cfg["tile_k"].apply(s, C, k)
    orders = [(io, jo, ko, im, jm, ki, ii, ji), (io, jo, im, jm, ko, ki, ii, ji),
              (io, jo, ko, ki, im, jm, ii, ji), (io, jo, im, ko, jm, ki, ii, ji)]
    s[C].reorder(*orders[cfg["order"]])
    if cfg["vec"]:
        s[C].vectorize(ji)
    if cfg["par"]:
        s[C].parallel(io)
    if cfg["unroll"]:
        s[C].unroll(ii)
    return s, [A, B, C]


class _Templates:
    @tunekit.hookimpl
    def tunekit_templates(self):
        return [tunekit.Template(op="matmul", name="test-3level", targets=("null",), fn=_matmul_3level)]


@pytest.fixture
def big_space(null_target_plugin, register_tunekit_plugin):
    register_tunekit_plugin(_Templates(), "test-3level")
    return lambda: tunekit.Task("matmul", {"M": 256, "N": 256, "K": 256}, template="test-3level").bind(NullTarget())


def _tune(task_space, model, explorer, seed: int, trials: int, batch: int = 16) -> float:
    """Best simulated cost after `trials` trials, proposing and refitting as the tuner does."""
    explorer.start(task_space, model, random.Random(seed))
    measured = []
    while len(measured) < trials:
        new = simulated_trials(task_space, explorer.propose(batch))
        task_space.measured.update(t.index for t in new)
        measured += new
        model.fit(measured)
        explorer.observe(new)
    return min(t.cost for t in measured)


def test_annealing_with_xgboost_beats_random_search(big_space):
    if XGBoostModel.available():
        pytest.skip(XGBoostModel.available())
    assert big_space().size > 500_000
    seeds, trials = (0, 1, 2), 64
    guided = [_tune(big_space(), XGBoostModel(), AnnealingExplorer(), s, trials) for s in seeds]
    blind = [_tune(big_space(), RandomModel(), RandomExplorer(), s, trials) for s in seeds]
    assert sum(guided) < sum(blind), (guided, blind)
    assert _tune(big_space(), XGBoostModel(), AnnealingExplorer(), seeds[0], trials) == guided[0]   # deterministic


def test_select_diverse_is_top_n_without_alpha(big_space):
    space = big_space().space
    ranked = space.sample(random.Random(0), 40)
    assert select_diverse(space, ranked, 8, 0.0) == ranked[:8]


def test_select_diverse_covers_more_knob_values(big_space):
    space = big_space().space
    base = space.sample(random.Random(0), 1)[0]
    # the top of the pool: near copies of one config; further down: varied configs
    ranked = list(dict.fromkeys([base] + [space.neighbor(base, random.Random(i)) for i in range(10)]))
    ranked += [i for i in space.sample(random.Random(1), 30) if i not in ranked]

    def coverage(picks):
        return sum(len({space.choices(i)[k] for i in picks}) for k in range(len(space.knobs)))
    plain, diverse = select_diverse(space, ranked, 6, 0.0), select_diverse(space, ranked, 6, 0.5)
    assert diverse[0] == ranked[0]          # the best candidate always goes first
    assert coverage(diverse) > coverage(plain)
    assert select_diverse(space, ranked, 6, 0.001) == plain   # tiny alpha: scores dominate


def test_grid_goes_in_index_order(null_target_plugin):
    ts = tunekit.Task("matmul", {"M": 16, "N": 16, "K": 16}, template="null-matmul").bind(NullTarget())
    valid = [i for i in range(ts.size) if ts.space.valid(i)]
    ts.measured.update(valid[1:3])
    grid = GridExplorer()
    grid.start(ts, RandomModel(), random.Random(0))
    assert grid.propose(3) == [valid[0]] + valid[3:5]
    assert grid.propose(2) == valid[5:7]


def test_annealing_restarts_chains_from_the_best_measured(big_space):
    ts = big_space()
    explorer = AnnealingExplorer(AnnealingExplorer.Options(n_chains=8, steps=0, restarts=2))
    explorer.start(ts, RandomModel(), random.Random(0))
    batch = explorer.propose(4)
    trials = simulated_trials(ts, batch)
    ts.measured.update(batch)
    explorer.observe(trials)
    explorer.propose(4)
    best = sorted(trials, key=lambda t: t.cost)[:2]
    assert {t.index for t in best} <= set(explorer._points)
