"""pytest fixtures for plugin tests; enable with `pytest_plugins = ["tunekit.testing.fixtures"]`."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from tunekit.testing.null_target import NULL_PLUGIN_NAME, null_plugin
from tunekit.testing.registration import plugin_registered


@pytest.fixture
def register_tunekit_plugin() -> Iterator[Callable[..., object]]:
    """Return `register(plugin, name="test-plugin", version=("", ""))`, which registers
    a plugin (module or object with hookimpls) until the test ends."""
    with contextlib.ExitStack() as stack:
        def register(plugin: object, name: str = "test-plugin", version: tuple[str, str] = ("", "")) -> object:
            return stack.enter_context(plugin_registered(plugin, name, version))
        yield register


@pytest.fixture
def null_target_plugin() -> Iterator[object]:
    """Register `tunekit.testing.null_plugin` (NullTarget "null" and its matmul
    template) for one test; yields the plugin."""
    from tunekit._version import __version__
    with plugin_registered(null_plugin, NULL_PLUGIN_NAME, ("tunekit", __version__)) as p:
        yield p
