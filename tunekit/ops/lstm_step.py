"""lstm_step: one step of an LSTM layer (ONNX's forward LSTM, default activations), the
recurrent matrix-vector product and the gates in one kernel:

    gates = h @ R^T + projection          (the projection: x_t @ W^T + biases, computed beforehand)
    i, o, f, c~ = sigmoid, sigmoid, sigmoid, tanh of the four gate rows (ONNX's order i, o, f, c)
    c' = f * c + i * c~;  h' = o * tanh(c')

Tensors: projection [B, 4H], state [2, B, H] ([h; c] of the previous step), recurrence
[U, H, 4, UNITS] = R's rows regrouped by blocks of UNITS hidden units (U = ceil(H / UNITS),
the last block padded with zero rows): block u holds, for every input k, the four gates
of its units side by side. A step then reads R as U contiguous panels, and each panel
yields every gate of its units, so the cell update of a block follows its product with
no exchange between the threads; out: the new state [2, B, H].
"""
from __future__ import annotations

import numpy as np

from .. import ir, te
from .op import Op, OpArgs, Size

#: hidden units per block of the recurrent weights (whole vectors on CPUs of up to 16 float32 lanes)
UNITS = 16


class LstmStepArgs(OpArgs):
    B: Size
    H: Size


def blocks(H: int) -> int:
    return -(-H // UNITS)


def _sigmoid(x):
    return 1.0 / (1.0 + te.exp(-x))


def compute(B: int, H: int, dtype: str = "float32"):
    U = blocks(H)
    proj = te.placeholder((B, 4 * H), "projection", dtype)
    state = te.placeholder((2, B, H), "state", dtype)
    rec = te.placeholder((U, H, 4, UNITS), "recurrence", dtype)
    k = te.reduce_axis(H, "k")
    gates = te.compute((B, U, 4, UNITS), lambda b, u, q, lane: te.sum(state[0, b, k] * rec[u, k, q, lane], axis=k),
                       name="gates")

    def gate(b, j, q):
        return gates[b, j // UNITS, q, j % UNITS] + proj[b, q * H + j]
    cell = te.compute((B, H), lambda b, j: _sigmoid(gate(b, j, 2)) * state[1, b, j]
                      + _sigmoid(gate(b, j, 0)) * te.tanh(gate(b, j, 3)), name="cell")
    out = te.compute((2, B, H), lambda s, b, j: te.if_then_else(
        ir.eq(s, 0), _sigmoid(gate(b, j, 1)) * te.tanh(cell[b, j]), cell[b, j]), name="lstm_state")
    return [proj, state, rec, out]


def recurrence(R: np.ndarray) -> np.ndarray:
    """numpy: ONNX's recurrent weights of one direction [4H, H] as the op's [U, H, 4, UNITS]."""
    H = R.shape[1]
    U = blocks(H)
    padded = np.zeros((4, U * UNITS, H), R.dtype)
    padded[:, :H] = R.reshape(4, H, H)
    return np.ascontiguousarray(padded.reshape(4, U, UNITS, H).transpose(1, 3, 0, 2))


def reference(proj, state, rec, *, B, H, **_):
    U = blocks(H)
    R = rec.astype(np.float64).transpose(2, 0, 3, 1).reshape(4, U * UNITS, H)[:, :H].reshape(4 * H, H)
    g = state[0].astype(np.float64) @ R.T + proj
    i, o, f, c = (g[:, q * H:(q + 1) * H] for q in range(4))

    def sig(x):
        return 1 / (1 + np.exp(-x))
    cell = sig(f) * state[1] + sig(i) * np.tanh(c)
    return [np.stack([sig(o) * np.tanh(cell), cell]).astype(proj.dtype)]


class LstmStepOp(Op):
    def random_inputs(self, args: dict, rng: np.random.Generator) -> list[np.ndarray]:
        """Inputs whose padded units have zero weights, as `recurrence` writes them."""
        a = self.canonical(args)
        B, H, dt = a["B"], a["H"], a["dtype"]
        R = rng.uniform(-1, 1, (4 * H, H)) / np.sqrt(H)
        return [rng.uniform(-1, 1, (B, 4 * H)).astype(dt), rng.uniform(-1, 1, (2, B, H)).astype(dt),
                recurrence(R.astype(dt))]


lstm_step = LstmStepOp("lstm_step", LstmStepArgs, compute, reference,
                       flops=lambda B, H, **_: 2 * B * 4 * H * H + 12 * B * H, reduction_size=lambda H, **_: H)
