"""Transfer learning (Eq. 4 of the paper): a global model trained on the measured
history of other workloads on the same target and device."""
from __future__ import annotations

import os
import tempfile

from tunekit.store.database import Database
from tunekit.tuning.dataset import current_trials


def transfer(db: Database, states, target, pool=None) -> None:
    """Train the global model of every task in `states` (tuner TaskStates) on the
    history of other workloads (Eq. 4); `pool` lowers their configs for features."""
    key = states[0].key
    records = []
    for _, space, trial in current_trials(db.history(key.target, key.device, {s.key.workload for s in states}),
                                          target, pool):
        trial.candidate = space.candidates([trial.index])[0]
        records.append(trial)
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
