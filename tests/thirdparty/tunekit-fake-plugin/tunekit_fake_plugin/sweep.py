"""fake-sweep: a strided sweep over the config space."""
from __future__ import annotations

import math

from pydantic import Field

import tunekit


class FakeSweepExplorer(tunekit.Explorer):
    """Visits configs in the order `(offset + k * stride) % size` for k = 0, 1, ...,
    skipping invalid and measured ones. The offset is drawn from the tuner's rng
    and the stride is coprime to the space size, so every config is visited once.
    The cost model is not consulted: this is a baseline, not a smart search.
    """

    name = "fake-sweep"

    class Options(tunekit.Options):
        stride: int = Field(0, ge=0, description="Step between visited indices (made coprime to the "
                                                 "space size); 0 draws one from the tuner's rng.")

    def start(self, space, model, rng) -> None:
        """Draw the sweep's offset (and stride) for `space`."""
        super().start(space, model, rng)
        size = space.size
        self._offset = rng.randrange(size)
        stride = self.options.stride or (rng.randrange(1, size) if size > 1 else 1)
        while math.gcd(stride, size) != 1:
            stride += 1
        self._stride, self._k = stride, 0

    def propose(self, n: int) -> list[int]:
        """The next `n` unmeasured valid configs of the sweep (fewer at its end)."""
        space, out = self.space, []
        while len(out) < n and self._k < space.size:
            i = (self._offset + self._k * self._stride) % space.size
            self._k += 1
            if i not in space.measured and space.space.valid(i):
                out.append(i)
        return out
