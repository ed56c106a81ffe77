"""Run arm-cpu kernels on a non-ARM host under qemu-aarch64 user-mode emulation.

MCJIT cannot run aarch64 code on x86, so the kernel's object code is linked with a
small C harness by the aarch64 cross gcc (with -fopenmp: parallel kernels call
GOMP_parallel, and libgomp comes from the cross toolchain's sysroot), and the
executable runs under qemu-aarch64. The emulator is another process, so the arrays
travel through two files: all of them in, all of them back. The answers are the
kernel's own (tuning under emulation checks correctness for real); the timings are
the emulator's, not a board's.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from string import Template

import numpy as np

import tunekit

from .kernels import KernelLoadError, check_arguments, kernel_params

QEMU, GCC = "qemu-aarch64", "aarch64-linux-gnu-gcc"
#: seconds one emulator process may take (a runner's own deadline usually ends it first)
TIMEOUT_S = 300.0

_HARNESS = Template(r"""/* tunekit's qemu harness for $entry: read the arrays, time the kernel, write them back.
   usage: harness IN OUT NUMBER REPEAT WARMUP MIN_REPEAT_MS (running once is NUMBER=REPEAT=1) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

void kernel($params) __asm__("$entry");
static const size_t SIZES[$n] = {$sizes};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* a runner killed for a hang takes the emulated kernel along */
  if (argc != 7) {
    fprintf(stderr, "usage: %s IN OUT NUMBER REPEAT WARMUP MIN_REPEAT_MS\n", argv[0]);
    return 2;
  }
  void *a[$n];
  FILE *f = fopen(argv[1], "rb");
  for (int k = 0; k < $n; k++)
    if (!f || posix_memalign(&a[k], 64, SIZES[k] + 1) || fread(a[k], 1, SIZES[k], f) != SIZES[k]) {
      fprintf(stderr, "cannot read array %d from %s\n", k, argv[1]);
      return 2;
    }
  fclose(f);
  long number = atol(argv[3]), repeat = atol(argv[4]), warmup = atol(argv[5]);
  double min_s = atof(argv[6]) / 1e3;
  for (long i = 0; i < warmup; i++) kernel($args);
  if (min_s > 0) { /* raise number until one repeat lasts min_s, as Target.run does */
    double t0 = now();
    kernel($args);
    double one = now() - t0;
    long need = (long)(min_s / (one > 1e-7 ? one : 1e-7)) + 1;
    if (need > number) number = need;
  }
  for (long r = 0; r < repeat; r++) {
    double t0 = now();
    for (long i = 0; i < number; i++) kernel($args);
    printf("%.9e\n", (now() - t0) / number);
  }
  f = fopen(argv[2], "wb");
  for (int k = 0; k < $n; k++)
    if (!f || fwrite(a[k], 1, SIZES[k], f) != SIZES[k]) {
      fprintf(stderr, "cannot write array %d to %s\n", k, argv[2]);
      return 2;
    }
  return fclose(f) ? 2 : 0;
}
""")

_EXES: dict[str, Path] = {}
_LOCK = threading.Lock()


def missing() -> str | None:
    """Return why kernels cannot run under emulation here (a tool not on PATH), or None."""
    gone = [f"{tool} (Debian package {pkg})" for tool, pkg in ((QEMU, "qemu-user"), (GCC, "gcc-aarch64-linux-gnu"))
            if shutil.which(tool) is None]
    if gone:
        return f"emulating arm-cpu needs {' and '.join(gone)}: apt-get install qemu-user gcc-aarch64-linux-gnu"
    return None


@functools.cache
def sysroot() -> str:
    """Return the aarch64 root qemu loads ld-linux and libgomp from (Debian: /usr/aarch64-linux-gnu)."""
    libc = subprocess.run([GCC, "-print-file-name=libc.so.6"], capture_output=True, text=True).stdout.strip()
    return str(Path(libc).resolve().parent.parent) if os.path.isabs(libc) else "/usr/aarch64-linux-gnu"


def harness(artifact: tunekit.Artifact) -> str:
    """Return the C source of the harness that runs `artifact`'s kernel."""
    ps = kernel_params(artifact)
    if artifact.meta.get("sizes"):
        raise KernelLoadError(f"{artifact.entry}: kernels with symbolic sizes are not emulated; run them on an "
                              "aarch64 machine")
    sizes = [int(np.prod(shape, dtype=np.int64)) * dt.itemsize for _, shape, dt in ps]
    return _HARNESS.substitute(entry=artifact.entry, n=len(ps), params=", ".join(["void *"] * len(ps)),
                               sizes=", ".join(map(str, sizes)), args=", ".join(f"a[{k}]" for k in range(len(ps))))


def executable(artifact: tunekit.Artifact) -> Path:
    """Return the harness linked with `artifact`'s object code: linked once per process (and
    reused from the cache directory when another process linked it already)."""
    source = harness(artifact)
    key = hashlib.blake2b(artifact.data + source.encode(), digest_size=16).hexdigest()
    with _LOCK:
        if key not in _EXES:
            _EXES[key] = _link(Path(tempfile.gettempdir()) / f"tunekit-qemu-{os.getuid()}" / key, source, artifact)
        return _EXES[key]


def _link(folder: Path, source: str, artifact: tunekit.Artifact) -> Path:
    exe = folder / "kernel"
    if exe.exists():
        return exe
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder))   # processes linking the same kernel never share files
    try:
        (work / "kernel.o").write_bytes(artifact.data)
        (work / "harness.c").write_text(source)
        cmd = [GCC, "-O2", "-fopenmp", "harness.c", "kernel.o", "-o", "kernel"]
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise KernelLoadError(f"{artifact.entry}: linking for qemu failed ({' '.join(cmd)}): "
                                  f"{done.stderr[-2000:].strip()}")
        os.replace(work / "kernel", exe)   # atomic: a reader sees no executable or a whole one
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return exe


def _execute(artifact: tunekit.Artifact, arrays, number: int, repeat: int, warmup: int,
             min_repeat_ms: float) -> list[float]:
    """Run the harness under qemu; copy every array back (the kernel may write any) and return the costs."""
    exe = executable(artifact)
    with tempfile.TemporaryDirectory(prefix="tunekit-qemu-") as tmp:
        src, dst = Path(tmp, "in"), Path(tmp, "out")
        with open(src, "wb") as f:
            for a in arrays:
                f.write(a.data)
        cmd = [QEMU, "-L", sysroot(), str(exe), str(src), str(dst), str(number), str(repeat), str(warmup),
               str(min_repeat_ms)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise KernelLoadError(f"{artifact.entry}: no result under {QEMU} within {TIMEOUT_S:g} s") from e
        rc = done.returncode
        if rc != 0:
            how = f"signal {-rc} ({signal.strsignal(-rc)})" if rc < 0 else f"exit code {rc}"
            raise KernelLoadError(f"{artifact.entry} failed under {QEMU} with {how}: "
                                  f"{done.stderr[-2000:].strip() or 'nothing on stderr'}")
        with open(dst, "rb") as f:
            for a in arrays:
                f.readinto(a.reshape(-1).view(np.uint8))
    return [float(c) for c in done.stdout.split()]


def load(artifact: tunekit.Artifact) -> Callable[..., None]:
    """Return `kernel(*arrays)`: run `artifact` once under qemu on the kernel's numpy arrays, in place."""
    entry, ps = artifact.entry, kernel_params(artifact)
    executable(artifact)   # a link error is a load error, as with MCJIT

    def kernel(*arrays: np.ndarray) -> None:
        check_arguments(entry, ps, arrays)
        _execute(artifact, arrays, 1, 1, 0, 0)

    kernel.__name__ = entry
    return kernel


def time(artifact: tunekit.Artifact, arrays: list[np.ndarray], settings: tunekit.RunSettings) -> list[float]:
    """Return `settings.repeat` costs (mean seconds per run) of `artifact` timed inside one qemu process.

    Warmup and min_repeat_ms work as in `Target.run`; flush_cache is ignored (the
    emulated caches are the host's, and these timings are no board's anyway).
    """
    check_arguments(artifact.entry, kernel_params(artifact), tuple(arrays))
    return _execute(artifact, arrays, settings.number, settings.repeat, settings.warmup, settings.min_repeat_ms)
