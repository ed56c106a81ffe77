"""fake-linear: a linear cost model on knob features."""
from __future__ import annotations

import json
import math

import numpy as np
from pydantic import Field

import tunekit


class FakeLinearModel(tunekit.CostModel):
    """Least-squares (ridge) regression of each trial's log cost on its knob
    features plus a bias; predicts minus the predicted log cost (higher = faster).

    Failed trials count as slower than the slowest success by `failed_penalty`
    (in log seconds). Before any successful fit every candidate scores 0.
    """

    name = "fake-linear"

    class Options(tunekit.Options):
        l2: float = Field(1e-3, ge=0.0, description="Ridge penalty on the weights (not the bias).")
        failed_penalty: float = Field(1.0, ge=0.0, description="How much slower than the slowest "
                                                               "success a failed trial counts, in log seconds.")

    def __init__(self, options: Options | None = None):
        super().__init__(options)
        self.weights: np.ndarray | None = None

    @staticmethod
    def _design(candidates) -> np.ndarray:
        x = np.stack([np.asarray(c.features("knob"), np.float64) for c in candidates])
        return np.hstack([x, np.ones((len(x), 1))])

    def fit(self, trials) -> None:
        """Fit on all `trials` of the task; does nothing until one succeeded."""
        ok = [math.log(t.cost) for t in trials if t.ok]
        if not ok:
            return
        worst = max(ok) + self.options.failed_penalty
        y = np.array([math.log(t.cost) if t.ok else worst for t in trials])
        x = self._design([t.candidate for t in trials])
        reg = self.options.l2 * np.eye(x.shape[1])
        reg[-1, -1] = 0.0
        self.weights = np.linalg.lstsq(x.T @ x + reg, x.T @ y, rcond=None)[0]

    def predict(self, candidates) -> np.ndarray:
        """Minus the predicted log cost of each candidate (zeros before a fit)."""
        if self.weights is None or not candidates:
            return np.zeros(len(candidates))
        x = self._design(candidates)
        if x.shape[1] != len(self.weights):  # another task's knobs: no opinion
            return np.zeros(len(candidates))
        return -(x @ self.weights)

    def save(self, path: str) -> None:
        """Write the weights as JSON to `path`."""
        with open(path, "w") as f:
            json.dump({"weights": None if self.weights is None else self.weights.tolist()}, f)

    def load(self, path: str) -> None:
        """Read the weights written by `save`."""
        with open(path) as f:
            w = json.load(f)["weights"]
        self.weights = None if w is None else np.asarray(w, np.float64)
