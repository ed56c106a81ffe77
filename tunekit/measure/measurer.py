"""Measurement: build a batch of configs in the build pool, then have the runner
check and time the artifacts; every config becomes a Trial."""
from __future__ import annotations

import dataclasses
from concurrent.futures import as_completed

from tunekit.errors import PluginError, TunekitError
from tunekit.measure.build_pool import BuildPool
from tunekit.plugin.registry import plugin_of
from tunekit.records import RUN_ERROR, Outcome, Trial


class Measurer:
    """A build pool and a runner for one target: configs in, Trials out."""

    def __init__(self, target, options, seed: int = 0, runner=None):
        self.target = target
        self.policy = options.timing_policy(seed)
        self.runner = runner if runner is not None else options.runner.create()
        self.runner.start(target)   # first: a runner that cannot reach its devices leaves no build workers behind
        try:
            self.pool = BuildPool(target, options.build_workers, options.build_timeout_s)
        except BaseException:
            self.runner.close()
            raise

    def measure(self, ts, indices: list[int], on_trial=None, cutoff_s: float | None = None) -> list[Trial]:
        """Build `indices` of task space `ts` in parallel, then have the runner time them;
        `on_trial(trial)` is called as each one is measured (to record it at once).
        `cutoff_s`: a kernel whose first run is slower is timed by that run alone."""
        built = self.pool.build(ts, indices)
        ok = [k for k, b in enumerate(built) if not b.error]
        pol = dataclasses.replace(self.policy, cutoff_s=cutoff_s)
        futures = list(self.runner.submit(ts.task, [built[k].artifact for k in ok], pol)) if ok else []
        if len(futures) != len(ok):
            raise PluginError(f"runner {self.runner.name!r} ({plugin_of(self.runner)}) returned "
                              f"{len(futures)} futures for {len(ok)} artifacts; it must return one per artifact")
        trials = [Trial(i, ts.space.get(i).to_json(), error=b.error, message=b.message, build_s=b.seconds)
                  for i, b in zip(indices, built)]
        on_trial = on_trial or (lambda trial: None)
        for t, b in zip(trials, built):   # each trial is reported as soon as it is known
            if b.error:
                on_trial(t)
        slot = {f: trials[k] for k, f in zip(ok, futures)}
        for f in as_completed(slot):
            r, trial = self._outcome(f), slot[f]
            trial.costs, trial.error, trial.message, trial.run_s = r.costs, r.error, r.message, r.seconds
            on_trial(trial)
        return trials

    def _outcome(self, future) -> Outcome:
        try:
            out = future.result()
        except TunekitError:
            raise
        except Exception as e:   # a runner's bug costs the trial, named, never the run
            return Outcome(error=RUN_ERROR, message=f"runner {self.runner.name!r} failed: {type(e).__name__}: {e}")
        if not isinstance(out, Outcome):
            return Outcome(error=RUN_ERROR, message=f"runner {self.runner.name!r} returned a "
                           f"{type(out).__name__}, not a tunekit.records.Outcome")
        return out

    def close(self) -> None:
        self.pool.close()
        self.runner.close()
