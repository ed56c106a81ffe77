"""Generated schedules: the `auto` template, which schedules any op on any target
from its computation alone (no hand-written template needed).

It serves every op (`tunekit.ops.ANY_OP`) on the "cpu" and "gpu" families with the
lowest priority: a hand template, where there is one, stays the default, and a task
that names no template is tuned over the hand templates and `auto` together. The
space it defines is an ordinary `ConfigSpace`, so cost models, explorers, features,
transfer, records and the farm work on it unchanged. The rules are in `cpu` and `gpu`;
`analysis` reads the computation they apply to.
"""
from __future__ import annotations

from tunekit import Template, hookimpl
from tunekit.ops import ANY_OP


def generate(op, cfg, device, **args):
    """Define the generated space of `op(**args)` on `device` and schedule it for `cfg`."""
    from tunekit import te

    from . import cpu, gpu
    tensors = op.compute(**args)
    outputs = list(tensors[len(tensors) - op.num_outputs:])
    s = te.create_schedule(outputs)
    (gpu if device.family == "gpu" else cpu).schedule(s, outputs, cfg, device)
    return s, tensors


@hookimpl
def tunekit_templates():
    return [Template(ANY_OP, "auto", ("cpu", "gpu"), generate, priority=-1)]
