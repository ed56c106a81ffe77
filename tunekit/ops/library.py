"""The built-in operator library, contributed through the same hooks as plugins."""
from __future__ import annotations

from .._hookspecs import hookimpl
from .batch_matmul import batch_matmul
from .conv2d import conv2d
from .dense import dense
from .depthwise_conv2d import depthwise_conv2d
from .group_conv2d import group_conv2d
from .matmul import matmul
from .pool import avg_pool2d, global_avg_pool2d, max_pool2d
from .workloads import workloads


@hookimpl
def tunekit_ops():
    return [matmul, batch_matmul, dense, conv2d, group_conv2d, depthwise_conv2d, max_pool2d, avg_pool2d,
            global_avg_pool2d]


@hookimpl
def tunekit_workloads():
    return workloads()
