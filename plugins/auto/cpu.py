"""CPU rules (placeholder: inline, then each root stage parallel over its outer loop)."""
from __future__ import annotations

from .analysis import inline_injective


def schedule(s, outputs, cfg, device) -> None:
    inline_injective(s, outputs)
    for st in s.stages:
        if st.attach is None and st.op.axis:
            st.parallel(st.op.axis[0])
