"""tunekit: learning to optimize tensor programs.

The public API is what this module exports (`__all__`) and these modules: the
contracts `tunekit.targets`, `tunekit.models`, `tunekit.explorers`,
`tunekit.runners`, `tunekit.frontends` and `tunekit._hookspecs` (the hooks' reference); the loop IR
`tunekit.ir`; tensor expressions `tunekit.te`; networks `tunekit.graph`; op definitions `tunekit.ops`;
`tunekit.features`, `tunekit.records`, `tunekit.errors`, `tunekit.timing`
(checking and timing one artifact, for runners) and the test kit
`tunekit.testing`. Other modules whose names start with "_" are internal.
"""
from ._hookspecs import hookimpl
from ._plugins import register as register_plugin
from ._plugins import reload as reload_plugins
from ._plugins import unregister as unregister_plugin
from ._registry import registry
from ._version import __version__
from .component import Options
from .dispatch import apply_history_best, build
from .explorers import Explorer
from .frontends import Frontend
from .memory import empty
from .models import Candidate, CostModel, feature_matrix
from .network import CompiledModel, compile_model, extract_tasks
from .ops import Op, OpArgs, Size, Template
from .recipe import Recipe, load_recipe
from .records import Outcome, Trial
from .runners import Runner, TimingPolicy
from .targets import Artifact, DeviceInfo, RunSettings, Target
from .task import Task, TaskSpace, TaskSpec
from .tuner import tune

__all__ = [
    "Artifact", "Candidate", "CompiledModel", "CostModel", "DeviceInfo", "Explorer", "Frontend", "Op", "OpArgs",
    "Options", "Outcome", "Recipe", "RunSettings", "Runner", "Size", "Target", "Task", "TaskSpace", "TaskSpec",
    "Template", "TimingPolicy", "Trial", "__version__", "apply_history_best", "build", "compile_model", "empty",
    "extract_tasks", "feature_matrix", "hookimpl", "load_recipe", "register_plugin", "registry", "reload_plugins",
    "tune", "unregister_plugin",
]
