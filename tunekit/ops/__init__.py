"""Operator definitions with numpy references, and named workloads."""
from .op import Op, OpArgs, Template  # noqa: F401
