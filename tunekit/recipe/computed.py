"""Recipe task tables that name a computation of the user's own
(`compute = "package.module:function"`, with `args`, `name`, `outputs`), or carry one
as data (a computed Task given to `tunekit.tune`: `compute` holds its `te.to_data`)."""
from __future__ import annotations

import importlib
import sys
from contextlib import contextmanager
from pathlib import Path

from tunekit.errors import ArgumentError, TunekitError
from tunekit.ops.computed import ComputedOp
from tunekit.plugin.registry import registry
from tunekit.recipe.errors import error
from tunekit.task import Task


def computed_task(compute: str | dict, name: str | None, outputs: int | None, args: dict, template: str | None,
                  base: str) -> Task:
    """Return the Task of a compute table: its function imported (a module beside the
    recipe, in folder `base`, is importable) or its computation rebuilt from data.

    Raises:
        ValidationError: naming the field at fault (compute, name or args) and the fix.
    """
    if isinstance(compute, str):
        module, _, attr = compute.partition(":")
        if not module or not attr.isidentifier():
            raise error([(("compute",), "expected \"package.module:function\"", compute)])
        try:
            with _importable_from(base):
                fn = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise error([(("compute",), f"cannot import module {module!r} ({e}); install its package, or put the "
                          "module beside the recipe", compute)]) from None
        except AttributeError:
            raise error([(("compute",), f"module {module!r} has no attribute {attr!r}", compute)]) from None
    try:   # a dict: a computed Task given to tunekit.tune, as data
        op = ComputedOp(fn, name, outputs or 1) if isinstance(compute, str) else ComputedOp.from_data(
            compute, name, outputs or 1)
    except ArgumentError as e:
        raise error([(("name",), str(e), name)]) from None
    reg = registry()
    try:
        return reg.computed_task(op, args, template=template)
    except ArgumentError as e:
        raise error([(("name" if op.name in reg.ops else "args",), str(e), None)]) from None
    except TunekitError as e:   # the function failed, or returned something other than te tensors
        raise error([(("compute",), str(e), None)]) from None


@contextmanager
def _importable_from(base: str):
    folder = str(Path(base).resolve())
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
