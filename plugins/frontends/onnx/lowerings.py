"""Every ONNX node type lowered to te, by op type (`LOWERINGS`), and how the fusion pass may
group each (`KINDS`: "injective", "reduction" or "contraction")."""
from __future__ import annotations

from . import lower_elementwise, lower_layout, lower_linear, lower_reduce

LOWERINGS = {**lower_elementwise.LOWERINGS, **lower_reduce.LOWERINGS, **lower_layout.LOWERINGS,
             **lower_linear.LOWERINGS}
KINDS = {**lower_elementwise.KINDS, **lower_reduce.KINDS, **lower_layout.KINDS, **lower_linear.KINDS}
