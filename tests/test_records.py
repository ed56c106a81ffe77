"""Records and the templates that change under them: a record is looked up by its config,
so a database written by an older version of a template never runs a config that was
never measured; the configs that are no longer in the space are ignored and said so."""
from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest

import tunekit
from tunekit import te
from tunekit.cli.main import main as cli_main
from tunekit.ops.matmul import compute as matmul_compute
from tunekit.testing import plugin_registered
from tunekit.tuning.guard import TunekitWarning

ARGS = {"M": 16, "N": 16, "K": 8}
#: the values the template's one knob takes "in this version of the plugin"
VALUES = {"tile": [1, 2, 4, 8]}


def evolving(cfg, device, M, N, K, dtype="float32"):
    A, B, C = matmul_compute(M, N, K, dtype)
    s = te.create_schedule(C)
    _, j = s[C].op.axis
    cfg.define_knob("tile", VALUES["tile"])
    s[C].split(j, factor=cfg["tile"])
    return s, [A, B, C]


PLUGIN = SimpleNamespace(tunekit_templates=tunekit.hookimpl(
    lambda: [tunekit.Template("matmul", "evolving", ("null",), evolving)]))
QUICK = {"repeat": 1, "number": 1, "min_repeat_ms": 0}


@pytest.fixture
def evolving_template(null_target_plugin, monkeypatch):
    monkeypatch.setitem(VALUES, "tile", [1, 2, 4, 8])
    with plugin_registered(PLUGIN, "evolving-template"):
        yield


def tune(db: str, seed: int = 0) -> list:
    task = tunekit.Task("matmul", ARGS, template="evolving")
    return tunekit.tune([task], target="null", trials=4, seed=seed, database=db, tuning={"batch_size": 4},
                        measure=QUICK)


def rows(db: str) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT config, config_index, cost FROM trials ORDER BY id").fetchall()


def best_tile(db: str, values: list[int]) -> int:
    """The tile of the fastest record whose tile the template has today."""
    import json
    return min((cost, json.loads(config)["tile"]) for config, _, cost in rows(db)
               if json.loads(config)["tile"] in values)[1]


def test_records_of_an_older_template_are_read_by_their_config_or_ignored(evolving_template, tmp_path, monkeypatch):
    db = str(tmp_path / "t.db")
    tune(db)
    assert sorted(int(i) for _, i, _ in rows(db)) == [0, 1, 2, 3]
    # the plugin's next version: 1 and 2 are gone, 8 and 4 change places, 32 is new
    monkeypatch.setitem(VALUES, "tile", [32, 8, 4])
    with pytest.warns(UserWarning, match=r"2 records of matmul\[evolving\] \(matmul\(.*\)\) are from an older "
                                         r"version of the template; ignored"):
        with tunekit.apply_history_best(db):
            kernel = tunekit.build("matmul", ARGS, target="null", template="evolving")
    assert kernel.tuned and kernel.config["tile"] == best_tile(db, [32, 8, 4])

    # the tuner says so once, reads 8 and 4 as measured (re-indexed) and measures only the new config
    with pytest.warns(TunekitWarning, match=r"2 records of matmul\[evolving\] .* older version of the template"):
        (st,) = tune(db, seed=1)
    tiles = [__import__("json").loads(c)["tile"] for c, _, _ in rows(db)]
    assert sorted(tiles) == [1, 2, 4, 8, 32] and st.done == 1
    assert {int(i) for c, i, _ in rows(db) if __import__("json").loads(c)["tile"] in (32, 8, 4)} == {0, 1, 2}
    assert st.best.config["tile"] == best_tile(db, [32, 8, 4])


def test_a_resumed_run_measures_again_as_many_trials_as_its_stale_records(evolving_template, tmp_path,
                                                                            monkeypatch):
    import json
    db = str(tmp_path / "t.db")
    tune(db)                                           # tiles 1, 2, 4 and 8
    monkeypatch.setitem(VALUES, "tile", [32, 16, 8, 4])
    with pytest.warns(TunekitWarning, match=r"2 records of matmul\[evolving\]"):
        (st,) = tune(db)   # the same run resumed: its records of tiles 1 and 2 no longer count as done
    assert sorted(json.loads(c)["tile"] for c, _, _ in rows(db)) == [1, 2, 4, 8, 16, 32] and st.done == 4


def test_tunekit_best_names_the_ignored_records(evolving_template, tmp_path, monkeypatch, capsys):
    db = str(tmp_path / "t.db")
    tune(db)
    monkeypatch.setitem(VALUES, "tile", [4, 16])
    assert cli_main(["best", db, "--wide"]) == 0
    out, err = capsys.readouterr()
    assert "3 records of matmul[evolving]" in err and "ignored" in err
    assert '{"tile": 4}' in out and '"tile": 1}' not in out and '"tile": 2}' not in out


def test_a_database_of_an_older_tunekit_is_read_and_upgraded(evolving_template, tmp_path):
    db = str(tmp_path / "old.db")
    tune(db)
    with sqlite3.connect(db) as c:   # as tunekit wrote it before records named their space
        c.execute("ALTER TABLE trials DROP COLUMN space")
    with tunekit.apply_history_best(db):   # read-only: the configs are looked up in today's space
        kernel = tunekit.build("matmul", ARGS, target="null", template="evolving")
    assert kernel.tuned and kernel.config["tile"] == best_tile(db, [1, 2, 4, 8])
    (st,) = tune(db, seed=1)   # the tuner adds the column and measures nothing twice
    assert st.done == 0 and st.finished == "space exhausted" and len(rows(db)) == 4
    with sqlite3.connect(db) as c:
        assert {s for (s,) in c.execute("SELECT space FROM trials")} != {None}
