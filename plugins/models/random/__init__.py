"""The `random` cost model: scores every candidate at random.

It is the paper's ablation baseline (search without a learned model), not a
stub: an explorer guided by it explores blindly, which is what the baseline
measures.
"""
from __future__ import annotations

import numpy as np
from pydantic import Field

import tunekit


class RandomModel(tunekit.CostModel):
    """Random scores: the no-model baseline."""

    name = "random"

    class Options(tunekit.Options):
        seed: int = Field(0, description="Seed of the score generator.")

    def __init__(self, options=None):
        super().__init__(options)
        self._rng = np.random.default_rng(self.options.seed)

    def fit(self, trials) -> None:
        pass  # nothing to learn: that is the point of the baseline

    def predict(self, candidates) -> np.ndarray:
        return self._rng.random(len(candidates))

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.options.model_dump_json())

    def load(self, path: str) -> None:
        with open(path) as f:
            self.options = self.Options.model_validate_json(f.read())
        self._rng = np.random.default_rng(self.options.seed)


@tunekit.hookimpl
def tunekit_cost_models():
    return [RandomModel]
