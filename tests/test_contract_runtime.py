"""The plugin contract enforced at run time: bad proposals, bad predictions, raising
hooks, refused components, failing templates; each named, none measured twice."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import Field

import tunekit
from tunekit import registry
from tunekit.cli import main as cli
from tunekit.errors import PluginError, RecipeError, TemplateError
from tunekit.plugin.manager import plugins
from tunekit.store.database import Database
from tunekit.tuning.guard import TunekitWarning

pytestmark = pytest.mark.usefixtures("null_target_plugin")
TASK = {"op": "matmul", "args": {"M": 16, "N": 16, "K": 16}, "template": "null-matmul"}


def tune(tmp_path, **kw):
    kw.setdefault("tuning", {"batch_size": 8, "epsilon": 0})
    return tunekit.tune([TASK], target="null", database=str(tmp_path / "t.db"), **kw)[0]


def plugin(**hooks):
    return SimpleNamespace(**{k: tunekit.hookimpl(v) for k, v in hooks.items()})


class Sloppy(tunekit.Explorer):
    """Proposes what it should not: measured, duplicate, invalid, float, out of range, too many."""
    name = "sloppy"

    def propose(self, n):
        ts, rng = self.space, self.rng
        invalid = next(i for i in range(ts.space.size) if not ts.space.valid(i))
        fresh = [i for i in ts.space.sample(rng, 3 * n) if i not in ts.measured]
        old = sorted(ts.measured)[:2]
        return [*old, fresh[0], fresh[0], float(fresh[1]), invalid, -1, ts.space.size, *fresh[2:2 + 2 * n]]


def test_bad_proposals_are_dropped_with_one_warning_and_the_budget_holds(tmp_path, register_tunekit_plugin):
    register_tunekit_plugin(plugin(tunekit_explorers=lambda: [Sloppy]), "acme", ("acme-tunekit", "1.2"))
    with pytest.warns(TunekitWarning) as seen:
        st = tune(tmp_path, explorer="sloppy", trials=24)
    msgs = [str(w.message) for w in seen if "sloppy" in str(w.message)]
    assert len(msgs) == 1 and "acme" in msgs[0] and "1.2" in msgs[0]
    for what in ("duplicate", "not an int", "invalid", "out of range", "beyond n"):   # of the first batch
        assert what in msgs[0]
    d = Database(str(tmp_path / "t.db"))
    rows = d.conn.execute("SELECT config_index FROM trials").fetchall()
    d.close()
    assert st.done == 24 and len(rows) == 24 and len({r[0] for r in rows}) == 24
    assert all(r[0].isdigit() for r in rows)                        # no "78.0"
    assert all(st.ts.space.valid(int(r[0])) for r in rows)


@pytest.mark.parametrize("result", [None, ()])
def test_propose_returning_none_or_a_tuple_does_not_stop_the_run(tmp_path, register_tunekit_plugin, result):
    cls = type("Lazy", (tunekit.Explorer,), {"name": "lazy", "propose": lambda self, n: result})
    register_tunekit_plugin(plugin(tunekit_explorers=lambda: [cls]), "acme")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TunekitWarning)
        st = tune(tmp_path, explorer="lazy", trials=8)
    assert st.done == 8   # the core's random picks fill what the explorer left


@pytest.mark.parametrize("scores, what", [(lambda n: np.zeros((n, 1)), "shape (16, 1)"),
                                          (lambda n: np.zeros(n - 1), "shape (15,)"),
                                          (lambda n: 0.5, "shape ()"),
                                          (lambda n: np.full(n, np.nan), "non-finite")])
def test_bad_predictions_are_a_plugin_error_naming_the_model(tmp_path, register_tunekit_plugin, scores, what):
    cls = type("Bad", (tunekit.CostModel,), {"name": "bad-model", "fit": lambda self, trials: None,
                                             "predict": lambda self, c: scores(len(c))})
    register_tunekit_plugin(plugin(tunekit_cost_models=lambda: [cls]), "acme", ("acme-tunekit", "1.2"))
    with pytest.raises(PluginError) as e:
        tune(tmp_path, model="bad-model", explorer={"name": "annealing", "n_chains": 16, "steps": 2}, trials=16)
    assert "cost model 'bad-model'" in str(e.value) and "acme-tunekit 1.2" in str(e.value) and what in str(e.value)


def test_a_raising_trial_hook_is_reported_once_and_disabled(tmp_path, register_tunekit_plugin):
    calls, seen = [], []

    def shaky(task, trial):
        calls.append(trial.index)
        raise RuntimeError("dashboard down")
    register_tunekit_plugin(plugin(tunekit_trial_measured=shaky), "shaky")
    register_tunekit_plugin(plugin(tunekit_trial_measured=lambda trial: seen.append(trial.index)), "logger")
    with pytest.warns(TunekitWarning, match="'shaky'.*dashboard down") as w:
        st = tune(tmp_path, trials=8)
    assert st.done == 8 and len(calls) == 1 and len(seen) == 8      # the other hook still runs
    assert sum("shaky" in str(x.message) for x in w) == 1


class Knn(tunekit.CostModel):
    name = "knn"


class NoDefault(tunekit.CostModel):
    name = "no-default"

    class Options(tunekit.Options):
        k: int = Field(description="neighbours")


class NoDescription(tunekit.CostModel):
    name = "no-description"

    class Options(tunekit.Options):
        k: int = 3


class CamelName(tunekit.CostModel):
    name = "CamelName"


@pytest.mark.parametrize("returned, name, why", [
    (Knn(), "knn", "instance, not a class"),
    (NoDefault, "no-default", "option 'k' has no default"),
    (NoDescription, "no-description", "option 'k' has no description"),
    (CamelName, "CamelName", "not a lower-kebab name"),
    (tunekit.Explorer, "explorer", "not a subclass of tunekit.CostModel")])
def test_bad_components_mark_their_plugin_broken_and_recipes_say_so(register_tunekit_plugin, returned, name, why):
    register_tunekit_plugin(plugin(tunekit_cost_models=lambda: [returned, Knn] if name != "knn" else [returned]),
                            "acme", ("acme-tunekit", "1.2"))
    reg = registry()
    assert name not in reg.components["cost model"]
    assert any(b.name == "acme" and why in b.error for b in plugins().broken)
    if name != "knn":
        assert "knn" in reg.components["cost model"]   # its good contributions still load
    if isinstance(getattr(returned, "name", None), str) and name != "explorer":
        with pytest.raises(RecipeError) as e:
            tunekit.Recipe.from_dict({"tasks": [TASK], "target": "null", "model": name}, source="r.toml")
        assert f"r.toml: model: cost model {name!r} is provided by plugin 'acme' (acme-tunekit 1.2) which is " \
               "broken" in str(e.value) and why in str(e.value)


def test_a_discovery_hook_returning_no_list_is_reported(register_tunekit_plugin):
    register_tunekit_plugin(plugin(tunekit_explorers=lambda: Sloppy), "acme")
    assert "sloppy" not in registry().components["explorer"]
    assert any(b.name == "acme" and "not a list" in b.error for b in plugins().broken)


def _raising_template(cfg, device, **args):
    raise ValueError("tile table missing")


def test_a_template_that_raises_fails_validate_and_tune_with_its_name(tmp_path, register_tunekit_plugin, capsys):
    register_tunekit_plugin(plugin(tunekit_templates=lambda: [
        tunekit.Template("matmul", "broken-tpl", ("null",), _raising_template)]), "acme")
    task = {**TASK, "template": "broken-tpl"}
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'target = "null"\ntasks = [{{op = "matmul", args = {{M = 16, N = 16, K = 16}}, '
                      f'template = "broken-tpl"}}]\n[database]\npath = "{tmp_path / "t.db"}"\n')
    assert cli.main(["validate", str(recipe)]) == 1
    err = capsys.readouterr().err
    assert "tasks[0]" in err and "template 'broken-tpl' (plugin 'acme')" in err and "tile table missing" in err
    assert "Traceback" not in err
    with pytest.raises(TemplateError, match="broken-tpl"):
        tunekit.tune([task], target="null", trials=4, database=str(tmp_path / "t.db"))
