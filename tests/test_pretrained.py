"""Cost models pretrained across tasks (step 20): `tunekit dataset train` on a toy dataset ranks
the configs of toy tasks it never saw better than chance; `pretrained = "FILE"` loads that model
as the starting (global) model of a task, which predicts before any trial and is fine-tuned on
the task's trials (Eq. 4); `pretrained = true` without a file for the device falls back with one
line; bad files are clear errors; the shipped files load and score real programs."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

import tunekit
from tunekit.errors import TunekitError
from tunekit.testing import NULL_PLUGIN_NAME, NullTarget, null_plugin, simulated_trials
from tunekit.tuning.dataset import KIND, Dataset

pytest.importorskip("xgboost")
from tunekit_plugins.models.gbt_common import _pretrained, pretrained_dir
from tunekit_plugins.models.xgboost import XGBoostModel

TRAIN = [(8, 64, 16), (16, 16, 16), (32, 32, 8), (64, 16, 32), (16, 64, 64), (32, 8, 32)]
HELD_OUT = [(24, 48, 16), (48, 24, 32)]


@pytest.fixture(scope="module")
def null():
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    yield
    tunekit.unregister_plugin(NULL_PLUGIN_NAME)


def _space(M: int, N: int, K: int):
    return tunekit.Task("matmul", {"M": M, "N": N, "K": K}, template="null-matmul").bind(NullTarget())


def _trials(shape):
    ts = _space(*shape)
    return simulated_trials(ts, [i for i in range(ts.space.size) if ts.space.valid(i)])


def _dataset(shapes, path) -> str:
    """Every config of each toy task with its simulated seconds, as `tunekit dataset export` writes them."""
    rows, seconds, task = [], [], []
    for k, shape in enumerate(shapes):
        for t in _trials(shape):
            rows.append(t.candidate.features(KIND))
            seconds.append(t.cost)
            task.append(k)
    tasks = [{"workload": str(s), "op": "matmul", "args": dict(zip("MNK", s)), "template": "null-matmul",
              "target": "null", "flops": 2 * s[0] * s[1] * s[2]} for s in shapes]
    Dataset(np.asarray(rows, np.float32), np.asarray(seconds), np.asarray(task, np.int32),
            np.zeros(len(task), np.int32), tasks, ["toy"]).save(path)
    return path


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, null) -> str:
    """A model file trained by `tunekit dataset train` on the toy tasks of TRAIN."""
    from tunekit.cli.main import main
    d = tmp_path_factory.mktemp("pretrained")
    data, out = _dataset(TRAIN, str(d / "toy.npz")), str(d / "toy.json")
    assert main(["dataset", "train", data, "-o", out, "--model", '{"name": "xgboost", "max_depth": 4}']) == 0
    return out


def _model(**options) -> XGBoostModel:
    return XGBoostModel(XGBoostModel.Options(features="relation", **options))


def test_a_model_trained_on_toy_tasks_ranks_held_out_toy_tasks_better_than_chance(pretrained, null):
    for shape in HELD_OUT:
        trials = _trials(shape)
        m = _model(pretrained=pretrained)
        m.start(_space(*shape))
        rho = spearmanr(m.predict([t.candidate for t in trials]), [-t.cost for t in trials])[0]
        assert rho > 0.5, (shape, rho)   # chance is 0; before any trial of the task
    blank = _model()
    blank.start(_space(*HELD_OUT[0]))
    assert not blank.predict([t.candidate for t in _trials(HELD_OUT[0])]).any()   # no pretraining: no opinion


def test_the_pretrained_model_is_fine_tuned_on_the_tasks_trials(pretrained, null):
    shape = HELD_OUT[1]
    trials = _trials(shape)
    m = _model(pretrained=pretrained)
    m.start(_space(*shape))
    before = m.predict([t.candidate for t in trials])
    m.fit(trials[::3])   # some of the task's own trials: the local model boosts from the pretrained margin
    after = m.predict([t.candidate for t in trials])
    assert not np.allclose(before, after)
    cost = [-t.cost for t in trials]
    assert spearmanr(after, cost)[0] >= spearmanr(before, cost)[0] - 0.02
    # saved and loaded, the fine-tuned model predicts the same
    path = os.path.join(os.path.dirname(pretrained), "tuned.json")
    m.save(path)
    again = _model()
    again.load(path)
    np.testing.assert_allclose(again.predict([t.candidate for t in trials]), after, rtol=1e-5)


def test_a_tuning_run_starts_from_the_pretrained_model(pretrained, null, tmp_path):
    (res,) = tunekit.tune([{"op": "matmul", "args": {"M": 24, "N": 48, "K": 16}, "template": "null-matmul"}],
                          target="null", model={"name": "xgboost", "features": "relation", "pretrained": pretrained},
                          trials=8, database=str(tmp_path / "t.db"), tuning={"batch_size": 4})
    assert res.model._global is not None and res.model._local is not None and res.done == 8


def test_without_a_file_for_the_device_the_model_falls_back_with_one_line(null, tmp_path, capsys, monkeypatch):
    m = _model(pretrained=True)
    with pytest.warns(UserWarning, match=r"xgboost: no pretrained model for null-\S+ \(shipped: .*\); the model "
                                         r"starts from nothing"):
        m.start(_space(8, 8, 8))
    assert m._global is None
    from tunekit.cli.main import main
    recipe = tmp_path / "r.toml"
    recipe.write_text('target = "null"\nmodel = { name = "xgboost", pretrained = true }\n'
                      f'[database]\npath = "{tmp_path / "t.db"}"\n[tuning]\ntrials = 4\nbatch_size = 4\n'
                      '[[tasks]]\nop = "matmul"\nargs = { M = 8, N = 8, K = 8 }\ntemplate = "null-matmul"\n')
    # shown as a run shows it (pytest records warnings instead): the text the CLI's format gives, on stderr
    monkeypatch.setattr(warnings, "_showwarnmsg_impl", lambda m: sys.stderr.write(warnings._formatwarnmsg(m)))
    assert main(["tune", str(recipe)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "pretrained" in line]
    assert len(err) == 1 and err[0].startswith("warning: xgboost: no pretrained model for null-"), err


def test_a_plugin_that_ships_no_folder_falls_back_too(null, tmp_path, monkeypatch):
    from tunekit_plugins.models import gbt_common
    monkeypatch.setattr(gbt_common, "pretrained_dir", lambda model: tmp_path / "no-such-folder")
    with pytest.warns(UserWarning, match=r"no pretrained model for null-\S+ \(shipped: none\)"):
        _model(pretrained=True).start(_space(8, 8, 8))


def test_a_folder_gives_each_task_its_templates_model_else_its_cpus(pretrained, null, tmp_path):
    ts = _space(8, 8, 8)
    family = f"{ts.target.name}-{ts.device.name}"
    mine, cpus = tmp_path / f"{family}@{ts.template.name}.json", tmp_path / f"{family}.json"
    for path in (mine, cpus):
        path.write_bytes(Path(pretrained).read_bytes())
    (tmp_path / f"{family}@other-template.json").write_text("not read: another template's")
    m = _model(pretrained=str(tmp_path))
    m.start(ts)
    assert m._global is _pretrained(m, str(mine))
    mine.unlink()
    m = _model(pretrained=str(tmp_path))
    m.start(ts)
    assert m._global is _pretrained(m, str(cpus))
    cpus.unlink()
    with pytest.warns(UserWarning, match=rf"no pretrained model for {family} \({tmp_path}: {family}\)"):
        _model(pretrained=str(tmp_path)).start(ts)


def test_a_missing_or_wrong_pretrained_file_is_a_clear_error(tmp_path, null):
    with pytest.raises(TunekitError, match=r"pretrained = '.*nothere\.json': No such file.*tunekit dataset train"):
        _model(pretrained=str(tmp_path / "nothere.json")).start(_space(8, 8, 8))
    (tmp_path / "other.json").write_text(json.dumps({"format": 1, "model": "lightgbm"}))
    with pytest.raises(TunekitError, match=r"other\.json: not a saved 'xgboost' cost model"):
        _model(pretrained=str(tmp_path / "other.json")).start(_space(8, 8, 8))
    local_only = _model()
    local_only.fit(_trials((8, 8, 8)))
    local_only.save(str(tmp_path / "local.json"))
    with pytest.raises(TunekitError, match=r"local\.json: a saved 'xgboost' cost model without a pretrained"):
        _model(pretrained=str(tmp_path / "local.json")).start(_space(8, 8, 8))


def test_dataset_train_needs_many_tasks(tmp_path):
    from tunekit.cli.main import main
    data = _dataset([(8, 8, 8)], str(tmp_path / "one.npz"))
    assert main(["dataset", "train", data, "-o", str(tmp_path / "m.json")]) == 1
    assert main(["dataset", "train", data, "-o", str(tmp_path / "m.json"), "--model", "nosuch"]) == 1


@pytest.mark.parametrize("path", sorted(pretrained_dir(XGBoostModel()).glob("*.json")), ids=lambda p: p.stem)
def test_a_shipped_pretrained_model_loads_and_scores_conv2d_programs(path):
    assert path.stat().st_size < 5 << 20   # a few MB at most
    target_name = path.stem.split("-")[0]
    target = tunekit.registry().components["target"][target_name].obj()
    ts = tunekit.Task(workload="resnet18.C6", template="nchwc").bind(target)
    m = _model(pretrained=str(path))
    m.start(ts)
    scores = m.predict(ts.candidates(ts.space.sample(__import__("random").Random(0), 16)))
    assert np.isfinite(scores).all() and np.ptp(scores) > 0
