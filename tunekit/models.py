"""The CostModel contract: predict which configs run fast (the paper's f-hat)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from .component import Component

if TYPE_CHECKING:
    from .measure import Trial
    from .space import ConfigEntity


class Candidate:
    """A config as a cost model sees it: its values, its lowered program and its
    feature vectors (computed on first use, then cached by the task)."""

    def __init__(self, index: int, config: ConfigEntity, program: Callable, features: Callable):
        self.index, self.config = index, config
        self._program, self._features = program, features

    @property
    def program(self):
        """The lowered loop-IR Program of this config."""
        return self._program(self.index)

    def features(self, kind: str = "knob") -> np.ndarray:
        """The feature vector of kind `kind` ("knob", "flatten", "relation", ...)."""
        return self._features(self.index, kind)


class CostModel(Component):
    """Scores configs so that the explorer measures promising ones first.

    Higher scores mean faster programs. A model sees the trials of one task
    through `fit`, and optionally history from other tasks through `fit_history`.
    """

    def fit(self, trials: list[Trial]) -> None:
        """Train on the measured `trials` of the current task (all of them so far).

        Each trial has `.candidate` (a Candidate), `.costs` (seconds, empty when
        it failed) and `.error`. Failed trials count as very slow.
        """
        raise NotImplementedError

    def predict(self, candidates: list[Candidate]) -> np.ndarray:
        """Score `candidates`.

        Returns:
            float array of len(candidates); higher = predicted faster. Only the
            order matters to explorers.
        """
        raise NotImplementedError

    def fit_history(self, records: list[Trial]) -> None:
        """Train the global (transfer) model on trials of other workloads.
        The default ignores history: a model that cannot transfer does nothing."""

    def save(self, path: str) -> None:
        """Write the trained state to `path`."""
        raise NotImplementedError(f"cost model {self.name!r} cannot be saved")

    def load(self, path: str) -> None:
        """Read the trained state written by `save`."""
        raise NotImplementedError(f"cost model {self.name!r} cannot be loaded")
