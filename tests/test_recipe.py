"""Recipes: parsing, validation against the installed plugins, error messages, hashing, schema."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeGpu, FakeModel, FakeTarget  # noqa: F401

import tunekit
from tunekit import registry
from tunekit.errors import RecipeError
from tunekit.recipe.components import ComponentSpec
from tunekit.recipe.model import Recipe, load_recipe
from tunekit.recipe.schema import json_schema

RECIPES = Path(__file__).parent / "recipes"


BASE = {"target": "fake-cpu", "model": "fake-model", "explorer": "fake-explorer",
        "tasks": [{"op": "matmul", "args": {"M": 64, "N": 32, "K": 16}}]}


def problems(data, source="recipe.toml") -> list[str]:
    with pytest.raises(RecipeError) as e:
        Recipe.from_dict(data, source=source)
    return str(e.value).splitlines()


@pytest.mark.parametrize("name", ["good.toml", "good.yaml", "good.json"])
def test_valid_recipe_in_each_format(fake, name):
    r = load_recipe(RECIPES / name)
    assert r.source == str(RECIPES / name)
    assert r.target.name == "fake-cpu" and r.target.options.num_threads == 4
    assert r.model.name == "fake-model" and r.model.options.objective == "regression"
    assert r.explorer.name == "fake-explorer"
    assert r.tuning.trials == 32 and r.measure.repeat == 2 and r.measure.min_repeat_ms == 50.0
    assert r.database.path == "tunekit.db"
    tasks = r.task_objects()
    assert [t.op.name for t in tasks] == ["matmul", "matmul"]
    assert tasks[0].args == {"dtype": "float32", "M": 64, "N": 32, "K": 16}
    assert tasks[1].workload == "fake.mm" and tasks[1].args["K"] == 128
    assert isinstance(r.model.create(), FakeModel) and r.model.create().options.trees == 5


def test_same_recipe_in_all_formats_hashes_alike(fake):
    assert len({load_recipe(RECIPES / n).run_hash() for n in ("good.toml", "good.yaml", "good.json")}) == 1


def test_defaults(fake):
    r = Recipe.from_dict(BASE)
    assert r.tuning.model_dump() == {"trials": 64, "seed": 0, "time_budget_s": None, "early_stopping": None,
                                         "batch_size": 16, "epsilon": 0.05, "transfer": False}
    assert r.measure.number == 4 and r.measure.check and r.measure.rtol is None and r.measure.runner.name == "local"
    assert r.measure.timing_policy().settings.min_repeat_ms == 50.0
    assert r.database.path == "tunekit.db" and r.database.log is None
    assert Recipe.model_fields["target"].default == "x86"
    assert Recipe.model_fields["model"].default == Recipe.model_fields["explorer"].default == "random"


def test_default_components_are_validated_too(fake):
    assert problems({"tasks": BASE["tasks"], "model": "fake-model", "explorer": "fake-explorer"}) == [
        "recipe.toml: target: unknown target 'x86' (installed: fake-cpu, fake-gpu)"]


def test_shorthand_and_table_components_are_the_same(fake):
    a = Recipe.from_dict(BASE)
    b = Recipe.from_dict({**BASE, "model": {"name": "fake-model"}, "target": {"name": "fake-cpu"}})
    assert isinstance(a.model, ComponentSpec) and a.model.kind == "cost model"
    assert a.model.options == b.model.options and a.run_hash() == b.run_hash()


def test_components_as_options_instances_and_specs(fake):
    model = FakeModel(FakeModel.Options(trees=3))
    r = Recipe.from_dict({**BASE, "model": model, "target": FakeTarget.Options(mcpu="znver4")})
    assert r.model.create() is model and r.model.name == "fake-model"
    assert r.target.name == "fake-cpu" and r.target.options.mcpu == "znver4"
    again = Recipe.from_dict({**BASE, "model": r.model})
    assert again.model is r.model
    assert problems({**BASE, "target": model}) == ["recipe.toml: target: expected a target, got a FakeModel"]


def test_table_without_name_uses_the_default_component(fake, monkeypatch):
    monkeypatch.setitem(tunekit.recipe.components.DEFAULTS, "model", "fake-model")
    assert Recipe.from_dict({**BASE, "model": {"trees": 7}}).model.options.trees == 7


def test_unknown_component_lists_installed(fake):
    assert problems({**BASE, "model": {"name": "xgbost"}}) == [
        "recipe.toml: model: unknown cost model 'xgbost' (installed: fake-model)"]
    assert problems({**BASE, "explorer": "anealing"}) == [
        "recipe.toml: explorer: unknown explorer 'anealing' (installed: fake-explorer)"]


def test_unknown_option_lists_valid_ones(fake):
    assert problems({**BASE, "model": {"name": "fake-model", "objectiv": "rank"}}) == [
        ("recipe.toml: model.objectiv: unknown option 'objectiv' for cost model 'fake-model' "
        "(its options: objective, trees)")]
    assert problems({**BASE, "explorer": {"name": "fake-explorer", "x": 1}}) == [
        "recipe.toml: explorer.x: unknown option 'x' for explorer 'fake-explorer' (it has no options)"]
    [line] = problems({**BASE, "measure": {"numbr": 4}})
    assert line.startswith("recipe.toml: measure.numbr: unknown option 'numbr' (its options: number, repeat,")
    assert problems({**BASE, "modle": {}}) == [
        ("recipe.toml: modle: unknown section 'modle' "
        "(its sections: target, tasks, model, explorer, tuning, measure, database)")]


def test_bad_types_have_dotted_paths(fake):
    lines = problems({**BASE, "measure": {"repeat": "three"}, "model": {"name": "fake-model", "trees": "many"},
                      "tuning": {"trials": 0}})
    assert "recipe.toml: measure.repeat: Input should be a valid integer, unable to parse string as an integer " \
           "(got 'three')" in lines
    assert any(x.startswith("recipe.toml: model.trees: Input should be a valid integer") for x in lines)
    assert "recipe.toml: tuning.trials: Input should be greater than or equal to 1 (got 0)" in lines
    assert problems({**BASE, "measure": 5}) == ["recipe.toml: measure: should be a table (got 5)"]
    assert problems({**BASE, "measure": {"runner": "dask"}}) == [
        "recipe.toml: measure.runner: unknown runner 'dask' (installed: local)"]


def test_all_problems_are_reported_together(fake):
    lines = problems({**BASE, "model": "xgbost", "measure": {"repeat": "x"},
                      "tasks": [{"op": "matmul", "args": {"M": 1, "N": 1}}, {"workload": "nope"}]})
    assert [x.split(": ")[1] for x in lines] == ["tasks[0].args.K", "tasks[1].workload", "model", "measure.repeat"]


def test_task_errors(fake):
    def task_problems(*tasks):
        return problems({**BASE, "tasks": list(tasks)})
    reg = registry()
    assert "matmul" in reg.ops and "fake.mm" in reg.workloads
    assert task_problems({"op": "conv9d", "args": {}}) == [
        f"recipe.toml: tasks[0].op: unknown op 'conv9d' (installed: {', '.join(sorted(reg.ops))})"]
    assert task_problems({"workload": "resnet99.C1"}) == [
        (f"recipe.toml: tasks[0].workload: unknown workload 'resnet99.C1' "
        f"(installed: {', '.join(sorted(reg.workloads))})")]
    assert task_problems({"op": "matmul", "args": {"M": 1, "N": 2}}) == [
        "recipe.toml: tasks[0].args.K: missing argument 'K' for op 'matmul'"]
    assert task_problems({"op": "matmul", "args": {"M": 1, "N": 2, "K": "x", "Q": 1}}) == [
        ("recipe.toml: tasks[0].args.Q: unknown argument 'Q' for op 'matmul' "
        f"(its arguments: {', '.join(reg.ops['matmul'].obj.Args.model_fields)})"),
        ("recipe.toml: tasks[0].args.K: Input should be a valid integer, unable to parse string as an integer "
        "(got 'x')")]
    assert task_problems({"args": {}}) == [
        "recipe.toml: tasks[0]: give either op (with args), workload, model or compute"]
    assert task_problems({"op": "matmul", "workload": "fake.mm"})[0].startswith(
        "recipe.toml: tasks[0]: give either op or workload, not both")
    assert task_problems({"opp": "matmul"})[0] == (
        "recipe.toml: tasks[0].opp: unknown key 'opp' (its keys: op, args, workload, template, model, layouts, "
        "precision, dims, dim_weights, compute, name, outputs)")
    assert problems({k: v for k, v in BASE.items() if k != "tasks"}) == [
        "recipe.toml: tasks: no tasks to tune; add [[tasks]] tables with op + args, workload or model"]


def test_workload_shorthand_and_overrides(fake):
    r = Recipe.from_dict({**BASE, "tasks": ["fake.mm", {"workload": "fake.mm", "args": {"K": 8}}]})
    a, b = r.task_objects()
    assert a.workload == "fake.mm" and a.args["K"] == 128 and b.args["K"] == 8 and a.key != b.key


def test_templates_are_checked_against_the_target(fake):
    r = Recipe.from_dict({**BASE, "tasks": [{**BASE["tasks"][0], "template": "packed"}]})
    assert r.tasks[0].template == "packed" and r.task_objects()[0].template_name == "packed"
    assert problems({**BASE, "tasks": [{**BASE["tasks"][0], "template": "tiled"}]}) == [
        ("recipe.toml: tasks[0].template: no template 'tiled' for op 'matmul' on target 'fake-cpu' "
        "(available: direct, packed)")]
    assert problems({**BASE, "target": "fake-gpu"}) == [
        ("recipe.toml: tasks[0]: no schedule template for op 'matmul' on target 'fake-gpu'; "
        "install a plugin that provides one")]


def test_run_hash_excludes_budgets_and_seed_but_not_what_is_run(fake):
    h = Recipe.from_dict(BASE).run_hash()
    budgets = {"trials": 999, "time_budget_s": 60.0, "early_stopping": 100}
    assert Recipe.from_dict({**BASE, "tuning": budgets, "database": {"path": "other.db"}}).run_hash() == h
    same_task = {"op": "matmul", "args": {"K": 16, "N": 32, "M": 64, "dtype": "float32"}}
    assert Recipe.from_dict({**BASE, "tasks": [same_task]}).run_hash() == h
    assert Recipe.from_dict({**BASE, "tuning": {"seed": 1}}).run_hash() == h  # the run is (hash, seed)
    assert Recipe.from_dict({**BASE, "model": {"name": "fake-model", "trees": 2}}).run_hash() != h
    assert Recipe.from_dict({**BASE, "measure": {"repeat": 5}}).run_hash() != h
    assert Recipe.from_dict({**BASE, "tasks": [{"op": "matmul", "args": {"M": 1, "N": 1, "K": 1}}]}).run_hash() != h
    assert len(h) == 16 and h == Recipe.from_dict(json.loads(json.dumps(Recipe.from_dict(BASE).to_dict()))).run_hash()


def test_to_dict_round_trips(fake):
    r = Recipe.from_dict({**BASE, "model": {"name": "fake-model", "trees": 3}})
    d = r.to_dict()
    assert d["model"] == {"name": "fake-model", "objective": "rank", "trees": 3}
    assert Recipe.from_dict(d) == r


@pytest.mark.parametrize("name, text, expected", [
    ("bad.toml", 'a = 1\n[model\nname = "x"\n', "bad.toml: line 2, column 7: invalid TOML: "),
    ("bad.yaml", "model:\n  name: [x\n", "bad.yaml: line 3, column 1: invalid YAML: "),
    ("bad.json", '{"model": }', "bad.json: line 1, column 11: invalid JSON: Expecting value"),
    ("bad.ini", "[model]", "bad.ini: unknown recipe format '.ini' (use .toml, .yaml, .yml or .json)"),
    ("list.yaml", "- a\n- b\n", "list.yaml: expected a table of sections at the top level, got list"),
])
def test_unparsable_files_name_file_and_line(fake, tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert str(e.value).startswith(str(path.parent / expected))


def test_unreadable_file(fake, tmp_path):
    with pytest.raises(RecipeError, match=r"missing\.toml: cannot read: No such file or directory"):
        load_recipe(tmp_path / "missing.toml")
    (tmp_path / "latin1.toml").write_bytes(b"# caf\xe9\n")
    with pytest.raises(RecipeError, match="latin1.toml: cannot read: not UTF-8"):
        load_recipe(tmp_path / "latin1.toml")


def test_file_errors_name_the_file(fake):
    assert problems({**BASE, "model": "xgbost"}, source="jobs/r.yaml")[0].startswith("jobs/r.yaml: model: ")
    lines = str(pytest.raises(RecipeError, load_recipe, RECIPES / "bad_fields.toml").value).splitlines()
    assert lines == [f"{RECIPES / 'bad_fields.toml'}: {x}" for x in (
        "tasks[0].args.K: missing argument 'K' for op 'matmul'",
        "model: unknown cost model 'xgbost' (installed: fake-model)",
        "measure.repeat: Input should be a valid integer, unable to parse string as an integer (got 'three')")]


def test_json_schema_covers_installed_components(fake):
    schema = json_schema()
    names = {sec: [c["properties"]["name"]["const"] for c in schema["properties"][sec]["oneOf"] if "properties" in c]
             for sec in ("target", "model", "explorer")}
    assert names == {"target": ["fake-cpu", "fake-gpu"], "model": ["fake-model"], "explorer": ["fake-explorer"]}
    model = schema["properties"]["model"]["oneOf"][1]
    assert model["required"] == ["name"] and model["additionalProperties"] is False
    assert model["properties"]["objective"]["enum"] == ["rank", "regression"]
    assert schema["properties"]["model"]["oneOf"][0]["enum"] == ["fake-model"]
    assert set(schema["properties"]) == {"target", "tasks", "model", "explorer", "tuning", "measure", "database"}
    assert schema["$defs"]["MeasureSection"]["properties"]["repeat"]["description"]


def test_json_schema_accepts_valid_and_rejects_invalid_recipes(fake):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    import tomllib
    good = tomllib.loads((RECIPES / "good.toml").read_text())
    assert not list(v.iter_errors(good)) and not list(v.iter_errors({**BASE, "tasks": ["fake.mm"]}))
    for bad in ({**BASE, "model": {"name": "fake-model", "objectiv": 1}}, {**BASE, "model": "xgbost"},
                {**BASE, "measure": {"repeat": "three"}}, {**BASE, "extra": 1}):
        assert list(v.iter_errors(bad)), bad
