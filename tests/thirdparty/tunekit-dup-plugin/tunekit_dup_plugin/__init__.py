"""A plugin whose cost model is named "random", like the built-in one (test fixture)."""
from __future__ import annotations

import numpy as np

import tunekit


class DupRandomModel(tunekit.CostModel):
    """Scores every candidate 0 (its only purpose is its clashing name)."""

    name = "random"

    class Options(tunekit.Options):
        pass

    def fit(self, trials) -> None:
        pass

    def predict(self, candidates) -> np.ndarray:
        return np.zeros(len(candidates))


@tunekit.hookimpl
def tunekit_cost_models():
    return [DupRandomModel]
