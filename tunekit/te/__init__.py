"""Tensor expressions, schedules and lowering."""
from .lower import lower  # noqa: F401
from .schedule import Schedule, Stage, create_schedule  # noqa: F401
from .tensor import IterVar, Reduce, Tensor, TensorLoad, all_, compute, if_then_else, max, placeholder, reduce_axis, sum  # noqa: F401
