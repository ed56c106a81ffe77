"""Helpers the GPU templates share: device limits as space constraints, and
cooperative fetching of a shared-memory tile by all threads of a block."""
from __future__ import annotations

import math

_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def block_limits(device) -> tuple[int, tuple[int, int, int], int]:
    """(max threads per block, max threads per axis (x, y, z), max shared bytes) of `device`."""
    total = device.max_threads_per_block or 256
    dims = tuple(device.extra.get("max_block", (total, total, min(total, 64))))
    return total, dims, device.max_shared_memory


def fits_block(threads: tuple[int, ...], device) -> bool:
    """Whether a block of `threads` = (x, y, z) threads fits `device`."""
    total, dims, _ = block_limits(device)
    return math.prod(threads) <= total and all(t <= d for t, d in zip(threads, dims))


def on_chip_shared(device) -> bool:
    """Whether `device` has fast (on-chip) shared memory worth tiling into (`DeviceInfo.shared_on_chip`)."""
    return device.shared_on_chip()


def cpu_device(device) -> bool:
    """An OpenCL CPU device (PoCL ...): work-items of a group run in a loop on one core."""
    return "CPU" in str(device.extra.get("device_type", "")).upper()


def bind(stage, axes: list, tags: list[str]) -> None:
    for ax, tag in zip(axes, tags):
        stage.bind(ax, tag)


def cooperative_fetch(s, cache, threads: tuple[int, ...], vec: int = 1) -> None:
    """Spread the copy into `cache` (a shared stage) over the block's threads,
    (x, y, z) = `threads`, each copying `vec` consecutive elements of the last axis
    (vectorized when vec > 1); the loop over rounds is serial."""
    st = s[cache]
    axes = list(st.op.axis)
    inner = None
    if vec > 1:
        axes[-1], inner = st.split(axes[-1], factor=vec)
    fused = st.fuse(*axes)
    n = math.prod(threads)
    _, flat = st.split(fused, factor=n)   # the outer loop: rounds of copies
    tagged = []
    for t, tag in zip(threads[:-1], _AXES):   # peel x, then y, ... off the flat thread index
        flat, ax = st.split(flat, factor=t)
        tagged.append((ax, tag))
    tagged.append((flat, _AXES[len(threads) - 1]))
    for ax, tag in tagged:
        st.bind(ax, tag)
    if inner is not None:
        st.vectorize(inner)


def power2_at_most(n: int, limit: int) -> list[int]:
    """Powers of two that divide n, up to `limit`."""
    return [v for v in (1, 2, 4, 8, 16) if v <= limit and n % v == 0]
