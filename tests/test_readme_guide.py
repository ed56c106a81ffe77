"""The README works as written.

- The plugin-author guide's module is loaded, registered and used from a recipe
  (target, template, explorer and cost model together).
- Every fenced block is checked by its language:
  - ```toml: a block with [[tasks]] is a whole recipe, validated with `tunekit.Recipe.from_dict`;
    a block with a [project] or [tool] table is a pyproject.toml fragment, parsed as TOML (and an
    entry-point table must be the group "tunekit"); any other block is part of a recipe, merged
    into a minimal one (one small matmul task) and validated.
  - ```python: run in a fresh namespace, in a temporary folder, in this process. The only change
    to what it does: `tunekit.tune` times each config once (repeat = number = 1, no minimum
    repeat time; keys of the block's own `measure` win), so the file stays fast. A block that
    would take long is made small in the README itself: users copy it.
  - ```bash, ```sh, ```shell, ```console (lines starting with "$ "; the rest is output): every
    `tunekit ...` (or `python -m tunekit ...`) command, also after `&&`, `;` or `|` and after
    VAR=value assignments, must parse with the real parser, flags spelled in full (a renamed
    flag fails); other commands (pip, python, dask) are not checked.
- A block may be exempted by the line `<!-- readme-test: skip (why) -->` right above it (for one
  that needs a device farm or a GPU; keep them few).
- Commands are not left outside fences: an indented `tunekit ...` line would not be checked.
"""
from __future__ import annotations

import argparse
import re
import shlex
import tomllib
import types
from pathlib import Path

import numpy as np
import pytest

import tunekit
from tunekit.cli.main import parser

README = Path(__file__).parent.parent / "README.md"


def guide_module() -> types.ModuleType:
    text = README.read_text()
    guide = text[text.index("## Writing a plugin"):text.index("## Benchmarks")]
    code = re.findall(r"```python\n(.*?)```", guide, re.S)
    assert len(code) == 1, "the guide has one plugin module"
    module = types.ModuleType("readme_plugin")
    exec(compile(code[0], str(README), "exec"), module.__dict__)
    return module


def test_the_guides_plugin_tunes_and_builds(tmp_path, register_tunekit_plugin):
    register_tunekit_plugin(guide_module(), "readme-plugin")
    recipe = tunekit.Recipe.from_dict({"target": "interp", "model": {"name": "ridge", "alpha": 0.5},
                                       "explorer": {"name": "hill-climb", "pool": 16},
                                       "tasks": [{"op": "matmul", "args": {"M": 8, "N": 4, "K": 4}}]}, source="r")
    ts = recipe.task_objects()[0].bind(recipe.target.create())
    assert ts.template.name == "rows" and ts.space.size == 8
    db = str(tmp_path / "t.db")
    states = tunekit.tune(recipe.task_objects(), target="interp", model="ridge", explorer="hill-climb", trials=6,
                          database=db, tuning={"batch_size": 3},
                          measure={"repeat": 1, "number": 1, "min_repeat_ms": 0})
    # tuned on the guide's template and the built-in ones that serve matmul on a "cpu" family target
    assert "rows" in [st.ts.template.name for st in states] and sum(st.done for st in states) == 6
    assert all(st.errors == 0 for st in states)   # every config checked against numpy
    with tunekit.apply_history_best(db):
        kernel = tunekit.build("matmul", {"M": 8, "N": 4, "K": 4}, target="interp")
    A, B, C = (tunekit.empty(s) for s in ((8, 4), (4, 4), (8, 4)))
    A[...], B[...] = np.random.rand(8, 4), np.random.rand(4, 4)
    kernel(A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)


FENCE = re.compile(r"^(<!-- readme-test: skip[^\n]*-->\n)?```(\w*)\n(.*?)^```", re.S | re.M)
SHELLS = ("bash", "sh", "shell", "console")
#: the tasks a partial recipe (e.g. a lone [measure] table) is merged into
MINIMAL = {"tasks": [{"op": "matmul", "args": {"M": 16, "N": 16, "K": 16}}]}
#: what `tunekit.tune` measures with while a README block runs (unless the block sets `measure`)
QUICK_TIMING = {"repeat": 1, "number": 1, "min_repeat_ms": 0}


def blocks(*langs: str) -> list:
    """(README line of the fence, language, code) of every fenced block in `langs`, as pytest
    params; exempted ones marked skip."""
    text = README.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m[2] in langs:
            line = text.count("\n", 0, m.start(2)) + 1
            marks = [pytest.mark.skip(reason=m[1].strip())] if m[1] else []
            out.append(pytest.param(line, m[2], m[3], id=f"README.md:{line}", marks=marks))
    assert out, f"no {'/'.join(langs)} blocks in the README"
    return out


def commands(lang: str, code: str) -> list[list[str]]:
    """The `tunekit` command lines of a shell block, as argument lists (after "tunekit")."""
    found = []
    for line in code.splitlines():
        if lang == "console":
            if not line.startswith("$ "):
                continue   # output
            line = line[2:]
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words, segment = list(lex), []
        for word in [*words, ";"]:
            if word not in ("&&", "||", ";", "|", "&"):
                segment.append(word)
                continue
            while segment and re.fullmatch(r"[A-Za-z_]\w*=.*", segment[0]):   # VAR=value cmd
                segment.pop(0)
            if segment[:1] == ["tunekit"]:
                found.append(segment[1:])
            elif segment[:3] == ["python", "-m", "tunekit"]:
                found.append(segment[3:])
            segment = []
    return found


@pytest.mark.parametrize("line, lang, code", blocks("toml"))
def test_toml_block_validates(line, lang, code):
    data = tomllib.loads(code)
    if "project" in data or "tool" in data:   # a pyproject.toml fragment
        groups = data.get("project", {}).get("entry-points", {})
        assert set(groups) <= {"tunekit"}, f"README.md:{line}: entry points of tunekit go in group 'tunekit'"
        return
    recipe = data if "tasks" in data else {**MINIMAL, **data}
    tunekit.Recipe.from_dict(recipe, source=f"README.md:{line}")   # raises RecipeError naming the field


@pytest.mark.parametrize("line, lang, code", blocks("python"))
def test_python_block_runs(line, lang, code, tmp_path, monkeypatch):
    tune = tunekit.tune

    def quick_tune(*args, measure=None, **kwargs):
        return tune(*args, measure={**QUICK_TIMING, **(measure or {})}, **kwargs)

    monkeypatch.setattr(tunekit, "tune", quick_tune)
    monkeypatch.chdir(tmp_path)
    exec(compile("\n" * line + code, str(README), "exec"), {"__name__": f"readme_block_{line}"})


def strict(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`p` with its subcommands' parsers refusing abbreviated flags: the README must spell a flag
    as the parser does (argparse would take `--device` for a flag renamed `--device-name`)."""
    p.allow_abbrev = False
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                strict(sub)
    return p


@pytest.mark.parametrize("line, lang, code", blocks(*SHELLS))
def test_commands_parse(line, lang, code):
    for argv in commands(lang, code):
        try:
            strict(parser()).parse_args(argv)
        except SystemExit:
            pytest.fail(f"README.md:{line}: `tunekit {shlex.join(argv)}` does not parse (argparse says why above)")


def test_commands_are_fenced():
    checked = [argv for p in blocks(*SHELLS) for argv in commands(*p.values[1:])]
    assert len(checked) >= 4, f"the README's shell blocks should show its tunekit commands; found {checked}"
    unfenced = FENCE.sub("", README.read_text())
    loose = re.findall(r"^ {4,}(?:\$ )?(?:[A-Za-z_]\w*=\S* )*tunekit .*$", unfenced, re.M)
    assert not loose, f"put these commands in a ```bash block, where they are checked: {loose}"
