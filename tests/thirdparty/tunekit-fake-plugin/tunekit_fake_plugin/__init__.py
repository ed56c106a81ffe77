"""tunekit-fake-plugin: a cost model and an explorer for tunekit.

Written the way a third party would write a tunekit plugin: against the public
API only (`tunekit.CostModel`, `tunekit.Explorer`, `tunekit.Options`,
`tunekit.hookimpl`), registered through the entry point group "tunekit" in
pyproject.toml. tunekit's own tests install it to check plugin discovery.

Components:
    fake-linear  least-squares linear regression of log cost on knob features.
    fake-sweep   visits the configs in a seeded, strided order.
"""
from __future__ import annotations

import tunekit

from .linear import FakeLinearModel
from .sweep import FakeSweepExplorer

__version__ = "0.3.0"
__all__ = ["FakeLinearModel", "FakeSweepExplorer"]


@tunekit.hookimpl
def tunekit_cost_models():
    return [FakeLinearModel]


@tunekit.hookimpl
def tunekit_explorers():
    return [FakeSweepExplorer]
