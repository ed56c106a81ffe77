"""What the rules read from a computation."""
from __future__ import annotations


def inline_injective(s, outputs) -> None:
    """Inline every elementwise/injective stage that is not an output into its consumers."""
    outs = {t.op for t in outputs}
    for st in s.stages:
        if st.op not in outs and not st.op.reduce_axis:
            st.compute_inline()
