"""Tensor expressions, schedules and lowering."""
from .lower import lower  # noqa: F401
from .schedule import Schedule, Stage, create_schedule  # noqa: F401
from .tensor import (IterVar, Reduce, Tensor, TensorLoad, all_, compute, if_then_else, max,  # noqa: F401,A004
                     placeholder, reduce_axis, sum)
