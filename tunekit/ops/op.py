"""Operators and schedule templates."""
from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tunekit.errors import ArgumentError

#: element types an op may be declared with (a target may support fewer: `Target.dtypes`)
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
#: the largest extent of any axis: index arithmetic of every target fits int64 with room to spare
MAX_SIZE = 2**31 - 1
#: an axis extent (a positive int up to MAX_SIZE); use it for the size fields of an op's Args
Size = Annotated[int, Field(ge=1, le=MAX_SIZE)]
_INT64 = 2**63
#: the `op` of a generic template: one that schedules any op from its computation alone
ANY_OP = "*"


class OpArgs(BaseModel):
    """Base of an op's argument schema (pydantic): extra keys are errors."""
    model_config = ConfigDict(extra="forbid")
    dtype: Literal[DTYPES] = Field("float32", description="Element type of every tensor of the op.")


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
    #: whether generic templates (`ANY_OP`: schedules generated from the computation) may schedule it;
    #: False for an op that only its own templates make fast (conv2d_winograd's unrolled transforms)
    generated: bool = True
    _buffers: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def canonical(self, args: dict) -> dict:
        """Return the validated args with defaults filled in.

        Raises:
            ArgumentError: naming each bad field and what it must be, or a size
                whose buffers or flop count cannot be counted in 64 bits.
        """
        from tunekit.ops.epilogue import strip_defaults
        from tunekit.ops.layout import strip_default_layout
        try:
            # a plain op keeps its key: no epilogue, default layout
            canon = strip_default_layout(strip_defaults(self.Args(**args).model_dump()))
        except ValidationError as e:
            lines = [f"args{''.join(f'.{x}' for x in err['loc'])}: {err['msg']}"
                     + ("" if err["type"] == "missing" or not err["loc"] else f" (got {err['input']!r})")
                     for err in e.errors()]
            raise ArgumentError(f"op {self.name!r}: " + "; ".join(lines)) from None
        if problem := self.too_large(canon):
            raise ArgumentError(f"op {self.name!r}: args: {problem}")
        return canon

    def buffers(self, args: dict) -> list[tuple[str, tuple, str]]:
        """(name, shape, dtype) of every kernel argument, inputs then outputs."""
        # cached: planning a network asks it of the same args many times, and a computation of many
        # stages (Winograd's) takes milliseconds to build
        key = json.dumps(args, sort_keys=True, default=str)
        if key not in self._buffers:
            self._buffers[key] = [(t.name, tuple(t.shape), t.dtype) for t in self.compute(**args)]
        return list(self._buffers[key])

    def buffer_bytes(self, args: dict) -> int:
        """Bytes of all the kernel's arrays together."""
        return sum(math.prod(shape) * np.dtype(dtype).itemsize for _, shape, dtype in self.buffers(args))

    def too_large(self, args: dict) -> str:
        """Why sizes `args` cannot be recorded (flops or bytes beyond 64 bits), else ""."""
        flops, nbytes = self.flops(**args), self.buffer_bytes(args)
        if flops >= _INT64 or nbytes >= _INT64:
            return (f"{flops:.3g} flops and {nbytes:.3g} bytes of arrays do not fit 64-bit counters; "
                    "use smaller sizes")
        return ""

    def key(self, args: dict) -> str:
        """Workload key: a hash of the op name and its canonical args."""
        blob = json.dumps([self.name, self.canonical(args)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def random_inputs(self, args: dict, rng: np.random.Generator) -> list[np.ndarray]:
        """Fresh random inputs (uniform in [-1, 1) for floats)."""
        tensors = self.compute(**args)
        return [(rng.uniform(-1, 1, t.shape) if t.dtype.startswith("float") else rng.integers(-8, 8, t.shape))
                .astype(t.dtype) for t in tensors[: len(tensors) - self.num_outputs]]

    def output_shapes(self, args: dict) -> list[tuple[tuple, str]]:
        tensors = self.compute(**args)
        return [(t.shape, t.dtype) for t in tensors[len(tensors) - self.num_outputs:]]

    def anchor_args(self, args: dict) -> dict:
        """`args` without a fused epilogue (the anchor op's args: its records serve the fused op)."""
        from tunekit.ops.epilogue import anchor_args
        return anchor_args(args)

    def fuses_epilogue(self, args: dict) -> bool:
        """Whether `args` ask for a fused epilogue (bias, residual, activation)."""
        from tunekit.ops.epilogue import has_epilogue
        return has_epilogue(args)

    def portable(self, args: dict) -> str | None:
        """Plain data that rebuilds this op in another process; None: it is found there by name."""
        return None

    def tolerance(self, args: dict, inputs: list | None = None) -> tuple:
        """Return (rtol, atol) for comparing outputs with the reference: they scale with the reduction
        length. An op whose rounding depends on its data (Winograd's transforms) reads `inputs`, the arrays
        the outputs are computed from, and may return atol as an array of the output's shape."""
        n = max(1, self.reduction_size(**args))
        return 1e-5 * math.sqrt(n) * 4, 1e-5 * n


@dataclass
class Template:
    """A schedule template: defines knobs on `cfg` and schedules the op.

    `fn(cfg, device, **args) -> (schedule, tensors)`; tensors in kernel
    parameter order. `targets` holds target names ("x86") or families ("cpu").
    A generic template has `op = ANY_OP` and `fn(op, cfg, device, **args)`: it
    schedules any op (its epilogue and layout included) from `op.compute(**args)`;
    a Task binds it to its op (`bound`).
    """
    op: str
    name: str
    targets: tuple
    fn: Callable[..., Any]
    priority: int = 0
    #: whether `fn` computes a fused epilogue (takes bias, residual, activation: `tunekit.ops.epilogue`)
    epilogue: bool = False
    #: whether `fn` schedules the blocked layouts ("NCHW{b}c": `tunekit.ops.layout`) instead of plain NCHW
    blocked: bool = False
    #: whether `fn` also takes matmul's B in column panels (`b_panel`: weights packed once, at compile time)
    panels: bool = False
    #: whether it schedules any op from its computation (set for `op = ANY_OP`; kept by `bound`)
    generic: bool = False
    #: who contributed it, e.g. "plugin 'acme', acme-tunekit 1.2": set by the registry, for messages
    origin: str = field(default="", compare=False, repr=False)

    def __post_init__(self):
        self.generic = self.generic or self.op == ANY_OP

    def bound(self, op: Op) -> Template:
        """This template for `op`: itself, or a generic template's copy whose `fn` takes the op's args."""
        return self if self.op != ANY_OP else replace(self, op=op.name, fn=functools.partial(self.fn, op))

    def serves(self, target, args: dict | None = None) -> bool:
        """Whether this template can schedule the op on `target` (with `args`: also its epilogue)."""
        from tunekit.ops.epilogue import has_epilogue
        from tunekit.ops.layout import block_of
        if args is not None and not self.generic and (has_epilogue(args) and not self.epilogue
                                                      or bool(block_of(args.get("layout"))) != self.blocked
                                                      or args.get("b_panel") and not self.panels):
            return False
        return target.name in self.targets or target.family in self.targets
