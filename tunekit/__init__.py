"""tunekit: learning to optimize tensor programs.

The public API is what this module exports (`__all__`) and the modules named in
`PUBLIC_MODULES`, the only ones a plugin imports. The packages are layers (see the
README's "How it works"); this module is the facade above them all.
"""
from tunekit._version import __version__  # noqa: F401  (in __all__)

#: where each public name is defined: imported on first use (PEP 562), so that `import tunekit.runtime`
#: on a machine that only runs saved models loads numpy and the standard library, not the compiler
_EXPORTS = {
    "Options": "component", "apply_history_best": "deploy.kernels", "build": "deploy.kernels",
    "CompiledModel": "deploy.network", "compile_model": "deploy.network", "extract_tasks": "deploy.network",
    "Explorer": "explorers", "Frontend": "frontends", "hookimpl": "hookspecs", "empty": "memory",
    "Candidate": "models", "CostModel": "models", "feature_matrix": "models", "Op": "ops", "OpArgs": "ops",
    "Size": "ops", "Template": "ops", "registry": "plugin.registry", "Recipe": "recipe.model",
    "load_recipe": "recipe.model", "tune": "recipe.run", "Outcome": "records", "Trial": "records",
    "Runner": "runners", "TimingPolicy": "runners", "Artifact": "targets", "DeviceInfo": "targets",
    "Library": "targets", "NetworkChoices": "targets", "RunSettings": "targets", "Target": "targets",
    "TaskSpace": "task", "TaskSpec": "task",
}
_RENAMED = {"register_plugin": ("plugin.manager", "register"), "reload_plugins": ("plugin.manager", "reload"),
            "unregister_plugin": ("plugin.manager", "unregister"), "Task": ("plugin.registry", "task")}


def __getattr__(name: str):
    import importlib
    module, attr = _RENAMED.get(name) or (_EXPORTS.get(name), name)
    if module is None:
        raise AttributeError(f"module 'tunekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tunekit.{module}"), attr)
    globals()[name] = value
    return value


__all__ = sorted(["__version__", *_EXPORTS, *_RENAMED])

#: the modules of tunekit a plugin may import (names below `tunekit.`; a package with its
#: submodules), besides this facade; the rest is internal. The built-in plugins keep to them
#: (tests/test_layers.py): a module joins this list by a decision, not by a plugin's import.
PUBLIC_MODULES = (
    # the contract: what a plugin implements or returns, and the hooks' reference
    "targets", "models", "explorers", "runners", "frontends", "hookspecs", "commands",
    # building blocks of templates, cost models and runners
    "task", "space", "features", "records", "errors",
    # the loop IR, tensor expressions, the frontend-neutral op library, op definitions, networks
    "ir", "te", "topi", "ops", "graph",
    # for runners: check and time one artifact, and do it in an isolated child with a deadline
    "measure.timing", "measure.isolated",
    # running saved models (numpy only): calling a kernel on arrays
    "runtime",
    # the test kit for plugin authors
    "testing",
)
