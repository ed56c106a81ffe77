"""Transfer learning (Eq. 4 of the paper): a global model trained on the measured
history of other workloads on the same target and device."""
from __future__ import annotations

import json
import os
import tempfile

from tunekit.errors import TunekitError
from tunekit.plugin.registry import task_of
from tunekit.store.database import Database
from tunekit.task import TaskSpec


def transfer(db: Database, states, target, pool=None) -> None:
    """Train the global model of every task in `states` (tuner TaskStates) on the
    history of other workloads (Eq. 4); `pool` lowers their configs for features."""
    key = states[0].key
    rows = db.history(key.target, key.device, {s.key.workload for s in states})
    spaces: dict = {}
    records = []
    for op, args, template, trial, computation in rows:
        k = (op, json.dumps(args, sort_keys=True), template, computation)
        if k not in spaces:
            try:
                spec = TaskSpec(op, tuple(sorted(args.items())), template, computation)
                spaces[k] = task_of(spec).bind(target, pool)
            except TunekitError:
                spaces[k] = None   # its op or template is no longer installed
        if spaces[k] is not None and (now := spaces[k].current(trial)) is not None:   # not of an older template
            now.candidate = spaces[k].candidates([now.index])[0]
            records.append(now)
    if not records:
        return
    states[0].model.fit_history(records)
    # one global model serves every task: copy it rather than refit (seconds each at 20k records)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "global")
        try:
            states[0].model.save(path)
        except NotImplementedError:
            path = None
        for st in states[1:]:
            if path:
                st.model.load(path)
            else:
                st.model.fit_history(records)
