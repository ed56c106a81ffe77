"""The `grid` explorer: every config in index order (exhaustive search)."""
from __future__ import annotations

import tunekit


class GridExplorer(tunekit.Explorer):
    """Proposes config indices 0, 1, 2, ... in order, skipping invalid, measured
    and already proposed ones, until the space is exhausted. Ignores the model."""

    name = "grid"

    class Options(tunekit.Options):
        pass

    def start(self, space, model, rng) -> None:
        super().start(space, model, rng)
        self._next = 0

    def propose(self, n: int) -> list[int]:
        ts, out = self.space, []
        while len(out) < n and self._next < ts.size:
            i, self._next = self._next, self._next + 1
            if i not in ts.measured and ts.space.valid(i):
                out.append(i)
        return out


@tunekit.hookimpl
def tunekit_explorers():
    return [GridExplorer]
