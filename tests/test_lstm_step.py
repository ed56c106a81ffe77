"""lstm_step: the recurrent product and the gates of one LSTM step in one kernel."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from checks import interpreted_and_compiled

import tunekit
from tunekit.ops import lstm_step


def _onnx_cell(x_proj, h, c, R):
    """One step as the ONNX spec writes it (gates i, o, f, c; R [4H, H])."""
    def sig(v):
        return 1 / (1 + np.exp(-v))
    g = x_proj + h @ R.T.astype(np.float64)
    i, o, f, cc = np.split(g, 4, axis=1)
    c2 = sig(f) * c + sig(i) * np.tanh(cc)
    return sig(o) * np.tanh(c2), c2


@pytest.mark.parametrize("B, H", [(1, 5), (2, 16), (1, 37)])
def test_the_reference_is_an_onnx_lstm_cell_over_the_regrouped_weights(B, H):
    rng = np.random.default_rng(0)
    R = rng.standard_normal((4 * H, H)).astype(np.float32) / np.sqrt(H)
    proj, state = rng.standard_normal((B, 4 * H)), rng.standard_normal((2, B, H))
    rec = lstm_step.recurrence(R)
    assert rec.shape == (lstm_step.blocks(H), H, 4, lstm_step.UNITS)
    assert not rec[-1, :, :, H - (len(rec) - 1) * lstm_step.UNITS:].any()   # padded units: zero weights
    h, c = _onnx_cell(proj, state[0], state[1], R)
    out = lstm_step.lstm_step.reference(proj, state, rec, B=B, H=H)[0]
    np.testing.assert_allclose(out, np.stack([h, c]), rtol=1e-6, atol=1e-6)


x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="compiles for the x86 host")


@x86
@pytest.mark.parametrize("B, H", [(1, 37), (1, 16), (2, 21)])
def test_the_template_matches_numpy_interpreted_and_compiled_in_every_config(B, H):
    pytest.importorskip("llvmlite")
    tgt = tunekit.registry().component("target", "x86")()
    ts = tunekit.Task("lstm_step", dict(B=B, H=H), template="panels").bind(tgt)
    for index in range(ts.space.size):
        interpreted_and_compiled(ts, index, tgt)
