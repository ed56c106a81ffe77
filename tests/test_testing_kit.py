"""The public test kit: NullTarget, the null plugin, fixtures and the contract suites themselves."""
from __future__ import annotations

import random
from typing import ClassVar

import numpy as np
import pytest
from pydantic import Field

import tunekit
from tunekit import registry, te
from tunekit.errors import BuildError
from tunekit.ops.matmul import compute as matmul
from tunekit.targets import RunSettings
from tunekit.testing import NullTarget, null_plugin, plugin_registered
from tunekit.testing.contract import ExplorerContract, TargetContract


def naive(n: int = 64):
    A, B, C = matmul(n, n, n)
    return te.lower(te.create_schedule(C), [A, B, C], name="naive")


def tuned(n: int = 64, ti: int = 8, tj: int = 16, vec: bool = True, par: bool = True):
    A, B, C = matmul(n, n, n)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, ti)
    jo, ji = s[C].split(j, tj)
    s[C].reorder(io, jo, k, ii, ji)
    if vec:
        s[C].vectorize(ji)
    if par:
        s[C].parallel(io)
    return te.lower(s, [A, B, C], name=f"tuned_{ti}_{tj}_{vec}_{par}")


def opts(**kw) -> NullTarget:
    return NullTarget(NullTarget.Options(**kw))


def test_null_target_is_deterministic():
    p = tuned()
    assert opts().simulated_cost(p) == opts().simulated_cost(tuned())
    settings = RunSettings(repeat=4)
    plain = opts().run(opts().build(p), [], settings)
    assert plain == [opts().simulated_cost(p)] * 4
    noisy = opts(noise=0.1).run(opts().build(p), [], settings)
    assert noisy == opts(noise=0.1).run(opts().build(p), [], settings)
    assert len(set(noisy)) == 4
    assert all(abs(c / plain[0] - 1) <= 0.1 for c in noisy)


def test_better_schedule_costs_less():
    t = opts()
    base = t.simulated_cost(naive())
    assert t.simulated_cost(tuned()) < base / 4
    # each optimization helps on its own
    assert t.simulated_cost(tuned(vec=False, par=False)) > t.simulated_cost(tuned(par=False))
    assert t.simulated_cost(tuned(vec=False, par=False)) > t.simulated_cost(tuned(vec=False))


def test_simulated_cost_follows_the_device():
    assert opts(cores=8).simulated_cost(tuned()) < opts(cores=2).simulated_cost(tuned())
    assert opts(vector_bits=512).simulated_cost(tuned()) < opts(vector_bits=128).simulated_cost(tuned())
    assert opts(cores=8).simulated_cost(naive()) == opts(cores=2).simulated_cost(naive())


def test_device_and_artifact():
    t = opts(vector_bits=512, cores=4)
    d = t.device()
    assert (d.name, d.family, d.vector_bits, d.cores) == ("null", "cpu", 512, 4)
    art = t.build(naive(8))
    assert (art.target, art.entry) == ("null", "naive")
    assert art.meta["simulated_cost"] == t.simulated_cost(naive(8)) > 0


def test_execute_writes_real_outputs():
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (8, 8)).astype("float32") for _ in range(2))
    c = np.full((8, 8), np.nan, "float32")
    t = opts()
    assert not t.produces_output
    t.run(t.build(tuned(8, 2, 4)), [a, b, c], RunSettings(repeat=2))
    assert np.isnan(c).all()
    t = opts(execute=True)
    assert t.produces_output
    assert len(t.run(t.build(tuned(8, 2, 4)), [a, b, c], RunSettings(repeat=2))) == 2
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_failure_hooks():
    t = opts(fail_build=["naive"], fail_run=["tuned_8_16_True_True"])
    with pytest.raises(BuildError, match="naive"):
        t.build(naive())
    with pytest.raises(RuntimeError, match="tuned_8_16_True_True"):
        t.run(t.build(tuned()), [], RunSettings())


def test_null_template_is_correct_for_every_config(null_target_plugin):
    t = opts(execute=True)
    ts = tunekit.Task("matmul", {"M": 3, "N": 4, "K": 5}, template="null-matmul").bind(t)
    assert ts.template.name == "null-matmul"
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (3, 5)).astype("float32"), rng.uniform(-1, 1, (5, 4)).astype("float32")
    for i in range(ts.size):
        if ts.space.valid(i):
            c = np.full((3, 4), np.nan, "float32")
            t.run(t.build(ts.program(i)), [a, b, c], RunSettings(repeat=1))
            np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5, err_msg=str(ts.space.get(i)))


def test_null_target_plugin_fixture(null_target_plugin):
    entry = registry().components["target"]["null"]
    assert entry.obj is NullTarget and entry.plugin == "tunekit.testing"


def test_plugin_registered_nests_and_undoes():
    assert "null" not in registry().components["target"]
    with plugin_registered(null_plugin, "tunekit.testing"):
        with plugin_registered(null_plugin, "tunekit.testing"):
            assert "null" in registry().components["target"]
        assert "null" in registry().components["target"]
    assert "null" not in registry().components["target"]


class _Plugin:
    class Explorer(tunekit.Explorer):
        name = "kit-test-explorer"

    @tunekit.hookimpl
    def tunekit_explorers(self):
        return [self.Explorer]


def test_register_tunekit_plugin_fixture(register_tunekit_plugin):
    register_tunekit_plugin(_Plugin(), "kit-test", ("kit-test-dist", "1.2"))
    entry = registry().components["explorer"]["kit-test-explorer"]
    assert (entry.plugin, entry.version) == ("kit-test", "kit-test-dist 1.2")


def test_fixture_unregistered_the_plugin():
    # runs after test_register_tunekit_plugin_fixture (file order)
    assert "kit-test-explorer" not in registry().components["explorer"]


class TestNullTargetContract(TargetContract):
    target_class = NullTarget

    def make_options(self):
        return NullTarget.Options(execute=True)


class TestNullTargetContractDefaults(TargetContract):
    target_class = NullTarget


# ---- the suites catch broken components

class _BadName(NullTarget):
    name: ClassVar[str] = "Null_Target"


class _UndocumentedOption(NullTarget):
    class Options(NullTarget.Options):
        extra_knob: int = 3


class _LaxOptions(NullTarget):
    class Options(NullTarget.Options, extra="allow"):
        pass


class _NoDefault(NullTarget):
    class Options(NullTarget.Options):
        needed: int = Field(description="has no default")


@pytest.mark.parametrize("cls, test", [
    (_BadName, "test_name_is_lower_kebab"),
    (_UndocumentedOption, "test_options_fields_have_defaults_and_descriptions"),
    (_NoDefault, "test_options_fields_have_defaults_and_descriptions"),
    (_LaxOptions, "test_options_is_a_tunekit_options"),
])
def test_contract_rejects(cls, test):
    suite = type("Suite", (TargetContract,), {"target_class": cls})()
    with pytest.raises(AssertionError):
        getattr(suite, test)()


class _RepeatingExplorer(tunekit.Explorer):
    """Ignores what was measured: the contract must catch it."""
    name = "repeating"

    def propose(self, n):
        return [i for i in range(self.space.size) if self.space.space.valid(i)][:n]


def test_explorer_contract_catches_remeasuring(null_target_plugin):
    suite = type("Suite", (ExplorerContract,), {"explorer_class": _RepeatingExplorer})()
    with pytest.raises(AssertionError, match="measured"):
        suite.test_observe_then_new_proposals(None)
    with pytest.raises(AssertionError, match="measured"):
        suite.test_propose_valid_unmeasured(None)


def test_tiny_space_has_ten_valid_configs(null_target_plugin):
    ts = tunekit.Task("matmul", {"M": 1, "N": 4, "K": 4}, template="null-matmul").bind(NullTarget())
    assert ts.size == 12 and sum(ts.space.valid(i) for i in range(12)) == 10
    assert len(ts.space.sample(random.Random(0), 20)) == 10
