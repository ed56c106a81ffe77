"""bench/common.py: per_task reports a task tuned over several templates as one task, best_within
reads its first n trials, alternate rotates the order of the sides from round to round, and
geomean_worst summarises ratios."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from tunekit import Trial

# bench/ is not a package; on sys.path its spawned processes can import `common` too
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import common


def state(workload, name, template, trials, done=None):
    """A TaskState's fields that per_task reads."""
    return SimpleNamespace(key=SimpleNamespace(workload=workload), trials=trials, done=len(trials) if done is None
                           else done, fit_s=1.0, propose_s=0.5, measure_s=2.0,
                           ts=SimpleNamespace(task=SimpleNamespace(name=name, flops=2e9),
                                              template=SimpleNamespace(name=template)))


def test_per_task_merges_a_tasks_templates_in_the_order_measured():
    t = lambda cost, ts, error=None: Trial(0, {}, costs=[] if error else [cost], error=error, timestamp=ts)
    states = [state("k1", "matmul-1024", "tiled", [t(4.0, 1), t(0, 3, "build_error"), t(2.0, 5)]),
              state("k1", "matmul-1024", "packed", [t(3.0, 2), t(1.0, 4)], done=1),
              state("k2", "resnet18.C6", "direct", [t(0, 1, "run_error")])]
    mm, c6 = common.per_task(states)
    assert (mm.name, mm.template, mm.best.cost, len(mm.trials), mm.done) == ("matmul-1024", "packed", 1.0, 5, 4)
    assert mm.curve == [4.0, 3.0, 3.0, 1.0, 1.0]
    assert mm.gflops_curve(2) == [2.0, 2.0] and mm.best_gflops == 2.0
    assert (mm.tuner_s, mm.measure_s) == (3.0, 4.0)
    assert (c6.best, c6.template, c6.curve, c6.gflops_curve()) == (None, None, [float("inf")], [0.0])


def test_alternate_rotates_the_sides_and_reports_the_median_of_the_rounds(monkeypatch):
    calls = []

    def fake(fn, *args):
        calls.append(args[0])
        return {"a": [1.0, 9.0, 2.0], "b": [], "c": [5.0]}[args[0]] if len(calls) <= 3 else \
            {"a": [3.0], "b": [], "c": [7.0]}[args[0]]

    monkeypatch.setattr(common, "in_process", fake)
    out = common.alternate({k: (None, (k,)) for k in "abc"}, rounds=4)
    assert calls == list("abc" "bca" "cab" "abc")
    assert out["a"] == (3.0, 2.0, 3.0) and out["b"] is None and out["c"] == (7.0, 5.0, 7.0)


def test_best_within_reads_the_first_n_trials_of_the_merged_history():
    t = lambda cost, ts, error=None: Trial(0, {}, costs=[] if error else [cost], error=error, timestamp=ts)
    tiled = [t(4.0, 1), t(0, 3, "build_error"), t(1.0, 5)]
    packed = [t(3.0, 2), t(2.0, 4)]
    (mm,) = common.per_task([state("k1", "matmul-1024", "tiled", tiled), state("k1", "matmul-1024", "packed", packed)])
    assert mm.best_within(1) == (tiled[0], "tiled")
    assert mm.best_within(4) == (packed[1], "packed")      # the 5th trial (tiled's 1.0) is not within 4
    assert mm.best_within(5) == mm.best_within(99) == (tiled[2], "tiled")
    (bad,) = common.per_task([state("k2", "resnet18.C6", "direct", [t(0, 1, "run_error")])])
    assert bad.best_within(0) == bad.best_within(1) == (None, None)


def test_geomean_worst():
    mean, worst, low = common.geomean_worst({"C1": 2.0, "C2": 0.5, "C3": 1.0})
    assert abs(mean - 1.0) < 1e-12 and (worst, low) == ("C2", 0.5)
    assert common.geomean_worst({}) is None
