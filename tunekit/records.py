"""What measuring a config gives: the record types every other module shares
(database, models, explorers, runners), below all of them."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

BUILD_ERROR, BUILD_TIMEOUT = "build error", "build timeout"
RUN_ERROR, RUN_TIMEOUT = "run error", "run timeout"
WRONG_ANSWER, DEVICE_LOST = "wrong answer", "device lost"
#: every error kind a Trial or Outcome may carry; DEVICE_LOST is never the config's fault (not recorded as a trial)
ERROR_KINDS = (BUILD_ERROR, BUILD_TIMEOUT, RUN_ERROR, RUN_TIMEOUT, WRONG_ANSWER, DEVICE_LOST)


@dataclass
class Trial:
    """One measured config: its costs (seconds per run, one per repeat) or its error.

    Attributes:
        index: the config's index in its task's space (a Python int of any size).
        config: the knob values, as JSON-able data (`ConfigEntity.to_json()`).
        costs: seconds per run, one per timed repeat; empty when the trial failed.
        error: None, or one of `ERROR_KINDS`.
        message: what went wrong (or a note, e.g. "timed by one run").
        build_s, run_s: seconds spent building and running it.
        timestamp: when it was measured (`time.time()`).
        space: the fingerprint of the config space `index` is an index of (`ConfigSpace.fingerprint`).
        code: the fingerprint of the code that generated its program (`TaskSpace.code`); "" when unknown.
        candidate: the `tunekit.Candidate` of the config (set by the tuner before models see it).
    """
    index: int
    config: dict
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = field(default_factory=time.time)
    space: str = ""
    code: str = ""
    candidate: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def cost(self) -> float:
        """Median seconds per run (inf when the trial failed)."""
        return statistics.median(self.costs) if self.ok else float("inf")

    def gflops(self, flops: int) -> float:
        return flops / self.cost / 1e9 if self.ok else 0.0


@dataclass
class Outcome:
    """What building or running one artifact gave.

    Attributes:
        artifact: the built `tunekit.Artifact` (builds only).
        costs: seconds per run, one per timed repeat (runs only).
        error: None, or one of `ERROR_KINDS`.
        message: what went wrong.
        seconds: wall time the build or the run took.
    """
    artifact: Any = None
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    seconds: float = 0.0
