"""CPU template of lstm_step (`tunekit.ops.lstm_step`): one parallel loop over blocks of
hidden units. A task computes its blocks' four gates (a register tile of 4 gates x
`units` lanes, accumulated over the inputs k down one contiguous panel of the recurrent
weights), then their cell and hidden updates, and writes them: one pass over the
weights, one fork and join per step. A step is bound by how fast the weights stream
from the caches, so the knobs shape the stream: the units per task (one or two panels
read side by side) and the unrolling of k.
"""
from __future__ import annotations

from tunekit import Template, te
from tunekit.ops import lstm_step as op

from ._common import vectorize


def _stage(t: te.Tensor, name: str) -> te.Tensor:
    return next(i for i in t.op.inputs if i.op.name == name)


def lstm_step(cfg, device, B, H, dtype="float32"):
    """lstm_step over tasks of `units` hidden units (see the module's doc)."""
    lanes = device.lanes(dtype)
    cfg.define_knob("units", [op.UNITS * n for n in (1, 2) if op.UNITS * n <= max(op.UNITS, H)])
    cfg.define_knob("unroll_k", [1, 2, 4, 8, 16])
    units, uk = cfg["units"], cfg["unroll_k"]

    tensors = op.compute(B=B, H=H, dtype=dtype)
    out = tensors[-1]
    s = te.create_schedule(out)
    cell = _stage(out, "cell")
    gates = _stage(cell, "gates")

    q, b, j = s[out].op.axis
    jo, ji = s[out].split(j, units)
    s[out].reorder(b, jo, q, ji)
    task = s[out].fuse(b, jo)
    s[out].parallel(task)
    vectorize(s, out, ji, lanes)

    s[cell].compute_at(s[out], task)
    vectorize(s, cell, s[cell].op.axis[1], lanes)

    s[gates].compute_at(s[out], task)
    gb, gu, gq, gl = s[gates].op.axis
    ko, ki = s[gates].split(s[gates].op.reduce_axis[0], uk)
    s[gates].reorder(gb, ko, ki, gu, gq, gl)
    s[gates].unroll(ki)
    s[gates].unroll(gu)
    s[gates].unroll(gq)
    vectorize(s, gates, gl, lanes)
    return s, tensors


TEMPLATES = [Template("lstm_step", "panels", ("cpu",), lstm_step, priority=20)]
