"""The core's own plugins, contributed through the same hooks as installed ones and
registered by name by the plugin manager before any entry point: the built-in op
library ("tunekit.ops") and the local runner ("tunekit.local-runner")."""
from __future__ import annotations

from tunekit.hookspecs import hookimpl
from tunekit.measure.local import LocalRunner
from tunekit.ops.batch_matmul import batch_matmul
from tunekit.ops.bconv2d import bconv2d
from tunekit.ops.bmatmul import bmatmul
from tunekit.ops.conv2d import conv2d
from tunekit.ops.conv2d_winograd import conv2d_winograd
from tunekit.ops.dense import dense
from tunekit.ops.depthwise_conv2d import depthwise_conv2d
from tunekit.ops.group_conv2d import group_conv2d
from tunekit.ops.lstm_step import lstm_step
from tunekit.ops.matmul import matmul
from tunekit.ops.mbconv import mbconv
from tunekit.ops.pool import avg_pool2d, global_avg_pool2d, max_pool2d
from tunekit.ops.qconv2d import qconv2d
from tunekit.ops.qdepthwise_conv2d import qdepthwise_conv2d
from tunekit.ops.qmatmul import qmatmul
from tunekit.ops.workloads import workloads


class Ops:
    """The built-in operators and named workloads."""

    @staticmethod
    @hookimpl
    def tunekit_ops():
        return [matmul, batch_matmul, dense, conv2d, conv2d_winograd, group_conv2d, depthwise_conv2d, max_pool2d,
                avg_pool2d, global_avg_pool2d, mbconv, lstm_step, qmatmul, qconv2d,
                qdepthwise_conv2d, bmatmul, bconv2d]

    @staticmethod
    @hookimpl
    def tunekit_workloads():
        return workloads()


class LocalRunnerPlugin:
    """The default runner: this machine."""

    @staticmethod
    @hookimpl
    def tunekit_runners():
        return [LocalRunner]


#: plugin name -> plugin object
PLUGINS = {"tunekit.ops": Ops, "tunekit.local-runner": LocalRunnerPlugin}
