"""tunekit: learning to optimize tensor programs.

The public API is what this module exports (`__all__`) and these modules: the
contracts `tunekit.targets`, `tunekit.models`, `tunekit.explorers`, `tunekit.runners`,
`tunekit.frontends` and `tunekit.hookspecs` (the hooks' reference); `tunekit.task`,
`tunekit.space`, `tunekit.features`; the loop IR `tunekit.ir`; tensor expressions
`tunekit.te`; networks `tunekit.graph`; op definitions `tunekit.ops`; `tunekit.records`,
`tunekit.errors`, `tunekit.measure.timing` (checking and timing one artifact, for
runners), `tunekit.cli.commands` (subcommands for plugins) and the test kit
`tunekit.testing`. The packages are layers (see the README's "How it works");
this module is the facade above them all.
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
