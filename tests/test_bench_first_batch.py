"""bench/first_batch.py: each candidate differs from the shipped pretrained method in one thing only."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))   # bench/first_batch.py imports bench/common.py and bench/search.py
_spec = importlib.util.spec_from_file_location("bench_first_batch", BENCH / "first_batch.py")
first_batch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_batch)


def test_candidates_are_the_shipped_method_then_each_model_file_and_each_walk():
    methods = first_batch.candidates("/models/a.json,b.json", "256x16,top_multiple=4+diversity=0.5")
    assert list(methods) == ["shipped", "a.json", "b.json", "walk-256x16", "walk-top_multiple=4+diversity=0.5"]
    model, walk = methods["shipped"]
    assert model["pretrained"] is True and (walk["n_chains"], walk["steps"]) == (64, 8)
    assert methods["a.json"] == (dict(model, pretrained="/models/a.json"), walk)
    assert methods["b.json"][0]["pretrained"] == str(Path("b.json").resolve())
    assert methods["walk-256x16"] == (model, dict(walk, n_chains=256, steps=16))
    assert methods["walk-top_multiple=4+diversity=0.5"] == (model, dict(walk, top_multiple=4, diversity=0.5))
