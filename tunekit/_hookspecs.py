"""The hooks a tunekit plugin implements (entry-point group "tunekit").

A plugin is a module of functions decorated with `@tunekit.hookimpl` whose names
are the hooks below. Discovery hooks take no arguments and return what they add.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("tunekit")


@hookspec
def tunekit_targets():
    """Contribute hardware targets.

    Returns:
        list of `tunekit.Target` subclasses.
    """


@hookspec
def tunekit_cost_models():
    """Contribute cost models.

    Returns:
        list of `tunekit.CostModel` subclasses.
    """


@hookspec
def tunekit_explorers():
    """Contribute explorers (search strategies).

    Returns:
        list of `tunekit.Explorer` subclasses.
    """


@hookspec
def tunekit_templates():
    """Contribute schedule templates.

    Returns:
        list of `tunekit.Template`: op name, template name, the targets or target
        family served, a priority (highest serves by default) and
        `fn(cfg, device, **args) -> (schedule, tensors)`.
    """


@hookspec
def tunekit_ops():
    """Contribute operator definitions.

    Returns:
        list of `tunekit.Op` (name, argument schema, compute, numpy reference, flops).
    """


@hookspec
def tunekit_workloads():
    """Contribute named workloads.

    Returns:
        dict mapping a name ("resnet18.C6") to (op name, args dict).
    """


@hookspec
def tunekit_trial_measured(task, trial):
    """Called after every measured trial (loggers, dashboards, notifications).

    Args:
        task: the `tunekit.Task` being tuned.
        trial: the `tunekit.measure.Trial` just measured (costs or error).
    """
