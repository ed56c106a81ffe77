"""Blocked activation layouts: "NCHW{b}c" holds channel c of an NCHW tensor at
[n, c // b, h, w, c % b], so that b consecutive channels of one pixel are one
vector. A network keeps its activations blocked from layer to layer on CPUs (no
transpose between layers), and each conv's weights are blocked once, when the
model is compiled: conv2d's to [K_out / b, C, R, S, b] (b output channels of one
tap contiguous), depthwise_conv2d's to [C / b, R, S, b].

An op takes `layout = "NCHW"` (the default, left out of its canonical args so a
plain op keeps its workload key) or "NCHW{b}c"; conv2d also takes `data_layout`,
the layout of its data when it differs from its output's (the first layer of a
network reads 3 NCHW channels into a blocked output).
"""
from __future__ import annotations

import re
from typing import Annotated

import numpy as np
from pydantic import Field

from .. import te

_PATTERN = r"^NCHW([1-9][0-9]*c)?$"
#: a layout field: "NCHW" or "NCHW{b}c"
Layout = Annotated[str, Field(pattern=_PATTERN, description='"NCHW", or "NCHW{b}c": channels in blocks of b, '
                              "the block innermost ([N, C/b, H, W, b])")]


def block_of(layout: str | None) -> int:
    """The channel block of `layout`: b for "NCHW{b}c", 0 for "NCHW" (or None)."""
    m = re.match(_PATTERN, layout or "NCHW")
    if m is None:
        raise ValueError(f"unknown layout {layout!r}: use \"NCHW\" or \"NCHW{{b}}c\" (e.g. \"NCHW8c\")")
    return int(m.group(1)[:-1]) if m.group(1) else 0


def blocked(b: int) -> str:
    """The layout name of channel block `b`."""
    return f"NCHW{b}c" if b else "NCHW"


def strip_default_layout(args: dict) -> dict:
    """`args` without `layout` "NCHW", without a `data_layout` that is None or the layout, and
    without matmul's `b_panel` 0 (B in its plain layout)."""
    out = dict(args)
    if out.get("b_panel") == 0:
        del out["b_panel"]
    if "data_layout" in out and out["data_layout"] in (None, out.get("layout")):
        del out["data_layout"]
    if out.get("layout") == "NCHW":
        del out["layout"]
    return out


def check_channels(b: int, **channels: int) -> None:
    """Raise ValueError unless every channel count is a whole number of blocks."""
    for name, c in channels.items():
        if b and c % b:
            raise ValueError(f"{name}={c} is not a multiple of the layout's channel block {b}; use layout \"NCHW\" "
                             f"or a block that divides it")


def shape(N: int, C: int, H: int, W: int, b: int) -> tuple:
    """The shape of an NCHW [N, C, H, W] tensor in channel block `b` (0: NCHW)."""
    return (N, C // b, H, W, b) if b else (N, C, H, W)


def placeholder(N: int, C: int, H: int, W: int, b: int, name: str, dtype: str) -> te.Tensor:
    return te.placeholder(shape(N, C, H, W, b), name, dtype)


def load(t: te.Tensor, b: int, n, c, h, w):
    """Element (n, c, h, w) of an activation in block `b`; with b, `c` is the (block, lane) pair."""
    return t[n, c[0], h, w, c[1]] if b else t[n, c, h, w]


def to_blocked(x: np.ndarray, b: int) -> np.ndarray:
    """numpy: an NCHW array in channel block `b` (itself when b is 0)."""
    if not b:
        return x
    N, C, H, W = x.shape
    return np.ascontiguousarray(x.reshape(N, C // b, b, H, W).transpose(0, 1, 3, 4, 2))


def to_nchw(x: np.ndarray, b: int) -> np.ndarray:
    """numpy: a blocked array back in NCHW (itself when b is 0)."""
    if not b:
        return x
    N, Cb, H, W, _ = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(N, Cb * b, H, W))


def conv_weight(w: np.ndarray, b: int) -> np.ndarray:
    """numpy: OIHW conv2d weights [K, C, R, S] as [K / b, C, R, S, b]."""
    K, C, R, S = w.shape
    return np.ascontiguousarray(w.reshape(K // b, b, C, R, S).transpose(0, 2, 3, 4, 1)) if b else w


def conv_weight_oihw(w: np.ndarray, b: int) -> np.ndarray:
    """numpy: blocked conv2d weights back in OIHW."""
    if not b:
        return w
    Kb, C, R, S, _ = w.shape
    return np.ascontiguousarray(w.transpose(0, 4, 1, 2, 3).reshape(Kb * b, C, R, S))


def depthwise_weight(w: np.ndarray, b: int) -> np.ndarray:
    """numpy: depthwise weights [C, 1, R, S] as [C / b, R, S, b]."""
    C, _, R, S = w.shape
    return np.ascontiguousarray(w[:, 0].reshape(C // b, b, R, S).transpose(0, 2, 3, 1)) if b else w


def depthwise_weight_nchw(w: np.ndarray, b: int) -> np.ndarray:
    """numpy: blocked depthwise weights back as [C, 1, R, S]."""
    if not b:
        return w
    Cb, R, S, _ = w.shape
    return np.ascontiguousarray(w.transpose(0, 3, 1, 2).reshape(Cb * b, 1, R, S))


def panels(b: np.ndarray, nv: int) -> np.ndarray:
    """numpy: a matmul's B [K, N] in column panels of `nv`, [ceil(N / nv), K, nv], the last
    one zero-padded (each panel is contiguous: what a register tile of nv columns reads)."""
    K, N = b.shape
    no = -(-N // nv)
    padded = np.zeros((K, no * nv), b.dtype)
    padded[:, :N] = b
    return np.ascontiguousarray(padded.reshape(K, no, nv).transpose(1, 0, 2))


def from_panels(bp: np.ndarray, N: int) -> np.ndarray:
    """numpy: B in column panels back as [K, N]."""
    no, K, nv = bp.shape
    return np.ascontiguousarray(bp.transpose(1, 0, 2).reshape(K, no * nv)[:, :N])
