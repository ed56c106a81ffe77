"""The saved-model file (`.tk`): one file that holds a compiled network.

    bytes 0-31   b"TUNEKIT\\0", then little-endian u32 format, u32 CRC-32 of the header,
                 u64 header length, u64 zero
    bytes 32-    the header: UTF-8 JSON (sorted keys): the format, the tunekit version, the
                 target and its options, the machine and CPU features the kernels need,
                 the sections, the weights' places and the plan (`tunekit.runtime.model`)
    then         the sections, each at a 4096-byte boundary with its CRC-32 in the header:
                 "library", the kernels' shared library; "weights", every weight at a
                 64-byte boundary, in the layouts the kernels read

Weights are mapped from the file (read-only, shared between processes), never copied.
Everything in it is a function of its inputs: the same model and database give the same bytes.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from collections.abc import Sequence

import numpy as np

from tunekit.errors import TunekitError

MAGIC, FORMAT = b"TUNEKIT\0", 1
_PREFIX = struct.Struct("<8sIIQQ")
_PAGE, _ALIGN = 4096, 64


class ArtifactError(TunekitError):
    """A saved-model file that cannot be read here (not one, corrupt, truncated, or for another machine)."""


def _up(n: int, align: int) -> int:
    return -(-n // align) * align


def write(path: str, header: dict, library: bytes, weights: Sequence[np.ndarray]) -> None:
    """Write a saved-model file at `path` (atomically: a file of that name is whole or absent).

    Args:
        header: the header's fields besides "format", "sections" and "weights".
        library: the kernels' shared library.
        weights: the weights, in the plan's weight order (C-contiguous arrays).
    """
    places, end, crc = [], 0, 0
    parts = [memoryview(np.ascontiguousarray(w).reshape(-1).view(np.uint8)) for w in weights]
    for part in parts:   # each weight at the next 64-byte boundary, zeros between
        at = _up(end, _ALIGN)
        crc = zlib.crc32(part, zlib.crc32(bytes(at - end), crc))
        places.append([at, part.nbytes])
        end = at + part.nbytes
    sizes = {"library": (len(library), zlib.crc32(library)), "weights": (end, crc)}

    def encoded(start: int) -> tuple[bytes, dict]:
        where, at = {}, start
        for name, (nbytes, crc) in sizes.items():
            where[name] = {"offset": _up(at, _PAGE), "nbytes": nbytes, "crc32": crc}
            at = where[name]["offset"] + nbytes
        text = json.dumps({**header, "format": FORMAT, "sections": where, "weights": places}, sort_keys=True)
        return text.encode(), where

    # the sections' offsets depend on the header's length, which holds them: settle on a fixed point
    text, where = encoded(_PAGE)
    while _up(_PREFIX.size + len(text), _PAGE) > min(w["offset"] for w in where.values()):
        text, where = encoded(_up(_PREFIX.size + len(text), _PAGE))
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(_PREFIX.pack(MAGIC, FORMAT, zlib.crc32(text), len(text), 0) + text)
        f.seek(where["library"]["offset"])
        f.write(library)
        for part, (off, _) in zip(parts, places):
            f.seek(where["weights"]["offset"] + off)
            f.write(part)
        f.truncate(where["weights"]["offset"] + end)   # a trailing gap, zeros
    os.replace(tmp, path)


def read(path: str) -> tuple[dict, bytes, list[np.ndarray]]:
    """Read and check the saved-model file at `path`.

    Returns:
        (its header, its shared library's bytes, its weights as flat read-only uint8 arrays mapped from the file).
    Raises:
        ArtifactError: not a saved model, a newer format, or corrupt or truncated (naming the file and the part).
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _PREFIX.size:
                raise ArtifactError(f"{path}: {size} bytes, too short to be a tunekit model file")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read it: {e.strerror or e}") from None
    magic, fmt, crc, length, _ = _PREFIX.unpack_from(mm, 0)
    if magic != MAGIC:
        raise ArtifactError(f"{path}: not a tunekit model file (it does not start with {MAGIC!r}); make one with "
                            "`tunekit compile MODEL.onnx -o model.tk` or CompiledModel.save")
    if fmt != FORMAT:
        raise ArtifactError(f"{path}: a model file of format {fmt}; this tunekit reads format {FORMAT}: compile the "
                            "model again with this version, or run it with the version that saved it")
    if _PREFIX.size + length > size:
        raise ArtifactError(f"{path}: truncated: its header needs {_PREFIX.size + length} bytes, the file has {size}")
    text = mm[_PREFIX.size:_PREFIX.size + length]
    try:
        if zlib.crc32(text) != crc:
            raise ValueError("its checksum does not match")
        header = json.loads(text)
        sections, places = header["sections"], header["weights"]
    except (ValueError, KeyError, TypeError) as e:
        raise ArtifactError(f"{path}: corrupt header ({e}); save the model again") from None
    data = np.frombuffer(mm, np.uint8)
    parts = {}
    for name in ("library", "weights"):
        s = sections[name]
        if s["offset"] + s["nbytes"] > size:
            raise ArtifactError(f"{path}: truncated: its {name} section ends at byte {s['offset'] + s['nbytes']}, "
                                f"the file has {size} bytes; copy the whole file again")
        parts[name] = data[s["offset"]:s["offset"] + s["nbytes"]]
        if zlib.crc32(parts[name]) != s["crc32"]:
            raise ArtifactError(f"{path}: corrupt: its {name} section does not match its checksum; copy the file "
                                "again or save the model again")
    blob = parts["weights"]
    if any(off < 0 or off + n > blob.nbytes for off, n in places):
        raise ArtifactError(f"{path}: corrupt header: a weight lies outside the weights section")
    return header, parts["library"].tobytes(), [blob[off:off + n] for off, n in places]
