"""Plugin discovery, with real third-party distributions installed from tests/thirdparty."""
from __future__ import annotations

import random
import types

import numpy as np
import pytest

import tunekit
from tunekit import registry
from tunekit.errors import PluginError, RecipeError
from tunekit.plugin import manager as _plugins
from tunekit.testing import simulated_trials
from tunekit.testing.contract import CostModelContract, ExplorerContract

pytestmark = pytest.mark.usefixtures("fake_plugins")


def _plugin_names() -> list[str]:
    return [name for name, _ in _plugins.plugins().pm.list_name_plugin()]


def test_fake_plugin_components_are_discovered():
    comps = registry().components
    for kind, name in (("cost model", "fake-linear"), ("explorer", "fake-sweep")):
        entry = comps[kind][name]
        assert entry.plugin == "tunekit-fake-plugin"
        assert entry.version == "tunekit-fake-plugin 0.3.0"
        assert entry.obj.__module__.startswith("tunekit_fake_plugin.")


def test_fake_plugin_is_usable_from_a_recipe(null_target_plugin):
    recipe = pytest.importorskip("tunekit.recipe", reason="tunekit.recipe is not written yet")
    d = {"target": {"name": "null"},
         "tasks": [{"op": "matmul", "args": {"M": 16, "N": 16, "K": 16}}],
         "model": {"name": "fake-linear", "l2": 0.01},
         "explorer": {"name": "fake-sweep", "stride": 7}}
    recipe.Recipe.from_dict(d, source="fake.toml")
    with pytest.raises(RecipeError, match="l3"):
        recipe.Recipe.from_dict({**d, "model": {"name": "fake-linear", "l3": 1}}, source="fake.toml")
    with pytest.raises(RecipeError, match="fake-linear"):
        recipe.Recipe.from_dict({**d, "model": {"name": "fake-linaer"}}, source="fake.toml")


def test_broken_plugin_is_recorded_and_the_others_load():
    broken = {b.name: b for b in _plugins.plugins().broken}
    b = broken["tunekit-broken-plugin"]
    assert (b.dist, b.version) == ("tunekit-broken-plugin", "0.1.0")
    assert "ImportError: needs libfoo" in b.error
    assert all(s in str(b) for s in ("tunekit-broken-plugin", "0.1.0", "needs libfoo"))
    assert "tunekit-fake-plugin" in _plugin_names()
    assert "fake-linear" in registry().components["cost model"]


class _StandInRandom(tunekit.CostModel):
    name = "random"


class _StandInPlugin:
    @tunekit.hookimpl
    def tunekit_cost_models(self):
        return [_StandInRandom]


class _Spelled(tunekit.CostModel):
    name = "spelled-right"


def test_a_misspelled_hook_marks_the_plugin_broken_and_the_rest_loads(register_tunekit_plugin):
    plugin = types.ModuleType("typo_plugin")
    plugin.tunekit_target = tunekit.hookimpl(lambda: [])   # misspelled: tunekit_targets
    plugin.tunekit_cost_models = tunekit.hookimpl(lambda: [_Spelled])
    plugin.tunekit_of_later_versions = tunekit.hookimpl(optionalhook=True)(lambda: [])   # optional: not reported
    register_tunekit_plugin(plugin, "typo-plugin", ("typo-dist", "1.0"))
    broken = [b for b in _plugins.plugins().broken if b.name == "typo-plugin"]
    assert [str(b) for b in broken] == ["plugin 'typo-plugin' (typo-dist 1.0) is broken: unknown hook "
                                        "'tunekit_target' (did you mean 'tunekit_targets'?)"]
    comps = registry().components["cost model"]
    assert comps["spelled-right"].plugin == "typo-plugin" and "fake-linear" in comps


def test_duplicate_component_name_names_both_plugins(dup_plugin, monkeypatch, register_tunekit_plugin):
    # who else provides the cost model "random"? (the built-in one, once it exists)
    monkeypatch.setenv("TUNEKIT_BLOCK_PLUGINS", "tunekit-dup-plugin")
    _plugins.reload()
    other = registry().components["cost model"].get("random")
    monkeypatch.delenv("TUNEKIT_BLOCK_PLUGINS")
    _plugins.reload()
    if other is None:
        register_tunekit_plugin(_StandInPlugin(), "stand-in-random")
    other_name = other.plugin if other is not None else "stand-in-random"
    with pytest.raises(PluginError) as e:
        registry()
    msg = str(e.value)
    assert "tunekit-dup-plugin" in msg and other_name in msg and "'random'" in msg


def test_disable_autoload_loads_only_the_core(monkeypatch, fresh_plugins):
    monkeypatch.setenv("TUNEKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    _plugins.reload()
    assert sorted(_plugin_names()) == ["tunekit.local-runner", "tunekit.ops"]
    assert _plugins.plugins().broken == []
    assert {k: list(t) for k, t in registry().components.items() if t} == {"runner": ["local"]}
    assert "matmul" in registry().ops


def test_blocked_plugins_are_skipped(monkeypatch, fresh_plugins):
    monkeypatch.setenv("TUNEKIT_BLOCK_PLUGINS", "tunekit-fake-plugin")
    _plugins.reload()
    assert "tunekit-fake-plugin" not in _plugin_names()
    assert "fake-linear" not in registry().components["cost model"]
    assert [b.name for b in _plugins.plugins().broken] == ["tunekit-broken-plugin"]

    monkeypatch.setenv("TUNEKIT_BLOCK_PLUGINS", " tunekit-fake-plugin , tunekit-broken-plugin ")
    _plugins.reload()
    assert _plugins.plugins().broken == []


def test_fake_linear_learns_from_null_target(null_target_plugin):
    task = tunekit.Task("matmul", {"M": 32, "N": 32, "K": 32}, template="null-matmul")
    task_space = task.bind(tunekit.testing.NullTarget())
    valid = [i for i in range(task_space.size) if task_space.space.valid(i)]
    rng = random.Random(0)
    train = rng.sample(valid, 40)
    test = [i for i in valid if i not in set(train)]
    model = registry().component("cost model", "fake-linear")()
    model.fit(simulated_trials(task_space, train))
    scores = model.predict(task_space.candidates(test))
    costs = np.array([t.cost for t in simulated_trials(task_space, test)])
    rank = lambda x: np.argsort(np.argsort(x))
    assert np.corrcoef(rank(scores), rank(-costs))[0, 1] > 0.5


class TestFakeLinearContract(CostModelContract):
    @property
    def model_class(self):
        return registry().component("cost model", "fake-linear")


class TestFakeSweepContract(ExplorerContract):
    @property
    def explorer_class(self):
        return registry().component("explorer", "fake-sweep")


def test_unknown_component_names_the_plugins_that_failed_to_import():
    with pytest.raises(RecipeError) as e:
        tunekit.Recipe.from_dict({"tasks": ["matmul-1024"], "model": "knn"}, source="r.toml")
    msg = str(e.value)
    assert "r.toml: model: unknown cost model 'knn'" in msg
    assert "plugin 'tunekit-broken-plugin' (tunekit-broken-plugin 0.1.0), which may provide it, failed to import: " \
           "ImportError: needs libfoo" in msg
