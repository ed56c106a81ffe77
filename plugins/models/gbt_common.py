"""What the gradient-boosted-tree cost models (xgboost, lightgbm) share: their
Options, labels, held-out early stopping, bootstrap ensembles, acquisition
functions, transfer (Eq. 4 of the paper) and saving. A backend only trains and
evaluates boosters. Uses only the public tunekit API, like a third party would.
"""
from __future__ import annotations

import base64
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

import tunekit
from tunekit.errors import TunekitError

FeatureKind = Literal["knob", "flatten", "relation", "curve"]
_MIN_HELDOUT = 8          # fewer held-out trials than this: train without early stopping
_MIN_GROUPS = 5           # trials of this many tasks or more: hold out whole tasks, not trials
_REFIT_BELOW = 2000       # up to this many trials, refit on all of them once the held-out ones chose the rounds
_FORMAT = 1


class GBTOptions(tunekit.Options):
    """Options of a gradient-boosted-tree cost model."""

    objective: Literal["rank", "regression"] = Field(
        "rank", description="rank: pairwise logistic rank loss (Eq. 2 of the paper); regression: squared error "
                            "on normalized throughput (best cost / cost; failed trials 0).")
    features: FeatureKind = Field(
        "knob", description="Feature kind the local model reads: knob (config values, cheapest, no lowering), "
                            "flatten (per-loop context vectors), relation or curve (context relation features). "
                            "Program features lower every candidate (a few ms each, shared by the tuner's build "
                            "workers), so pair them with a shorter annealing walk (n_chains=64, steps=8); in the "
                            "large nchwc conv2d spaces relation features found random search's best in fewer "
                            "trials than knob (bench/search.py).")
    transfer_features: FeatureKind = Field(
        "relation", description="Feature kind of the global model trained by fit_history (transfer, Eq. 4); "
                                "relation/curve have one length for every task, others are zero-padded.")
    num_boost_round: int = Field(300, ge=1, description="Most boosting rounds (early stopping picks fewer).")
    learning_rate: float = Field(0.3, gt=0, le=1, description="Shrinkage of each tree (xgboost eta).")
    max_depth: int = Field(3, ge=1, le=16, description="Depth of each tree (lightgbm: also 2**depth leaves).")
    min_child_weight: float = Field(1.0, ge=0, description="Least hessian sum in a leaf.")
    subsample: float = Field(1.0, gt=0, le=1, description="Fraction of rows sampled for each tree.")
    colsample: float = Field(1.0, gt=0, le=1, description="Fraction of features sampled for each tree.")
    reg_lambda: float = Field(1.0, ge=0, description="L2 penalty on leaf values.")
    early_stopping_rounds: int = Field(20, ge=1, description="Stop after this many rounds without improvement "
                                                             "of the loss on held-out trials (never training ones).")
    validation_fraction: float = Field(0.2, gt=0, lt=1, description="Fraction of the trials held out for early "
                                                                    "stopping; up to 2000 trials the model is "
                                                                    "then refit on all of them (ensemble members "
                                                                    "use their out-of-bag trials instead).")
    max_pairs: int = Field(50_000, ge=100, description="Rank loss: most (better, worse) pairs per fit; all pairs "
                                                       "are used below it, a fixed random sample above.")
    ensemble: int = Field(1, ge=1, le=64, description="Bootstrap ensemble size; above 1 the spread of the "
                                                      "members is the uncertainty EI and UCB use.")
    acquisition: Literal["mean", "ei", "ucb"] = Field(
        "mean", description="Score of a candidate: the mean prediction, expected improvement, or upper "
                            "confidence bound (ei/ucb need objective=regression and ensemble > 1).")
    kappa: float = Field(1.0, ge=0, description="UCB: mean + kappa * standard deviation.")
    max_history: int = Field(20_000, ge=1, description="fit_history: most records used (a seeded sample).")
    pretrained: bool | str = Field(
        False, description="Start from a model trained across many tasks' measured programs, then fine-tune on "
                           "the task's own trials as they come (Eq. 4 of the paper). true: the model shipped for "
                           "the target and its CPU (`pretrained/<target>-<cpu>@<template>.json` beside the "
                           "plugin for a task of that template, else `<target>-<cpu>.json`; without either, a "
                           "warning says so and the model starts from nothing); a file: a model `tunekit dataset "
                           "train` wrote; a folder: its files, chosen as for true. With [tuning] transfer and "
                           "history in the database, the model trained on that history replaces it.")
    n_jobs: int = Field(1, ge=0, description="Threads for training and prediction (0: the library's default, "
                                             "all cores). One by default: fits are small, and idle OpenMP "
                                             "threads were seen to stall a fit for seconds on a busy machine.")
    seed: int = Field(0, description="Seed of held-out splits, bootstrap samples and pair sampling.")

    @model_validator(mode="after")
    def _check_acquisition(self):
        if self.acquisition != "mean" and (self.objective != "regression" or self.ensemble < 2):
            raise ValueError(f"acquisition {self.acquisition!r} needs an uncertainty estimate: set "
                             f"objective='regression' and ensemble >= 2 (got objective={self.objective!r}, "
                             f"ensemble={self.ensemble}), or use acquisition='mean'")
        return self


class PairwiseRankLoss:
    """Eq. 2 of the paper: sum over pairs (i better than j, same group) of
    log(1 + exp(-(f_i - f_j))), with its gradient and hessian for boosting."""

    def __init__(self, labels: np.ndarray, groups: np.ndarray, rng: np.random.Generator, max_pairs: int):
        hi, lo = [], []
        groups_of = [np.flatnonzero(groups == g) for g in np.unique(groups)]
        total = sum(len(m) * (len(m) - 1) // 2 for m in groups_of)
        for m in groups_of:
            if total <= max_pairs:
                a, b = np.triu_indices(len(m), 1)
            else:   # sample pairs of the group in proportion to its share of all pairs
                k = max(1, round(max_pairs * len(m) * (len(m) - 1) / 2 / total))
                a, b = rng.integers(len(m), size=(2, k))
            a, b = m[a], m[b]
            keep = labels[a] != labels[b]
            a, b = a[keep], b[keep]
            better = labels[a] > labels[b]
            hi.append(np.where(better, a, b))
            lo.append(np.where(better, b, a))
        self.hi = np.concatenate(hi) if hi else np.zeros(0, int)
        self.lo = np.concatenate(lo) if lo else np.zeros(0, int)
        self.n = len(labels)

    def loss(self, margin: np.ndarray) -> float:
        """Mean pairwise logistic loss (0 without pairs)."""
        return float(np.mean(np.logaddexp(0.0, -(margin[self.hi] - margin[self.lo])))) if len(self.hi) else 0.0

    def grad_hess(self, margin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = 1.0 / (1.0 + np.exp(margin[self.hi] - margin[self.lo]))   # sigma(-(f_hi - f_lo))
        h = p * (1.0 - p)
        grad = np.bincount(self.lo, p, self.n) - np.bincount(self.hi, p, self.n)
        hess = np.bincount(self.hi, h, self.n) + np.bincount(self.lo, h, self.n)
        return grad, np.maximum(hess, 1e-6)


def history_labels(records, seed: int, cap: int):
    """Prepare history for a global model: keep records with candidates, sample at
    most `cap` of them, and group them into workloads (one config space each).

    Returns:
        (records, workload id per record, labels normalized per workload, the rng used).
    """
    records = [r for r in records if r.candidate is not None]
    rng = np.random.default_rng([seed, len(records), 1])
    if len(records) > cap:
        records = [records[i] for i in np.sort(rng.choice(len(records), cap, False))]
    spaces: dict[int, int] = {}
    gid = np.array([spaces.setdefault(id(r.candidate.config.space), len(spaces)) for r in records], np.int64)
    return records, gid, labels(records, gid), rng


def labels(trials, groups: np.ndarray | None = None) -> np.ndarray:
    """Normalized throughput: best cost / cost (1 for the best; within each group of `groups`), 0 for failures."""
    return throughput(np.array([t.cost if t.ok else np.inf for t in trials], np.float64), groups)


def throughput(costs: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """best cost / cost of `costs` (seconds; inf or 0 for failures, whose label is 0), the best taken
    within each group of `groups` (a task's configs are compared with the task's best) or over all."""
    ok = np.isfinite(costs) & (costs > 0)
    groups = np.zeros(len(costs), np.int64) if groups is None else np.asarray(groups)
    y = np.zeros(len(costs))
    for g in np.unique(groups[ok]):
        m = ok & (groups == g)
        y[m] = costs[m].min() / costs[m]
    return y


def _ei_factor(z: np.ndarray) -> np.ndarray:
    """phi(z) + z * Phi(z) (expected improvement / std), positive and without
    cancellation in the lower tail (asymptotic series below z = -6)."""
    phi = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in z.tolist()])
    tail = phi / np.maximum(z * z, 1.0) * (1.0 - 3.0 / np.maximum(z * z, 1.0))
    return np.maximum(np.where(z < -6.0, tail, phi + z * cdf), 0.0)


class _Fitted:
    """Boosters of one model (an ensemble), the feature kind and width they read."""

    def __init__(self, kind: str, width: int, members: list):
        self.kind, self.width, self.members = kind, width, members   # members: [(booster, rounds)]

    def x(self, candidates) -> np.ndarray:
        return tunekit.feature_matrix(candidates, self.kind, self.width)


class GBTModel(tunekit.CostModel):
    """A boosted-tree cost model; subclasses provide the backend (`_train`, `_margin`,
    `_dumps`, `_loads`). f(x) = f_global(x) + f_local(x) once history was given."""

    Options = GBTOptions

    def __init__(self, options=None):
        super().__init__(options)
        self._global: _Fitted | None = None
        self._local: _Fitted | None = None
        self.best_y = 1.0
        self.pretrained_on: dict | None = None   # what `pretrain` learned from: saved with the model

    # -- backend ----------------------------------------------------------------------------
    def _train(self, x, y, groups, margin, heldout, rounds: int, rng) -> tuple[object, int]:
        """Train one booster from `margin`; `heldout` = (x, y, groups, margin) or None.
        Returns (booster, rounds to use)."""
        raise NotImplementedError

    def _margin(self, booster, rounds: int, x: np.ndarray, margin: np.ndarray | None) -> np.ndarray:
        """Raw score of the first `rounds` rounds plus `margin` (when given)."""
        raise NotImplementedError

    def _dumps(self, booster) -> bytes:
        raise NotImplementedError

    def _loads(self, blob: bytes):
        raise NotImplementedError

    # -- training ---------------------------------------------------------------------------
    def _rank_loss(self, y, groups, rng) -> PairwiseRankLoss:
        return PairwiseRankLoss(y, groups, rng, self.options.max_pairs)

    def _fit(self, x, y, groups, margin, rng, refit: bool = False, most: int | None = None) -> list:
        """Boosters of the ensemble, their rounds (at most `most`, default num_boost_round) chosen on
        held-out trials; `refit`: then train on all trials, however many (a one-off pretraining; the
        tuner's fits refit up to _REFIT_BELOW)."""
        o, n = self.options, len(y)
        most = most or o.num_boost_round
        members = []
        for _ in range(o.ensemble):
            if o.ensemble > 1:
                train = np.sort(rng.integers(n, size=n))   # sorted: rows stay grouped
                held = np.setdiff1d(np.arange(n), train)
            elif len(kinds := np.unique(groups)) >= _MIN_GROUPS:   # across tasks: stop where unseen tasks rank best
                out = rng.permutation(kinds)[:round(len(kinds) * o.validation_fraction)]
                mask = np.isin(groups, out)
                held, train = np.flatnonzero(mask), np.flatnonzero(~mask)
            else:
                perm = rng.permutation(n)
                n_held = round(n * o.validation_fraction)
                held, train = np.sort(perm[:n_held]), np.sort(perm[n_held:])
            if len(held) < _MIN_HELDOUT or len(np.unique(y[held])) < 2:   # too few to hold out: all trials, every round
                train = train if o.ensemble > 1 else np.arange(n)
                members.append(self._train(x[train], y[train], groups[train], _take(margin, train), None,
                                           most, rng))
                continue
            part = (x[held], y[held], groups[held], _take(margin, held))
            booster, rounds = self._train(x[train], y[train], groups[train], _take(margin, train), part, most, rng)
            if o.ensemble == 1 and (n <= _REFIT_BELOW or refit):   # the rounds chosen: learn from all trials
                booster, rounds = self._train(x, y, groups, margin, None, rounds, rng)
            members.append((booster, rounds))
        return members

    def fit(self, trials) -> None:
        """Train the local model on all trials of the task (failed ones have throughput 0);
        with a global model it boosts from the global margin (Eq. 4)."""
        trials = list(trials)
        y = labels(trials)
        if not trials or not y.any():
            self._local = None   # nothing ran: keep the global model's (or no) opinion
            return
        self.best_y = float(y.max())
        cands = [t.candidate for t in trials]
        x = tunekit.feature_matrix(cands, self.options.features)
        if x.shape[1] == 0:   # a space without knobs: one config, nothing to learn
            self._local = None
            return
        margin = self._global_margin(cands)
        rng = np.random.default_rng([self.options.seed, len(trials)])
        # from a global model, a round per trial at most: a few trials move it a little (with all rounds, 8-16
        # trials made a pretrained model rank a held-out layer worse than it did alone)
        most = min(self.options.num_boost_round, len(trials)) if margin is not None else None
        self._local = _Fitted(self.options.features, x.shape[1],
                              self._fit(x, y, np.zeros(len(y), np.int64), margin, rng, most=most))

    def fit_history(self, records) -> None:
        """Train the global model on trials of other workloads, on `transfer_features`.

        Records are grouped into workloads by their candidates' config space (one
        TaskSpace per workload); the rank loss compares configs of one workload
        only, and regression labels are normalized per workload. Drops the local
        model: call `fit` afterwards."""
        records, gid, y, rng = history_labels(records, self.options.seed, self.options.max_history)
        self._global, self._local = None, None
        if not y.any():
            return
        order = np.argsort(gid, kind="stable")   # grouped rows, as ranking backends need
        kind = self.options.transfer_features
        x = tunekit.feature_matrix([records[i].candidate for i in order], kind)
        if x.shape[1] == 0:
            return
        self._global = _Fitted(kind, x.shape[1], self._fit(x, y[order], gid[order], None, rng))

    def pretrain(self, dataset) -> None:
        """Train the global model on a dataset's rows (labels: throughput normalized per task;
        the rank loss compares rows of one task only). Drops the local model."""
        order = np.argsort(dataset.task, kind="stable")
        gid = np.asarray(dataset.task, np.int64)[order]
        y = throughput(np.asarray(dataset.seconds, np.float64)[order], gid)
        x = np.asarray(dataset.features, np.float32)[order]
        rng = np.random.default_rng([self.options.seed, len(y), 2])
        self._global = _Fitted(dataset.kind, x.shape[1], self._fit(x, y, gid, None, rng, refit=True))
        self._local = None
        self.pretrained_on = {"trials": len(y), "tasks": [t.get("workload") for t in dataset.tasks],
                              "templates": sorted({str(t.get("template")) for t in dataset.tasks}),
                              "devices": list(dataset.devices), "tunekit": tunekit.__version__}

    def start(self, space) -> None:
        """Load the pretrained global model the options name (`GBTOptions.pretrained`)."""
        want = self.options.pretrained
        if want is False:
            return
        folder = pretrained_dir(self) if want is True else Path(want)
        if want is True or folder.is_dir():   # the CPU's file for the task's template, else for every one
            family = f"{space.target.name}-{space.device.name}"
            path = next((str(p) for p in (folder / f"{family}@{space.template.name}.json", folder / f"{family}.json")
                         if p.exists()), None)
            if path is None:
                have = sorted({p.stem.split("@")[0] for p in folder.glob("*.json")})
                warnings.warn(f"{self.name}: no pretrained model for {family} ({'shipped' if want is True else folder}"
                              f": {', '.join(have) or 'none'}); the model starts from nothing and learns from this "
                              "task's trials", stacklevel=2)
                return
            want = path
        self._global = _pretrained(self, want)

    def _global_margin(self, candidates) -> np.ndarray | None:
        g = self._global
        if g is None:
            return None
        x = g.x(candidates)
        return np.mean([self._margin(b, r, x, None) for b, r in g.members], axis=0)

    # -- prediction -------------------------------------------------------------------------
    def predict(self, candidates) -> np.ndarray:
        """Scores (higher = predicted faster): the acquisition of the ensemble's
        predictions; zeros before any fit."""
        candidates = list(candidates)
        if not candidates:
            return np.zeros(0)
        margin = self._global_margin(candidates)
        if self._local is None:
            return np.zeros(len(candidates)) if margin is None else margin.astype(np.float64)
        x = self._local.x(candidates)
        preds = np.array([self._margin(b, r, x, margin) for b, r in self._local.members], np.float64)
        mean = preds.mean(axis=0)
        o = self.options
        if o.acquisition == "mean" or len(preds) < 2:
            return mean
        std = preds.std(axis=0)
        if o.acquisition == "ucb":
            return mean + o.kappa * std
        std = np.maximum(std, 1e-9)
        return std * _ei_factor((mean - self.best_y) / std)

    # -- persistence ------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write options, boosters (base64) and feature layouts to `path` as JSON."""
        def enc(f: _Fitted | None):
            return None if f is None else {"kind": f.kind, "width": f.width, "members": [
                [base64.b64encode(self._dumps(b)).decode(), r] for b, r in f.members]}
        with open(path, "w") as fh:
            json.dump({"format": _FORMAT, "model": self.name, "options": self.options.model_dump(),
                       "best_y": self.best_y, "global": enc(self._global), "local": enc(self._local),
                       "pretrained_on": self.pretrained_on}, fh)

    def load(self, path: str) -> None:
        """Read the state written by `save` (also its options)."""
        state = self._state(path)
        self.options = self.Options.model_validate(state["options"])
        self.best_y = state["best_y"]
        self._global, self._local = self._decode(state["global"]), self._decode(state["local"])
        self.pretrained_on = state.get("pretrained_on")

    def _state(self, path: str) -> dict:
        try:
            with open(path) as fh:
                state = json.load(fh)
        except (OSError, ValueError) as e:
            raise TunekitError(f"{path}: cannot read a saved {self.name!r} cost model: {e}") from None
        if not isinstance(state, dict) or state.get("format") != _FORMAT or state.get("model") != self.name:
            got = state if not isinstance(state, dict) else (state.get("format"), state.get("model"))
            raise TunekitError(f"{path}: not a saved {self.name!r} cost model ((format, model) {got!r}); "
                               "write one with tunekit dataset train DATA -o FILE")
        return state

    def _decode(self, d) -> _Fitted | None:
        return None if d is None else _Fitted(d["kind"], d["width"], [(self._loads(base64.b64decode(b)), r)
                                                                      for b, r in d["members"]])


def pretrained_dir(model) -> Path:
    """Where the pretrained files of `model`'s plugin lie: `pretrained/` beside its module."""
    return Path(sys.modules[type(model).__module__].__file__).parent / "pretrained"


_PRETRAINED: dict = {}   # (model, path, mtime) -> its global model: every task of a run shares one


def _pretrained(model: GBTModel, path: str) -> _Fitted:
    try:
        key = (model.name, os.path.abspath(path), os.path.getmtime(path))
    except OSError as e:
        raise TunekitError(f"{model.name}: pretrained = {path!r}: {e.strerror}; give a model file that tunekit "
                           "dataset train wrote, or pretrained = true for the shipped one") from None
    if key not in _PRETRAINED:
        fitted = model._decode(model._state(path)["global"])
        if fitted is None:
            raise TunekitError(f"{path}: a saved {model.name!r} cost model without a pretrained (global) model; "
                               "write one with tunekit dataset train DATA -o FILE")
        _PRETRAINED[key] = fitted
    return _PRETRAINED[key]


def _take(margin, idx):
    return None if margin is None else margin[idx]
