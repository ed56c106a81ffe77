"""Operator definitions with numpy references, and named workloads.

Public: `Op`, `OpArgs`, `Size` (an axis extent field), `DTYPES`, `MAX_SIZE`,
`Template`, `ANY_OP` (the op of a generic template), and the conv helpers `pair` (an int or (h, w) pair as a pair) and
`out_size` (a sliding window's output extent). The built-in ops' compute
functions are `tunekit.ops.<module>.compute` (matmul, batch_matmul, dense,
conv2d (with `groups`: group_conv2d), conv2d_winograd (its stages in `winograd`),
depthwise_conv2d, mbconv (MobileNet-v2's fused block), lstm_step (a recurrent step and its gates); pool: max_pool2d,
`avg_compute` for avg_pool2d, `global_compute` for global_avg_pool2d)."""
from .conv2d import out_size, pair  # noqa: F401
from .op import ANY_OP, DTYPES, MAX_SIZE, Op, OpArgs, Size, Template  # noqa: F401
