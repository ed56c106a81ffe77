"""The CostModel contract: predict which configs run fast (the paper's f-hat)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from tunekit.component import Component

if TYPE_CHECKING:
    from tunekit.records import Trial
    from tunekit.space import ConfigEntity


class Candidate:
    """A config as a cost model sees it: its values, its lowered program and its
    feature vectors (computed on first use, then cached by the task). Read the
    vectors of many candidates at once with `tunekit.feature_matrix`.

    Attributes:
        index: the config's index in its task's space (a Python int).
        config: its `ConfigEntity` (`config[knob]` gives a knob's value, `to_json()` all of them).
        program: (property) the lowered loop-IR `tunekit.ir.Program`, lowered on first use.
    """

    def __init__(self, index: int, config: ConfigEntity, program: Callable, features: Callable,
                 prefetch: Callable | None = None):
        self.index, self.config = index, config
        self._program, self._features, self._prefetch = program, features, prefetch

    @property
    def program(self):
        """The lowered loop-IR Program of this config."""
        return self._program(self.index)

    def features(self, kind: str = "knob") -> np.ndarray:
        """The feature vector of kind `kind` ("knob", "flatten", "relation", ...)."""
        return self._features(self.index, kind)


def feature_matrix(candidates, kind: str = "knob", width: int | None = None) -> np.ndarray:
    """Return the feature vectors of kind `kind` of `candidates`, one row each.

    The vectors a task has not cached yet are extracted in one batch per task,
    across the tuner's build workers while it tunes (program features lower
    every config). Prefer it to calling `Candidate.features` in a loop.

    Args:
        candidates: Candidates, of one task or several.
        kind: the feature kind ("knob", "flatten", "relation", "curve").
        width: pad with zeros or truncate every row to this length (default: the longest vector).
    Returns:
        float32 array of shape (len(candidates), width).
    """
    candidates = list(candidates)
    batches: dict = {}
    for c in candidates:
        if c._prefetch is not None:
            batches.setdefault(c._prefetch, []).append(c.index)
    for prefetch, indices in batches.items():
        prefetch(indices, kind)
    vectors = [c.features(kind) for c in candidates]
    width = max((len(v) for v in vectors), default=0) if width is None else width
    out = np.zeros((len(vectors), width), np.float32)
    for i, v in enumerate(vectors):
        out[i, :min(width, len(v))] = v[:width]
    return out


class CostModel(Component):
    """Scores configs so that the explorer measures promising ones first.

    Higher scores mean faster programs. A model sees the trials of one task
    through `fit`, and optionally history from other tasks through `fit_history`.

    One model serves one task of a tuning run. Order of calls: `start` with the
    task's space; with transfer learning, `fit_history` (or `load` of a global
    model another task's model `save`d); `fit` on the task's earlier trials when it has any; then the
    explorer calls `predict` while proposing, and the core calls `fit` after
    every measured batch with all the task's trials so far. `predict` must
    return finite floats of shape (len(candidates),), else the core raises
    `tunekit.errors.PluginError` naming the model; any exception stops the
    tuning run (every trial measured so far is kept).
    """

    def start(self, space) -> None:
        """Prepare to serve the task of `space` before any fit: a pretrained model picks the
        weights of `space.target` and `space.device` here. The default does nothing.

        Args:
            space: the task's `tunekit.TaskSpace` (its task, target, device and config space).
        """

    def fit(self, trials: list[Trial]) -> None:
        """Train on the measured `trials` of the current task (all of them so far).

        Each `tunekit.Trial` has `.candidate` (a Candidate), `.costs` (seconds
        per run, one per timed repeat; empty when it failed), `.cost` (their
        median, inf when it failed), `.ok`, `.error` (None or an error kind) and
        `.config` (the knob values). Failed trials count as very slow.
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

    def pretrain(self, dataset) -> None:
        """Train the global (transfer) model on measured programs of many tasks, as
        `tunekit dataset train` does before `save`. The default cannot: NotImplementedError.

        Args:
            dataset: a `tunekit.tuning.dataset.Dataset`: `features` (one row per trial, of
                feature kind `dataset.kind`, one layout for every task), `seconds`, and `task`
                (which task each row measured: compare rows of one task only).
        """
        raise NotImplementedError(f"cost model {self.name!r} cannot be pretrained")

    def save(self, path: str) -> None:
        """Write the trained state to `path`."""
        raise NotImplementedError(f"cost model {self.name!r} cannot be saved")

    def load(self, path: str) -> None:
        """Read the trained state written by `save`."""
        raise NotImplementedError(f"cost model {self.name!r} cannot be loaded")
