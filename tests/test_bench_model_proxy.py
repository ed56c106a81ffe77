"""bench/model_proxy.py: a replay draws 8 configs of the pool at random, then takes the model's
best-ranked ones, learning from what it has measured so far."""
from __future__ import annotations

import numpy as np
import pytest
from checks import bench_script

import tunekit

model_proxy = bench_script("model_proxy")

X86 = tunekit.registry().component("target", "x86")
pytestmark = pytest.mark.skipif(X86.available() is not None, reason=f"x86 cannot run here: {X86.available()}")
TASK = tunekit.Task("matmul", dict(M=32, N=32, K=32), template="tiled")


class Scored(tunekit.CostModel):
    """Ranks by a fixed score per candidate; records what each fit saw."""
    name = "scored-test"

    def __init__(self, score: dict):
        super().__init__()
        self.score, self.fits = score, []

    def fit(self, trials):
        self.fits.append(len(trials))

    def predict(self, candidates):
        return np.array([self.score[id(c)] for c in candidates])


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    root = tmp_path_factory.mktemp("layer")
    for seed in (0, 1):   # two random searches, partly of the same configs
        tunekit.tune([TASK], target="x86", model="random", explorer="random", trials=20, seed=seed,
                     database=str(root / f"random-seed{seed}.db"), tuning={"batch_size": 10},
                     measure={"min_repeat_ms": 1, "repeat": 2})
    (root / "grid-seed0.db").write_bytes(b"")   # not random search: left out
    return model_proxy.pool(str(root))


def test_the_pool_is_every_distinct_config_of_the_random_searches(pool):
    trials, space = pool
    keys = [(t.candidate.config.space.fingerprint() == space.space.fingerprint(), t.index) for t in trials]
    assert len(set(keys)) == len(trials) > 21 and all(k[0] for k in keys)
    assert all(t.candidate.index == t.index for t in trials)


@pytest.mark.parametrize("sign", [1, -1])
def test_after_8_random_draws_a_replay_takes_the_models_best_ranked(pool, sign):
    trials, space = pool
    speed = np.arange(len(trials), dtype=float)   # config k has speed k
    model = Scored({id(t.candidate): sign * k for k, t in enumerate(trials)})
    best = model_proxy.replay(model, space, trials, speed, seed=3)
    assert model.fits == [8, 16]
    first = np.random.default_rng([3, 7]).choice(len(trials), 8, replace=False)
    # ranked by speed: the fastest config comes first; ranked against it: the 8 draws keep their best,
    # unless it is among the 13 slowest of the rest
    want = len(trials) - 1 if sign > 0 else max(first.max(), sorted(set(range(len(trials))) - set(first))[12])
    assert best == want
