"""The tuning loop on NullTarget: budgets, resume, the multi-task scheduler, transfer."""
import numpy as np
import pytest

import tunekit
from tunekit.store.database import Database
from tunekit.testing import NULL_PLUGIN_NAME, null_plugin


@pytest.fixture
def null():
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    yield
    tunekit.unregister_plugin(NULL_PLUGIN_NAME)


def task(M, N=16, K=16):
    return {"op": "matmul", "args": {"M": M, "N": N, "K": K}, "template": "null-matmul"}


def test_loop_spends_the_budget_and_resumes_to_the_same_total(tmp_path, null):
    db = str(tmp_path / "t.db")
    kw = dict(target="null", trials=12, database=db, tuning={"batch_size": 4})
    st = tunekit.tune([task(16)], **kw)[0]
    assert st.done == 12 and st.best is not None and len(st.ts.measured) == 12
    again = tunekit.tune([task(16)], **kw)[0]           # the same run: already complete
    assert again.done == 12 and len(again.trials) == 12
    more = tunekit.tune([task(16)], seed=1, **kw)[0]    # another seed is another run
    assert more.done == 12 and len(more.trials) == 24 and len({t.index for t in more.trials}) == 24


def test_scheduler_gives_more_trials_to_the_task_that_costs_more(tmp_path, null):
    db = str(tmp_path / "t.db")
    small, big = tunekit.tune([task(4, 4, 4), task(64, 64, 64)], target="null", trials=24, database=db,
                              tuning={"batch_size": 4})
    assert small.done + big.done == 48
    assert big.done > small.done and big.done <= 48


def test_epsilon_greedy_and_exhaustion(tmp_path, null):
    st = tunekit.tune([task(1, 4, 4)], target="null", trials=40, database=str(tmp_path / "t.db"),
                      tuning={"batch_size": 4, "epsilon": 0.5})[0]
    assert st.finished == "space exhausted" and st.done == st.ts.space.size - 2   # 10 of 12 are valid


def test_a_batch_is_the_default_then_the_guided_picks_then_random_ones(tmp_path, null):
    import random

    from tunekit.tuning.tuner import propose_batch
    ts = tunekit.tune([task(16)], target="null", trials=1, database=str(tmp_path / "t.db"))[0].ts
    ts.measured = set()
    d = ts.space.default()
    a, b = [i for i in ts.space.sample(random.Random(1), 8) if i != d][:2]
    asked = []

    def guided(k):
        asked.append(k)
        return [i for i in (d, a, b) if i not in ts.measured][:k]   # the default again must not count twice
    cold = lambda idx: np.zeros(len(idx))   # a model that knows nothing yet: every score alike
    picks = propose_batch(ts, random.Random(0), 6, 0.0, d, guided, cold)
    assert picks[:3] == [d, a, b] and asked == [5] and len(set(picks)) == 6
    assert all(ts.space.valid(i) for i in picks[3:])
    ts.measured = {d, a}
    picks = propose_batch(ts, random.Random(0), 4, 0.0, d, guided, cold)
    assert picks[0] == b and not ts.measured & set(picks) and len(set(picks)) == 4
    asked.clear()
    picks = propose_batch(ts, random.Random(0), 4, 1.0, d, guided, cold)   # epsilon 1: every pick at random
    assert asked == [0] and len(set(picks)) == 4 and not ts.measured & set(picks)


def test_a_model_that_ranks_the_default_below_its_picks_defers_it_to_the_second_batch(tmp_path, null):
    import random

    from tunekit.tuning.tuner import propose_batch
    ts = tunekit.tune([task(16)], target="null", trials=1, database=str(tmp_path / "t.db"))[0].ts
    d = ts.space.default()
    a, b, c = [i for i in ts.space.sample(random.Random(1), 8) if i != d][:3]
    proposed = []

    def guided(k):   # as explorers do: never the same pick twice
        out = [i for i in (a, b, c) if i not in ts.measured and i not in proposed][:k]
        proposed.extend(out)
        return out
    knows = lambda idx: np.array([-1.0 if i == d else 1.0 for i in idx])   # e.g. a pretrained model
    ts.measured = set()
    assert propose_batch(ts, random.Random(0), 3, 0.0, d, guided, knows) == [c, a, b]   # c: the pick in its place
    proposed.clear()
    above_one = lambda idx: np.array([{d: 0.5, a: 1.0, b: 0.0}.get(i, 0.0) for i in idx])
    assert propose_batch(ts, random.Random(0), 3, 0.0, d, guided, above_one) == [d, a, b]
    proposed.clear()
    ts.measured = {a}   # not the task's first batch: the default waits no longer
    assert propose_batch(ts, random.Random(0), 2, 0.0, d, guided, knows) == [d, b]


class Knower(tunekit.CostModel):
    """Scores the untuned default below every other config, before any fit (a test model)."""
    name = "knower"

    def start(self, space):
        self.default = space.space.default()

    def fit(self, trials):
        pass

    def predict(self, candidates):
        return np.array([-1.0 if c.index == self.default else 0.0 for c in candidates])


class KnowerPlugin:
    @tunekit.hookimpl
    def tunekit_cost_models(self):
        return [Knower]


def test_the_tuner_asks_the_model_whether_the_default_goes_first(tmp_path, null):
    tunekit.register_plugin(KnowerPlugin(), "knower")
    try:
        st = tunekit.tune([task(16)], target="null", model="knower", explorer="annealing", trials=8,
                          database=str(tmp_path / "t.db"), tuning={"batch_size": 4, "epsilon": 0.0})[0]
    finally:
        tunekit.unregister_plugin("knower")
    first, second = [t.index for t in st.trials[:4]], [t.index for t in st.trials[4:]]
    assert st.default not in first and st.default in second


class Recorder(tunekit.CostModel):
    """Records what it was trained on (a test model)."""
    name = "recorder"
    history: list = []

    def fit(self, trials):
        pass

    def fit_history(self, records):
        Recorder.history = [(r.candidate.program.name, r.candidate.features("knob").shape) for r in records]

    def predict(self, candidates):
        return np.zeros(len(candidates))


class RecorderPlugin:
    @tunekit.hookimpl
    def tunekit_cost_models(self):
        return [Recorder]


def test_transfer_trains_the_global_model_on_other_workloads(tmp_path, null):
    db = str(tmp_path / "t.db")
    tunekit.tune([task(8), task(32)], target="null", trials=8, database=db, tuning={"batch_size": 4})
    tunekit.register_plugin(RecorderPlugin(), "recorder")
    try:
        tunekit.tune([task(16)], target="null", model="recorder", trials=4, database=db,
                     tuning={"transfer": True, "batch_size": 4})
    finally:
        tunekit.unregister_plugin("recorder")
    assert len(Recorder.history) == 16                      # both other workloads, not this one
    assert all(name.startswith("matmul_") for name, _ in Recorder.history)
    d = Database(db)
    assert len(d.best()) == 3
    d.close()


def test_report_plots_a_curve_per_search(tmp_path, null):
    from tunekit.cli.main import main
    db = str(tmp_path / "t.db")
    for seed in (0, 1):
        tunekit.tune([task(16)], target="null", trials=8, seed=seed, database=db)
    png = tmp_path / "r.png"
    assert main(["report", db, "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from tunekit.cli.report import report
    rows = report(db, None)
    assert len(rows) == 2 and all("random+random run" in r[0] and r[1] == "8" for r in rows)


def test_cli_tune_best_show(tmp_path, null, capsys):
    from tunekit.cli.main import main
    db = tmp_path / "t.db"
    recipe = tmp_path / "r.toml"
    recipe.write_text(f"""
[target]
name = "null"
[[tasks]]
op = "matmul"
args = {{ M = 16, N = 16, K = 16 }}
template = "null-matmul"
[tuning]
trials = 6
[database]
path = "{db}"
""")
    assert main(["tune", str(recipe)]) == 0
    assert "tuning summary" in capsys.readouterr().out
    assert main(["tune", str(recipe), "--trials", "8"]) == 0      # resumes: 2 more
    assert Database(str(db)).best()[0]["trials"] == 8
    assert main(["best", str(db)]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "null" in out
    assert main(["show", str(recipe), "--config", "3"]) == 0
    out = capsys.readouterr().out
    assert "config Config(3:" in out and "def matmul_3(" in out and "for " in out
    assert main(["show", str(recipe)]) == 0                        # the best recorded config
    assert main(["best", str(tmp_path / "none.db")]) == 1


def test_warm_up_gives_every_task_its_mean_even_with_large_batches(tmp_path, null):
    a, b = tunekit.tune([task(8), task(32)], target="null", trials=8, database=str(tmp_path / "t.db"),
                        tuning={"batch_size": 16})
    assert a.done == 8 and b.done == 8


def test_tuner_time_is_recorded_per_batch(tmp_path, null):
    st = tunekit.tune([task(16)], target="null", model="xgboost", explorer="annealing", trials=12,
                      database=str(tmp_path / "t.db"), tuning={"batch_size": 4})[0]
    assert [b[0] for b in st.batches] == [4, 4, 4]
    assert all(p >= 0 and m >= 0 and f >= 0 for _, p, m, f in st.batches)
    assert abs(sum(b[3] for b in st.batches) - st.fit_s) < 1e-9 and 0 < st.tuner_share < 1


def test_program_features_go_through_the_measurers_extractor(tmp_path, null, monkeypatch):
    """While tuning, a model on program features gets them from the measurer's
    extractor (the build workers, for targets they can rebuild), in batches."""
    pytest.importorskip("xgboost")
    from tunekit.measure.build_pool import BuildPool
    batches = []
    real = BuildPool.extract

    def spy(self, ts, indices, kind):
        batches.append((len(indices), kind))
        return real(self, ts, indices, kind)
    monkeypatch.setattr(BuildPool, "extract", spy)
    st = tunekit.tune([task(32, 32, 32)], target="null", trials=12, database=str(tmp_path / "t.db"),
                      model={"name": "xgboost", "features": "relation"},
                      explorer={"name": "annealing", "n_chains": 48, "steps": 2}, tuning={"batch_size": 4})[0]
    assert st.done == 12
    assert batches and all(kind == "relation" and n >= 16 for n, kind in batches)


def test_a_task_naming_no_template_is_tuned_on_each_and_built_from_the_fastest(tmp_path, null,
                                                                                register_tunekit_plugin):
    from tunekit.testing.null_target import null_matmul_template

    class Second:   # a second template for matmul on null (a third party's, say)
        @tunekit.hookimpl
        def tunekit_templates(self):
            return [tunekit.Template("matmul", "second", ("null",), null_matmul_template, priority=1)]
    register_tunekit_plugin(Second(), "second-template")
    db = str(tmp_path / "t.db")
    plain = {"op": "matmul", "args": {"M": 32, "N": 16, "K": 16}}
    states = tunekit.tune([plain], target="null", trials=20, database=db, tuning={"batch_size": 4})
    names = [st.ts.template.name for st in states]   # null is a "cpu" family target: the CPU templates too
    assert {"null-matmul", "second", "tiled", "packed", "auto"} == set(names) and len(names) == 5
    assert sum(st.done for st in states) == 20 and all(st.done == 4 for st in states)   # one task's budget
    fastest = min(states, key=lambda st: st.best.cost)
    with tunekit.apply_history_best(db):
        kernel = tunekit.build("matmul", plain["args"], target="null")
    assert kernel.tuned and (kernel.task.template_name, kernel.config.index) == (fastest.ts.template.name,
                                                                               fastest.best.index)
    named = tunekit.tune([{**plain, "template": "second"}], target="null", trials=4, database=db)
    assert [st.ts.template.name for st in named] == ["second"]   # a named template is the only one


def test_the_network_estimate_takes_each_tasks_fastest_template_times_its_weight():
    from types import SimpleNamespace as NS

    from tunekit.tuning.progress import TuneProgress, labels, network_estimate

    def state(key, template, weight, cost):
        return NS(key=NS(workload=key), best=NS(cost=cost) if cost else None,
                  ts=NS(task=NS(weight=weight, name=f"task {key}"), template=NS(name=template)))
    a1, a2, b = state("a", "direct", 4, 0.002), state("a", "nchwc", 4, 0.001), state("b", "rows", 1, 0.003)
    assert network_estimate([a1, a2, b]) == pytest.approx(4 * 0.001 + 0.003)
    assert network_estimate([a1, a2, state("b", "rows", 1, None)]) is None   # a task with no time yet
    assert network_estimate([state("c", "x", 1, 0.1)]) is None               # not a network's tasks
    assert labels([a1, a2, b]) == ["task a [direct]", "task a [nchwc]", "task b"]
    p = TuneProgress()
    p.states = [a1, a2, b]
    p._footer()
    assert p.bar.footer == "network: 7.000 ms estimated so far"


def test_the_untuned_default_config_is_measured_first(tmp_path, null):
    """A few trials of a large space rarely beat the template's default: measuring it first
    keeps a tuned task at least as fast as an untuned build (and a resumed run does not redo it)."""
    db = str(tmp_path / "t.db")
    st = tunekit.tune([task(256, 256, 256)], target="null", explorer="random", trials=2, database=db,
                      tuning={"batch_size": 2})[0]
    assert st.ts.space.size > 300 and st.ts.space.default() in {t.index for t in st.trials}
    more = tunekit.tune([task(256, 256, 256)], target="null", explorer="random", trials=2, seed=1, database=db,
                        tuning={"batch_size": 2})[0]
    assert len({t.index for t in more.trials}) == 4
