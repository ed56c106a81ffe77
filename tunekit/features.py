"""Feature vectors of configs, selectable by name (the cost models' input).

`knob`: the config's knob values (log2 split sizes, one-hot reorder/annotate/choice).
"""
from __future__ import annotations

import math

import numpy as np

from .errors import TunekitError


def knob_features(space, index: int) -> np.ndarray:
    cfg = space.get(index)
    out: list[float] = []
    for k in space.knobs:
        v = cfg[k.name]
        if k.kind == "split":
            out += [math.log2(max(1, x)) for x in v]
        else:
            pos = k.values.index(v)
            out += [1.0 if i == pos else 0.0 for i in range(len(k))] if len(k) <= 32 else [float(pos)]
    return np.asarray(out, np.float32)


def extract(task_space, index: int, kind: str) -> np.ndarray:
    """The `kind` features of config `index` of `task_space`."""
    if kind == "knob":
        return knob_features(task_space.space, index)
    raise TunekitError(f"unknown feature kind {kind!r} (available: knob)")
