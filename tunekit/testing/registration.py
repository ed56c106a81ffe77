"""Register a plugin for the duration of a `with` block (tests)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tunekit.plugin import manager as _plugins


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
