"""The Explorer contract: choose which configs to measure next."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

from tunekit.component import Component

if TYPE_CHECKING:
    from tunekit.models import CostModel
    from tunekit.records import Trial
    from tunekit.task import TaskSpace


class Explorer(Component):
    """Proposes batches of unmeasured configs, guided by a cost model.

    One explorer serves one task of a tuning run. Order of calls: `start` once
    (after the model was fit on the trials already in the database, if any), then
    per batch `propose(n)`, the core measures the proposals, fits the model on
    every trial of the task (`model.fit`), then `observe(batch)`; repeated until
    the budget is spent or `propose` returns nothing and the core's random picks
    find nothing either.

    What the core enforces: each proposal must be an int in
    `range(space.space.size)`, valid (`space.space.valid`), never measured and
    not repeated, and at most `n` of them; the others are dropped (with one
    `tunekit.tuning.guard.TunekitWarning` naming the plugin per run) and the core fills
    the batch with random valid picks, as it does for epsilon-greedy. An
    exception from any method stops the tuning run (every trial measured so far
    is kept). The model an explorer receives checks its own predictions: a
    `predict` returning anything but finite floats of shape (n,) raises
    `tunekit.errors.PluginError` naming the model.
    """

    def start(self, space: TaskSpace, model: CostModel, rng: random.Random) -> None:
        """Begin exploring `space` for one task.

        Args:
            space: the task (a `tunekit.TaskSpace`): `space.space` is its
                `ConfigSpace` (`size`, `valid`, `sample`, `neighbor`, `crossover`, `get`),
                `space.candidates(indices)` makes the Candidates that
                `model.predict` scores, `space.measured` holds the indices already
                measured (also those from earlier runs; updated as trials come in).
            model: the cost model to consult (it is refit between batches).
            rng: the only source of randomness to use, for reproducible runs.
        """
        self.space, self.model, self.rng = space, model, rng

    def propose(self, n: int) -> list[int]:
        """Return up to `n` distinct valid config indices never measured before
        (fewer, or none, when the space is exhausted)."""
        raise NotImplementedError

    def observe(self, trials: list[Trial]) -> None:
        """Learn from a measured batch (the model was already refit on it).

        Args:
            trials: the batch's `tunekit.Trial`s, failed ones included (`.ok` is False).
        """
