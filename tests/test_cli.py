"""The `tunekit` command line: validate, schema, plugins, error display."""
from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakes import _template
from rich.console import Console

import tunekit
from tunekit import registry
from tunekit.cli import commands
from tunekit.cli import main as cli
from tunekit.errors import TunekitError
from tunekit.plugin import manager as _plugins
from tunekit.store.database import Database
from tunekit.tuning.progress import TuneProgress, summary_table

ROOT = Path(__file__).parent.parent
RECIPES = Path(__file__).parent / "recipes"


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def narrow(monkeypatch) -> io.StringIO:
    """Make the commands print to an 80-column console; returns what it writes to."""
    buf = io.StringIO()
    monkeypatch.setattr(commands, "_console", lambda stream=None: Console(file=buf, width=80, highlight=False))
    return buf


def fits_80(text: str) -> bool:
    return all(len(line) <= 80 for line in text.splitlines())


def squeezed(text: str) -> str:
    """`text` without whitespace: a wrapped line still contains the squeezed original."""
    return "".join(text.split())


NULL_TASKS = [{"op": "matmul", "args": {"M": M, "N": 16, "K": 16}, "template": "null-matmul"} for M in (16, 64)]


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


def _null_recipe(tmp_path, **task) -> tuple[Path, Path]:
    """A recipe tuning one small matmul on the null target (the real `auto` plugin serves it)."""
    db, recipe = tmp_path / "t.db", tmp_path / "null.json"
    recipe.write_text(json.dumps({"target": "null", "tasks": [{"op": "matmul", "args": {"M": 16, "N": 16, "K": 16},
                                                                **task}],
                                  "tuning": {"trials": 8, "batch_size": 4}, "database": {"path": str(db)}}))
    return recipe, db


def test_validate_shows_the_size_of_the_generated_space(null_target_plugin, capsys, tmp_path):
    from tunekit.testing import NullTarget
    recipe, _ = _null_recipe(tmp_path)
    task = tunekit.Task("matmul", {"M": 16, "N": 16, "K": 16})
    auto = tunekit.Task("matmul", task.args, template="auto").bind(NullTarget()).size
    code, out, err = run(capsys, "validate", str(recipe))
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert lines[2] == ["#", "task", "workload", "key", "template", "space", "size", "valid", "auto", "space"]
    rows = [line for line in lines if line[:1] == ["0"]]
    assert {r[-4] for r in rows} == {t.name for t in task.serving(NullTarget())} and "auto" in {r[-4] for r in rows}
    assert all(r[-1] == f"{auto:,}" for r in rows)   # the task's, on each of its rows
    assert "auto space of" not in out


def test_validate_says_why_a_task_has_no_generated_space(fake, null_target_plugin, capsys, tmp_path):
    code, out, err = run(capsys, "validate", str(RECIPES / "good.toml"))   # no `auto` installed
    assert code == 0, err
    assert all(line.split()[-1] == "-" for line in out.splitlines() if line[:2] in ("0 ", "1 "))
    assert "auto space of tasks[0, 1]: no template 'auto' is installed" in out.splitlines()

    def broken(op, cfg, device, **args):
        raise ValueError("no rule for this op")
    _plugins.register(SimpleNamespace(tunekit_templates=tunekit.hookimpl(
        lambda: [tunekit.Template(tunekit.ops.ANY_OP, "auto", ("cpu",), broken, priority=-1)])), "broken-auto")
    path = tmp_path / "r.json"   # the task names its template: the broken `auto` is not tuned, only sized
    path.write_text(json.dumps({"target": "null", "model": "fake-model", "explorer": "fake-explorer", "tasks": [
        {"op": "matmul", "args": {"M": 64, "N": 32, "K": 16}, "template": "null-matmul"}]}))
    code, out, err = run(capsys, "validate", str(path))
    assert code == 0, err
    [row] = [line.split() for line in out.splitlines() if line.startswith("0 ")]
    assert row[-4] == "null-matmul" and row[-1] == "-"
    [note] = [line for line in out.splitlines() if line.startswith("auto space of tasks[0]: ")]
    assert "template 'auto'" in note and note.endswith("ValueError: no rule for this op")


def test_show_template_prints_a_config_of_that_template(null_target_plugin, capsys, tmp_path):
    from tunekit.testing import NullTarget
    recipe, db = _null_recipe(tmp_path)
    task = tunekit.Task("matmul", {"M": 16, "N": 16, "K": 16})
    auto = tunekit.Task("matmul", task.args, template="auto").bind(NullTarget())
    code, out, err = run(capsys, "show", str(recipe), "--template", "auto")   # nothing recorded yet
    assert code == 0, err
    first, config, *program = out.splitlines()
    assert first == f"{task.name} on null, template 'auto': {auto.space}"
    default = auto.space.default()
    assert config == f"config {auto.space.get(default)} (the space's default: no successful trial in {db})"
    assert "\n".join(program) == str(auto.program(default))

    states = tunekit.tune([task], target="null", trials=8, database=str(db), tuning={"batch_size": 4})
    assert {st.ts.template.name for st in states} >= {"auto", "null-matmul"}
    for st in states:   # each template's best record, not the task's best of all
        code, out, err = run(capsys, "show", str(recipe), "--template", st.ts.template.name)
        assert code == 0, err
        first, config, *_ = out.splitlines()
        assert first.endswith(f"template {st.ts.template.name!r}: {st.ts.space}")
        assert config.endswith(" (the best recorded)")
        index = int(config.split("(", 1)[1].split(":", 1)[0])
        assert min(t.cost for t in st.trials if t.ok and t.index == index) == st.best.cost
    code, out, err = run(capsys, "show", str(recipe), "--template", "auto", "--config", "0")
    assert code == 0 and out.splitlines()[1] == f"config {auto.space.get(0)} (--config)"

    code, out, err = run(capsys, "show", str(recipe), "--template", "nope")
    serving = ", ".join(t.name for t in task.serving(NullTarget()))
    assert code == 1 and out == ""
    assert err == (f"error: {recipe}: --template 'nope' does not serve {task.name} on target 'null' "
                   f"(templates that do: {serving})\n")


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
    assert "templates" in lines and "op template targets priority plugin" in lines
    assert "matmul direct cpu 0 fake" in lines and "matmul packed cpu 0 fake" in lines
    assert sum("tunekit_explorers() raised ImportError: no module named 'foo'" in x for x in lines) == 1
    reg = registry()
    counts = f"ops: {len(reg.ops)} workloads: {len(reg.workloads)} templates: {len(reg.templates)}"
    assert counts in lines and len(reg.templates) >= 1 and "fake.mm" in reg.workloads


def test_tune_summary_and_best_fit_80_columns(null_target_plugin, monkeypatch, capsys, tmp_path):
    db = str(tmp_path / "t.db")
    recipe = tmp_path / "null.json"
    recipe.write_text(json.dumps({"target": "null", "model": "random", "explorer": "random", "tasks": NULL_TASKS,
                                  "tuning": {"trials": 8, "batch_size": 4}, "database": {"path": db}}))
    buf = narrow(monkeypatch)
    assert cli.main(["tune", str(recipe)]) == 0
    summary = buf.getvalue()
    d = Database(db)
    rows = d.best()
    d.close()
    assert len(rows) == 2 and fits_80(summary)
    assert summary.splitlines()[2].split() == ["┃", "task", "┃", "trials", "┃", "GFLOPS", "┃", "best", "ms", "┃",
                                               "err", "┃", "tuner", "┃", "stopped", "┃"]
    for r in rows:  # the config in full under the table
        assert squeezed(f"{r['name']}: #{r['index']} {json.dumps(r['config'])}") in squeezed(summary)

    buf = narrow(monkeypatch)
    assert cli.main(["best", db]) == 0
    out = buf.getvalue()
    assert fits_80(out) and "best config" not in out
    assert out.splitlines()[0].split() == ["workload", "target", "device", "GFLOPS", "ms", "trials", "errors"]
    for r in rows:
        assert squeezed(f"{r['name']}: #{r['index']} {json.dumps(r['config'])}") in squeezed(out)

    monkeypatch.undo()  # the plain console: 200 columns when not a terminal
    code, out, _ = run(capsys, "best", db, "--wide")
    assert code == 0 and out.splitlines()[0].split()[-2:] == ["best", "config"]
    for r in rows:  # the config in a column of the workload's row
        assert any(line.startswith(r["name"]) and f"#{r['index']} {json.dumps(r['config'])}" in line
                   for line in out.splitlines())


def test_progress_line_fits_80_columns(null_target_plugin, tmp_path):
    states = tunekit.tune(NULL_TASKS, target="null", trials=8, database=str(tmp_path / "t.db"),
                          tuning={"batch_size": 4})
    console = Console(file=io.StringIO(), width=80)
    progress = TuneProgress(console)
    progress.start(states, 8)
    states[0].suspect = 123   # a busy machine says so in the line, which still fits
    for st in states:
        progress.update(st)
    progress.stop()
    lines = console.file.getvalue().splitlines()
    assert len(lines) == 2 and fits_80("\n".join(lines))
    for st, line in zip(states, lines):  # nothing cut short by an ellipsis
        assert line.startswith(st.ts.task.name[:20]) and "…" not in line
        busy = f" busy {st.suspect}" if st.suspect else ""
        want = f"best {st.best_gflops:6.1f} GFLOPS err {st.errors}{busy} tuner {st.tuner_share:3.0%}"
        assert " ".join(line.split()).endswith(" ".join(want.split()))   # columns are padded to align

    console = Console(file=io.StringIO(), width=80)
    console.print(summary_table(states))
    assert fits_80(console.file.getvalue())


def test_errors_show_without_traceback_unless_debug(monkeypatch, capsys):
    def boom(args):
        raise TunekitError("the widget failed on 'x'\ninstall the widget plugin")
    monkeypatch.setitem(commands.COMMANDS, "boom", commands.Command("boom", boom, "fail"))
    code, _out, err = run(capsys, "boom")
    assert code == 1 and err == "error: the widget failed on 'x'\n  install the widget plugin\n"
    code, _out, err = run(capsys, "--debug", "boom")
    assert code == 1 and "Traceback" in err and err.endswith("error: the widget failed on 'x'\n"
                                                             "  install the widget plugin\n")


def test_command_decorator_adds_subcommands(monkeypatch, capsys):
    monkeypatch.setattr(commands, "COMMANDS", dict(commands.COMMANDS))

    @commands.command("hello", commands.arg("who"), commands.arg("--times", type=int, default=1), help="greet")
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
