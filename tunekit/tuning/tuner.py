"""The tuning loop (Algorithm 1 of the paper): propose a batch with the explorer
guided by the cost model, measure it, record it, refit the model, repeat."""
from __future__ import annotations

import random
import signal
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

from tunekit.errors import Interrupted, TunekitError
from tunekit.measure.measurer import Measurer
from tunekit.measure.timing import spread
from tunekit.records import DEVICE_LOST, Trial
from tunekit.store.database import Database, TaskKey
from tunekit.tuning.budget import Budget
from tunekit.tuning.guard import Guard, TunekitWarning
from tunekit.tuning.transfer import transfer

#: repeats of one config still this far apart after re-timing: the machine was busy while it was timed
SUSPECT_SPREAD = 0.25


@dataclass
class TaskState:
    """One task's progress in a tuning run."""
    ts: object                     # TaskSpace
    key: TaskKey
    model: object
    explorer: object
    rng: random.Random
    trials: list[Trial] = field(default_factory=list)   # every known trial (earlier runs too)
    curve: list[float] = field(default_factory=list)    # best cost after each known trial
    done: int = 0                  # trials of this run
    best: Trial | None = None
    errors: int = 0
    since_best: int = 0
    finished: str = ""             # why it stopped ("" = still going)
    fit_s: float = 0.0
    propose_s: float = 0.0
    measure_s: float = 0.0
    batches: list = field(default_factory=list)   # (trials, propose s, measure s, fit s) per batch
    suspect: int = 0               # trials of this run whose repeats still spread widely (a busy machine)
    retimed: float | None = None   # the best config's cost timed again at the end of the run
    last_id: int = 0               # the newest database row seen (other processes add rows too)
    own: set = field(default_factory=set)          # row ids this process wrote
    default: int = 0               # the template's untuned config (`ConfigSpace.default`)
    stale: int = 0                 # records of an older version of the template (their config is not in the space)
    stale_in_run: int = 0          # of those, the ones this run made (they do not count as done: tuned again)

    @property
    def tuner_share(self) -> float:
        """The tuner's own time (proposing + fitting) as a fraction of the task's wall time."""
        own = self.fit_s + self.propose_s
        return own / (own + self.measure_s) if own + self.measure_s > 0 else 0.0

    @property
    def best_gflops(self) -> float:
        return self.best.gflops(self.ts.task.flops) if self.best else 0.0

    def add(self, trial: Trial, this_run: bool) -> None:
        trial.candidate = self.ts.candidates([trial.index])[0]
        self.trials.append(trial)
        self.ts.measured.add(trial.index)
        if this_run:
            self.done += 1
            self.errors += trial.error is not None
            self.since_best += 1
        if trial.ok and (self.best is None or trial.cost < self.best.cost):
            self.best, self.since_best = trial, 0
        self.curve.append(self.best.cost if self.best else float("inf"))


def propose_batch(ts, rng: random.Random, n: int, epsilon: float, default: int, guided, score) -> list[int]:
    """Choose up to `n` distinct unmeasured configs of a task (`ts`, its TaskSpace) to measure next: the
    template's untuned `default` while unmeasured (a task's best is then never worse than an untuned build),
    the explorer's picks (`guided(k)`: up to k distinct unmeasured ones), and about `epsilon` of the batch
    drawn at random from `rng` (the paper's epsilon-greedy, whatever the explorer). In a task's first batch,
    a model that scores (`score(indices)`) the default below every pick, as a pretrained one can, gives
    its place to one more pick: the default waits for the next batch."""
    first = [] if default in ts.measured else [default]
    want = n - len(first) - sum(rng.random() < epsilon for _ in range(n - len(first)))
    picks = [i for i in guided(want) if i not in first]
    if first and picks and not ts.measured and (s := score(first + picks))[0] < s[1:].min():
        first = [i for i in guided(1) if i not in picks and i != default]
    picks = first + picks
    seen = ts.measured | set(picks)
    extra = [i for i in ts.space.sample(rng, 2 * (n - len(picks)) + 4) if i not in seen]
    return picks + extra[: n - len(picks)]


class Tuner:
    """Runs a validated Recipe to completion (or until stopped)."""

    def __init__(self, recipe, progress=None, budget: Budget | None = None):
        """Args:
            recipe: the validated Recipe.
            progress: shows progress (a `tunekit.tuning.progress.TuneProgress`), or None.
            budget: how long to go on; default: the recipe's [tuning] section's.
        """
        self.recipe = recipe
        self.progress = progress
        self.budget = budget or Budget.of(recipe.tuning)
        self.run_id = f"{recipe.run_hash()}:{recipe.tuning.seed}"
        self.target = recipe.target.create()   # whether its kernels can run is the runner's to say (start)
        self.interrupted = False   # set by Ctrl-C / SIGTERM during `run`

    def _state(self, db: Database, task, measurer: Measurer) -> TaskState:
        ts = task.bind(self.target, measurer.pool)
        ts.fingerprint = measurer.runner.fingerprint() or ts.fingerprint   # devices elsewhere: theirs
        key = TaskKey(task.key, self.target.name, ts.fingerprint, ts.template.name)
        rng = random.Random(f"{self.recipe.tuning.seed}:{task.key}")
        st = TaskState(ts, key, self.recipe.model.create(), self.recipe.explorer.create(), rng,
                       default=ts.space.default())
        st.model.start(ts)
        self._sync(st, db)   # resume: every trial known for this task, from any run
        if st.stale:
            warnings.warn(ts.stale_note(st.stale), TunekitWarning, stacklevel=2)
        return st

    def _sync(self, st: TaskState, db: Database) -> None:
        """Take in the trials other processes recorded for this task since the last
        look, and count the run's trials across processes."""
        for rid, run, trial in db.new_trials(st.key, st.last_id):
            st.last_id = rid
            if rid in st.own:
                continue
            now = st.ts.current(trial)   # another process's, or an earlier run's
            if now is None:
                st.stale += 1
                st.stale_in_run += run == self.run_id
                continue
            if now is not trial:   # measured in an older space that holds its config too: index it in today's
                db.rekey(rid, now.index, now.space)
            st.add(now, False)
        st.done = db.count(st.key, self.run_id) - st.stale_in_run

    def _propose(self, st: TaskState, n: int) -> list[int]:
        return propose_batch(st.ts, st.rng, n, self.recipe.tuning.epsilon, st.default,
                             lambda k: self.guard.proposals(st.explorer, st.ts, st.explorer.propose(k), k),
                             lambda idx: self.guard.model(st.model).predict(st.ts.candidates(idx)))

    def run(self) -> list[TaskState]:
        """Tune to the end of the budget. Ctrl-C or SIGTERM stops it after closing the
        workers: `Interrupted` (a KeyboardInterrupt) says how many trials were saved."""
        self.saved, self.interrupted = 0, False
        try:
            with _interrupts_stop(self):
                return self._run()
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; {self.saved} trials of this run saved in {self.recipe.database.path}; "
                              "rerun to resume") from None

    def _run(self) -> list[TaskState]:
        r = self.recipe
        db = Database(r.database.path, r.database.log)
        self.guard = Guard()
        t_end = self.budget.deadline()
        measurer = None
        try:
            measurer = Measurer(self.target, r.measure, r.tuning.seed)
            # a task that names no template is tuned on each that serves it, sharing the task's trials
            states = [self._state(db, v, measurer) for t in r.task_objects() for v in t.variants(self.target)]
            self._groups = {}
            for st in states:
                self._groups.setdefault(st.key.workload, []).append(st)
            total, cap = self.budget.total(len(self._groups)), self.budget.cap
            self._states, self._total = states, total
            if r.tuning.transfer:
                transfer(db, states, self.target, measurer.pool)
            for st in states:
                if st.trials:
                    st.model.fit(st.trials)
                st.explorer.start(st.ts, self.guard.model(st.model), st.rng)
            if self.progress:
                self.progress.start(states, self.budget.trials)
            while sum(s.done for s in states) < total:
                if self.interrupted:   # raised where Python could only print it (see `_interrupts_stop`)
                    raise KeyboardInterrupt
                live = [s for s in states if not self._finished(s, cap, t_end)]
                if not live:
                    break
                st = self._pick(live)
                limit = min(cap, st.done + total - sum(s.done for s in states))
                if st.done < self._warm(st):   # warm-up: no task takes more than its share yet
                    limit = min(limit, self._warm(st))
                self._batch(st, db, measurer, limit)
                if self.progress:
                    self.progress.update(st)
            self._retime(states, measurer)
        finally:
            if measurer is not None:
                measurer.close()
            db.close()
            if self.progress:
                self.progress.stop()
        for st in states:
            st.finished = st.finished or "budget"
        return states

    def _retime(self, states: list[TaskState], measurer: Measurer) -> None:
        """Time the best config again of each task whose trials showed a busy machine (repeats
        far apart): the two times differ (shown in the summary). On a quiet machine nothing is
        measured twice."""
        for st in states:
            if self.interrupted:
                raise KeyboardInterrupt
            if st.best is not None and st.done and st.suspect:
                (again,) = measurer.measure(st.ts, [st.best.index])
                st.retimed = again.cost if again.ok else None

    def _warm(self, st: TaskState) -> int:
        """Trials a task (one template of it) gets before the scheduler compares gains:
        two batches, at most its share of the task's mean."""
        return min(2 * self.recipe.tuning.batch_size, -(-self.budget.trials // len(self._groups[st.key.workload])))

    def _pick(self, live: list[TaskState]) -> TaskState:
        """The task whose next batch should lower the total time the most: tasks
        first get their warm-up trials, then the one with the largest expected gain
        per trial (recent improvement of its best time, or an optimistic share of
        its best time while it has few trials), times the task's weight: a layer
        a network runs four times saves four times as much. A template slower than
        its task's best gains only in proportion (its best must drop below the other's)."""
        cold = [s for s in live if s.done < self._warm(s)]
        if cold:
            return min(cold, key=lambda s: s.done / self._warm(s))

        def gain(s: TaskState) -> float:
            if s.best is None:   # nothing ran yet: no evidence that more trials help
                return 0.0
            w = min(len(s.curve) - 1, 2 * self.recipe.tuning.batch_size)
            before = s.curve[-1 - w] if w > 0 else s.curve[-1]
            recent = (before - s.curve[-1]) / w if w > 0 and before != float("inf") else 0.0
            lead = min(o.best.cost for o in self._groups[s.key.workload] if o.best is not None)
            per_trial = max(recent, 0.5 * s.best.cost / max(1, s.done)) * lead / s.best.cost
            return per_trial * s.ts.task.weight   # time in the network
        return max(live, key=gain)

    def _finished(self, st: TaskState, cap: int, t_end) -> bool:
        if not st.finished:
            if st.done >= cap:
                st.finished = "budget"
            elif st.best is not None and self.budget.stalled(st.since_best):
                st.finished = "early stop"
            elif t_end is not None and time.monotonic() >= t_end:
                st.finished = "time budget"
        return bool(st.finished)

    def _claimed(self, st: TaskState, db: Database, n: int, limit: int) -> list[int] | None:
        """Propose up to `n` configs and claim them in the database (other processes
        tuning the same task take the rest); None when the space is exhausted."""
        for _ in range(4):
            picks = self._propose(st, n)
            if not picks:
                return None
            # the database counts the run's stale records among its trials; they are not done
            stale = sum(s.stale_in_run for s in self._states)
            got, taken = db.claim(st.key, self.run_id, picks, limit + st.stale_in_run, self._total + stale,
                                  st.ts.space.fingerprint(), st.ts.code)
            st.ts.measured.update(taken)   # another process measures them: never propose them again
            if got or not taken:
                return got
        return []

    def _batch(self, st: TaskState, db: Database, measurer: Measurer, limit: int) -> None:
        self._sync(st, db)
        n = min(self.recipe.tuning.batch_size, limit - st.done)
        if n <= 0:   # other processes measured this task's share meanwhile
            return
        t0 = time.perf_counter()
        indices = self._claimed(st, db, n, limit)
        proposed = time.perf_counter() - t0
        st.propose_s += proposed
        if indices is None:
            st.finished = "space exhausted"
            return
        if not indices:   # the budget is held by other processes' claims: let them measure, then count again
            time.sleep(0.2)
            for s in self._states:
                self._sync(s, db)
            return

        lost: list[Trial] = []

        def record(trial: Trial) -> None:
            if trial.error == DEVICE_LOST:   # not the config's fault: it stays unmeasured
                lost.append(trial)
                return
            st.own.add(db.add(self.run_id, st.ts, trial, self.recipe.model.name, self.recipe.explorer.name))
            self.saved += 1
            st.suspect += trial.ok and len(trial.costs) > 1 and spread(trial.costs) > SUSPECT_SPREAD
            st.add(trial, True)
            self.guard.trial_measured(st.ts.task, trial)

        t0 = time.perf_counter()
        cut = self.recipe.measure.cutoff
        cutoff_s = st.best.cost * cut if cut and st.best is not None else None
        batch = [t for t in measurer.measure(st.ts, indices, record, cutoff_s) if t.error != DEVICE_LOST]
        if lost:
            raise TunekitError(f"device lost while measuring {st.ts.task.name} on {self.target.name!r}: "
                               f"{lost[0].message}; every trial measured so far is saved: rerun to resume")
        measured = time.perf_counter() - t0
        st.measure_s += measured
        t0 = time.perf_counter()
        st.model.fit(st.trials)
        st.explorer.observe(batch)
        fitted = time.perf_counter() - t0
        st.fit_s += fitted
        st.batches.append((len(batch), proposed, measured, fitted))


@contextmanager
def _interrupts_stop(tuner: Tuner):
    """SIGTERM stops a run as Ctrl-C does (workers closed, every trial kept); main thread only.
    Both also mark the run (`tuner.interrupted`; Ctrl-C only where Python's own handler has it):
    a KeyboardInterrupt raised where Python can only print it (in a finalizer the garbage
    collector runs) still stops the run, before its next batch."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        tuner.interrupted = True
        raise KeyboardInterrupt
    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGINT)
           if s == signal.SIGTERM or signal.getsignal(s) is signal.default_int_handler}
    try:
        yield
    finally:
        late = None
        for s, handler in old.items():
            while signal.getsignal(s) is not handler:
                try:
                    signal.signal(s, handler)
                except KeyboardInterrupt as e:   # one that came just now: Python runs it before the swap
                    late = e
        if late is not None:
            raise late

