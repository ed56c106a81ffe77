"""Tensor expressions, schedules, lowering, and the affine analysis of index
expressions that code generators use (`affine`)."""
from .bound import affine  # noqa: F401
from .lower import lower  # noqa: F401
from .schedule import Schedule, Stage, create_schedule  # noqa: F401
from .tensor import IterVar, Reduce, Tensor, TensorLoad, all_, compute, if_then_else, max, placeholder, reduce_axis, sum  # noqa: F401
