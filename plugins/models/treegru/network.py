"""The TreeGRU network of the `treegru` cost model: loop trees of lowered programs
(encoding and caching), forests batched by tree height, the network's forward and
hand-written backward passes, and its losses. See the package docstring for the model."""
from __future__ import annotations

import weakref

import numpy as np

from tunekit.features import FLATTEN_BUFFER_COLUMNS, FLATTEN_LOOP_COLUMNS, LoopNest, flatten_features

_BUFFERS = 4           # buffer slots of a node's context vector (kernel params first, then allocations)


# ---- tree encoding ---------------------------------------------------------------------------

class Tree:
    """One program's loop tree: node inputs `x` (loops, dim), `parent` (-1 for
    roots) and `height` (0 for leaves), loops in preorder."""

    __slots__ = ("height", "parent", "x")

    def __init__(self, x: np.ndarray, parent: np.ndarray):
        self.x, self.parent = x, parent
        height = np.zeros(len(parent), np.int64)
        for k in reversed(range(len(parent))):    # preorder: children come after their parent
            p = parent[k]
            if p >= 0:
                height[p] = max(height[p], height[k] + 1)
        self.height = height


def encode(program) -> Tree:
    """The loop tree of a lowered program, node inputs = `flatten` per-loop rows."""
    nest = LoopNest(program)
    n = len(nest.extent)
    if n == 0:
        return Tree(np.zeros((0, input_dim())), np.zeros(0, np.int64))
    x = flatten_features(nest, n, _BUFFERS).astype(np.float64).reshape(n, -1)
    return Tree(x, np.asarray(nest.parent, np.int64))


def input_dim() -> int:
    """Length of a node's context vector (the `flatten` row of one loop)."""
    return FLATTEN_LOOP_COLUMNS + FLATTEN_BUFFER_COLUMNS * _BUFFERS


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # ConfigSpace -> {index: Tree}


def tree_of(candidate) -> Tree:
    """The cached Tree of a Candidate (lowered once per config)."""
    space = candidate.config.space
    try:
        per = _CACHE.setdefault(space, {})
    except TypeError:   # not weak-referenceable: no cache
        return encode(candidate.program)
    t = per.get(candidate.index)
    if t is None:
        t = per[candidate.index] = encode(candidate.program)
    return t


class Batch:
    """Trees of several programs as one forest with level schedules."""

    def __init__(self, trees: list[Tree], dim: int):
        sizes = np.array([len(t.parent) for t in trees], np.int64)
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.n_prog = len(trees)
        self.x = np.concatenate([t.x for t in trees]) if sizes.sum() else np.zeros((0, dim))
        self.prog = np.repeat(np.arange(len(trees)), sizes)
        parent = [np.where(t.parent >= 0, t.parent + o, -1) for t, o in zip(trees, offs)]
        self.parent = np.concatenate(parent) if parent else np.zeros(0, np.int64)
        self.height = np.concatenate([t.height for t in trees]) if trees else np.zeros(0, np.int64)
        n_levels = int(self.height.max()) + 1 if len(self.height) else 0
        has_p = self.parent >= 0
        ph = np.where(has_p, self.height[np.maximum(self.parent, 0)], -1)
        self.levels = [np.flatnonzero(self.height == lv) for lv in range(n_levels)]
        # children of the nodes on each level, sorted by parent, with the segment of each parent:
        # sum of children = np.add.reduceat (np.add.at is an order of magnitude slower)
        self.children, self.child_segments = [], []
        for lv in range(n_levels):
            ch = np.flatnonzero(ph == lv)
            ch = ch[np.argsort(self.parent[ch], kind="stable")]
            starts = np.flatnonzero(np.diff(self.parent[ch], prepend=-2)) if len(ch) else ch
            self.children.append(ch)
            self.child_segments.append((starts, self.parent[ch[starts]]))
        # programs with loops, and where their (contiguous) nodes start
        self.nonempty = np.flatnonzero(sizes)
        self.prog_starts = offs[self.nonempty]

    def program_sum(self, rows: np.ndarray) -> np.ndarray:
        """Per-program sums of per-node `rows` (zeros for programs without loops)."""
        out = np.zeros((self.n_prog,) + rows.shape[1:], rows.dtype)
        if len(self.nonempty):
            out[self.nonempty] = np.add.reduceat(rows, self.prog_starts, axis=0)
        return out


# ---- the network -----------------------------------------------------------------------------

def _sigmoid(a):
    return 0.5 * (1.0 + np.tanh(0.5 * a))


class TreeGRU:
    """Parameters, forward and manual backward of the TreeGRU scorer."""

    NAMES = ("Wx", "bx", "Uzr", "Uc", "Wm", "bm", "w", "b")

    def __init__(self, dim: int, hidden: int, slots: int, rng: np.random.Generator, dtype=np.float64):
        H, m = hidden, slots
        s = lambda fan_in: 1.0 / np.sqrt(fan_in)
        self.p = {
            "Wx": rng.normal(0, s(dim), (dim, 3 * H)),
            "bx": np.zeros(3 * H),
            "Uzr": rng.normal(0, s(H), (H, 2 * H)),
            "Uc": rng.normal(0, s(H), (H, H)),
            "Wm": rng.normal(0, s(H), (H, m)),
            "bm": np.zeros(m),
            "w": rng.normal(0, s(m * H), m * H),
            "b": np.zeros(1),
        }
        self.p = {k: v.astype(dtype) for k, v in self.p.items()}
        self.mean = np.zeros(dim)
        self.scale = np.ones(dim)
        self.hidden, self.slots = H, m

    def forward(self, batch: Batch, keep: bool = False):
        """Scores of the batch's programs; `keep` the activations for `backward`."""
        p, H, m = self.p, self.hidden, self.slots
        N = len(batch.x)
        x = (batch.x - self.mean) / self.scale
        ax = x @ p["Wx"] + p["bx"]                                   # (N, 3H): the input terms of all gates
        hs_all = np.zeros((N, H))
        h_all = np.zeros((N, H))
        if keep:
            z_all, r_all, c_all = np.zeros((N, H)), np.zeros((N, H)), np.zeros((N, H))
        for lv, idx in enumerate(batch.levels):
            ch = batch.children[lv]
            if len(ch):
                starts, parents = batch.child_segments[lv]
                hs_all[parents] = np.add.reduceat(h_all[ch], starts, axis=0)
            hs = hs_all[idx]
            a = ax[idx]
            zr = _sigmoid(a[:, :2 * H] + hs @ p["Uzr"])
            z, r = zr[:, :H], zr[:, H:]
            c = np.tanh(a[:, 2 * H:] + (r * hs) @ p["Uc"])
            h_all[idx] = z * hs + (1.0 - z) * c
            if keep:
                z_all[idx], r_all[idx], c_all[idx] = z, r, c
        logits = h_all @ p["Wm"] + p["bm"]
        logits -= logits.max(axis=1, keepdims=True) if N else 0.0
        A = np.exp(logits)
        A /= A.sum(axis=1, keepdims=True)
        if not keep:   # score = sum over nodes and slots of A[n, i] * (h[n] . w_i): no (N, m*H) tensor
            node = (A * (h_all @ p["w"].reshape(m, H).T)).sum(axis=1)
            return batch.program_sum(node) + p["b"][0]
        E = batch.program_sum((A[:, :, None] * h_all[:, None, :]).reshape(N, m * H))
        self._cache = (x, hs_all, h_all, z_all, r_all, c_all, A, E)
        return E @ p["w"] + p["b"][0]

    def backward(self, batch: Batch, dscore: np.ndarray) -> dict:
        p, H, m = self.p, self.hidden, self.slots
        x, hs_all, h_all, z_all, r_all, c_all, A, E = self._cache
        N = len(x)
        g = {"w": E.T @ dscore, "b": np.array([dscore.sum()])}
        dE = dscore[:, None] * p["w"][None, :]                       # (P, mH)
        dout = dE[batch.prog].reshape(N, m, H)
        dA = np.einsum("nmh,nh->nm", dout, h_all)
        dh_all = np.einsum("nmh,nm->nh", dout, A)
        dlog = A * (dA - (dA * A).sum(axis=1, keepdims=True))
        g["Wm"], g["bm"] = h_all.T @ dlog, dlog.sum(axis=0)
        dh_all += dlog @ p["Wm"].T
        dax = np.zeros((N, 3 * H))
        dUzr, dUc = np.zeros_like(p["Uzr"]), np.zeros_like(p["Uc"])
        dhs_all = np.zeros((N, H))
        for lv in reversed(range(len(batch.levels))):
            idx = batch.levels[lv]
            dh = dh_all[idx]
            hs, z, r, c = hs_all[idx], z_all[idx], r_all[idx], c_all[idx]
            dz = dh * (hs - c)
            dac = dh * (1.0 - z) * (1.0 - c * c)
            dhs = dh * z
            rhs = r * hs
            dUc += rhs.T @ dac
            drhs = dac @ p["Uc"].T
            dhs += drhs * r
            dazr = np.concatenate([dz * z * (1.0 - z), drhs * hs * r * (1.0 - r)], axis=1)
            dUzr += hs.T @ dazr
            dhs += dazr @ p["Uzr"].T
            dax[idx, :2 * H], dax[idx, 2 * H:] = dazr, dac
            dhs_all[idx] = dhs
            ch = batch.children[lv]
            if len(ch):   # each child has one parent: plain fancy-index add is exact
                dh_all[ch] += dhs_all[batch.parent[ch]]
        g["Uzr"], g["Uc"] = dUzr, dUc
        g["Wx"], g["bx"] = x.T @ dax, dax.sum(axis=0)
        return g

    # -- persistence
    def state(self, prefix: str) -> dict:
        d = {f"{prefix}{k}": v for k, v in self.p.items()}
        d[f"{prefix}mean"], d[f"{prefix}scale"] = self.mean, self.scale
        return d

    @classmethod
    def from_state(cls, d, prefix: str) -> TreeGRU:
        net = cls.__new__(cls)
        net.p = {k: np.array(d[f"{prefix}{k}"]) for k in cls.NAMES}
        net.mean, net.scale = np.array(d[f"{prefix}mean"]), np.array(d[f"{prefix}scale"])
        net.hidden = net.p["Uc"].shape[0]
        net.slots = net.p["Wm"].shape[1]
        return net


# ---- losses ----------------------------------------------------------------------------------

def rank_loss(score: np.ndarray, y: np.ndarray, groups: np.ndarray) -> tuple[float, np.ndarray]:
    """Eq. 2: mean over pairs (i faster than j, same group) of log(1 + exp(-(f_i - f_j)))."""
    a, b = np.triu_indices(len(y), 1)
    keep = (groups[a] == groups[b]) & (y[a] != y[b])
    a, b = a[keep], b[keep]
    if not len(a):
        return 0.0, np.zeros_like(score)
    better = y[a] > y[b]
    hi, lo = np.where(better, a, b), np.where(better, b, a)
    d = score[hi] - score[lo]
    loss = float(np.mean(np.logaddexp(0.0, -d)))
    q = _sigmoid(-d) / len(d)                                       # -dloss/dd
    grad = np.bincount(lo, q, len(score)) - np.bincount(hi, q, len(score))
    return loss, grad


def mse_loss(score: np.ndarray, y: np.ndarray, groups=None) -> tuple[float, np.ndarray]:
    d = score - y
    return float(np.mean(d * d)), 2.0 * d / len(d)
