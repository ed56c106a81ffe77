"""Kernels' object code linked into one shared library by the system's C compiler driver
(the host's `cc`, or the cross gcc of the target's architecture), for `tunekit.runtime`.

libgomp and libm stay dynamic dependencies; `-z defs` makes a symbol nothing provides a
link error here instead of a load error on the machine the library is shipped to.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile

import tunekit
from tunekit.errors import BuildError

#: the instruction-set extensions (LLVM's names) LLVM's code generator may select in a kernel: the
#: ones of these a build enables are what a machine running its library must have
X86_ISA = frozenset({
    "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "lzcnt", "bmi", "bmi2", "movbe", "f16c", "fma",
    "avx", "avx2", "avxvnni", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512vnni",
    "avx512bf16", "avx512fp16", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq", "avx512ifma",
    "gfni", "amx-tile", "amx-int8", "amx-bf16"})
ARM_ISA = frozenset({"neon", "fullfp16", "dotprod", "i8mm", "bf16", "sve", "sve2"})

_MACHINES = {"x86_64": "x86_64", "aarch64": "aarch64"}


def needed(triple: str, features: frozenset) -> tuple[str, ...]:
    """The features of `features` that code for `triple` may use (sorted)."""
    isa = X86_ISA if triple.startswith("x86_64") else ARM_ISA
    have = set(features) | ({"neon"} if triple.startswith("aarch64") else set())
    return tuple(sorted(have & isa))


def machine(triple: str) -> str:
    """The `platform.machine()` name of `triple`'s architecture."""
    arch = triple.split("-", 1)[0]
    if arch not in _MACHINES:
        raise BuildError(f"tunekit.runtime links kernels for x86_64 or aarch64, not {triple}")
    return _MACHINES[arch]


def driver(arch: str) -> str:
    """The C compiler driver that links for `arch` here: the host's own, else its cross gcc."""
    host = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    names = [os.environ.get("CC", "cc"), "gcc"] if arch == host else [f"{arch}-linux-gnu-gcc"]
    for name in names:
        if found := shutil.which(name):
            return found
    pkg = "gcc" if arch == host else f"gcc-{arch.replace('_', '-')}-linux-gnu"
    raise BuildError(f"linking {arch} kernels needs the C compiler driver {names[0]} (Debian: apt-get install {pkg})")


def link(artifacts: list[tunekit.Artifact], triple: str) -> bytes:
    """The shared library of `artifacts`' object code (their entries exported), for `triple`."""
    entries = [a.entry for a in artifacts]
    if len(set(entries)) != len(entries):
        raise BuildError("kernels linked into one library need distinct entry names")
    cc = driver(machine(triple))
    parallel = any(a.meta.get("parallel") for a in artifacts)
    with tempfile.TemporaryDirectory(prefix="tunekit-link-") as d:
        objs = []
        for k, a in enumerate(artifacts):
            objs.append(os.path.join(d, f"k{k}.o"))
            with open(objs[-1], "wb") as f:
                f.write(a.data)
        out = os.path.join(d, "kernels.so")
        # -z defs: every symbol resolved now; the build id hashes the contents only (reproducible)
        cmd = [cc, "-shared", "-o", out, "-Wl,-z,defs", "-Wl,--build-id=sha1", *objs, "-lm",
               *(["-lgomp"] if parallel else []), "-lc"]
        done = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"linking {len(objs)} kernels with {cc} failed: {done.stderr.strip()[-2000:]}")
        with open(out, "rb") as f:
            return f.read()
