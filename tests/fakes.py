"""Fake components for recipe and CLI tests (registered by the `fake` fixture)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Literal

from pydantic import Field

import tunekit


class FakeTarget(tunekit.Target):
    """A CPU that is never run."""
    name = "fake-cpu"
    family = "cpu"

    class Options(tunekit.Options):
        num_threads: int = Field(0, description="Threads (0 = all cores).")
        mcpu: str = Field("generic", description="CPU model.")


class FakeGpu(tunekit.Target):
    name = "fake-gpu"
    family = "gpu"

    @classmethod
    def available(cls):
        return "no fake GPU here"


class FakeModel(tunekit.CostModel):
    name = "fake-model"

    class Options(tunekit.Options):
        objective: Literal["rank", "regression"] = Field("rank", description="Loss.")
        trees: int = Field(10, description="Number of trees.")


class FakeExplorer(tunekit.Explorer):
    name = "fake-explorer"


def _template(name, targets=("cpu",)):
    return tunekit.Template("matmul", name, targets, lambda cfg, device, **args: None)


FAKE = SimpleNamespace(
    tunekit_targets=tunekit.hookimpl(lambda: [FakeTarget, FakeGpu]),
    tunekit_cost_models=tunekit.hookimpl(lambda: [FakeModel]),
    tunekit_explorers=tunekit.hookimpl(lambda: [FakeExplorer]),
    tunekit_templates=tunekit.hookimpl(lambda: [_template("direct"), _template("packed")]),
    tunekit_workloads=tunekit.hookimpl(lambda: {"fake.mm": ("matmul", {"M": 128, "N": 128, "K": 128})}),
)
