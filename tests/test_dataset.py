"""Datasets of measured programs (step 20, `tunekit.tuning.dataset`): the successful trials of
tuning databases exported as one feature space for every task, read back as written, each
row its trial's program features; and the errors of an empty database and of a file that is
no dataset."""
from __future__ import annotations

import numpy as np
import pytest

import tunekit
from tunekit.errors import ArgumentError
from tunekit.features import feature_names
from tunekit.store.database import Database
from tunekit.testing import NULL_PLUGIN_NAME, null_plugin
from tunekit.tuning.dataset import KIND, current_trials, export, load


@pytest.fixture
def null():
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    yield
    tunekit.unregister_plugin(NULL_PLUGIN_NAME)


def _task(M: int) -> dict:
    return {"op": "matmul", "args": {"M": M, "N": 16, "K": 16}, "template": "null-matmul"}


def test_the_trials_of_databases_export_and_load_as_one_feature_space(tmp_path, null):
    dbs = [str(tmp_path / "a.db"), str(tmp_path / "b.db")]
    tunekit.tune([_task(8), _task(32)], target="null", trials=8, database=dbs[0], tuning={"batch_size": 4})
    tunekit.tune([_task(24)], target="null", trials=6, database=dbs[1], tuning={"batch_size": 3})
    data = export(dbs, str(tmp_path / "d.npz"))
    assert data.features.shape == (22, len(feature_names(KIND))) and data.features.dtype == np.float32
    assert sorted(t["args"]["M"] for t in data.tasks) == [8, 24, 32] and len(data.devices) == 1
    assert np.bincount(data.task).tolist() == [8 if t["args"]["M"] != 24 else 6 for t in data.tasks]
    assert (data.seconds > 0).all() and np.isfinite(data.gflops()).all()
    again = load(str(tmp_path / "d.npz"))
    for name in ("features", "seconds", "task", "device"):
        np.testing.assert_array_equal(getattr(again, name), getattr(data, name))
    assert again.tasks == data.tasks and again.devices == data.devices
    # each row is its trial's program, lowered anew: the features and the median of its measured repeats
    target = tunekit.registry().components["target"]["null"].obj()
    db = Database(dbs[1], readonly=True)
    rows = db.history("null", data.devices[0], set(), limit=None)
    db.close()
    want = {(space.features(t.index, KIND).tobytes(), t.cost) for _, space, t in current_trials(rows, target)}
    got = {(x.tobytes(), s) for x, s, k in zip(data.features, data.seconds, data.task)
           if data.tasks[k]["args"]["M"] == 24}
    assert got == want and len(got) == 6


def test_an_empty_database_or_a_file_that_is_no_dataset_is_a_clear_error(tmp_path):
    Database(str(tmp_path / "empty.db")).close()
    with pytest.raises(ArgumentError, match=r"empty\.db: no successful trial .* \(tune some tasks first"):
        export([str(tmp_path / "empty.db")], str(tmp_path / "d.npz"))
    (tmp_path / "x.npz").write_bytes(b"not a dataset")
    with pytest.raises(ArgumentError, match=r"x\.npz: not a dataset of tunekit .*tunekit dataset export"):
        load(str(tmp_path / "x.npz"))


def test_tunekit_dataset_export(tmp_path, null, capsys):
    from tunekit.cli.main import main
    db = str(tmp_path / "t.db")
    tunekit.tune([_task(8)], target="null", trials=4, database=db, tuning={"batch_size": 4})
    assert main(["dataset", "export", db, "-o", str(tmp_path / "d.npz")]) == 0
    assert f"d.npz: 4 trials of 1 tasks, {len(feature_names(KIND))} features each, from 1 device(s)" in \
        capsys.readouterr().out
    assert load(str(tmp_path / "d.npz")).features.shape[0] == 4
