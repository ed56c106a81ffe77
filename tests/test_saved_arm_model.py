"""A model compiled for arm-cpu and saved here (cross-linked for aarch64) runs under
qemu-aarch64: a small C program dlopens the file's library and makes the plan's calls on
its weights, as tunekit.runtime does on an ARM machine, and its outputs are the x86 model's
(to float rounding: other vector widths sum in other orders)."""
from __future__ import annotations

import subprocess
import warnings

import numpy as np
import pytest
from conftest import require

import tunekit
from tunekit.runtime import ArtifactError, artifact

pytest.importorskip("llvmlite")
require("onnx", "saved models of ONNX files")
from tunekit_plugins.targets.llvm import qemu  # noqa: E402

if qemu.missing():
    pytest.skip(qemu.missing(), allow_module_level=True)
import networks  # noqa: E402  (examples/, on sys.path by conftest.py)

#: runs a saved model's plan: DRIVER LIBRARY PLAN WEIGHTS INPUTS OUTPUTS (the plan as `_plan_text` writes it)
DRIVER = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef void (*kernel)(void *, void *, void *, void *, void *, void *, void *, void *,
                       void *, void *, void *, void *, void *, void *, void *, void *);
static char *aligned(long n) {
  void *p;
  if (posix_memalign(&p, 64, n + 64)) exit(3);
  memset(p, 0, n + 64);
  return p;
}
int main(int argc, char **argv) {
  void *lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  FILE *plan = fopen(argv[2], "r"), *w = fopen(argv[3], "rb"), *in = fopen(argv[4], "rb"), *out = fopen(argv[5], "wb");
  int nb; long n, off;
  if (fscanf(plan, " B %d", &nb) != 1) return 4;
  char **bufs = malloc(sizeof(char *) * (nb + 1));
  for (int i = 0; i < nb; i++) { if (fscanf(plan, "%ld", &n) != 1) return 4; bufs[i] = aligned(n); }
  if (fscanf(plan, " W %ld", &n) != 1) return 4;
  bufs[nb] = aligned(n);   /* the weights: "buffer" nb */
  if (fread(bufs[nb], 1, n, w) != (size_t)n) return 5;
  char tag, sym[256];
  int b, na;
  while (fscanf(plan, " %c", &tag) == 1) {
    if (tag == 'I' && fscanf(plan, "%d %ld %ld", &b, &off, &n) == 3) {
      if (fread(bufs[b] + off, 1, n, in) != (size_t)n) return 5;
    } else if (tag == 'O' && fscanf(plan, "%d %ld %ld", &b, &off, &n) == 3) {
      fwrite(bufs[b] + off, 1, n, out);
    } else if (tag == 'C' && fscanf(plan, "%255s %d", sym, &na) == 2) {
      void *a[16] = {0};
      for (int k = 0; k < na; k++) { if (fscanf(plan, "%d %ld", &b, &off) != 2) return 4; a[k] = bufs[b] + off; }
      kernel f = (kernel)dlsym(lib, sym);
      if (!f) { fprintf(stderr, "no kernel %s\n", sym); return 6; }
      f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]);
    } else return 4;
  }
  fclose(out);
  return 0;
}
"""


def _plan_text(header: dict) -> str:
    """The plan for DRIVER: its buffers, then the inputs, calls and outputs as (buffer, byte offset)."""
    plan, places = header["plan"], header["weights"]
    nb = len(plan["buffers"])
    at = lambda r: (nb, places[r["weight"]][0]) if "weight" in r else (r["buffer"], r["offset"])
    size = lambda r: int(np.prod(r["shape"])) * np.dtype(r["dtype"]).itemsize
    lines = [f"B {nb} " + " ".join(map(str, plan["buffers"])), f"W {header['sections']['weights']['nbytes']}"]
    lines += [f"I {at(r)[0]} {at(r)[1]} {size(r)}" for r in plan["inputs"].values()]
    for c in plan["calls"]:
        lines.append(f"C {plan['kernels'][c['kernel']]['symbol']} {len(c['args'])} "
                     + " ".join(f"{b} {o}" for b, o in map(at, c["args"])))
    lines += [f"O {at(r)[0]} {at(r)[1]} {size(r)}" for _, r in plan["outputs"]]
    return "\n".join(lines) + "\n"


def test_a_resnet18_saved_for_arm_runs_under_qemu_as_the_x86_model(tmp_path):
    path = networks.resnet18(str(tmp_path / "resnet18.onnx"), size=32, exporter="onnx")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no tuning record.*default config")
        arm, x86 = tunekit.compile_model(path, target="arm-cpu"), tunekit.compile_model(path, target="x86")
    arm.save(tmp_path / "arm.tk")
    with pytest.raises(ArtifactError, match="compiled for aarch64 .*this machine is x86_64"):
        tunekit.runtime.load(tmp_path / "arm.tk")
    header, library, _ = artifact.read(str(tmp_path / "arm.tk"))
    assert header["machine"] == "aarch64" and header["target"] == "arm-cpu"
    (tmp_path / "kernels.so").write_bytes(library)
    (tmp_path / "plan.txt").write_text(_plan_text(header))
    section = header["sections"]["weights"]
    raw = (tmp_path / "arm.tk").read_bytes()
    (tmp_path / "weights.bin").write_bytes(raw[section["offset"]:section["offset"] + section["nbytes"]])
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (tmp_path / "inputs.bin").write_bytes(x.tobytes())
    (tmp_path / "driver.c").write_text(DRIVER)
    subprocess.run([qemu.GCC, "-O1", "-o", str(tmp_path / "driver"), str(tmp_path / "driver.c"), "-ldl"], check=True)
    subprocess.run([qemu.QEMU, "-L", qemu.sysroot(), str(tmp_path / "driver"), *(str(tmp_path / f) for f in (
        "kernels.so", "plan.txt", "weights.bin", "inputs.bin", "outputs.bin"))], check=True, timeout=300)
    got = np.frombuffer((tmp_path / "outputs.bin").read_bytes(), np.float32).reshape(1, 1000)
    want = x86(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
