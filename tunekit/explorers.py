"""The Explorer contract: choose which configs to measure next."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

from .component import Component

if TYPE_CHECKING:
    from .measure import Trial
    from .models import CostModel
    from .tuner import TaskSpace


class Explorer(Component):
    """Proposes batches of unmeasured configs, guided by a cost model."""

    def start(self, space: TaskSpace, model: CostModel, rng: random.Random) -> None:
        """Begin exploring `space` for one task.

        Args:
            space: the task's config space; `space.candidates(indices)` makes the
                Candidates that `model.predict` scores, `space.measured` holds the
                indices already measured (also those from earlier runs).
            model: the cost model to consult (it is refit between batches).
            rng: the only source of randomness to use, for reproducible runs.
        """
        self.space, self.model, self.rng = space, model, rng

    def propose(self, n: int) -> list[int]:
        """Return up to `n` distinct valid config indices never measured before
        (fewer, or none, when the space is exhausted)."""
        raise NotImplementedError

    def observe(self, trials: list[Trial]) -> None:
        """Learn from a measured batch (the model was already refit on it)."""
