"""Host buffers for kernels: aligned to cache lines, and laid out the same way in
every process.

numpy aligns large arrays to 16 bytes only. A CPU kernel whose 64-byte vector
loads straddle two cache lines can run at half speed, so a config timed on
numpy's own arrays gets a speed that depends on where malloc put them (seen on
resnet18.C9: the same kernel at 101 and 184 GFLOPS in two processes).
"""
from __future__ import annotations

import itertools

import numpy as np

ALIGN = 64          # bytes: a cache line, and one AVX-512 register
_PAGE = 4096


def empty(shape, dtype="float32", align: int = ALIGN) -> np.ndarray:
    """Return an uninitialized C-contiguous array whose data starts on an `align`-byte boundary.

    Args:
        shape, dtype: as for `numpy.empty`.
        align: alignment of the first element in bytes (a power of two).
    Returns:
        the array (a view of a slightly larger buffer, which it keeps alive).
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def arena(arrays) -> list[np.ndarray]:
    """Copy `arrays` into one page-aligned block, each at the next cache-line boundary.

    A kernel's buffers then sit at the same offsets from each other and from a
    page boundary in every process, so that its timing does not depend on the
    allocator (cache-set and 4K-aliasing conflicts between buffers).

    Args:
        arrays: numpy arrays (a kernel's inputs and outputs, in call order).
    Returns:
        C-contiguous copies, in the same order.
    """
    arrays = [np.asarray(a) for a in arrays]
    offsets = list(itertools.accumulate((-(-a.nbytes // ALIGN) * ALIGN for a in arrays), initial=0))
    block = empty(max(offsets[-1], 1), np.uint8, _PAGE)
    out = [block[off:off + a.nbytes].view(a.dtype).reshape(a.shape) for a, off in zip(arrays, offsets)]
    for view, a in zip(out, arrays):
        view[...] = a
    return out


def misaligned(arrays) -> list[int]:
    """Positions of the numpy arrays in `arrays` whose data is not `ALIGN`-byte aligned."""
    return [k for k, a in enumerate(arrays) if isinstance(a, np.ndarray) and a.__array_interface__["data"][0] % ALIGN]
