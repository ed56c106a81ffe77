"""The README's plugin-author guide runs as written: its module is loaded, registered
and used from a recipe (target, template, explorer and cost model together)."""
from __future__ import annotations

import re
import types
from pathlib import Path

import numpy as np

import tunekit

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
