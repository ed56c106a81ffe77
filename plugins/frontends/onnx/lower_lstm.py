"""The ONNX LSTM node (forward, default activations) as kernels:

- the input projection of every step at once: one dense (or matmul) of [T*B, I] x [4H, I]^T
  with the two biases summed (a hand-template op, tuned like any Gemm);
- one `lstm_step` per step (`tunekit.ops.lstm_step`): the recurrent product and the gates
  in one kernel, reading its slice of the projection and the previous state in place and
  writing its state ([h; c], [2, B, H]) into one tensor of all steps (views: every step
  is the same task, tuned once for all T); the recurrent weights regrouped once, here;
- Y, Y_h and Y_c read out of the states by small te nodes (`tunekit.topi.layout.lstm_output`, fused into their readers).
"""
from __future__ import annotations

import numpy as np

from tunekit.graph import Node
from tunekit.ops import lstm_step
from tunekit.topi import layout

from .context import attrs_of, ident


def expand(cv, n) -> None:
    """Add the items of LSTM node `n` to converter `cv`."""
    a = attrs_of(n)
    x, w, r, bias, lens, h0, c0, peep = list(n.input) + [""] * (8 - len(n.input))
    if a.get("direction", "forward") != "forward" or a.get("layout", 0) or a.get("clip") is not None \
            or a.get("input_forget", 0) or peep or a.get("activations", ["Sigmoid", "Tanh", "Tanh"]) != \
            ["Sigmoid", "Tanh", "Tanh"]:
        raise cv.fail(n, "only a forward LSTM, layout 0, default activations, without clip, input_forget or "
                      "peepholes")
    for k, name in ((1, w), (2, r), (3, bias), (5, h0), (6, c0)):
        if name and name not in cv.constants:
            raise cv.fail(n, f"its input {k} ({name!r}) must be a constant")
    T, B, I = cv.shapes[x]
    H = int(a["hidden_size"])
    if lens and not (lens in cv.constants and np.all(cv.constants[lens] == T)):
        raise cv.fail(n, "sequence_lens must be a constant equal to the sequence length (no padding)")
    b = cv.constants[bias].reshape(2, 4 * H).sum(0) if bias else np.zeros(4 * H, np.float32)
    tag = ident(n.name or n.output[0])
    proj = f"{tag}/projection"
    cv.add(cv.anchors.linear(n, x, T * B, f"{tag}/W", cv.constants[w][0], cv.const(f"{tag}/B", b), proj),
                (T * B, 4 * H))
    zeros = np.zeros((B, H), np.float32)
    init = cv.const(f"{tag}/initial_state", np.stack([cv.constants[h0][0] if h0 else zeros,
                                                      cv.constants[c0][0] if c0 else zeros]))
    states = f"{tag}/states"
    cv.shapes[states], cv.dtypes[states] = (T, 2, B, H), "float32"
    rec, prev = cv.const(f"{tag}/R", lstm_step.recurrence(cv.constants[r][0])), init
    for t in range(T):
        view, out = f"{proj}@{t}", f"{states}@{t}"
        cv.view(view, proj, t * B * 4 * H, (B, 4 * H))
        cv.view(out, states, t * 2 * B * H, (2, B, H))
        node = Node("lstm_step", {"B": B, "H": H}, [view, prev, rec], out, f"{n.name or tag} step {t}", "LSTM")
        cv.add(node, (2, B, H))
        prev = out
    for k, o in enumerate(n.output):
        if o and o in cv.used:
            cv.add(cv.te_call("LSTM", n.name, [states], [o], 0, {}, lambda cx, k=k: [layout.lstm_output(
                cx.tensor(0), k, f"{tag}_{('y', 'y_h', 'y_c')[k]}")]), cv.shapes[o])

