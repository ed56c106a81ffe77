"""What the built-in explorers share (public tunekit API only): drawing fresh
configs, and scoring configs with the model once per proposal."""
from __future__ import annotations

import numpy as np

# Spaces up to this size are enumerated once, so that an explorer can exhaust them
ENUMERATE_BELOW = 1 << 16


class Fresh:
    """Valid configs of a task not measured or proposed yet."""

    def __init__(self, space, rng):
        self.space, self.rng = space, rng
        self.proposed: set[int] = set()
        self._all = [i for i in range(space.size) if space.space.valid(i)] if space.size <= ENUMERATE_BELOW else None

    def seen(self, i: int) -> bool:
        return i in self.proposed or i in self.space.measured

    def draw(self, n: int, exclude=()) -> list[int]:
        """Up to `n` fresh configs (not in `exclude`) at random; on small spaces
        every fresh config is found, so fewer than `n` means there are no more."""
        if n <= 0:
            return []
        skip = set(exclude)
        if self._all is not None:
            left = [i for i in self._all if not self.seen(i) and i not in skip]
            return left if len(left) <= n else self.rng.sample(left, n)
        return [i for i in self.space.space.sample(self.rng, 2 * n + 8) if not self.seen(i) and i not in skip][:n]


class Scorer:
    """Model scores of configs, each computed once while the model stays the same."""

    def __init__(self, space, model):
        self.space, self.model = space, model
        self.cache: dict[int, float] = {}

    def __call__(self, indices: list[int]) -> np.ndarray:
        new = [i for i in dict.fromkeys(indices) if i not in self.cache]
        if new:
            scores = np.asarray(self.model.predict(self.space.candidates(new)), np.float64)
            self.cache.update(zip(new, scores.tolist()))
        return np.array([self.cache[i] for i in indices], np.float64)
