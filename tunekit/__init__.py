"""tunekit: learning to optimize tensor programs.

The public API is what this module exports (`__all__`) and the modules named in
`PUBLIC_MODULES`, the only ones a plugin imports. The packages are layers (see the
README's "How it works"); this module is the facade above them all.
"""
from tunekit._version import __version__
from tunekit.component import Options
from tunekit.deploy.kernels import apply_history_best, build
from tunekit.deploy.network import CompiledModel, compile_model, extract_tasks
from tunekit.explorers import Explorer
from tunekit.frontends import Frontend
from tunekit.hookspecs import hookimpl
from tunekit.memory import empty
from tunekit.models import Candidate, CostModel, feature_matrix
from tunekit.ops import Op, OpArgs, Size, Template
from tunekit.plugin.manager import register as register_plugin
from tunekit.plugin.manager import reload as reload_plugins
from tunekit.plugin.manager import unregister as unregister_plugin
from tunekit.plugin.registry import registry
from tunekit.plugin.registry import task as Task
from tunekit.recipe.model import Recipe, load_recipe
from tunekit.recipe.run import tune
from tunekit.records import Outcome, Trial
from tunekit.runners import Runner, TimingPolicy
from tunekit.targets import Artifact, DeviceInfo, NetworkChoices, RunSettings, Target
from tunekit.task import TaskSpace, TaskSpec

__all__ = [
    "Artifact", "Candidate", "CompiledModel", "CostModel", "DeviceInfo", "Explorer", "Frontend", "NetworkChoices",
    "Op", "OpArgs", "Options", "Outcome", "Recipe", "RunSettings", "Runner", "Size", "Target", "Task", "TaskSpace",
    "TaskSpec", "Template", "TimingPolicy", "Trial", "__version__", "apply_history_best", "build", "compile_model",
    "empty", "extract_tasks", "feature_matrix", "hookimpl", "load_recipe", "register_plugin", "registry",
    "reload_plugins", "tune", "unregister_plugin",
]

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
    # the test kit for plugin authors
    "testing",
)
