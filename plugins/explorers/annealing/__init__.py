"""The `annealing` explorer: the paper's parallel simulated annealing with
diversity-aware batch selection (Sec. 3.3, Algorithm 1, Eq. 3)."""
from __future__ import annotations

import math

import numpy as np
from pydantic import Field

import tunekit

from ..common import Fresh, Scorer


class AnnealingExplorer(tunekit.Explorer):
    """A batch of Markov chains walks the config space with the model's score as
    (negative) energy; moves change one knob (`space.neighbor`). The chains
    persist across model updates, and each proposal restarts its lowest-scored
    chains from the best measured configs. Every config visited is a candidate;
    the batch is picked greedily from the top `top_multiple * n` unmeasured ones,
    maximizing the sum of their normalized scores (rank in the pool, 1 = best,
    0 = worst) plus `diversity` times the number of distinct knob values the
    batch covers (Eq. 3)."""

    name = "annealing"

    class Options(tunekit.Options):
        n_chains: int = Field(128, ge=1, description="Markov chains walked in parallel (one model call per step).")
        steps: int = Field(64, ge=0, description="Steps of every chain per proposal. Each step scores up to "
                                                 "n_chains new configs: with program features each needs a "
                                                 "lowering, so fewer steps keep proposals fast.")
        temperature_start: float = Field(1.0, ge=0, description="Temperature of the first step, in units of "
                                                                "the spread (std) of the chains' scores.")
        temperature_end: float = Field(0.0, ge=0, description="Temperature of the last step (linear schedule).")
        restarts: int = Field(8, ge=0, description="Chains moved to the best measured configs at each proposal.")
        top_multiple: float = Field(2.0, ge=1, description="Lambda of Eq. 3: the batch of n is picked from the "
                                                           "top lambda*n candidates.")
        diversity: float = Field(0.2, ge=0, description="Alpha of Eq. 3: weight of each newly covered knob value "
                                                        "against normalized scores in [0, 1]; 0 = plain top-n.")

    def start(self, space, model, rng) -> None:
        super().start(space, model, rng)
        self._fresh = Fresh(space, rng)
        self._points: list[int] = []
        self._best: dict[int, float] = {}   # measured index -> cost

    def observe(self, trials) -> None:
        self._best.update((t.index, t.cost) for t in trials if t.ok)

    def propose(self, n: int) -> list[int]:
        if n <= 0:
            return []
        o, space, rng = self.options, self.space.space, self.rng
        score = Scorer(self.space, self.model)
        points = self._points or space.sample(rng, o.n_chains)
        if points:
            points = self._restart(points, score)
            current = score(points)
            scale = float(current.std()) or 1.0
            for step in range(o.steps):
                temp = o.temperature_start + (o.temperature_end - o.temperature_start) * step / max(1, o.steps - 1)
                moved = [space.neighbor(p, rng) for p in points]
                new = score(moved)
                gain = (new - current) / scale
                draws = np.array([rng.random() for _ in points])
                with np.errstate(over="ignore", divide="ignore"):
                    accept = (gain >= 0) | (draws < np.exp(gain / temp) if temp > 0 else False)
                points = [m if a else p for m, p, a in zip(moved, points, accept)]
                current = np.where(accept, new, current)
            self._points = points
        pool = [i for i in score.cache if not self._fresh.seen(i)]
        want = math.ceil(o.top_multiple * n)
        if len(pool) < want:   # chains stuck among measured configs (small spaces): add fresh ones
            pool += self._fresh.draw(want - len(pool), exclude=pool)
        if not pool:
            return []
        scores = score(pool)
        order = np.argsort(-scores, kind="stable")[:want]
        picks = select_diverse(space, [pool[i] for i in order], n, o.diversity)
        self._fresh.proposed.update(picks)
        return picks

    def _restart(self, points: list[int], score: Scorer) -> list[int]:
        """Move the lowest-scored chains to the best measured configs not already walked."""
        walked = set(points)
        best = [i for i in sorted(self._best, key=self._best.get) if i not in walked][:self.options.restarts]
        if not best:
            return points
        worst = np.argsort(score(points), kind="stable")[:len(best)]
        points = list(points)
        for slot, i in zip(sorted(worst.tolist()), best):
            points[slot] = i
        return points


def select_diverse(space, ranked: list[int], n: int, alpha: float) -> list[int]:
    """Greedy maximization of Eq. 3 over `ranked` (best first): each pick adds
    its normalized score (1 for the best of the pool, 0 for the worst) plus
    `alpha` times the knob values it covers that the picks so far do not."""
    if alpha <= 0 or len(ranked) <= n:
        return ranked[:n]
    p = len(ranked)
    quality = 1.0 - np.arange(p) / (p - 1)
    choices = np.array([space.choices(i) for i in ranked], np.int64)     # (pool, knobs)
    covered = np.zeros(choices.shape, bool)
    free = np.ones(p, bool)
    picks = []
    for _ in range(n):
        gain = np.where(free, quality + alpha * (~covered).sum(axis=1), -np.inf)
        r = int(np.argmax(gain))
        picks.append(ranked[r])
        free[r] = False
        covered |= choices == choices[r]
    return picks


@tunekit.hookimpl
def tunekit_explorers():
    return [AnnealingExplorer]
