"""Fused epilogues: what a network layer does to a convolution's output in the same
pass over memory: a per-output-channel bias, a residual input of the output's
shape, and an activation (relu, relu6).

An op that takes an epilogue has the `EpilogueArgs` fields; its kernel's
parameters are the anchor's inputs, then `bias` [channels] and `residual`
(output shape) when enabled, then the output. Args at their defaults are left
out of the canonical args, so a plain op keeps its workload key, and the config
space of a template never depends on the epilogue: a record tuned for the plain
op serves every epilogue of that shape (`Task.anchor()`).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from .. import ir, te

ACTIVATIONS = ("none", "relu", "relu6")
#: the epilogue fields at their defaults (no epilogue)
DEFAULTS = {"bias": False, "residual": False, "activation": "none"}


class EpilogueArgs(BaseModel):
    """The epilogue fields an op's Args class adds by subclassing this too."""
    bias: bool = Field(False, description="Add a per-output-channel bias (one more input, of shape [channels]).")
    residual: bool = Field(False, description="Add a residual input of the output's shape (one more input).")
    activation: Literal[ACTIVATIONS] = Field("none", description="Apply none, relu or relu6 (min(max(x, 0), 6)) "
                                             "last.")


def strip_defaults(args: dict) -> dict:
    """`args` without the epilogue fields that are at their defaults."""
    return {k: v for k, v in args.items() if not (k in DEFAULTS and v == DEFAULTS[k])}


def anchor_args(args: dict) -> dict:
    """The args of the same op without any epilogue."""
    return {k: v for k, v in args.items() if k not in DEFAULTS}


def has_epilogue(args: dict) -> bool:
    return any(args.get(k, d) != d for k, d in DEFAULTS.items())


class Epilogue:
    """The epilogue of one kernel: its extra input tensors and the expression it
    wraps around a value of the output (used by op computes and by templates, in
    the stage that writes the output)."""

    def __init__(self, channels: int, out_shape: tuple, dtype: str, bias: bool = False, residual: bool = False,
                 activation: str = "none", channel_axis: int = 1, block: int = 0):
        self.block = block   # a blocked output [N, C/b, H, W, b]: channel c is (index[1], index[-1])
        self.bias = te.placeholder((channels,), "bias", dtype) if bias else None
        self.residual = te.placeholder(tuple(out_shape), "residual", dtype) if residual else None
        self.activation, self.axis, self.dtype = activation, channel_axis, dtype

    @property
    def inputs(self) -> list:
        """The extra kernel inputs, in parameter order (bias, then residual)."""
        return [t for t in (self.bias, self.residual) if t is not None]

    def __call__(self, value, index: tuple):
        """`value` (of the output element at `index`) with the epilogue applied."""
        if self.bias is not None:
            c = index[1] * self.block + index[-1] if self.block else index[self.axis]
            value = value + self.bias[c]
        if self.residual is not None:
            value = value + self.residual[tuple(index)]
        if self.activation != "none":
            value = ir.max_(value, ir.cast(0, self.dtype))
        if self.activation == "relu6":
            value = ir.min_(value, ir.cast(6, self.dtype))
        return value


def fused(out: te.Tensor, channels: int, dtype: str, epilogue: dict, name: str, block: int = 0) -> list:
    """For op computes: the epilogue's inputs and the output, `out` itself or a stage
    `name` applying the epilogue to it (channels on axis 1, or blocked by `block`)."""
    if not has_epilogue(epilogue):
        return [out]
    epi = Epilogue(channels, out.shape, dtype, **epilogue, block=block)
    return [*epi.inputs, te.compute(out.shape, lambda *i: epi(out[i], i), name=name)]


def accumulator(s, out: te.Tensor, epilogue: dict, scope: str = "local") -> te.Tensor:
    """For templates: the stage that accumulates `out` in a `scope` buffer. Without an
    epilogue, a `cache_write` of `out`; with one (the op's compute then returns `out`
    as a stage applying it to the accumulation), the accumulation stage itself, in
    `scope`: the output stage applies the epilogue as it writes the tile out.

    Returns:
        the accumulating tensor (schedule its stage: split, compute_at, ...).
    """
    if not has_epilogue(epilogue):
        return s.cache_write(out, scope)
    acc = next(t for t in out.op.inputs if isinstance(t.op, te.tensor.ComputeOp))
    s[acc].scope = scope
    return acc


def reference(out: np.ndarray, extra: list, bias: bool = False, residual: bool = False, activation: str = "none",
              channel_axis: int = 1) -> np.ndarray:
    """numpy: apply the epilogue to `out` (float64 is fine), `extra` being the bias and residual arrays given."""
    extra = list(extra)
    if bias:
        b = extra.pop(0).astype(np.float64)
        out = out + b.reshape([-1 if d == channel_axis else 1 for d in range(out.ndim)])
    if residual:
        out = out + extra.pop(0)
    if activation != "none":
        out = np.maximum(out, 0)
    if activation == "relu6":
        out = np.minimum(out, 6)
    return out
