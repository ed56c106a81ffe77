"""How long a tuning run goes on, as one value: made once from the recipe's [tuning]
section (or with a command line's override) and handed to the scheduler and the
database's claim."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Budget:
    """The trials and time a tuning run may spend.

    Attributes:
        trials: trials per task on average; the scheduler may give a task up to twice that.
        time_budget_s: stop after this many seconds (None: no limit).
        early_stopping: stop a task after this many trials without a better config (None: never).
    """
    trials: int
    time_budget_s: float | None = None
    early_stopping: int | None = None

    @classmethod
    def of(cls, tuning) -> Budget:
        """The budget of a recipe's `tuning` section."""
        return cls(tuning.trials, tuning.time_budget_s, tuning.early_stopping)

    def with_trials(self, trials: int | None) -> Budget:
        """This budget with `trials` per task instead (None: unchanged)."""
        return self if trials is None else replace(self, trials=trials)

    def total(self, tasks: int) -> int:
        """Trials of a run over `tasks` tasks."""
        return self.trials * tasks

    @property
    def cap(self) -> int:
        """The most trials one task may take."""
        return 2 * self.trials

    def deadline(self) -> float | None:
        """The `time.monotonic()` at which a run started now must stop (None: never)."""
        return time.monotonic() + self.time_budget_s if self.time_budget_s else None

    def stalled(self, since_best: int) -> bool:
        """Whether a task `since_best` trials past its best config should stop early."""
        return self.early_stopping is not None and since_best >= self.early_stopping
