"""Measurement: build configs in worker processes, time them one at a time in an
isolated runner, check every result against the op's numpy reference."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

BUILD_ERROR, BUILD_TIMEOUT = "build error", "build timeout"
RUN_ERROR, RUN_TIMEOUT = "run error", "run timeout"
WRONG_ANSWER, DEVICE_LOST = "wrong answer", "device lost"
ERROR_KINDS = (BUILD_ERROR, BUILD_TIMEOUT, RUN_ERROR, RUN_TIMEOUT, WRONG_ANSWER, DEVICE_LOST)


@dataclass
class Trial:
    """One measured config: its costs (seconds per run, one per repeat) or its error."""
    index: int
    config: dict
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = field(default_factory=time.time)
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
