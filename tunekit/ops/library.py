"""The built-in operator library, contributed through the same hooks as plugins."""
from __future__ import annotations

from .._plugins import hookimpl
from .matmul import matmul


@hookimpl
def tunekit_ops():
    return [matmul]


@hookimpl
def tunekit_workloads():
    return {"matmul-1024": ("matmul", {"M": 1024, "N": 1024, "K": 1024, "dtype": "float32"})}
