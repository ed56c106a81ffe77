"""The core's packages are layers: a module imports from its own layer and those below,
never from one above (type-checking imports included), and no imports go round in a cycle
(the loop IR's nodes and printer excepted). A few pairs the layer order allows are
forbidden still; the core loads modules by name only where listed; the built-in plugins
import only the modules the facade declares public. Names are resolved at the edge (the
plugin layer): a Task made from an Op object loads no plugin."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import tunekit

CORE = Path(tunekit.__file__).parent
ROOT = Path(__file__).resolve().parent.parent

#: the layers, lowest first: each names the top-level modules and packages of tunekit/ in it
LAYERS = [
    ["_version", "errors", "records", "memory", "component"],   # leaves
    ["runtime"],    # running saved models: numpy and the standard library only
    ["ir"],
    ["te"],
    ["topi"],       # the frontend-neutral op library: te computations
    ["ops"],
    ["graph"],
    ["space", "features"],
    ["targets", "models", "explorers", "runners", "frontends", "task", "hookspecs", "commands"],   # the contract
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
#: (importer package, imported package, why): imports the layer order allows, forbidden all the same,
#: directly or through other modules
FORBIDDEN = [
    ("tunekit.store", "tunekit.plugin", "records are data: a database is read and written without loading a "
                                        "plugin or resolving a name"),
    ("tunekit.graph", "tunekit.plugin", "a network holds Op objects: the frontend resolves names at the edge, "
                                        "the graph's passes never do"),
    ("tunekit.ops", "tunekit.graph", "an op is one operator: a network knows its ops, an op knows no network"),
]
#: what a by-name load names when it is computed at run time
COMPUTED = "<a name computed at run time>"
#: every by-name load in the core, which the import checks cannot see: (the loading module, or
#: pyproject.toml for its entry points and scripts; the tunekit module named, or COMPUTED) -> why.
#: Found: a call of importlib.import_module or __import__, and a string that is the name of a
#: tunekit module. A new one is a decision: add it here, with its reason.
BY_NAME = {
    ("tunekit.plugin.manager", "tunekit.builtin"): "the core's own plugins sit above the manager registering them",
    ("tunekit.builtin", "tunekit.ops"): "the op library's plugin name, not a load",
    ("tunekit.testing.null_target", "tunekit.testing"): "the test kit's plugin name, not a load",
    ("tunekit.measure.spawn", COMPUTED): "a spawned worker imports the parent's hand-registered plugin modules",
    ("tunekit.recipe.computed", COMPUTED): "a recipe's `compute = \"module:function\"` imports the user's module",
    ("tunekit", COMPUTED): "the facade imports a public name's module on first use (`import tunekit.runtime` "
                           "alone loads no compiler)",
    ("pyproject.toml", "tunekit.cli.main"): "the `tunekit` console script: the command line, the top layer",
}


def _modules(root: Path = CORE, package: str = "tunekit") -> dict[str, Path]:
    """Map the dotted name of every module under `root` (imported as `package`) to its file."""
    mods = {}
    for path in root.rglob("*.py"):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Return the tunekit modules that module `name` (file `path`) imports: at module level,
    lazily or for type checking. `mods` are the tunekit modules (`_modules()`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text())):
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


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Return the imports of `graph` (module -> the modules it imports) that point up the layers."""
    return [f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
            for m, deps in sorted(graph.items()) for d in sorted(deps) if _layer(d) > _layer(m)]


def test_every_import_points_down_the_layers():
    upward = _upward(_graph())
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    mods = _modules()
    bad = tmp_path / "records.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tunekit.cli.main import main\n"
                   "def f():\n    from tunekit.recipe.model import Recipe\n    return Recipe\n")
    deps = _imports("tunekit.records", bad, mods)
    assert deps == {"tunekit.recipe.model", "tunekit.cli.main"}
    assert len(_upward({"tunekit.records": deps})) == 2


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _forbidden(graph: dict[str, set[str]]) -> list[str]:
    """Return the FORBIDDEN imports in `graph`, each with the chain of imports that makes it."""
    found = []
    for importer, imported, why in FORBIDDEN:
        queue = sorted(m for m in graph if _in(m, importer))
        chains = {m: [m] for m in queue}
        for m in queue:   # breadth first: the first module of `imported` reached has the shortest chain
            for d in sorted(graph[m] - chains.keys()):
                chains[d] = [*chains[m], d]
                queue.append(d)
        reached = [m for m in queue if _in(m, imported)]
        if reached:
            found.append(f"{' -> '.join(chains[reached[0]])}: {importer} must not import {imported}: {why}")
    return found


def test_no_forbidden_import():
    found = _forbidden(_graph())
    assert not found, "forbidden imports:\n" + "\n".join(found)


def test_the_forbidden_check_sees_an_import_through_another_module(tmp_path):
    bad = tmp_path / "database.py"
    bad.write_text("from tunekit.measure.local import LocalRunner\n")
    graph = {**_graph(), "tunekit.store.database": _imports("tunekit.store.database", bad, _modules())}
    found = _forbidden(graph)
    assert len(found) == 1 and found[0].startswith("tunekit.store.database -> tunekit.measure.local -> ")
    assert "tunekit.store must not import tunekit.plugin" in found[0]


def _by_name(name: str, path: Path, mods: dict[str, Path]) -> set[tuple[str, str]]:
    """Return the by-name loads of module `name` (file `path`): (name, the tunekit module a string
    names, or COMPUTED for importlib.import_module or __import__ of a name not written in the module)."""
    tree = ast.parse(path.read_text())
    constants = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) for t in node.targets if isinstance(t, ast.Name)}
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            module = node.value.partition(":")[0]
            if module in mods and module != "tunekit":   # the facade is no layer to skip
                found.add((name, module))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args:
            arg = node.args[0]
            named = arg.value if isinstance(arg, ast.Constant) else constants.get(getattr(arg, "id", None))
            if not isinstance(named, str):
                found.add((name, COMPUTED))
    return found


def _entry_points(pyproject: Path, mods: dict[str, Path]) -> set[tuple[str, str]]:
    """Return ("pyproject.toml", module) for each script and entry point that names a tunekit module."""
    project = tomllib.loads(pyproject.read_text())["project"]
    groups = [project.get("scripts", {}), project.get("gui-scripts", {}), *project.get("entry-points", {}).values()]
    return {("pyproject.toml", module) for group in groups for value in group.values()
            if (module := value.partition(":")[0]) in mods}


def test_by_name_loads_are_the_listed_ones():
    mods = _modules()
    found = set().union(*(_by_name(name, path, mods) for name, path in mods.items()),
                        _entry_points(ROOT / "pyproject.toml", mods))
    assert found == set(BY_NAME), (f"by-name loads not in BY_NAME: {sorted(found - set(BY_NAME))}; "
                                   f"listed, not found: {sorted(set(BY_NAME) - found)}")


def test_the_by_name_check_sees_a_load(tmp_path):
    mods = _modules()
    bad = tmp_path / "records.py"
    bad.write_text('"""Load tunekit.recipe.model."""\nimport importlib\nRECIPE = "tunekit.recipe.model"\n'
                   "def f(name):\n    return importlib.import_module(RECIPE), __import__(name)\n")
    assert _by_name("tunekit.records", bad, mods) == {("tunekit.records", "tunekit.recipe.model"),
                                                      ("tunekit.records", COMPUTED)}
    toml = tmp_path / "pyproject.toml"
    toml.write_text('[project.entry-points.tunekit]\nops = "tunekit.ops"\nllvm = "tunekit_plugins.targets.llvm"\n')
    assert _entry_points(toml, mods) == {("pyproject.toml", "tunekit.ops")}


def _private_imports(plugin_files: dict[str, Path], mods: dict[str, Path]) -> list[str]:
    """Return the imports of tunekit modules that are not public (`tunekit.PUBLIC_MODULES`) in `plugin_files`."""
    def public(module: str) -> bool:
        return module == "tunekit" or any(_in(module, f"tunekit.{p}") for p in tunekit.PUBLIC_MODULES)
    return [f"{name} imports {d}" for name, path in sorted(plugin_files.items())
            for d in sorted(_imports(name, path, mods)) if not public(d)]


def test_the_plugins_import_only_public_modules():
    private = _private_imports(_modules(ROOT / "plugins", "tunekit_plugins"), _modules())
    assert not private, ("plugins/ imports modules that tunekit.PUBLIC_MODULES does not declare public:\n"
                         + "\n".join(private))


def test_the_public_check_sees_a_private_import(tmp_path):
    bad = tmp_path / "plugin.py"
    bad.write_text("from tunekit import te\nfrom tunekit.ops.matmul import matmul\n"
                   "from tunekit.store.database import Database\n")
    assert _private_imports({"tunekit_plugins.bad": bad}, _modules()) == [
        "tunekit_plugins.bad imports tunekit.store.database"]


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
