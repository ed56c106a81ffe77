"""Algorithm alternatives: layers that may run as another op, tuned as a task of its own
and chosen where its best record beats theirs (the choice: `tunekit.deploy.plan`).

Each alternative is one declared object with a pattern (`matches`), a task maker
(`candidates`) and a weight transform (`inputs`); the rewrite is the same for all. Adding
one is a module here with its `Alternative`, a line in `ALTERNATIVES`, and a template
for its op.
"""
from __future__ import annotations

from .alternative import Alternative
from .mbconv import MbConv
from .winograd import Winograd

#: the alternatives, in the order they are chosen (a fused chain before its layers' own algorithms)
ALTERNATIVES: tuple[Alternative, ...] = (MbConv(), Winograd())
