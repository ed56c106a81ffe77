"""The plugin contract enforced at run time: what explorers propose, what cost
models predict and what trial hooks do is checked, so that a plugin's mistake is
named (plugin, version, what was wrong) instead of surfacing as a traceback from
somewhere else, and never costs a trial or the run."""
from __future__ import annotations

import numbers
import warnings
from collections import Counter

import numpy as np

from tunekit.errors import PluginError
from tunekit.plugin.manager import plugins
from tunekit.plugin.registry import plugin_of


class TunekitWarning(UserWarning):
    """A plugin broke the contract and tunekit worked around it (the run goes on)."""


class Guard:
    """Checks one tuning run's plugins; each kind of complaint is warned once per plugin."""

    def __init__(self):
        self._warned: set = set()
        self._disabled: set[str] = set()   # trial hooks that raised

    def warn_once(self, key, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, TunekitWarning, stacklevel=2)

    def proposals(self, explorer, ts, picks, n: int) -> list[int]:
        """The proposals of `explorer` that the tuner may measure: distinct valid
        unmeasured int indices, at most `n`; the rest are dropped, with one warning."""
        who = f"explorer {explorer.name!r} ({plugin_of(explorer)})"
        if picks is None:
            self.warn_once((who, "none"), f"{who}: propose() returned None; return a list ([] when the space "
                           "is exhausted)")
            return []
        if not isinstance(picks, (list, tuple)):
            raise PluginError(f"{who}: propose() returned a {type(picks).__name__}; it must return a list of "
                              "config indices")
        out, seen, dropped = [], set(), Counter()
        for i in picks:
            why = _refusal(i, ts, seen, len(out) >= n)
            if why:
                dropped[why] += 1
                continue
            out.append(int(i))
            seen.add(int(i))
        if dropped:
            what = ", ".join(f"{c} {why}" for why, c in dropped.items())
            self.warn_once((who, "proposals"), f"{who}: dropped proposals ({what}); propose(n) must return at "
                           "most n distinct int indices in range, valid and never measured (warned once a run)")
        return out

    def model(self, model) -> CheckedModel:
        """`model` as explorers see it: its predictions checked."""
        return CheckedModel(model, f"cost model {model.name!r} ({plugin_of(model)})")

    def trial_measured(self, task, trial) -> None:
        """Call every `tunekit_trial_measured` hook; one that raises is reported once and disabled."""
        for impl in plugins().pm.hook.tunekit_trial_measured.get_hookimpls():
            if impl.plugin_name in self._disabled:
                continue
            given = {"task": task, "trial": trial}
            try:
                impl.function(**{k: given[k] for k in impl.argnames if k in given})
            except Exception as e:   # a logger's bug must not stop the tuning
                self._disabled.add(impl.plugin_name)
                version = plugins().version(impl.plugin_name)
                warnings.warn(f"plugin {impl.plugin_name!r}{f' ({version})' if version else ''}: "
                              f"tunekit_trial_measured raised {type(e).__name__}: {e}; it is not called again "
                              "in this run", TunekitWarning, stacklevel=2)


def _refusal(i, ts, seen: set, full: bool) -> str:
    """Why proposal `i` cannot be measured ("" when it can)."""
    if isinstance(i, bool) or not isinstance(i, numbers.Integral):
        return f"not an int ({type(i).__name__})"
    i = int(i)
    if not 0 <= i < ts.space.size:
        return "out of range"
    if i in seen:
        return "duplicate"
    if i in ts.measured:
        return "already measured"
    if full:
        return "beyond n"
    return "" if ts.space.valid(i) else "invalid (constrained out)"


class CheckedModel:
    """A cost model whose `predict` must return finite floats of shape (n,); the
    rest of the model is passed through."""

    def __init__(self, model, who: str):
        self._model, self._who = model, who

    def __getattr__(self, name):
        return getattr(self._model, name)

    def predict(self, candidates) -> np.ndarray:
        n = len(candidates)
        scores = self._model.predict(candidates)
        try:
            arr = np.asarray(scores, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise PluginError(f"{self._who}: predict() returned {type(scores).__name__}, not numbers ({e}); "
                              "return a float array of shape (n,)") from None
        if arr.shape != (n,):
            raise PluginError(f"{self._who}: predict() returned shape {arr.shape} for {n} candidates; "
                              "return a float array of shape (n,)")
        bad = ~np.isfinite(arr)
        if bad.any():
            raise PluginError(f"{self._who}: predict() returned {int(bad.sum())} non-finite scores (NaN or inf) "
                              f"of {n}, e.g. at position {int(np.argmax(bad))}; return finite floats")
        return arr
