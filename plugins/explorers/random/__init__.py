"""The `random` explorer: uniform sampling of unmeasured valid configs."""
from __future__ import annotations

import tunekit

from ..common import ENUMERATE_BELOW


class RandomExplorer(tunekit.Explorer):
    """Proposes configs drawn uniformly at random, ignoring the model."""

    name = "random"

    class Options(tunekit.Options):
        pass

    def start(self, space, model, rng) -> None:
        super().start(space, model, rng)
        self._order = None
        if space.size <= ENUMERATE_BELOW:   # shuffled once; larger spaces are sampled (repeats: very unlikely)
            self._order = [i for i in range(space.size) if space.space.valid(i)]
            rng.shuffle(self._order)
        self._proposed: set[int] = set()

    def propose(self, n: int) -> list[int]:
        seen = self.space.measured | self._proposed
        if self._order is not None:
            out = []
            while self._order and len(out) < n:
                i = self._order.pop()
                if i not in seen:
                    out.append(i)
        else:
            out = [i for i in self.space.space.sample(self.rng, 2 * n) if i not in seen][:n]
        self._proposed.update(out)
        return out


@tunekit.hookimpl
def tunekit_explorers():
    return [RandomExplorer]
