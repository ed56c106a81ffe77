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
                                         r"version of the template or of the target's code generator; ignored"):
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
    with sqlite3.connect(db) as c:   # as tunekit wrote it before records named their space and code
        c.execute("ALTER TABLE trials DROP COLUMN space")
        c.execute("ALTER TABLE trials DROP COLUMN code")
    # read-only: records of unknown code are named and ignored (their costs may not be today's kernels')
    with pytest.warns(UserWarning, match=r"4 records of matmul\[evolving\] .* ignored"):
        with tunekit.apply_history_best(db):
            kernel = tunekit.build("matmul", ARGS, target="null", template="evolving")
    assert not kernel.tuned
    with pytest.warns(TunekitWarning, match=r"4 records of matmul\[evolving\]"):
        (st,) = tune(db, seed=1)   # the tuner adds the columns and measures the configs again, as today's
    assert st.done == 4 and len(rows(db)) == 8
    with sqlite3.connect(db) as c:
        assert None not in {v for r in c.execute("SELECT space, code FROM trials WHERE id > 4") for v in r}


def evolving_v2(cfg, device, M, N, K, dtype="float32"):
    """The template's next version: the same knob, another schedule (the split on the other axis)."""
    A, B, C = matmul_compute(M, N, K, dtype)
    s = te.create_schedule(C)
    i, _ = s[C].op.axis
    cfg.define_knob("tile", VALUES["tile"])
    s[C].split(i, factor=cfg["tile"])
    return s, [A, B, C]


def versions(*fns):
    """The plugin's successive versions: the "evolving" template with each body in turn."""
    for fn in fns:
        yield SimpleNamespace(tunekit_templates=tunekit.hookimpl(
            lambda fn=fn: [tunekit.Template("matmul", "evolving", ("null",), fn)]))


def test_a_changed_template_body_with_the_same_knobs_invalidates_its_records(null_target_plugin, tmp_path):
    db = str(tmp_path / "t.db")
    v1, v2 = versions(evolving, evolving_v2)
    with plugin_registered(v1, "evolving-template"):
        tune(db)
    with plugin_registered(v2, "evolving-template"):   # the same space, another body: the old costs are not its
        ts = tunekit.Task("matmul", ARGS, template="evolving").bind(tunekit.registry().component("target", "null")())
        assert ts.template.fn is evolving_v2 and ts.space.fingerprint() == space_of(db)
        with pytest.warns(UserWarning, match=r"4 records of matmul\[evolving\] .* code generator; ignored"):
            with tunekit.apply_history_best(db):
                kernel = tunekit.build("matmul", ARGS, target="null", template="evolving")
        assert not kernel.tuned
        with pytest.warns(TunekitWarning, match=r"4 records of matmul\[evolving\]") as said:
            (st,) = tune(db, seed=1)
        assert len([w for w in said if "records of" in str(w.message)]) == 1   # named once
        assert st.done == 4 and sorted(i for _, i, _ in rows(db)) == ["0", "0", "1", "1", "2", "2", "3", "3"]
        with tunekit.apply_history_best(db), pytest.warns(UserWarning, match="4 records"):
            assert tunekit.build("matmul", ARGS, target="null", template="evolving").tuned   # today's serve it
    with plugin_registered(v1, "evolving-template"), pytest.warns(UserWarning, match="4 records"):
        with tunekit.apply_history_best(db):   # and the first body's records are its own again
            assert tunekit.build("matmul", ARGS, target="null", template="evolving").tuned


def space_of(db: str) -> str:
    with sqlite3.connect(db) as c:
        (space,) = {s for (s,) in c.execute("SELECT space FROM trials")}
    return space
