"""The core's packages are layers: a module imports from its own layer and those below,
never from one above, and no imports go round in a cycle (the loop IR's nodes and
printer excepted). Names are resolved at the edge (the plugin layer): a Task made
from an Op object loads no plugin."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import tunekit

CORE = Path(tunekit.__file__).parent

#: the layers, lowest first: each names the top-level modules and packages of tunekit/ in it
LAYERS = [
    ["_version", "errors", "records", "memory", "component"],   # leaves
    ["ir"],
    ["te"],
    ["ops"],
    ["graph"],
    ["space", "features"],
    ["targets", "models", "explorers", "runners", "frontends", "task", "hookspecs"],   # the contract
    ["plugin"],     # the edge: every name -> component/op/workload/template resolution
    ["store"],
    ["measure"],
    ["builtin"],    # the core's own plugins (loaded by name by the plugin manager)
    ["testing"],
    ["deploy"],
    ["tuning"],
    ["recipe"],
    ["cli"],
    ["__init__", "__main__", "_hookspecs", "timing", "isolated"],   # the facade and deprecated paths
]
#: cycles allowed inside these packages only
CYCLES_OK = ("tunekit.ir.",)


def _modules() -> dict[str, Path]:
    mods = {}
    for path in CORE.rglob("*.py"):
        parts = path.relative_to(CORE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The tunekit modules `name` imports, at module level or lazily (TYPE_CHECKING blocks left out)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tunekit":
                    add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] == "tunekit":
                for a in node.names:
                    add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    for k, names in enumerate(LAYERS):
        if top in names:
            return k
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def test_every_import_points_down_the_layers():
    upward = [f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
              for m, deps in sorted(_graph().items()) for d in sorted(deps) if _layer(d) > _layer(m)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_import_cycles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def strong(v: str) -> None:   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 and not all(m.startswith(CYCLES_OK) for m in comp):
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_layer_check_sees_an_upward_import(tmp_path, monkeypatch):
    mods = _modules()
    bad = tmp_path / "records.py"
    bad.write_text("def f():\n    from tunekit.recipe.model import Recipe\n    return Recipe\n")
    deps = _imports("tunekit.records", bad, mods)
    assert deps == {"tunekit.recipe.model"} and _layer("tunekit.recipe.model") > _layer("tunekit.records")


def test_a_task_made_from_an_op_loads_no_plugin():
    code = """
import tunekit.plugin.manager as manager
from tunekit.ops.matmul import matmul
from tunekit.task import Task
from tunekit.testing.null_target import NULL_MATMUL, NullTarget
task = Task(matmul, dict(M=8, N=8, K=8), templates=[NULL_MATMUL])
ts = task.bind(NullTarget())
assert ts.template is NULL_MATMUL and ts.space.size > 1
ts.program(ts.space.default())
assert manager._PLUGINS is None, "a plugin manager was created"
print("no plugin loaded")
"""
    env = {**os.environ, "TUNEKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "no plugin loaded" in out.stdout, out.stderr


def test_old_import_paths_still_work_and_say_where_the_name_moved():
    code = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as seen:
    from tunekit._hookspecs import hookimpl, tunekit_targets
    from tunekit.isolated import IsolatedProcess
    from tunekit.timing import execute
import tunekit, tunekit.measure.isolated, tunekit.measure.timing
assert hookimpl is tunekit.hookimpl and tunekit_targets is tunekit.hookspecs.tunekit_targets
assert IsolatedProcess is tunekit.measure.isolated.IsolatedProcess and execute is tunekit.measure.timing.execute
print(sorted(str(w.message) for w in seen if w.category is DeprecationWarning))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "tunekit._hookspecs moved to tunekit.hookspecs" in out.stdout
    assert "tunekit.isolated moved to tunekit.measure.isolated" in out.stdout
    assert "tunekit.timing moved to tunekit.measure.timing" in out.stdout
