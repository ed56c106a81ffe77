"""GPU rules (placeholder: inline, then one thread per output element of each root stage)."""
from __future__ import annotations

from .analysis import inline_injective


def schedule(s, outputs, cfg, device) -> None:
    inline_injective(s, outputs)
    for st in s.stages:
        if st.attach is None:
            fused = st.fuse(*st.op.axis)
            bx, tx = st.split(fused, factor=64)
            st.bind(bx, "blockIdx.x")
            st.bind(tx, "threadIdx.x")
