"""Operator definitions with numpy references, and named workloads.

Public: `Op`, `OpArgs`, `Size` (an axis extent field), `DTYPES`, `MAX_SIZE`,
`Template`, and the conv helpers `pair` (an int or (h, w) pair as a pair) and
`out_size` (a sliding window's output extent). The built-in ops' compute
functions are `tunekit.ops.<op>.compute` (matmul, batch_matmul, conv2d,
depthwise_conv2d)."""
from .conv2d import out_size, pair  # noqa: F401
from .op import DTYPES, MAX_SIZE, Op, OpArgs, Size, Template  # noqa: F401
