"""Feature vectors of configs, selectable by name (the cost models' input).

Kinds (`extract(task_space, index, kind)`; `TaskSpace.features` caches them):

- `knob`: the config's knob values: log2 split sizes, one-hot reorder /
  annotate / choice values (ordinal position when a knob has over 32 values).
  No lowering needed, so it is by far the cheapest kind; not transferable
  across tasks (its layout is the task's knob list).
- `flatten`: one context vector per loop of the lowered program, outermost
  first in program order: log2 extent, nesting depth, annotation one-hot
  (serial, parallel, vectorized, unrolled, thread), log2 iterations above
  (top-down product) and below (bottom-up product); then for every buffer
  (kernel parameters in call order, then allocations in program order): log2
  bytes touched by one run of the loop, log2 accesses, log2 reuse ratio
  (accesses per touched element), log2(1 + stride in bytes along the loop).
  Zero-padded (or truncated) to the most loops and buffers of a few probe
  configs of the task, so the length is fixed per task but not across tasks.
- `relation` (alias `curve`): the paper's context relation features (Sec. 4),
  R_t(i, j) = max over loops k with Z_kj < beta_t of Z_ki, with log2-spaced
  thresholds beta_t, on the loops around the program's hottest statement (the
  store executed most often). Per buffer of that statement (the stored one,
  then the loaded ones in order of appearance; `RELATION_BUFFERS` slots): reuse,
  accesses and -log2(times the loop is entered) against touched bytes (the
  memory hierarchy), touched bytes and stride against the iterations of the
  sub-nest; per annotation, the sum of log2(1 + extent) of its loops in the sub-nest against the
  sub-nest iterations; plus a few global scalars. Fixed length for every task, so it is
  the kind to transfer across workloads (`feature_names("relation")` names
  each entry).

Program features read only the loop structure, extents, annotations and index
arithmetic, never names, so renaming loop variables changes nothing.
"""
from __future__ import annotations

import functools
import math
import random
import weakref

import numpy as np

from tunekit import ir
from tunekit.errors import TunekitError
from tunekit.ir.sizes import upper

__all__ = ["FLATTEN_BUFFER_COLUMNS", "FLATTEN_LOOP_COLUMNS", "KINDS", "PROGRAM_KINDS", "RELATION_BUFFERS", "LoopNest",
           "extract", "feature_names", "flatten_features", "knob_features", "program_features", "relation_features"]

PROGRAM_KINDS = ("flatten", "relation", "curve")   # the kinds read from the lowered program
KINDS = ("knob", *PROGRAM_KINDS)
ANNOTATIONS = (ir.SERIAL, ir.PARALLEL, ir.VECTORIZED, ir.UNROLLED, ir.THREAD)

#: relation features: buffer slots, thresholds (log2) on touched bytes and on sub-nest iterations
RELATION_BUFFERS = 4
BYTES_LOG2 = np.arange(4, 31, dtype=np.float64)
ITERS_LOG2 = np.arange(1, 26, 2, dtype=np.float64)
_BYTE_REL = ("reuse", "count", "entries")      # values read against touched bytes
_ITER_REL = ("bytes", "stride")                # values read against sub-nest iterations
_GLOBALS = ("log2_executions", "loops", *(f"buf{b}_log2_bytes" for b in range(RELATION_BUFFERS)),
            "other_log2_executions", "stores")

FLATTEN_LOOP_COLUMNS = 9      # per-loop columns of `flatten` before the per-buffer ones
FLATTEN_BUFFER_COLUMNS = 4
_PROBES = 8            # configs lowered to fix a task's `flatten` layout


@functools.lru_cache(maxsize=64)
def _dtype_bytes(dtype: str) -> int:
    digits = "".join(c for c in dtype if c.isdigit())
    return max(1, int(digits or 32) // 8)


def _linear(e, out: dict, scale: float) -> None:
    """Add scale * d(e)/d(var) to out[var]: exact on affine indices (as
    `te.bound.affine`), a stride estimate on floordiv/mod by constants."""
    if isinstance(e, ir.Var):
        out[e] = out.get(e, 0.0) + scale
    elif isinstance(e, ir.BinOp):
        op, a, b = e.op, e.a, e.b
        if op == "+":
            _linear(a, out, scale), _linear(b, out, scale)
        elif op == "-":
            _linear(a, out, scale), _linear(b, out, -scale)
        elif op == "*":
            if isinstance(b, ir.Const):
                _linear(a, out, scale * b.value)
            elif isinstance(a, ir.Const):
                _linear(b, out, scale * a.value)
            else:
                _linear(a, out, scale), _linear(b, out, scale)
        elif op == "//" and isinstance(b, ir.Const) and b.value:
            _linear(a, out, scale / b.value)
        elif op != "//":   # %, min, max: the stride inside a period / branch
            _linear(a, out, scale)
            if op != "%":
                _linear(b, out, scale)
    elif isinstance(e, ir.Cast):
        _linear(e.a, out, scale)
    elif isinstance(e, ir.Select):
        _linear(e.t, out, scale), _linear(e.f, out, scale)


def _loads(e, out: list) -> None:
    if isinstance(e, ir.Load):
        out.append(e)
    elif isinstance(e, ir.BinOp):
        _loads(e.a, out), _loads(e.b, out)
    elif isinstance(e, (ir.Cast, ir.Not)):
        _loads(e.a, out)
    elif isinstance(e, ir.Select):
        _loads(e.cond, out), _loads(e.t, out), _loads(e.f, out)
    elif isinstance(e, ir.Call):
        for x in e.args:
            _loads(x, out)


class LoopNest:
    """One walk over a Program: its loops (preorder) and its buffer accesses,
    with the touch analysis of every (access, enclosing loop) pair as arrays."""

    def __init__(self, program: ir.Program):
        self.extent, self.kind, self.depth, self.parent = [], [], [], []
        self.buffers: dict = {b: i for i, b in enumerate(program.params)}
        self.acc_buf, self.acc_stmt, self.acc_coef = [], [], []
        self.stmt_path: list[tuple] = []
        self._var_loop: dict = {}
        self._walk(program.body, ())
        self._analyse()

    def _walk(self, s, path: tuple) -> None:
        if isinstance(s, ir.For):
            k = len(self.extent)
            self.extent.append(max(1, upper(s.extent)))   # a symbolic loop at its largest
            self.kind.append(ANNOTATIONS.index(s.kind) if s.kind in ANNOTATIONS else 0)
            self.depth.append(len(path))
            self.parent.append(path[-1] if path else -1)
            self._var_loop[s.var] = k
            self._walk(s.body, path + (k,))
        elif isinstance(s, ir.Seq):
            for x in s.stmts:
                self._walk(x, path)
        elif isinstance(s, ir.Allocate):
            self.buffers.setdefault(s.buffer, len(self.buffers))
            self._walk(s.body, path)
        elif isinstance(s, ir.IfThenElse):
            self._walk(s.then, path)
            if s.orelse is not None:
                self._walk(s.orelse, path)
        elif isinstance(s, ir.Store):
            st = len(self.stmt_path)
            self.stmt_path.append(path)
            loads: list = []
            _loads(s.value, loads)
            for buf, index in [(s.buffer, s.index)] + [(ld.buffer, ld.index) for ld in loads]:
                coef: dict = {}
                _linear(index, coef, 1.0)
                self.acc_buf.append(self.buffers.setdefault(buf, len(self.buffers)))
                self.acc_stmt.append(st)
                self.acc_coef.append({self._var_loop[v]: abs(c) for v, c in coef.items()
                                      if c and v in self._var_loop})

    def _analyse(self) -> None:
        n_loop, n_acc = len(self.extent), len(self.acc_buf)
        ext = np.asarray(self.extent, np.float64)
        self.log_ext = np.log2(ext)
        depth = np.asarray(self.depth)
        inside = np.zeros((n_acc, n_loop), bool)     # access a is inside loop k
        coef = np.zeros((n_acc, n_loop))
        for a, (st, c) in enumerate(zip(self.acc_stmt, self.acc_coef)):
            inside[a, list(self.stmt_path[st])] = True
            coef[a, list(c)] = list(c.values())
        # loops at or below k on an access's path are the path loops as deep as k or deeper
        below = (depth[:, None] >= depth[None, :]).astype(np.float64)
        buffers = sorted(self.buffers, key=self.buffers.get)
        acc_buf = np.asarray(self.acc_buf, int)
        elem = np.asarray([_dtype_bytes(b.dtype) for b in buffers], np.float64)[acc_buf] if n_acc else np.zeros(0)
        size = np.asarray([max(1, b.size) for b in buffers], np.float64)[acc_buf] if n_acc else np.zeros(0)
        with np.errstate(divide="ignore"):
            self.count = (inside * self.log_ext) @ below                       # log2 accesses
            touched = np.minimum(np.exp2(((inside & (coef > 0)) * self.log_ext) @ below),
                                 1.0 + (inside * coef * (ext - 1.0)) @ below)
            self.touched = np.log2(np.minimum(touched, size[:, None]))        # log2 elements
        self.inside, self.coef, self.elem, self.buffer_list, self.acc_buf_arr = inside, coef, elem, buffers, acc_buf
        # iterations above (including) and below (deepest chain, including) each loop
        td, bu = np.zeros(n_loop), self.log_ext.copy()
        for k in range(n_loop):
            td[k] = self.log_ext[k] + (td[self.parent[k]] if self.parent[k] >= 0 else 0.0)
        child_max = np.zeros(n_loop)
        for k in reversed(range(n_loop)):
            bu[k] = self.log_ext[k] + child_max[k]
            p = self.parent[k]
            if p >= 0:
                child_max[p] = max(child_max[p], bu[k])
        self.topdown, self.bottomup = td, bu

    def buffer_touch(self, accesses: np.ndarray, n_slots: int, slot_of: np.ndarray) -> np.ndarray:
        """(n_slots, loops, 4): per buffer slot and loop, log2 touched bytes, log2
        accesses, log2 reuse, log2(1 + stride bytes), over the given accesses
        (`slot_of[a]` is access a's slot; slots >= n_slots are left out)."""
        m = (slot_of[accesses][None, :] == np.arange(n_slots)[:, None])[:, :, None] & self.inside[accesses][None]
        touched, elem = self.touched[accesses], self.elem[accesses][:, None]
        out = np.zeros((n_slots, len(self.extent), 4))
        with np.errstate(divide="ignore", invalid="ignore"):
            hit = m.any(1)
            elems = np.where(m, touched, -np.inf).max(1, initial=-np.inf)
            count = np.log2(np.where(m, np.exp2(self.count[accesses]), 0.0).sum(1))
            out[..., 0] = np.where(hit, np.where(m, touched + np.log2(elem), -np.inf).max(1, initial=-np.inf), 0.0)
            out[..., 1] = np.where(hit, count, 0.0)
            out[..., 2] = np.where(hit, count - elems, 0.0)
            out[..., 3] = np.log2(1.0 + np.where(m, self.coef[accesses] * elem, 0.0).max(1, initial=0.0))
        return out


# ---- flatten

def flatten_features(nest: LoopNest, n_loops: int, n_buffers: int) -> np.ndarray:
    """The `flatten` vector of `nest`, padded/truncated to n_loops x n_buffers."""
    n = len(nest.extent)
    ann = np.zeros((n, len(ANNOTATIONS)))
    ann[np.arange(n), nest.kind] = 1.0
    loop = np.column_stack([nest.log_ext, np.asarray(nest.depth, np.float64), ann, nest.topdown, nest.bottomup])
    acc = np.arange(len(nest.acc_buf))
    touch = nest.buffer_touch(acc, n_buffers, nest.acc_buf_arr)         # (B, L, 4)
    rows = np.concatenate([loop, touch.transpose(1, 0, 2).reshape(n, FLATTEN_BUFFER_COLUMNS * n_buffers)], axis=1)
    out = np.zeros((n_loops, FLATTEN_LOOP_COLUMNS + FLATTEN_BUFFER_COLUMNS * n_buffers), np.float32)
    out[:min(n, n_loops)] = rows[:n_loops]
    return out.ravel()


_LAYOUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _flatten_layout(task_space) -> tuple[int, int]:
    """(loops, buffers) of a task's `flatten` vectors: the most over a few probe
    configs drawn with a fixed seed, so the length does not depend on call order."""
    layout = _LAYOUTS.get(task_space)
    if layout is None:
        probes = task_space.space.sample(random.Random(0), _PROBES) or [0]
        nests = [LoopNest(task_space.program(i)) for i in probes]
        layout = _LAYOUTS[task_space] = (max(len(n.extent) for n in nests), max(len(n.buffers) for n in nests))
    return layout


# ---- relation

def _relation_pairs():
    pairs = []   # (name, value column, key column, thresholds)
    for b in range(RELATION_BUFFERS):
        pairs += [(f"buf{b}.{v}|bytes", f"buf{b}.{v}", f"buf{b}.bytes", BYTES_LOG2) for v in _BYTE_REL]
        pairs += [(f"buf{b}.{v}|iters", f"buf{b}.{v}", "iters", ITERS_LOG2) for v in _ITER_REL]
    pairs += [(f"{a}|iters", a, "iters", ITERS_LOG2) for a in ANNOTATIONS[1:]]
    return pairs


_REL_PAIRS = _relation_pairs()
_REL_COLS = ["iters", *ANNOTATIONS[1:]] + [f"buf{b}.{c}" for b in range(RELATION_BUFFERS)
                                          for c in ("bytes", "reuse", "count", "entries", "stride")]
_REL_COL = {c: i for i, c in enumerate(_REL_COLS)}
_REL_VAL = np.asarray([_REL_COL[v] for _, v, _, _ in _REL_PAIRS])
_REL_KEY = np.asarray([_REL_COL[k] for _, _, k, _ in _REL_PAIRS])
_REL_SEGMENTS = [len(t) for _, _, _, t in _REL_PAIRS]
_REL_THRESH = np.concatenate([t for _, _, _, t in _REL_PAIRS])
_REL_PAIR_OF = np.repeat(np.arange(len(_REL_PAIRS)), _REL_SEGMENTS)


def relation_features(nest: LoopNest) -> np.ndarray:
    """The `relation` vector of `nest` (fixed length; see `feature_names`)."""
    glob = np.zeros(len(_GLOBALS))
    if not nest.stmt_path:
        return np.zeros(len(_REL_THRESH) + len(_GLOBALS), np.float32)
    logs = [float(nest.log_ext[list(p)].sum()) for p in nest.stmt_path]
    hot = max(range(len(logs)), key=lambda s: (logs[s], len(nest.stmt_path[s])))
    path = list(nest.stmt_path[hot])
    acc = np.flatnonzero(np.asarray(nest.acc_stmt) == hot)
    # slots: the stored buffer, then the loaded ones in order of appearance
    order = list(dict.fromkeys(nest.acc_buf_arr[acc].tolist()))
    slot_of = np.full(len(nest.buffers), RELATION_BUFFERS)
    slot_of[order[:RELATION_BUFFERS]] = np.arange(min(len(order), RELATION_BUFFERS))
    acc_slot = np.zeros(len(nest.acc_buf), int)
    acc_slot[acc] = slot_of[nest.acc_buf_arr[acc]]
    touch = nest.buffer_touch(acc, RELATION_BUFFERS, acc_slot)[:, path]       # (B, P, 4)
    logext = nest.log_ext[path]
    z = np.zeros((len(path), len(_REL_COLS)))
    z[:, 0] = np.cumsum(logext[::-1])[::-1]                                   # sub-nest iterations
    kinds = np.asarray(nest.kind)[path]
    for a in range(1, len(ANNOTATIONS)):
        # summed over the sub-nest's loops of that annotation: with each loop's value alone, the max hid an
        # outer unrolled loop under a longer inner one (configs apart by 20% had equal vectors); log2(1 + extent),
        # so that an annotated loop of extent 1 still shows
        z[:, a] = np.cumsum(np.where(kinds == a, np.log2(1.0 + np.exp2(logext)), 0.0)[::-1])[::-1]
    entries = -(np.cumsum(logext) - logext)                                   # -log2(times entered)
    per_buf = np.stack([touch[..., 0], touch[..., 2], touch[..., 1],
                        np.broadcast_to(entries, touch.shape[:2]), touch[..., 3]], axis=-1)   # (B, P, 5)
    z[:, len(ANNOTATIONS):] = per_buf.transpose(1, 0, 2).reshape(len(path), 5 * RELATION_BUFFERS)
    vals, keys = z[:, _REL_VAL[_REL_PAIR_OF]], z[:, _REL_KEY[_REL_PAIR_OF]]  # (P, features)
    rel = np.where(keys < _REL_THRESH, vals, -np.inf).max(axis=0, initial=-np.inf)
    rel[~np.isfinite(rel)] = 0.0
    glob[0], glob[1] = logs[hot], len(path)
    sizes = [math.log2(max(1, b.size) * _dtype_bytes(b.dtype)) for b in nest.buffer_list]
    for buf, s in enumerate(slot_of[:len(sizes)]):
        if s < RELATION_BUFFERS:
            glob[2 + s] = sizes[buf]
    other = sum(2.0 ** x for i, x in enumerate(logs) if i != hot)
    glob[-2], glob[-1] = math.log2(1.0 + other), len(logs)
    return np.concatenate([rel, glob]).astype(np.float32)


def feature_names(kind: str) -> list[str]:
    """Names of the entries of a fixed-layout feature kind (`relation`/`curve`):
    "buf0.reuse|bytes<2^12" is R_t(reuse, bytes) of buffer slot 0 at beta = 2^12 bytes."""
    if kind not in ("relation", "curve"):
        raise TunekitError(f"feature kind {kind!r} has no fixed names (only relation/curve)")
    return [f"{n}<2^{int(t)}" for n, _, _, ts in _REL_PAIRS for t in ts] + list(_GLOBALS)


# ---- knob

def knob_features(space, index: int) -> np.ndarray:
    """The `knob` vector of config `index` of ConfigSpace `space`."""
    out: list[float] = []
    for k, c in zip(space.knobs, space.choices(index)):
        if k.kind == "split":
            out += [math.log2(max(1, x)) for x in k.values[c]]
        elif len(k) <= 32:   # one-hot
            out += [float(p == c) for p in range(len(k))]
        else:
            out.append(float(c))
    return np.asarray(out, np.float32)


def program_features(program: ir.Program, kind: str, layout: tuple[int, int] | None = None) -> np.ndarray:
    """Features of a lowered program: `relation`/`curve`, or `flatten` with an
    explicit (loops, buffers) layout (default: the program's own)."""
    nest = LoopNest(program)
    if kind in ("relation", "curve"):
        return relation_features(nest)
    if kind == "flatten":
        return flatten_features(nest, *(layout or (len(nest.extent), len(nest.buffers))))
    raise TunekitError(f"unknown program feature kind {kind!r} (available: flatten, relation, curve)")


def extract(task_space, index: int, kind: str) -> np.ndarray:
    """The `kind` features of config `index` of `task_space` (see the module doc)."""
    if kind == "knob":
        return knob_features(task_space.space, index)
    if kind in ("relation", "curve"):
        return relation_features(LoopNest(task_space.program(index)))
    if kind == "flatten":
        return flatten_features(LoopNest(task_space.program(index)), *_flatten_layout(task_space))
    raise TunekitError(f"unknown feature kind {kind!r} (available: {', '.join(KINDS)})")
