"""Tensor expressions, schedules, lowering, and the affine analysis of index
expressions that code generators use (`affine`); `evaluate` computes a te computation
with numpy, `to_data`/`from_data` describe one as plain data and `structural_hash`
hashes what it computes."""
from .bound import affine  # noqa: F401
from .evaluate import evaluate  # noqa: F401
from .lower import lower  # noqa: F401
from .schedule import Schedule, Stage, create_schedule  # noqa: F401
from .serialize import from_data, structural_hash, to_data  # noqa: F401
from .tensor import (  # noqa: F401
    IterVar,
    Reduce,
    Tensor,
    TensorLoad,
    all_,
    bf16x2,
    compute,
    dot2_bf16,
    dot4_u8s8,
    exp,
    fabs,
    fma,
    if_then_else,
    log,
    max,
    placeholder,
    reduce_axis,
    rint,
    sqrt,
    sum,
    tanh,
)
