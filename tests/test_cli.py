"""The `tunekit` command line: validate, schema, plugins, error display."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakes import _template

import tunekit
from tunekit import _plugins, cli
from tunekit._registry import registry
from tunekit.errors import TunekitError

ROOT = Path(__file__).parent.parent
RECIPES = Path(__file__).parent / "recipes"


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_ok_prints_a_summary(fake, capsys):
    code, out, err = run(capsys, "validate", str(RECIPES / "good.toml"))
    assert code == 0, err
    assert out.startswith(f"OK {RECIPES / 'good.toml'}")
    task = tunekit.Task("matmul", {"M": 64, "N": 32, "K": 16})
    for text in ("tasks: 2", task.name, task.key, "fake.mm",
                 "fake-cpu (num_threads=4)", "fake-model (objective='regression', trees=5)", "fake-explorer",
                 "32 trials per task", "seed 0", "tunekit.db"):
        assert text in out
    assert err == ""


def test_validate_reports_every_problem(fake, capsys):
    path = RECIPES / "bad_fields.toml"
    code, out, err = run(capsys, "validate", str(path))
    assert code == 1 and out == ""
    assert err.splitlines() == [f"error: {path}: {x}" for x in (
        "tasks[0].args.K: missing argument 'K' for op 'matmul'",
        "model: unknown cost model 'xgbost' (installed: fake-model)",
        "measure.repeat: Input should be a valid integer, unable to parse string as an integer (got 'three')")]
    assert "Traceback" not in err


def test_validate_unparsable_and_missing_files(fake, capsys, tmp_path):
    bad = tmp_path / "r.toml"
    bad.write_text("[model\n")
    code, _, err = run(capsys, "validate", str(bad))
    assert code == 1 and err.startswith(f"error: {bad}: line 1, column 7: invalid TOML")
    code, _, err = run(capsys, "validate", str(tmp_path / "none.yaml"))
    assert code == 1 and err == f"error: {tmp_path / 'none.yaml'}: cannot read: No such file or directory\n"


def test_validate_warns_about_unavailable_components(fake, capsys, tmp_path):
    _plugins.register(SimpleNamespace(tunekit_templates=tunekit.hookimpl(lambda: [_template("gpu", ("gpu",))])),
                      "fake-gpu-templates")
    path = tmp_path / "gpu.yaml"
    path.write_text("target: fake-gpu\nmodel: fake-model\nexplorer: fake-explorer\ntasks: [fake.mm]\n")
    code, out, err = run(capsys, "validate", str(path))
    assert code == 0 and "OK" in out
    assert err == f"warning: {path}: target 'fake-gpu' is not available here: no fake GPU here\n"


@pytest.mark.parametrize("name", ["matmul.toml", "resnet18.toml"])
def test_example_recipes_validate_with_the_installed_plugins(name, capsys):
    pytest.importorskip("llvmlite")
    pytest.importorskip("xgboost")
    code, out, err = run(capsys, "validate", str(ROOT / "examples" / name))
    assert code == 0, err
    recipe = tunekit.recipe.load_recipe(ROOT / "examples" / name)
    assert recipe.target.name == "x86"
    if name == "matmul.toml":
        assert (recipe.model.name, recipe.explorer.name) == ("xgboost", "annealing")
        [task] = recipe.task_objects()
        assert task.args == {"M": 1024, "N": 1024, "K": 1024, "dtype": "float32"}
        m = recipe.measure
        assert (m.number, m.repeat, m.min_repeat_ms, m.timeout_s, m.check) == (4, 3, 50.0, 10.0, True)
    else:
        assert [t.workload for t in recipe.task_objects()] == [f"resnet18.C{i}" for i in range(1, 13)]
        assert out.count("direct") == 12    # every layer has a CPU template and a space


def test_schema(fake, capsys, tmp_path):
    code, out, _ = run(capsys, "schema")
    assert code == 0
    schema = json.loads(out)
    assert next(c.get("enum") for c in schema["properties"]["model"]["oneOf"]) == ["fake-model"]
    assert "fake-cpu" in out and "fake-gpu" in out and "fake-explorer" in out
    code, out, _ = run(capsys, "schema", "-o", str(tmp_path / "s.json"))
    assert code == 0 and out == "" and json.loads((tmp_path / "s.json").read_text()) == schema


def test_plugins_lists_components_broken_plugins_and_counts(fake, capsys):
    def broken_hook():
        raise ImportError("no module named 'foo'")
    _plugins.register(SimpleNamespace(tunekit_explorers=tunekit.hookimpl(broken_hook)), "shaky")
    _plugins.plugins().broken.append(_plugins.BrokenPlugin("gone", "tunekit-gone", "1.2", "ImportError: nope"))
    code, out, err = run(capsys, "plugins")
    assert code == 0, err
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "target fake-cpu fake ok" in lines
    assert "target fake-gpu fake no fake GPU here" in lines
    assert "cost model fake-model fake ok" in lines
    assert "explorer fake-explorer fake ok" in lines
    assert "gone tunekit-gone 1.2 ImportError: nope" in lines
    assert sum("tunekit_explorers() raised ImportError: no module named 'foo'" in x for x in lines) == 1
    reg = registry()
    counts = f"ops: {len(reg.ops)} workloads: {len(reg.workloads)} templates: {len(reg.templates)}"
    assert counts in lines and len(reg.templates) >= 1 and "fake.mm" in reg.workloads


def test_errors_show_without_traceback_unless_debug(monkeypatch, capsys):
    def boom(args):
        raise TunekitError("the widget failed on 'x'\ninstall the widget plugin")
    monkeypatch.setitem(cli.COMMANDS, "boom", cli.Command("boom", boom, "fail"))
    code, _out, err = run(capsys, "boom")
    assert code == 1 and err == "error: the widget failed on 'x'\n  install the widget plugin\n"
    code, _out, err = run(capsys, "--debug", "boom")
    assert code == 1 and "Traceback" in err and err.endswith("error: the widget failed on 'x'\n"
                                                             "  install the widget plugin\n")


def test_command_decorator_adds_subcommands(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))

    @cli.command("hello", cli.arg("who"), cli.arg("--times", type=int, default=1), help="greet")
    def hello(args):
        print(" ".join([f"hi {args.who}"] * args.times))
        return 3

    assert run(capsys, "hello", "you", "--times", "2")[:2] == (3, "hi you hi you\n")


def test_usage_errors_and_version_return_codes(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("tunekit ")
    assert cli.main([]) == 2
    assert cli.main(["no-such-command"]) == 2
    assert cli.main(["validate", "--help"]) == 0
