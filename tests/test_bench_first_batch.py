"""bench/first_batch.py: each candidate differs from the shipped pretrained method in one thing only."""
from __future__ import annotations

from pathlib import Path

from checks import bench_script

first_batch = bench_script("first_batch")


def test_candidates_are_the_shipped_method_then_each_model_file_and_each_walk():
    methods = first_batch.candidates("/models/a.json,b.json", "256x16,top_multiple=4+diversity=0.5")
    assert list(methods) == ["shipped", "a.json", "b.json", "walk-256x16", "walk-top_multiple=4+diversity=0.5"]
    model, walk = methods["shipped"]
    assert model["pretrained"] is True and (walk["n_chains"], walk["steps"]) == (64, 8)
    assert methods["a.json"] == (dict(model, pretrained="/models/a.json"), walk)
    assert methods["b.json"][0]["pretrained"] == str(Path("b.json").resolve())
    assert methods["walk-256x16"] == (model, dict(walk, n_chains=256, steps=16))
    assert methods["walk-top_multiple=4+diversity=0.5"] == (model, dict(walk, top_multiple=4, diversity=0.5))
