"""bench/auto.py: the per-task table and the goal line read the figures a run gathered."""
from __future__ import annotations

from checks import bench_script

auto = bench_script("auto")


def row(task, ratio=None, auto_ok=True, hand=True, **more):
    """A task's figures as bench_task gathers them (GFLOPS re-timed: median, min, max)."""
    r = {"task": task, "auto trials": 64, "auto@16": 10.0, "auto@64": 20.0, "baseline": "pytorch",
         "pytorch re-timed": {"median": 30.0, "min": 29.0, "max": 31.0}, **more}
    if auto_ok:
        r["auto re-timed"] = {"median": 20.0, "min": 19.0, "max": 21.0}
    if hand:
        r.update({"hand trials": 64, "hand@16": 15.0, "hand@64": 25.0, "hand template": "direct",
                  "hand re-timed": {"median": 25.0, "min": 24.0, "max": 26.0}})
    if ratio is not None:
        r["auto/hand"] = ratio
    return r


def test_goal_is_met_only_by_the_mean_and_the_lowest_task_together():
    assert auto.summary([row("C1", 1.0), row("C2", 0.8)]).endswith(
        "geometric mean auto/hand 0.89x over 2 tasks, lowest C2 0.80x: NOT met")   # the mean is short
    assert auto.summary([row("C1", 1.2), row("C2", 0.8)]).endswith("lowest C2 0.80x: met")
    assert auto.summary([row("C1", 2.0), row("C2", 0.7)]).endswith("lowest C2 0.70x: NOT met")   # one layer too low
    # softmax has no hand template: not in the mean; a task whose auto ran nothing fails the goal
    assert auto.summary([row("C1", 1.0), row("softmax", hand=False)]).endswith("over 1 tasks, lowest C1 1.00x: met")
    assert auto.summary([row("C1", 1.0), row("C2", auto_ok=False)]).endswith(
        "lowest C1 1.00x, and auto ran no config of C2: NOT met")
    assert auto.summary([row("C2", auto_ok=False)]).endswith("NOT met (auto ran no config of C2)")
    assert auto.summary([row("softmax", hand=False)]).endswith("no task has both an auto and a hand figure")


def test_table_has_a_line_per_task_with_its_figures_and_the_missing_ones_as_dashes():
    rows = [row("C2", 0.8, **{"auto/baseline": 0.67}),
            row("softmax", hand=False, **{"auto/baseline": 0.67}),
            row("C6", auto_ok=False, **{"auto error": "XGBoostError: boom"})]
    lines = auto.table(rows, [16, 64], rounds=3).splitlines()
    assert "median of 3 rotating rounds" in lines[0]
    assert lines[1].split() == ["task", "trials", "auto@16", "auto@64", "hand@16", "hand@64", "hand", "best", "auto",
                                "hand", "baseline", "auto/hand", "auto/base"]
    assert lines[2].split() == ["C2", "64/64", "10.0", "20.0", "15.0", "25.0", "direct", "20.0", "(19.0-21.0)",
                                "25.0", "(24.0-26.0)", "pytorch", "30.0", "(29.0-31.0)", "0.80", "0.67"]
    assert lines[3].split()[:7] == ["softmax", "64/-", "10.0", "20.0", "-", "-", "-"]
    assert lines[4].split()[-5:] == ["pytorch", "30.0", "(29.0-31.0)", "-", "-"] and "C6" in lines[4]
    assert lines[5] == "  C6: auto tuning failed: XGBoostError: boom"
    assert lines[6] == auto.summary(rows) and len(lines) == 7
