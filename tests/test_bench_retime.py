"""bench/retime.py: each search's picks are its best so far by its own timings, and every pick is
timed again once a round, in rotating order."""
from __future__ import annotations

import math
import os
import statistics
from contextlib import closing

import pytest
from checks import bench_script

import tunekit
from tunekit.measure.measurer import Measurer
from tunekit.store.database import Database

retime = bench_script("retime")

X86 = tunekit.registry().component("target", "x86")
pytestmark = pytest.mark.skipif(X86.available() is not None, reason=f"x86 cannot run here: {X86.available()}")
TASK = tunekit.Task("matmul", dict(M=32, N=32, K=32))
TRIALS = 4


@pytest.fixture(scope="module")
def layer(tmp_path_factory):
    """A bench/search.py layer folder: two methods (one with two seeds), every template of a small matmul."""
    root = tmp_path_factory.mktemp("layer")
    for label, seed in (("random", 0), ("random", 1), ("grid", 0)):
        tunekit.tune([TASK], target="x86", model="random", explorer=label, trials=TRIALS, seed=seed,
                     database=str(root / f"{label}-seed{seed}.db"), tuning={"batch_size": 2},
                     measure={"min_repeat_ms": 1, "repeat": 2})
    return root


def test_picks_are_each_search_best_so_far_by_its_own_timings(layer):
    runs, spaces = retime.searches(retime.databases(str(layer)), TRIALS)
    assert {label: len(seeds) for label, seeds in runs.items()} == {"grid": 1, "random": 2}
    assert len(spaces) > 1   # the task's trials span its templates, merged in the order measured
    for label, seeds in runs.items():
        for seed, picks in enumerate(seeds):
            with closing(Database(str(layer / f"{label}-seed{seed}.db"), readonly=True)) as db:
                (curve,) = db.curves().values()
            assert len(picks) == len(curve) == TRIALS
            assert [TASK.flops / p[2] / 1e9 for p in picks] == pytest.approx([g for _, g in curve])
            assert all(p[0] in spaces for p in picks)


def test_random_search_from_another_folder(layer, tmp_path):
    (tmp_path / "screen").mkdir()
    (tmp_path / "screen" / "random-seed0.db").write_bytes(b"")   # left out: --random names random's folder
    (tmp_path / "screen" / "shipped-seed0.db").write_bytes(b"")
    paths = retime.databases(str(tmp_path / "screen"), str(layer))
    assert sorted(map(os.path.basename, paths)) == ["random-seed0.db", "random-seed1.db", "shipped-seed0.db"]
    assert all(os.path.dirname(p) == str(layer) for p in paths if os.path.basename(p).startswith("random"))


def test_every_pick_is_timed_once_a_round_in_rotating_order(layer, monkeypatch):
    runs, spaces = retime.searches(retime.databases(str(layer)), TRIALS)
    picks = {p[:2] for seeds in runs.values() for ps in seeds for p in ps}
    order, measure = [], Measurer.measure

    def spy(self, ts, indices, *a, **k):
        order.append([(ts.template.name, i) for i in indices])
        return measure(self, ts, indices, *a, **k)
    monkeypatch.setattr(Measurer, "measure", spy)
    timed_rounds = retime.retime(picks, spaces, rounds=2)
    assert set(timed_rounds) == picks and all(len(c) == 2 and 0 < min(c) <= max(c) < math.inf
                                              for c in timed_rounds.values())
    again = {p: statistics.median(c) for p, c in timed_rounds.items()}
    timed = [p for call in order for p in call]
    assert sorted(timed) == sorted(list(picks) * 2)
    first, second = order[:len(order) // 2], order[len(order) // 2:]
    templates = [call[0][0] for call in first]
    assert [call[0][0] for call in second] == templates[1:] + templates[:1]
    for a, b in zip(first, second[-1:] + second[:-1]):
        assert b == a[1:] + a[:1]
    curves = retime.curves(runs, TASK.flops, again)
    assert curves["grid"][0][-1] == pytest.approx(TASK.flops / again[runs["grid"][0][-1][:2]] / 1e9)


def test_flattery_is_each_methods_own_median_over_its_retimed_median():
    fig = lambda **m: {"methods": {label: {"gflops": {"8": g}} for label, g in m.items()}}
    own, new = fig(random=[100, 120, 90], guided=[150, 130]), fig(random=[100, 100, 90], guided=[120, 100])
    assert retime.flattery(own, new, 8) == {"random": 1.0, "guided": pytest.approx(140 / 110)}
    assert retime.flattery(own, fig(random=[0, 0, 0], guided=[1, 1]), 8) == {"guided": 140}   # nothing ran


def test_each_round_compares_the_methods_medians_from_that_rounds_timings():
    # random search's picks after 2 trials: seed 0 config 1, seed 1 config 2; the screen's (one trial):
    # configs 3 and 4. Round 0 times configs 2 and 4 fast, round 1 times every config alike.
    runs = {"random": [[("t", 0, 1.0), ("t", 1, 1.0)], [("t", 2, 1.0), ("t", 2, 1.0)]],
            "guided": [[("t", 3, 1.0)], [("t", 4, 1.0)]]}
    costs = {("t", 0): [1.0, 1.0], ("t", 1): [1.0, 1.0], ("t", 2): [0.5, 1.0], ("t", 3): [1.0, 1.0],
             ("t", 4): [0.25, 1.0]}
    out = retime.paired(runs, 10**9, costs, marks=[1, 2], n=2)
    # GFLOPS = 1 / seconds here; round 0: guided's median (1 + 4) / 2 over random's (1 + 2) / 2
    assert out == {"guided": {"1": [pytest.approx(2.5 / 1.5), 1.0]}}   # the screen's one trial: its mark 1 only
