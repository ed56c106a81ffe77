# mypy: disable-error-code="empty-body"
"""The hooks a tunekit plugin implements (entry-point group "tunekit").

A plugin is a module of functions decorated with `@tunekit.hookimpl` whose names
are the hooks below. Discovery hooks take no arguments and return what they add;
tunekit calls each once per process when it first needs the registry (and again
after `tunekit.reload_plugins()` or a plugin is registered by hand).

What tunekit checks when it loads a plugin (a failure marks the plugin broken:
`tunekit plugins` lists it with the reason, its other contributions are skipped,
and a recipe naming one of its components is told so):
- a discovery hook that raises, or returns something other than a list (a dict
  for `tunekit_workloads`);
- a component that is not a class, or not a subclass of the hook's base class;
- a component `name` that is not lower-kebab (`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`);
- an `Options` that is not a subclass of `tunekit.Options`, or has a field
  without a default or without a `description`;
- a template that is not a `tunekit.Template`, an op that is not a `tunekit.Op`;
- a `@tunekit.hookimpl` whose name is none of the hooks below (a misspelling: the
  message names the nearest hook); `@tunekit.hookimpl(optionalhook=True)` is exempt.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from tunekit.commands import Command
    from tunekit.explorers import Explorer
    from tunekit.frontends import Frontend
    from tunekit.models import CostModel
    from tunekit.ops import Op, Template
    from tunekit.records import Trial
    from tunekit.runners import Runner
    from tunekit.targets import Target
    from tunekit.task import Task

hookspec = pluggy.HookspecMarker("tunekit")
#: decorate a plugin's hook implementations with this (`@tunekit.hookimpl`)
hookimpl = pluggy.HookimplMarker("tunekit")


@hookspec
def tunekit_targets() -> list[type[Target]]:
    """Contribute hardware targets.

    Returns:
        `tunekit.Target` subclasses (not instances).
    """


@hookspec
def tunekit_cost_models() -> list[type[CostModel]]:
    """Contribute cost models.

    Returns:
        `tunekit.CostModel` subclasses (not instances).
    """


@hookspec
def tunekit_explorers() -> list[type[Explorer]]:
    """Contribute explorers (search strategies).

    Returns:
        `tunekit.Explorer` subclasses (not instances).
    """


@hookspec
def tunekit_runners() -> list[type[Runner]]:
    """Contribute runners: where built kernels are checked and timed (`[measure] runner`).

    Returns:
        `tunekit.Runner` subclasses (not instances). The core provides `local`.
    """


@hookspec
def tunekit_frontends() -> list[type[Frontend]]:
    """Contribute frontends: readers of model files (`tunekit.compile_model`), chosen by file suffix.

    Returns:
        `tunekit.Frontend` subclasses (not instances). The built-in one reads ONNX.
    """


@hookspec
def tunekit_templates() -> list[Template]:
    """Contribute schedule templates.

    Returns:
        `tunekit.Template` objects: op name, template name, the targets or target
        family served, a priority and `fn(cfg, device, **args) -> (schedule, tensors)`.
        Among the templates serving an op on a target, a task uses the one it
        names, else the highest priority (ties: the first registered). Built-in
        priorities: CPU (x86, arm-cpu) 20 for each op's default (matmul `packed`,
        batch_matmul `packed`, conv2d `direct`, depthwise_conv2d `rows`, max_pool2d
        `rows`) and 10 for alternatives (matmul `tiled`, conv2d `nchwc`); GPU (cuda, opencl,
        mali) 10 for `gpu`, 5 for `shared` and `register`. A plugin outranks a
        built-in default with a priority above 20 (`tunekit plugins` lists them).
    """


@hookspec
def tunekit_ops() -> list[Op]:
    """Contribute operator definitions.

    Returns:
        `tunekit.Op` objects (name, argument schema, compute, numpy reference, flops).
    """


@hookspec
def tunekit_workloads() -> dict[str, tuple[str, dict]]:
    """Contribute named workloads.

    Returns:
        dict mapping a name ("resnet18.C6") to (op name, args dict).
    """


@hookspec
def tunekit_commands() -> list[Command]:
    """Add subcommands to the `tunekit` command line (the dask runner adds `tunekit worker`).

    Returns:
        `tunekit.commands.Command` objects: a name, a function taking the parsed
        `argparse.Namespace` and returning an exit code, one line of help, and the
        arguments, each made with `tunekit.commands.arg(...)`. A name that a
        built-in or another plugin's command already has is refused (the plugin is
        listed as broken).
    """


@hookspec
def tunekit_trial_measured(task: Task, trial: Trial) -> None:
    """Called in the tuning process after every measured trial is committed to the
    database (loggers, dashboards, notifications).

    If an implementation raises, tunekit warns once, naming the plugin and the
    error, and stops calling that implementation for the rest of the run; the
    tuning run goes on. Keep it fast: it runs between measurements.

    Args:
        task: the `tunekit.task.Task` being tuned.
        trial: the `tunekit.records.Trial` just measured (costs or error).
    """
