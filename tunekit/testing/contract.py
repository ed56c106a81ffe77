"""Contract suites: pytest test classes that check a plugin component against
the plugin contract. Subclass one in a test module and name the class under test:

    from tunekit.testing.contract import CostModelContract

    class TestMyModel(CostModelContract):
        model_class = MyModel

Every suite checks the common contract (a lower-kebab `name`; an `Options`
subclass of `tunekit.Options` that forbids unknown keys and whose fields all
have a default and a description; construction from default Options; an
`available()` of None or a reason) and then the component's behaviour, skipped
with the reason `available()` gives when the component cannot run here.
Functional checks run on `tunekit.testing.NullTarget` and its matmul template.
Override `make_options()` to test other settings; the other `make_*` and
`*_kernel` methods are hooks for components that need more than the defaults.
"""
from __future__ import annotations

import pickle
import random
import re
from typing import ClassVar

import numpy as np
import pydantic
import pytest

from tunekit import te
from tunekit.component import Options
from tunekit.explorers import Explorer
from tunekit.models import CostModel
from tunekit.ops.matmul import compute as matmul_compute
from tunekit.ops.matmul import matmul
from tunekit.targets import Artifact, DeviceInfo, RunSettings, Target
from tunekit.task import Task
from tunekit.testing.null_target import NULL_MATMUL, NULL_PLUGIN_NAME, NullTarget, null_plugin, simulated_trials
from tunekit.testing.registration import plugin_registered

__all__ = ["CostModelContract", "ExplorerContract", "TargetContract"]

_KEBAB = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*\Z")
#: 100 configs (90 valid) and 12 configs (10 valid) with the null matmul template (pinned:
#: NullTarget's family is "cpu", so real CPU templates serve it too)
SMALL_ARGS = {"M": 16, "N": 16, "K": 16}
TINY_ARGS = {"M": 1, "N": 4, "K": 4}


class _ComponentContract:
    """What every component must satisfy; the kinds' suites add behaviour checks."""

    _class_attr: ClassVar[str] = ""

    @property
    def component_class(self) -> type:
        cls = getattr(self, self._class_attr, None)
        if cls is None:
            pytest.fail(f"{type(self).__name__} must set the class attribute {self._class_attr!r}")
        return cls

    def make_options(self) -> Options:
        """The Options the functional checks use (default: all defaults)."""
        return self.component_class.Options()

    def make(self):
        """A component under test, built from `make_options()`."""
        return self.component_class(self.make_options())

    @pytest.fixture(autouse=True)
    def _null_plugin(self):
        from tunekit._version import __version__
        with plugin_registered(null_plugin, NULL_PLUGIN_NAME, ("tunekit", __version__)):
            yield

    @pytest.fixture
    def usable(self) -> None:
        """Skip the test with the component's reason when it cannot run here."""
        reason = self.component_class.available()
        if reason is not None:
            pytest.skip(f"{self.component_class.name}: {reason}")

    def test_name_is_lower_kebab(self):
        name = getattr(self.component_class, "name", None)
        assert isinstance(name, str) and _KEBAB.match(name), \
            f"name must be a lower-kebab str such as 'arm-cpu', got {name!r}"

    def test_options_is_a_tunekit_options(self):
        opts = self.component_class.Options
        assert isinstance(opts, type) and issubclass(opts, Options), \
            "Options must be a nested subclass of tunekit.Options"
        assert opts.model_config.get("extra") == "forbid", "Options must forbid unknown keys"

    def test_options_fields_have_defaults_and_descriptions(self):
        for fname, field in self.component_class.Options.model_fields.items():
            assert not field.is_required(), f"Options.{fname} needs a default"
            assert field.description and field.description.strip(), f"Options.{fname} needs a description"

    def test_options_reject_unknown_keys(self):
        with pytest.raises(pydantic.ValidationError):
            self.component_class.Options(no_such_option_xyz=1)

    def test_options_json_round_trip(self):
        # workers rebuild a component from (name, Options JSON)
        opts = self.make_options()
        name, blob = self.component_class(opts).spec()
        assert name == self.component_class.name
        assert self.component_class.Options.model_validate_json(blob) == opts

    def test_constructs_with_default_options(self):
        cls = self.component_class
        comp = cls(cls.Options())
        assert isinstance(comp.options, cls.Options)

    def test_available_is_none_or_a_reason(self):
        reason = self.component_class.available()
        assert reason is None or (isinstance(reason, str) and reason.strip()), \
            f"available() must return None or a non-empty reason, got {reason!r}"


def _check_scores(scores, n: int) -> None:
    assert isinstance(scores, np.ndarray), f"predict must return a numpy array, got {type(scores).__name__}"
    assert scores.shape == (n,), f"predict returned shape {scores.shape} for {n} candidates"
    assert np.issubdtype(scores.dtype, np.floating), f"predict returned dtype {scores.dtype}, not float"
    assert np.all(np.isfinite(scores)), "predict returned non-finite scores"


class TargetContract(_ComponentContract):
    """Checks a `tunekit.Target` subclass (set `target_class`)."""

    target_class: ClassVar[type[Target] | None] = None
    _class_attr = "target_class"

    def make_program(self, target: Target):
        """The program to build: an 8x8x8 matmul, untouched on a CPU, one thread
        per output element on a GPU."""
        A, B, C = matmul_compute(8, 8, 8)
        s = te.create_schedule(C)
        if target.family == "gpu":
            i, j = s[C].op.axis
            bx, tx = s[C].split(s[C].fuse(i, j), factor=32)
            s[C].bind(bx, "blockIdx.x")
            s[C].bind(tx, "threadIdx.x")
        return te.lower(s, [A, B, C], name="contract_matmul")

    def call_kernel(self, target: Target, artifact: Artifact, arrays: list[np.ndarray]) -> None:
        """Run the loaded kernel once on host arrays, outputs written back into them."""
        target.load(artifact)(*arrays)

    def run_kernel(self, target: Target, artifact: Artifact, arrays: list[np.ndarray],
                   settings: RunSettings) -> list[float]:
        """Time the kernel on host arrays with `target.run`."""
        return target.run(artifact, arrays, settings)

    def _or_skip(self, what: str, fn):
        # available() speaks of running: an unavailable target may still build (arm-cpu off ARM)
        reason = self.component_class.available()
        try:
            return fn()
        except Exception as e:
            if reason is None:
                raise
            pytest.skip(f"{self.component_class.name} is not available ({reason}) and {what} "
                        f"raised {type(e).__name__}: {e}")

    @pytest.fixture
    def target(self) -> Target:
        return self.make()

    @pytest.fixture
    def arrays(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        a, b = (rng.uniform(-1, 1, (8, 8)).astype("float32") for _ in range(2))
        return [a, b, np.full((8, 8), np.nan, "float32")]

    def test_family(self):
        assert self.component_class.family in ("cpu", "gpu")

    def test_device(self, target):
        info = self._or_skip("device()", target.device)
        assert isinstance(info, DeviceInfo)
        assert info.family == self.component_class.family
        assert isinstance(info.fingerprint(), str)

    def test_build_gives_a_picklable_artifact(self, target):
        art = self._or_skip("build()", lambda: target.build(self.make_program(target)))
        assert isinstance(art, Artifact)
        assert art.target == self.component_class.name
        back = pickle.loads(pickle.dumps(art))
        assert (back.target, back.entry, back.data, back.meta) == (art.target, art.entry, art.data, art.meta)

    def test_load_computes_matmul(self, target, usable, arrays):
        if not getattr(target, "produces_output", True):
            pytest.skip(f"{self.component_class.name} does not produce outputs with these options")
        self.call_kernel(target, target.build(self.make_program(target)), arrays)
        a, b, c = arrays
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)

    def test_run_returns_repeat_positive_costs(self, target, usable, arrays):
        art = target.build(self.make_program(target))
        costs = self.run_kernel(target, art, arrays, RunSettings(number=1, repeat=3, min_repeat_ms=0, warmup=0))
        assert len(costs) == 3, f"run must return settings.repeat costs, got {costs!r}"
        assert all(isinstance(c, float) and np.isfinite(c) and c > 0 for c in costs), costs
        if getattr(target, "produces_output", True):
            a, b, c = arrays
            np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def _task_space(args: dict):
    return Task(matmul, args, template=NULL_MATMUL.name, templates=[NULL_MATMUL]).bind(
        NullTarget(NullTarget.Options(noise=0.05)))


class CostModelContract(_ComponentContract):
    """Checks a `tunekit.CostModel` subclass (set `model_class`) on a small
    matmul task measured on NullTarget."""

    model_class: ClassVar[type[CostModel] | None] = None
    _class_attr = "model_class"

    @pytest.fixture
    def model(self, usable) -> CostModel:
        return self.make()

    @pytest.fixture
    def task_space(self):
        return _task_space(SMALL_ARGS)

    @pytest.fixture
    def trials(self, task_space) -> list:
        """33 trials: 30 with simulated costs, 3 failed with a build error."""
        idx = task_space.space.sample(random.Random(0), 33)
        return simulated_trials(task_space, idx, failed=idx[-3:])

    @pytest.fixture
    def unseen(self, task_space, trials) -> list:
        seen = {t.index for t in trials}
        idx = [i for i in range(task_space.size) if task_space.space.valid(i) and i not in seen]
        return task_space.candidates(idx[:20])

    def test_predict_before_fit(self, model, unseen):
        _check_scores(model.predict(unseen), len(unseen))

    def test_fit_then_predict(self, model, trials, unseen):
        model.fit(trials)
        _check_scores(model.predict(unseen), len(unseen))
        _check_scores(model.predict([t.candidate for t in trials]), len(trials))

    def test_refit_with_more_trials(self, model, trials, unseen):
        # the tuner refits on all trials so far after every batch
        model.fit(trials[:8])
        model.fit(trials)
        _check_scores(model.predict(unseen), len(unseen))

    def test_fit_on_failed_trials_only(self, model, task_space, unseen):
        idx = task_space.space.sample(random.Random(1), 4)
        model.fit(simulated_trials(task_space, idx, failed=idx))
        _check_scores(model.predict(unseen), len(unseen))

    def test_fit_history_then_fit(self, model, trials, unseen):
        other = _task_space({"M": 8, "N": 32, "K": 16})
        idx = other.space.sample(random.Random(2), 20)
        model.fit_history(simulated_trials(other, idx))
        model.fit(trials)
        _check_scores(model.predict(unseen), len(unseen))

    def test_save_load_round_trip(self, model, trials, unseen, tmp_path):
        model.fit(trials)
        path = str(tmp_path / "model")
        try:
            model.save(path)
        except NotImplementedError as e:
            pytest.skip(f"{self.component_class.name} cannot be saved: {e}")
        fresh = self.make()
        fresh.load(path)
        np.testing.assert_array_equal(fresh.predict(unseen), model.predict(unseen))


class _KnobModel(CostModel):
    """A fixed linear score of the knob features: a deterministic stand-in model."""

    name: ClassVar[str] = "contract-knob"

    def fit(self, trials) -> None:
        pass

    def predict(self, candidates) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        x = np.stack([c.features("knob") for c in candidates]).astype(np.float64)
        w = np.random.default_rng(0).normal(size=x.shape[1])
        return x @ w


class ExplorerContract(_ComponentContract):
    """Checks a `tunekit.Explorer` subclass (set `explorer_class`) on matmul
    tasks of NullTarget, the tiny one (12 configs, 10 valid) to exhaustion."""

    explorer_class: ClassVar[type[Explorer] | None] = None
    _class_attr = "explorer_class"

    def make_model(self) -> CostModel:
        """The cost model the explorer consults (default: a fixed linear score)."""
        return _KnobModel()

    def _propose(self, explorer, task_space, n: int) -> list[int]:
        out = explorer.propose(n)
        assert isinstance(out, list), f"propose must return a list, got {type(out).__name__}"
        assert len(out) <= n, f"propose({n}) returned {len(out)} indices"
        assert all(type(i) is int for i in out), f"propose must return Python ints, got {out!r}"
        assert len(set(out)) == len(out), f"propose returned duplicates: {out!r}"
        assert all(task_space.space.valid(i) for i in out), f"propose returned invalid configs: {out!r}"
        again = set(out) & task_space.measured
        assert not again, f"propose returned measured configs: {sorted(again)}"
        return out

    def _session(self, args: dict, rounds: int, n: int, seed: int = 0) -> list[list[int]]:
        """Propose `rounds` batches of `n`, measuring and observing each, as the tuner does."""
        task_space, model, explorer = _task_space(args), self.make_model(), self.make()
        explorer.start(task_space, model, random.Random(seed))
        batches, trials = [], []
        for _ in range(rounds):
            batch = self._propose(explorer, task_space, n)
            batches.append(batch)
            if not batch:
                break
            new = simulated_trials(task_space, batch)
            task_space.measured.update(batch)
            trials += new
            model.fit(trials)
            explorer.observe(new)
        return batches

    def test_propose_valid_unmeasured(self, usable):
        task_space = _task_space(SMALL_ARGS)
        # configs measured in an earlier run: some drawn at random, plus the first valid ones
        task_space.measured.update(task_space.space.sample(random.Random(1), 10))
        task_space.measured.update([i for i in range(20) if task_space.space.valid(i)][:5])
        explorer = self.make()
        explorer.start(task_space, self.make_model(), random.Random(0))
        assert self._propose(explorer, task_space, 8), "propose returned nothing on a fresh space"

    def test_propose_zero(self, usable):
        task_space = _task_space(SMALL_ARGS)
        explorer = self.make()
        explorer.start(task_space, self.make_model(), random.Random(0))
        assert explorer.propose(0) == []

    def test_observe_then_new_proposals(self, usable):
        batches = self._session(SMALL_ARGS, rounds=4, n=8)
        assert all(batches), f"a batch was empty before the space was exhausted: {batches}"
        flat = [i for b in batches for i in b]
        assert len(set(flat)) == len(flat), f"a config was proposed twice: {batches}"

    def test_exhausts_a_tiny_space(self, usable):
        task_space = _task_space(TINY_ARGS)
        valid = {i for i in range(task_space.size) if task_space.space.valid(i)}
        batches = self._session(TINY_ARGS, rounds=len(valid) + 2, n=3)
        seen = {i for b in batches for i in b}
        assert seen == valid, f"proposals {sorted(seen)} do not cover the valid configs {sorted(valid)}"
        assert batches[-1] == [], "propose must return [] once every valid config was measured"

    def test_same_seed_same_proposals(self, usable):
        assert self._session(SMALL_ARGS, rounds=3, n=6) == self._session(SMALL_ARGS, rounds=3, n=6)
