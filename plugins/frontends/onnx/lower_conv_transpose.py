"""A 2-D ConvTranspose of constant weights (group 1, dilation 1) as stride^2 ordinary
convolutions, one per output phase, and an interleave (of a one-pixel input: a dense).

Output row oh = q*s + r (phase r) gets the taps kh = c_r + s*a (c_r = (r + pad) mod s) from
input rows q + d_r - a: a dense convolution over the input with a sub-kernel of the weights,
no zeros multiplied and no division in its indexing (the generic lowering's gather form is
left with a floor division per load, which keeps its loops from vectors). Each phase is its
own kernel (a computation tuned through `auto`; phases of equal offsets share a task) that
puts innermost, where it vectorizes, the longer of its output channels and columns; the
interleave that writes them into the output is a te node, with the bias and a folded
BatchNormalization as its per-channel scale and shift, and fuses the ReLU/Tanh after it.
"""
from __future__ import annotations

import numpy as np

from tunekit import te
from tunekit.graph import Node
from tunekit.topi import linear

from .context import attrs_of, ident


def applies(cv, n) -> bool:
    """Whether ConvTranspose node `n` takes this form (else the generic te lowering)."""
    a = attrs_of(n)
    return (n.input[1] in cv.constants and len(cv.shapes[n.input[0]]) == 4 and a.get("group", 1) == 1
            and set(a.get("dilations", [1, 1])) == {1} and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
            and "output_shape" not in a and (len(n.input) < 3 or not n.input[2] or n.input[2] in cv.constants))


def _axis(out: int, k: int, s: int, pad: int, r: int) -> tuple[int, int, int]:
    """Phase r along one axis: (outputs q, taps A, input offset of tap 0 at q = 0 after flipping)."""
    c = (r + pad) % s
    taps = -(-(k - c) // s) if k > c else 0
    d = (r + pad - c) // s
    return -(-(out - r) // s), taps, d - taps + 1


def expand(cv, n) -> None:
    """Add the phase kernels and the interleave of ConvTranspose node `n` to converter `cv`."""
    a = attrs_of(n)
    x, w = n.input[0], cv.constants[n.input[1]]   # [C, K, kh, kw]
    N, C, H, W = cv.shapes[x]
    K, kh, kw = w.shape[1:]
    sh, sw = a.get("strides", [1, 1])
    pt, pl = a.get("pads", [0, 0, 0, 0])[:2]
    Ho, Wo = cv.shapes[n.output[0]][2:]
    tag = ident(n.name or n.output[0])
    phases = []
    if (H, W) == (1, 1):   # one pixel in (DCGAN's first layer): a dense of the kernel's window that the output is,
        name = f"{tag}/dense"   # rows [pt, pt + Ho) and columns [pl, pl + Wo), zeros past its end (output_padding)
        win = np.pad(w, [(0, 0), (0, 0), (0, max(0, pt + Ho - kh)), (0, max(0, pl + Wo - kw))])[:, :, pt:, pl:]
        win = win[:, :, :Ho, :Wo].reshape(C, -1).T
        cv.add(cv.anchors.linear(n, x, N, name, win, None, name), (N, K * Ho * Wo))
        cv.shapes[name] = (N, K, Ho, Wo)   # the interleave reads it as one phase (the same bytes)
        sh = sw = 1
        phases.append(name)
    # each phase vectorizes its innermost axis: channels last where there are as many as its columns or more
    last = not phases and K >= -(-Wo // sw)
    for rh in range(sh if not phases else 0):
        for rw in range(sw):
            Q, A, oh = _axis(Ho, kh, sh, pt, rh)
            P, B, ow = _axis(Wo, kw, sw, pl, rw)
            name = f"{tag}/phase{rh}{rw}"
            shape = (N, Q, P, K) if last else (N, K, Q, P)
            if min(Q, P) <= 0 or min(A, B) <= 0:   # no output, or no tap reaches it (zeros)
                cv.constants[name] = np.zeros([max(d, 0) for d in shape], np.float32)
                cv.shapes[name] = cv.constants[name].shape
            else:
                ch, cw = (rh + pt) % sh, (rw + pl) % sw
                sub = w[:, :, ch::sh, cw::sw][:, :, ::-1, ::-1]   # [C, K, A, B], flipped
                weight = cv.const(f"{name}/w", sub.transpose(2, 3, 0, 1) if last else sub.transpose(1, 0, 2, 3))
                data = te.to_data(linear.conv_transpose_phase(N, C, H, W, K, Q, P, A, B, oh, ow, last))
                cv.add(Node("onnx_conv_transpose_phase", {}, [x, weight], name, f"{n.name or tag} phase {rh}{rw}",
                            "ConvTranspose", computation=data), shape)
            phases.append(name)
    bias = cv.constants[n.input[2]] if len(n.input) > 2 and n.input[2] else np.zeros(K, np.float32)
    scale, shift = cv.const(f"{tag}/scale", np.ones(K)), cv.const(f"{tag}/shift", bias)
    cv.add(cv.te_call("ConvTranspose", n.name or tag, [*phases, scale, shift], [n.output[0]], 0,
                           {"strides": [sh, sw], "last": last}, interleave, ("scale_shift",), "injective"),
                cv.shapes[n.output[0]])


def interleave(cx) -> list[te.Tensor]:
    """The lowering of the interleave (`tunekit.topi.linear.interleave`), its inputs the phases, scale, shift."""
    n = len(cx.values) - 2
    return [linear.interleave([cx.tensor(k) for k in range(n)], cx.tensor(n), cx.tensor(n + 1), cx.attrs["strides"],
                              cx.attrs["last"], cx.out_shapes[0], ident(cx.name))]
