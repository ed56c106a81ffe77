"""Operators and schedule templates."""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict


class OpArgs(BaseModel):
    """Base of an op's argument schema (pydantic): extra keys are errors."""
    model_config = ConfigDict(extra="forbid")
    dtype: str = "float32"


@dataclass
class Op:
    """A tensor operator: its arguments, what it computes and how to check it."""
    name: str
    Args: type[OpArgs]
    #: compute(**args) -> tensors in kernel parameter order (inputs, then outputs)
    compute: Callable[..., list]
    #: reference(*input arrays, **args) -> list of output arrays (numpy)
    reference: Callable[..., list]
    #: flops(**args) -> floating point operations of one run
    flops: Callable[..., int]
    #: reduction_size(**args) -> length of the longest reduction (scales tolerances)
    reduction_size: Callable[..., int] = lambda **a: 1
    num_outputs: int = 1

    def canonical(self, args: dict) -> dict:
        """Validated args with defaults filled in."""
        return self.Args(**args).model_dump()

    def key(self, args: dict) -> str:
        """Workload key: a hash of the op name and its canonical args."""
        blob = json.dumps([self.name, self.canonical(args)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def random_inputs(self, args: dict, rng: np.random.Generator) -> list[np.ndarray]:
        """Fresh random inputs (uniform in [-1, 1) for floats)."""
        tensors = self.compute(**args)
        out = []
        for t in tensors[: len(tensors) - self.num_outputs]:
            if t.dtype.startswith("float"):
                out.append(rng.uniform(-1, 1, t.shape).astype(t.dtype))
            else:
                out.append(rng.integers(-8, 8, t.shape).astype(t.dtype))
        return out

    def output_shapes(self, args: dict) -> list[tuple[tuple, str]]:
        tensors = self.compute(**args)
        return [(t.shape, t.dtype) for t in tensors[len(tensors) - self.num_outputs:]]

    def tolerance(self, args: dict) -> tuple[float, float]:
        """(rtol, atol) that scale with the reduction length."""
        n = max(1, self.reduction_size(**args))
        return 1e-5 * math.sqrt(n) * 4, 1e-5 * n


@dataclass
class Template:
    """A schedule template: defines knobs on `cfg` and schedules the op.

    `fn(cfg, device, **args) -> (schedule, tensors)`; tensors in kernel
    parameter order. `targets` holds target names ("x86") or families ("cpu").
    """
    op: str
    name: str
    targets: tuple
    fn: Callable[..., Any]
    priority: int = 0

    def serves(self, target) -> bool:
        return target.name in self.targets or target.family in self.targets
