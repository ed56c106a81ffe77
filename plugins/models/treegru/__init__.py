"""The `treegru` cost model: a child-sum TreeGRU over the loop tree of the lowered
program (Sec. 4 and Figure 3d of the paper), numpy only.

Every loop (For node) is one tree node; its input is the loop's context vector,
the per-loop row of the `flatten` features (log2 extent, depth, annotation,
iterations above/below, then touched bytes / accesses / reuse / stride for each
of `network._BUFFERS` buffer slots). The children of a loop are the loops directly
nested in it (through Seq / Allocate / IfThenElse). Bottom-up, with hs the sum
of the children's hidden states:

    z = sigmoid(Wz x + Uz hs + bz),   r = sigmoid(Wr x + Ur hs + br)
    c = tanh(Wc x + Uc (r * hs) + bc),   h = z * hs + (1 - z) * c

Each node's h is softly scattered into m memory slots (slot i gets
softmax(Wm^T h + bm)_i * h); the slots, summed over all nodes of a program, are
its embedding (m * hidden) and a linear layer gives the score. Trained with the
pairwise rank loss (Eq. 2) or squared error on normalized throughput, with Adam;
the gradients are written by hand. A batch of programs is evaluated level by
level (all nodes of one height at once), so both passes are matrix operations.

Transfer (Eq. 4): `fit_history` trains a global TreeGRU on other workloads;
`fit` then trains a separate local TreeGRU whose score is added to the global
one's.
"""
from __future__ import annotations

import io
from typing import Literal

import numpy as np
from pydantic import Field

import tunekit
from tunekit.errors import TunekitError

from ..gbt_common import history_labels, labels
from .network import Batch, Tree, TreeGRU, input_dim, mse_loss, rank_loss, tree_of

_FORMAT = 1


# ---- the cost model --------------------------------------------------------------------------

class TreeGRUModel(tunekit.CostModel):
    """TreeGRU cost model on the loop tree of the lowered program (Figure 3d)."""

    name = "treegru"

    class Options(tunekit.Options):
        hidden: int = Field(32, ge=1, le=1024, description="Hidden state size of the TreeGRU.")
        slots: int = Field(4, ge=1, le=64, description="Memory slots the node states are softly scattered "
                                                        "into; the program embedding is slots * hidden.")
        epochs: int = Field(60, ge=1, description="Passes over the trials per fit (at least `min_steps` "
                                                  "Adam steps are taken however few the trials are).")
        min_steps: int = Field(150, ge=0, description="Fewest Adam steps per fit (small trial sets need more "
                                                      "passes than `epochs`).")
        learning_rate: float = Field(0.005, gt=0, description="Adam step size.")
        batch_size: int = Field(64, ge=2, description="Trials (programs) per minibatch; rank pairs are formed "
                                                      "within a minibatch.")
        objective: Literal["rank", "regression"] = Field(
            "rank", description="rank: pairwise logistic rank loss (Eq. 2 of the paper); regression: squared "
                                "error on normalized throughput (best cost / cost; failed trials 0).")
        max_history: int = Field(20_000, ge=1, description="fit_history: most records used (a seeded sample).")
        seed: int = Field(0, description="Seed of the weight initialization and the minibatch order.")

    def __init__(self, options=None):
        super().__init__(options)
        self._global: TreeGRU | None = None
        self._local: TreeGRU | None = None

    # -- training
    def _train(self, trees: list[Tree], y: np.ndarray, groups: np.ndarray, base: np.ndarray | None,
               rng: np.random.Generator) -> TreeGRU:
        o = self.options
        dim = input_dim()
        net = TreeGRU(dim, o.hidden, o.slots, rng)
        xs = [t.x for t in trees if len(t.x)]
        if xs:
            allx = np.concatenate(xs)
            net.mean, net.scale = allx.mean(axis=0), np.maximum(allx.std(axis=0), 1e-3)
        loss_fn = rank_loss if o.objective == "rank" else mse_loss
        n = len(trees)
        bs = min(o.batch_size, n)
        per_epoch = -(-n // bs)
        steps = max(o.epochs * per_epoch, o.min_steps)
        adam = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in net.p.items()}
        b1, b2, eps = 0.9, 0.999, 1e-8
        batches: dict = {}
        order = np.zeros(0, np.int64)
        for step in range(1, steps + 1):
            if len(order) < bs:
                order = np.concatenate([order, rng.permutation(n)])
            sel, order = np.sort(order[:bs]), order[bs:]
            if n <= bs:   # one fixed batch: build the forest once
                batch = batches.get(0) or batches.setdefault(0, Batch(trees, dim))
            else:
                batch = Batch([trees[i] for i in sel], dim)
            score = net.forward(batch, keep=True)
            if base is not None:
                score = score + base[sel]
            _, dscore = loss_fn(score, y[sel], groups[sel])
            if not dscore.any():
                continue
            g = net.backward(batch, dscore)
            lr = o.learning_rate * np.sqrt(1 - b2 ** step) / (1 - b1 ** step)
            for k, v in net.p.items():
                m1, m2 = adam[k]
                m1[...] = b1 * m1 + (1 - b1) * g[k]
                m2[...] = b2 * m2 + (1 - b2) * g[k] * g[k]
                v -= lr * m1 / (np.sqrt(m2) + eps)
        return net

    @staticmethod
    def _score(net: TreeGRU | None, trees: list[Tree]) -> np.ndarray:
        return np.zeros(len(trees)) if net is None else net.forward(Batch(trees, net.p["Wx"].shape[0]))

    def fit(self, trials) -> None:
        """Train the local TreeGRU on all trials of the task (failed ones have throughput 0);
        with a global model, on the sum f_global + f_local (Eq. 4)."""
        trials = list(trials)
        y = labels(trials)
        if not trials or not y.any():
            self._local = None
            return
        trees = [tree_of(t.candidate) for t in trials]
        base = self._score(self._global, trees) if self._global is not None else None
        rng = np.random.default_rng([self.options.seed, len(trials)])
        self._local = self._train(trees, y, np.zeros(len(y), np.int64), base, rng)

    def fit_history(self, records) -> None:
        """Train the global TreeGRU on trials of other workloads (rank pairs and
        regression labels within a workload, i.e. a config space). Drops the local model."""
        records, gid, y, rng = history_labels(records, self.options.seed, self.options.max_history)
        self._global, self._local = None, None
        if not y.any():
            return
        trees = [tree_of(r.candidate) for r in records]
        self._global = self._train(trees, y, gid, None, rng)

    def predict(self, candidates) -> np.ndarray:
        """Scores (higher = predicted faster): f_global + f_local; zeros before any fit."""
        candidates = list(candidates)
        if not candidates or (self._global is None and self._local is None):
            return np.zeros(len(candidates))
        trees = [tree_of(c) for c in candidates]
        return self._score(self._global, trees) + self._score(self._local, trees)

    # -- persistence
    def save(self, path: str) -> None:
        """Write options and weights with np.savez (to exactly `path`)."""
        d = {"format": np.array(_FORMAT), "model": np.array(self.name),
             "options": np.array(self.options.model_dump_json())}
        for prefix, net in (("global.", self._global), ("local.", self._local)):
            if net is not None:
                d.update(net.state(prefix))
        buf = io.BytesIO()
        np.savez(buf, **d)
        with open(path, "wb") as fh:
            fh.write(buf.getvalue())

    def load(self, path: str) -> None:
        """Read the state written by `save` (also its options)."""
        try:
            d = np.load(path, allow_pickle=False)
            ok = int(d["format"]) == _FORMAT and str(d["model"]) == self.name
        except Exception as e:
            raise TunekitError(f"{path}: not a saved {self.name!r} cost model ({e})") from e
        if not ok:
            raise TunekitError(f"{path}: not a saved {self.name!r} cost model")
        self.options = self.Options.model_validate_json(str(d["options"]))
        self._global = TreeGRU.from_state(d, "global.") if "global.Wx" in d.files else None
        self._local = TreeGRU.from_state(d, "local.") if "local.Wx" in d.files else None


@tunekit.hookimpl
def tunekit_cost_models():
    return [TreeGRUModel]
