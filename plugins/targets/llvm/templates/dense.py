"""CPU dense template (`rows`): out[m, n] = data[m, :] . weight[n, :], the weights read
in place in their [N, K] layout (no packing: a network head reads each once).

Each task of the parallel loop owns `nt` output features of one data row and walks
K in steps of `vec` (whole vectors): one load of the data row serves the `nt`
weight rows, the products accumulating in `nt` x `vec` lanes of registers that are
summed across lanes at the end (the epilogue applied as it is written). A K that is
not a whole number of vectors runs scalar. Shaped for the M = 1 of a network's
classifier; a large M is matmul's."""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops.epilogue import Epilogue, has_epilogue

from ._common import registers, vectorize


def dense_rows(cfg, device, M, N, K, dtype="float32", **epilogue):
    """dense with nt output features per task, K in vectors (see the module's doc)."""
    lanes = device.lanes(dtype)
    cfg.define_knob("vec", [u * lanes for u in (1, 2, 4) if K % (u * lanes) == 0] or [1])
    cfg.define_split("tile_n", N, num_outputs=2, filter=lambda v: v[1] <= 8)
    cfg.constrain(lambda c: c["tile_n"][1] * max(1, c["vec"] // lanes) <= registers(device) - 2)
    v, nt = cfg["vec"], cfg["tile_n"][1]

    data = te.placeholder((M, K), "data", dtype)
    weight = te.placeholder((N, K), "weight", dtype)
    ko, ri = te.reduce_axis(K // v, "ko"), te.reduce_axis(v, "ri")
    part = te.compute((M, N, v), lambda m, n, i: te.sum(data[m, ko * v + i] * weight[n, ko * v + i], axis=ko),
                      name="dense_lanes")
    acc = te.compute((M, N), lambda m, n: te.sum(part[m, n, ri], axis=ri),
                     name="dense_acc" if has_epilogue(epilogue) else "dense")
    epi = Epilogue(N, (M, N), dtype, **epilogue)
    out = te.compute((M, N), lambda m, n: epi(acc[m, n], (m, n)), name="dense") if has_epilogue(epilogue) else acc

    s = te.create_schedule(out)
    m, n = s[out].op.axis
    no, ni = s[out].split(n, nt)
    s[out].reorder(no, m, ni)   # every row of a task's weight rows in turn: the weights read once for all rows
    par = s[out].fuse(no, m)
    s[out].parallel(par)
    if acc is not out:
        s[acc].compute_at(s[out], par)
    s[part].compute_at(s[out], par)
    pm, pn, pi = s[part].op.axis
    s[part].reorder(pm, ko, pn, pi)
    s[part].unroll(pn)
    vectorize(s, part, pi, lanes)
    return s, [data, weight, *epi.inputs, out]


TEMPLATES = [Template("dense", "rows", ("cpu",), dense_rows, priority=20, epilogue=True)]
