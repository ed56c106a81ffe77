"""The `genetic` explorer: a genetic algorithm over configs (the paper's GA
baseline when paired with the `random` model; model-guided otherwise)."""
from __future__ import annotations

import math

import numpy as np
from pydantic import Field

import tunekit

from ..common import Fresh, Scorer


class GeneticExplorer(tunekit.Explorer):
    """Keeps a population of configs. Fitness is normalized throughput (best
    cost / cost, failed 0) for measured members; an unmeasured member gets the
    throughput at the quantile its model score reaches among the measured
    configs' scores. Parents are chosen by tournament, a child takes each knob
    from either parent (`space.crossover`) and then mutates (each knob with
    `mutation_prob`, one `space.neighbor` move per mutation). Of the fresh
    children bred, the model's best n are proposed; the next population is the
    fittest `population` of the old one and the last proposed children (elitist)."""

    name = "genetic"

    class Options(tunekit.Options):
        population: int = Field(64, ge=2, description="Population size.")
        tournament: int = Field(3, ge=1, description="Members drawn per tournament; the fittest becomes a parent.")
        mutation_prob: float = Field(0.1, ge=0, le=1, description="Probability that a child's knob mutates "
                                                                 "(each knob independently).")
        oversample: int = Field(4, ge=1, description="Children bred per proposed config; the model ranks them "
                                                     "(1 = a plain GA: every fresh child is proposed).")

    def start(self, space, model, rng) -> None:
        super().start(space, model, rng)
        self._fresh = Fresh(space, rng)
        self._pop: list[int] = []
        self._pending: list[int] = []          # the last proposal, not yet in the population
        self._cost: dict[int, float] = {}     # measured index -> cost (inf when it failed)

    def observe(self, trials) -> None:
        self._cost.update((t.index, t.cost) for t in trials)

    def _fitness(self, members: list[int], score: Scorer) -> np.ndarray:
        costs = self._cost
        best = min(costs.values(), default=math.inf)
        thr = lambda i: best / costs[i] if math.isfinite(costs[i]) else 0.0
        fit = np.array([thr(i) if i in costs else 0.0 for i in members])
        todo = [k for k, i in enumerate(members) if i not in costs]
        if todo:
            s = score([members[k] for k in todo])
            if math.isfinite(best):   # calibrate scores to throughput through their ranks among measured configs
                q = np.searchsorted(np.sort(score(list(costs))), s, side="right") / len(costs)
                fit[todo] = np.quantile([thr(i) for i in costs], q)
            else:   # nothing ran yet: rank of the score in [0, 1]
                fit[todo] = np.argsort(np.argsort(s, kind="stable")) / max(1, len(s) - 1)
        return fit

    def _tournament(self, fit: np.ndarray) -> int:
        picks = [self.rng.randrange(len(fit)) for _ in range(self.options.tournament)]
        return max(picks, key=lambda k: (fit[k], -k))

    def propose(self, n: int) -> list[int]:
        if n <= 0:
            return []
        o, space, rng = self.options, self.space.space, self.rng
        score = Scorer(self.space, self.model)
        # survivors: the fittest of the population and the last children (now measured)
        pool = list(dict.fromkeys(self._pop + self._pending))
        if len(pool) < 2:
            pool = list(dict.fromkeys(pool + space.sample(rng, o.population)))
        children: dict[int, None] = {}
        if len(pool) >= 2:
            fit = self._fitness(pool, score)
            keep = np.argsort(-fit, kind="stable")[:o.population]
            self._pop, fit = [pool[i] for i in keep], fit[keep]
            want, tries = n * o.oversample, 0
            while len(children) < want and tries < 20 * want:
                tries += 1
                a, b = self._pop[self._tournament(fit)], self._pop[self._tournament(fit)]
                child = space.crossover(a, b, rng)
                for _ in range(sum(rng.random() < o.mutation_prob for _ in range(len(space.knobs)))):
                    child = space.neighbor(child, rng)
                if not self._fresh.seen(child):
                    children[child] = None
        kids = list(children)
        if len(kids) < n:   # converged or small space: fresh configs keep the search going
            kids += self._fresh.draw(n - len(kids), exclude=kids)
        if len(kids) > n:
            kids = [kids[i] for i in np.argsort(-score(kids), kind="stable")[:n]]
        self._fresh.proposed.update(kids)
        self._pending = kids
        return kids


@tunekit.hookimpl
def tunekit_explorers():
    return [GeneticExplorer]
