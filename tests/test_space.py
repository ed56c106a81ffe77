import json
import random

import pytest

from tunekit.errors import SpaceError
from tunekit.space import ConfigSpace


def make_space():
    s = ConfigSpace()
    s.define_split("a", 1024, num_outputs=4)
    s.define_split("b", 112, num_outputs=3, policy="power2")
    s.define_reorder("r", [0, 1, 2])
    s.define_annotate("ann", [0, 1], ["none", "unroll", "vec"])
    s.define_knob("k", [1, 2, 4])
    return s


def test_size_is_product_and_index_round_trips():
    s = make_space()
    assert s.size == 286 * len(s._knobs["b"]) * 6 * 9 * 3
    rng = random.Random(0)
    for _ in range(200):
        i = rng.randrange(s.size)
        e = s.get(i)
        assert s.index_of(s.choices(i)) == i
        assert s.from_json(json.loads(json.dumps(e.to_json()))).index == i


def test_split_values_cover_extent():
    s = make_space()
    for v in s._knobs["a"].values:
        assert v[0] * v[1] * v[2] * v[3] == 1024
    for v in s._knobs["b"].values:   # power-of-two inner sizes, outer covers 112 with a guarded tail
        assert v[0] * v[1] * v[2] >= 112 and all((x & (x - 1)) == 0 for x in v[1:])


def test_huge_space_is_never_enumerated():
    s = ConfigSpace()
    for n in range(8):
        s.define_split(f"s{n}", 1 << 12, num_outputs=4)
    assert s.size > 2 ** 60
    rng = random.Random(1)
    idx = s.sample(rng, 50)
    assert len(set(idx)) == 50
    for i in idx:
        n = s.neighbor(i, rng)
        assert sum(a != b for a, b in zip(s.choices(i), s.choices(n))) == 1
        c = s.crossover(i, idx[0], rng)
        assert all(x in (a, b) for x, a, b in zip(s.choices(c), s.choices(i), s.choices(idx[0])))


def test_constraints_filter_samples_and_neighbors():
    s = make_space()
    s.constrain(lambda c: c["k"] != 4)
    rng = random.Random(2)
    for i in s.sample(rng, 100):
        assert s.get(i)["k"] != 4
        assert s.get(s.neighbor(i, rng))["k"] != 4
    assert 0.5 < s.valid_fraction() < 0.8


def test_bad_index_and_unknown_value():
    s = make_space()
    with pytest.raises(SpaceError, match="outside this space"):
        s.get(s.size)
    with pytest.raises(SpaceError, match="has no value"):
        s.from_json({**s.get(0).to_json(), "k": 3})
