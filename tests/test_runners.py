"""Runners as a plugin kind: the tuner talks only to the Runner interface."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from pydantic import Field

import tunekit
from tunekit.errors import PluginError, TunekitError
from tunekit.measure.timing import execute
from tunekit.records import DEVICE_LOST, RUN_ERROR, Outcome
from tunekit.store.database import Database

pytestmark = pytest.mark.usefixtures("null_target_plugin")
TASK = {"op": "matmul", "args": {"M": 16, "N": 16, "K": 16}, "template": "null-matmul"}


def done(value=None, error=None) -> Future:
    f = Future()
    f.set_exception(error) if error else f.set_result(value)
    return f


class Farm(tunekit.Runner):
    """Times in this process, in reverse order (as devices finishing at random would)."""
    name = "farm"
    policies: list = []

    class Options(tunekit.Options):
        mode: str = Field("ok", description="ok | lost | short | raise")

    def submit(self, task, artifacts, policy):
        Farm.policies.append(policy)
        mode = self.options.mode
        if mode == "lost":
            return [done(Outcome(error=DEVICE_LOST, message="board 3 unplugged")) for _ in artifacts]
        if mode == "short":
            return [done(Outcome(costs=[1.0])) for _ in artifacts[1:]]
        if mode == "raise":
            return [done(error=ConnectionError("scheduler gone")) for _ in artifacts]
        outs = [execute(self.target, task, a, policy) for a in reversed(artifacts)]
        return [done(o) for o in reversed(outs)]


@pytest.fixture
def farm(register_tunekit_plugin):
    Farm.policies = []
    register_tunekit_plugin(SimpleNamespace(tunekit_runners=tunekit.hookimpl(lambda: [Farm])), "farm-plugin")


def tune(tmp_path, mode="ok", trials=16):
    return tunekit.tune([TASK], target="null", trials=trials, database=str(tmp_path / "t.db"),
                        tuning={"batch_size": 8}, measure={"runner": {"name": "farm", "mode": mode}})[0]


def test_the_recipe_picks_the_runner_and_the_policy_comes_with_each_batch(tmp_path, farm):
    st = tune(tmp_path)
    assert st.done == 16 and st.best is not None and all(t.ok for t in st.trials)
    assert len(Farm.policies) == 2              # two batches; a quiet machine times no config again (#24)
    best_of_first = min(t.cost for t in st.trials[:8])
    assert Farm.policies[0].cutoff_s is None and Farm.policies[1].cutoff_s == pytest.approx(10 * best_of_first)


def test_a_lost_device_stops_the_run_and_records_nothing_against_the_configs(tmp_path, farm):
    with pytest.raises(TunekitError, match="device lost.*board 3 unplugged.*rerun to resume"):
        tune(tmp_path, "lost")
    d = Database(str(tmp_path / "t.db"))
    assert d.conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0
    d.close()


def test_a_runner_breaking_the_contract_is_named(tmp_path, farm):
    with pytest.raises(PluginError, match="runner 'farm' \\(plugin 'farm-plugin'\\) returned 7 futures for 8"):
        tune(tmp_path, "short")
    (tmp_path / "b").mkdir()
    st = tune(tmp_path / "b", "raise", trials=8)
    assert st.done == 8 and all(t.error == RUN_ERROR and "runner 'farm' failed: ConnectionError: scheduler gone"
                                in t.message for t in st.trials)


def test_local_is_the_default_runner(tmp_path):
    st = tunekit.tune([TASK], target="null", trials=8, database=str(tmp_path / "t.db"), tuning={"batch_size": 8})[0]
    r = tunekit.Recipe.from_dict({"tasks": [TASK], "target": "null"})
    assert r.measure.runner.name == "local" and st.done == 8 and st.best is not None


def test_the_local_runner_reports_a_device_lost_with_the_kernel_that_crashed(monkeypatch):
    from tunekit.measure.local import LocalRunner
    from tunekit.records import RUN_ERROR
    from tunekit.testing import NullTarget

    class Crashing:
        crashed = True

        def run(self, *args):
            return Outcome(error=RUN_ERROR, message="the kernel crashed the runner (exit code -11)")
    runner = LocalRunner()
    runner.target, runner._process = NullTarget(), Crashing()
    assert runner._isolated(None, None, None, None).error == RUN_ERROR      # the device is still there
    monkeypatch.setattr(NullTarget, "available", classmethod(lambda cls: "GPU 0 fell off the bus"))
    out = runner._isolated(None, None, None, None)
    assert out.error == DEVICE_LOST and "fell off the bus" in out.message and "exit code -11" in out.message
