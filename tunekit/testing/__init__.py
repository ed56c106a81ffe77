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

from tunekit.testing.null_target import NULL_MATMUL, NULL_PLUGIN_NAME, NullTarget, null_plugin, simulated_trials
from tunekit.testing.registration import plugin_registered

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


def __getattr__(name: str):
    # the contract suites need pytest: import them only when asked for
    if name in ("TargetContract", "CostModelContract", "ExplorerContract"):
        from tunekit.testing import contract
        return getattr(contract, name)
    raise AttributeError(f"module 'tunekit.testing' has no attribute {name!r}")
