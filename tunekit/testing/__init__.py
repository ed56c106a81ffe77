"""The public test kit for plugin authors.

- `NullTarget`: a simulated CPU target for tests without hardware (a test tool,
  never a real backend), and `null_plugin`, which contributes it and a matmul
  template for it.
- `plugin_registered(plugin, name)`: register a plugin for the duration of a
  `with` block.
- Contract suites (`tunekit.testing.contract`, needs pytest): subclass
  `TargetContract`, `CostModelContract` or `ExplorerContract` in a test module
  and set `target_class` / `model_class` / `explorer_class`.
- Fixtures (`pytest_plugins = ["tunekit.testing.fixtures"]`):
  `register_tunekit_plugin`, `null_target_plugin`.

This package imports pytest only in `contract` and `fixtures`.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .null_target import NULL_MATMUL, NULL_PLUGIN_NAME, NullTarget, null_plugin, simulated_trials

__all__ = [
    "NULL_MATMUL",
    "NULL_PLUGIN_NAME",
    "CostModelContract",
    "ExplorerContract",
    "NullTarget",
    "TargetContract",
    "null_plugin",
    "plugin_registered",
    "simulated_trials",
]


@contextlib.contextmanager
def plugin_registered(plugin: object, name: str, version: tuple[str, str] = ("", "")) -> Iterator[object]:
    """Register `plugin` (a module or object with `@tunekit.hookimpl` functions)
    under `name` for the duration of the block, then unregister it.

    Args:
        plugin: the plugin object.
        name: the plugin name the registry reports for its components.
        version: (distribution, version) shown for it, e.g. ("my-dist", "1.0").
    Yields:
        `plugin`. If it is already registered under `name`, it is left as it is
        (and not unregistered on exit), so blocks may nest.
    """
    from .. import _plugins
    pm = _plugins.plugins().pm
    if pm.get_plugin(name) is plugin:
        yield plugin
        return
    _plugins.plugins().register(plugin, name, version)
    try:
        yield plugin
    finally:
        # a test may have rediscovered plugins meanwhile (reload): then there is nothing to undo
        current = _plugins._PLUGINS
        if current is not None and current.pm.get_plugin(name) is plugin:
            current.unregister(name)


def __getattr__(name: str):
    # the contract suites need pytest: import them only when asked for
    if name in ("TargetContract", "CostModelContract", "ExplorerContract"):
        from . import contract
        return getattr(contract, name)
    raise AttributeError(f"module 'tunekit.testing' has no attribute {name!r}")
