"""A model's symbolic dimensions in its plan: a size (a tensor's dimension, a view's offset)
is an int, or a polynomial of named dimensions written as text, "64*batch*sequence+64": terms
joined by "+", each a product of an integer and names (a name twice is its square).

The values of the dimensions come from the inputs' shapes at each call (`read`), each
checked against the range the model was compiled for."""
from __future__ import annotations

import functools
import math

from tunekit.errors import ArgumentError


def value(d: int | str, dims: dict[str, int]) -> int:
    """The value of size `d` (an int or a polynomial's text) where the dimensions are `dims`."""
    if isinstance(d, int):
        return d
    return sum(c * math.prod(dims[n] for n in factors) for c, factors in _terms(d))


@functools.lru_cache(maxsize=4096)
def _terms(text: str) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """A polynomial's text as (coefficient, names) terms (parsed once: a generation step evaluates many)."""
    out = []
    for term in text.replace("-", "+-").split("+"):
        if term:
            sign, term = (-1, term[1:]) if term.startswith("-") else (1, term)
            factors = term.split("*")
            out.append((sign * math.prod(int(t) for t in factors if t.isdigit()),
                        tuple(t for t in factors if not t.isdigit())))
    return tuple(out)


def growing(*sizes) -> bool:
    """Whether no size (ints and polynomials' texts) has a term below 0: each grows with the dimensions."""
    return all(d >= 0 if isinstance(d, int) else all(c >= 0 for c, _ in _terms(d)) for d in sizes)


def names(*sizes) -> set[str]:
    """The dimensions that sizes (ints and polynomials' texts) read."""
    return {n for d in sizes if isinstance(d, str) for _, factors in _terms(d) for n in factors}


def shape(s, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(value(d, dims) for d in s)


def nearest(sizes: list[dict[str, int]], dims: dict[str, int]) -> int:
    """The index of the sizes (each name -> size) nearest `dims`: the least sum of the ratios' logarithms."""
    return min(range(len(sizes)), key=lambda k: sum(abs(math.log(max(dims[n], 1) / v)) for n, v in sizes[k].items()))


def read(inputs: dict[str, tuple], arrays: dict, ranges: dict[str, tuple[int, int]]) -> dict[str, int]:
    """The dimensions' values from the inputs' shapes (a dimension that is an input's whole dimension
    is read there), checked against `ranges` (name -> (lo, hi)) and against every input's shape.

    Args:
        inputs: input name -> its shape in the plan (ints and polynomials).
        arrays: input name -> the array given for it.
    Raises:
        ArgumentError: a dimension out of its range, two inputs that disagree on one, or an input
            of another shape, naming the input, the dimension and its range.
    """
    dims: dict[str, int] = {}
    for name, s in inputs.items():
        got = getattr(arrays[name], "shape", ())
        for k, d in enumerate(s):
            if isinstance(d, str) and d in ranges and k < len(got):
                if dims.setdefault(d, got[k]) != got[k]:
                    raise ArgumentError(f"input {name!r}: dimension {d!r} is {got[k]} here and {dims[d]} in another "
                                        "input; give the inputs one size of it")
                lo, hi = ranges[d]
                if not lo <= got[k] <= hi:
                    raise ArgumentError(f"input {name!r}: dimension {d!r} is {got[k]}, out of the range {lo}..{hi} "
                                        "the model was compiled for; compile it with a wider range (dims=...)")
    if missing := [d for d in ranges if d not in dims]:
        raise ArgumentError(f"the model's dimensions {missing} are no input's whole dimension, so a call cannot "
                            "tell their sizes")
    return dims
