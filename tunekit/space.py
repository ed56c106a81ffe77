"""Configuration spaces: the knobs a template defines and the configs they span.

A template is called with a `ConfigSpace` once, to define its knobs
(`define_split`, `define_reorder`, `define_annotate`, `define_knob`), and with
a `ConfigEntity` for every config, where the same calls return nothing and
`cfg[name]` gives the chosen value. A config index is the mixed-radix number of
the knob choices: Python ints, so spaces of any size are never enumerated.
Constraints (`space.constrain(fn)`) mark configs invalid without enumeration.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Sequence

from tunekit.errors import SpaceError


def factorizations(n: int, parts: int) -> list[tuple]:
    """Return every way to write `n` as a product of `parts` loop sizes, outermost first (the values of a
    "factors" split; a template that builds its own candidates starts from them)."""
    if parts == 1:
        return [(n,)]
    return [(f,) + rest for f in range(1, n + 1) if n % f == 0 for rest in factorizations(n // f, parts - 1)]


def _pow2_splits(n: int, parts: int, max_factor: int) -> list[tuple]:
    # inner factors are powers of two; the outer one covers the rest (guarded tail)
    pows = [2 ** i for i in range(max(1, (n - 1).bit_length()) + 1) if 2 ** i <= min(n, max_factor)]
    products = ((math.prod(inner), inner) for inner in itertools.product(pows, repeat=parts - 1))
    return [(-(-n // prod),) + inner for prod, inner in products if prod <= n]


class SplitValue(tuple):
    """Loop sizes, outermost first; their product covers the axis extent."""

    def apply(self, s, tensor, axis) -> list:
        """Split `axis` of `tensor`'s stage into len(self) loops, outermost first."""
        stage, out = s[tensor], []
        for f in reversed(self[1:]):
            axis, inner = stage.split(axis, factor=f)
            out.append(inner)
        return [axis] + out[::-1]


class ReorderValue(tuple):
    """A permutation of loop positions."""

    def apply(self, s, tensor, axes) -> list:
        order = [axes[i] for i in self]
        s[tensor].reorder(*order)
        return order


_PRIMITIVES = {"unroll": "unroll", "vec": "vectorize", "parallel": "parallel"}   # annotation -> Stage method


class AnnotateValue(tuple):
    """One annotation per loop: "none", "unroll", "vec" or "parallel"."""

    def apply(self, s, tensor, axes) -> None:
        for ax, ann in zip(axes, self):
            if ann in _PRIMITIVES:
                getattr(s[tensor], _PRIMITIVES[ann])(ax)


class Knob:
    """A named dimension of the space with a list of values."""

    def __init__(self, name: str, kind: str, values: list, meta: dict | None = None):
        if not values:
            raise SpaceError(f"knob {name!r} has no values")
        self.name, self.kind, self.values, self.meta = name, kind, values, meta or {}

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"Knob({self.name}, {self.kind}, {len(self)} values)"


class _Define:
    """The knob-defining API shared by ConfigSpace (records) and ConfigEntity (reads)."""
    _knobs: dict[str, Knob]

    def _add(self, knob: Knob) -> None:
        raise NotImplementedError

    def define_split(self, name: str, axis, num_outputs: int = 2, policy: str = "factors",
                     max_factor: int = 1 << 30, candidates: list | None = None, filter=None):
        """Define a split knob: an axis into `num_outputs` loops, outermost first.

        Args:
            name: the knob's name (`cfg[name]` in the template gives the chosen SplitValue).
            axis: the axis (an IterVar) or its extent.
            num_outputs: how many loops it becomes.
            policy: "factors" (exact factorizations), "power2" (power-of-two inner
                sizes, the outer loop covers the rest with a guarded tail) or
                "candidates" (the size tuples in `candidates`).
            max_factor: largest inner size (factors and power2).
            filter: called with each candidate value, a `SplitValue` (a tuple of
                loop sizes, outermost first, whose product covers the extent);
                values for which it returns False are left out of the space.
        """
        if name in self._knobs:
            return
        extent = axis if isinstance(axis, int) else axis.extent
        if policy == "factors":
            vals = [v for v in factorizations(extent, num_outputs) if max(v[1:], default=0) <= max_factor]
        elif policy == "power2":
            vals = _pow2_splits(extent, num_outputs, max_factor)
        elif policy == "candidates":
            vals = [tuple(c) for c in candidates or []]
        else:
            raise SpaceError(f"split knob {name!r}: unknown policy {policy!r} (factors, power2, candidates)")
        if filter is not None:
            vals = [v for v in vals if filter(SplitValue(v))]
        self._add(Knob(name, "split", [SplitValue(v) for v in vals], {"extent": extent}))

    def define_reorder(self, name: str, axes: list, candidates: list[tuple[int, ...]] | None = None):
        """Reorder loops; candidates are permutations of range(len(axes)) (default: all)."""
        if name in self._knobs:
            return
        perms = candidates or list(itertools.permutations(range(len(axes))))
        self._add(Knob(name, "reorder", [ReorderValue(p) for p in perms]))

    def define_annotate(self, name: str, axes: list, options: Sequence[str] = ("none", "unroll", "vec")):
        """Annotate each loop with one of `options`."""
        if name in self._knobs:
            return
        vals = [AnnotateValue(v) for v in itertools.product(options, repeat=len(axes))]
        self._add(Knob(name, "annotate", vals))

    def constrain(self, fn) -> None:
        """Mark configs for which `fn(config)` is false as invalid (never proposed)."""
        if isinstance(self, ConfigSpace):
            self.constraints.append(fn)

    def define_knob(self, name: str, values: list):
        """A free choice among `values` (JSON-serializable)."""
        if name in self._knobs:
            return
        self._add(Knob(name, "choice", list(values)))

    def values(self, name: str) -> list:
        """The values of defined knob `name`, in order (the template reads the first while the space
        is being defined)."""
        return self._knobs[name].values

    def prefer(self, **values) -> None:
        """Name the knob values of the config to run with no tuning record (`ConfigSpace.default`):
        a rule of thumb for the untuned case that leaves the space to search unchanged."""
        if isinstance(self, ConfigSpace):
            self.preferred.update(values)


class ConfigSpace(_Define):
    """The knobs of one task. `space.size` is the product of their sizes (a Python
    int of any size: there is no `len()`, which is limited to 2**63)."""

    def __init__(self):
        self._knobs: dict[str, Knob] = {}
        self.constraints: list = []
        self._sizes: list[int] = []
        self.preferred: dict = {}

    def _add(self, knob: Knob) -> None:
        self._knobs[knob.name] = knob
        self._sizes.append(len(knob))

    def __getitem__(self, name: str):
        # while the template defines knobs, it runs with each knob's first value
        return self._knobs[name].values[0]

    @property
    def knobs(self) -> list[Knob]:
        return list(self._knobs.values())

    @property
    def size(self) -> int:
        return math.prod(self._sizes)

    def choices(self, index: int) -> list[int]:
        """Per-knob value positions of `index` (first knob varies fastest)."""
        if not 0 <= index < self.size:
            raise SpaceError(f"config index {index} is outside this space (size {self.size})")
        out = []
        for n in self._sizes:
            index, r = divmod(index, n)
            out.append(r)
        return out

    def index_of(self, choices: list[int]) -> int:
        idx = 0
        for c, n in zip(reversed(choices), reversed(self._sizes)):
            idx = idx * n + c
        return idx

    def get(self, index: int) -> ConfigEntity:
        return ConfigEntity(self, int(index), self.choices(int(index)))

    def valid(self, index: int) -> bool:
        if not self.constraints:
            return True
        e = self.get(index)
        return all(c(e) for c in self.constraints)

    def sample(self, rng: random.Random, n: int = 1, max_tries: int = 10000) -> list[int]:
        """Draw up to `n` distinct valid indices uniformly."""
        out: dict[int, None] = {}
        tries = 0
        while len(out) < min(n, self.size) and tries < max_tries + 10 * n:
            i = rng.randrange(self.size)
            tries += 1
            if i not in out and self.valid(i):
                out[i] = None
        return list(out)

    def neighbor(self, index: int, rng: random.Random, tries: int = 50) -> int:
        """A valid index differing from `index` in one knob (itself if none found)."""
        ch = self.choices(index)
        movable = [k for k, n in enumerate(self._sizes) if n > 1]
        for _ in range(tries if movable else 0):
            k = rng.choice(movable)
            new = list(ch)
            new[k] = rng.randrange(self._sizes[k] - 1)
            new[k] += new[k] >= ch[k]
            j = self.index_of(new)
            if self.valid(j):
                return j
        return index

    def crossover(self, a: int, b: int, rng: random.Random) -> int:
        """A child taking each knob from `a` or `b` (a parent if no valid child)."""
        ca, cb = self.choices(a), self.choices(b)
        for _ in range(20):
            child = self.index_of([x if rng.random() < 0.5 else y for x, y in zip(ca, cb)])
            if self.valid(child):
                return child
        return a

    def valid_fraction(self, rng: random.Random | None = None, samples: int = 2000) -> float:
        """Estimated fraction of valid configs."""
        if not self.constraints:
            return 1.0
        rng = rng or random.Random(0)
        return sum(self.valid(rng.randrange(self.size)) for _ in range(samples)) / samples

    def default(self) -> int:
        """The index of the config to run untuned: the template's preferred values (`prefer`;
        the first value of the other knobs) when that config is valid, else of a seeded sample of
        valid configs the one that keeps most of those values, else the first valid config."""
        choices = [next((p for p, v in enumerate(k.values) if v == self.preferred[k.name]), 0)
                   if k.name in self.preferred else 0 for k in self._knobs.values()]
        if self.valid(index := self.index_of(choices)):
            return index
        # a scan from 0 can take minutes where tight constraints leave few valid configs
        found = self.sample(random.Random(0), 64)
        if found:
            return max(found, key=lambda i: (sum(a == b for a, b in zip(self.choices(i), choices)), -i))
        first = next((i for i in range(self.size) if self.valid(i)), None)
        if first is None:
            raise SpaceError(f"no config of the {self.size} in this space is valid: the template's constraints "
                             "exclude them all (a bug of the template at these sizes)")
        return first

    def fingerprint(self) -> str:
        """A short hash of the knobs (names, kinds and every value, in order): what identifies
        the space, so that a record's index is read against the space it was measured in."""
        if getattr(self, "_fingerprint", None) is None:
            knobs = [[k.name, k.kind, [_jsonable(v) for v in k.values]] for k in self._knobs.values()]
            self._fingerprint = hashlib.sha256(json.dumps(knobs, default=repr).encode()).hexdigest()[:16]
        return self._fingerprint

    def from_json(self, values: dict) -> ConfigEntity:
        """The config whose knob values are `values` (as `ConfigEntity.to_json` gives)."""
        choices = []
        for k in self._knobs.values():
            if k.name not in values:
                raise SpaceError(f"config has no value for knob {k.name!r}")
            v = values[k.name]
            pos = next((p for p, cand in enumerate(k.values) if _jsonable(cand) == v), None)
            if pos is None:
                raise SpaceError(f"knob {k.name!r} has no value {v!r}")
            choices.append(pos)
        return self.get(self.index_of(choices))

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k.name}:{len(k)}" for k in self._knobs.values())
        return f"ConfigSpace(size={self.size}, {knobs})"


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


class ConfigEntity(_Define):
    """One config: the template reads its knob values with `cfg[name]`."""

    def __init__(self, space: ConfigSpace, index: int, choices: list[int]):
        self.space, self.index = space, index
        self._knobs = space._knobs
        self._values = {k.name: k.values[c] for k, c in zip(space._knobs.values(), choices)}

    def _add(self, knob):  # knobs are fixed once the space is defined
        pass

    def __getitem__(self, name: str):
        try:
            return self._values[name]
        except KeyError:
            raise SpaceError(f"template reads knob {name!r} before defining it") from None

    def to_json(self) -> dict:
        return {k: _jsonable(v) for k, v in self._values.items()}

    def __repr__(self) -> str:
        return f"Config({self.index}: {json.dumps(self.to_json())})"
