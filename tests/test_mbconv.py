"""mbconv (`tunekit.ops.mbconv`, MobileNet-v2's inverted-residual block as one op) and its
CPU template `fused`: the op's reference is the three layers one after the other (the
existing ops' references, on weights blocked as a network's are), its compute is that
reference, bad args are refused with the way out, and sampled configs of the template
match it in the interpreter and compiled, on odd shapes."""
from __future__ import annotations

import platform
import random

import numpy as np
import pytest
from checks import interpreted_and_compiled

import tunekit
from tunekit import te
from tunekit.errors import ArgumentError
from tunekit.ops import layout as layouts

RNG = np.random.default_rng(11)
x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")

# (H, W, C, E, K_out, b, stride, expand, residual): odd sizes, both strides, a first block (no expand)
CASES = [(7, 9, 8, 24, 8, 8, 1, True, True), (6, 5, 8, 16, 16, 4, 2, True, False),
         (7, 9, 32, 32, 32, 16, 1, False, True), (5, 7, 32, 64, 32, 32, 2, True, False),
         (6, 5, 8, 8, 16, 8, 2, False, False)]


def _args(H, W, C, E, K, b, stride, expand, residual) -> dict:
    return dict(N=2 if stride == 2 else 1, C=C, H=H, W=W, E=E, K_out=K, layout=f"NCHW{b}c", expand=expand,
                stride=stride, residual=residual)


def _layers(x, w_e, b_e, w_d, b_d, w_p, b_p, args) -> np.ndarray:
    """The block by the conv2d and depthwise_conv2d references (float32 between layers)."""
    lay, residual = args["layout"], args["residual"]
    conv, dw = tunekit.registry().op("conv2d"), tunekit.registry().op("depthwise_conv2d")
    e = conv.reference(x, w_e, b_e, R=1, S=1, bias=True, activation="relu6", layout=lay)[0] if args["expand"] else x
    d = dw.reference(e, w_d, b_d, R=3, S=3, stride=args["stride"], padding=1, bias=True, activation="relu6",
                     layout=lay)[0]
    return conv.reference(d, w_p, b_p, *([x] if residual else []), R=1, S=1, bias=True, residual=residual,
                          layout=lay)[0]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-s{c[6]}{'-expand' * c[7]}{'-residual' * c[8]}"
                                             for c in CASES])
def test_the_reference_is_the_three_layers_on_a_networks_blocked_weights(case):
    args = _args(*case)
    (H, W, C, E, K, b), N = case[:6], args["N"]
    x = layouts.to_blocked(RNG.uniform(-1, 1, (N, C, H, W)).astype(np.float32), b)
    w_e = layouts.conv_weight(RNG.uniform(-1, 1, (E, C, 1, 1)).astype(np.float32), b)
    b_e = RNG.uniform(0.5, 1.5, E).astype(np.float32)   # relu6(b_e) > 0: the padding must still be 0
    w_d = layouts.depthwise_weight(RNG.uniform(-1, 1, (E, 1, 3, 3)).astype(np.float32), b)
    b_d = RNG.uniform(-1, 1, E).astype(np.float32)
    w_p = layouts.conv_weight(RNG.uniform(-1, 1, (K, E, 1, 1)).astype(np.float32), b)
    b_p = RNG.uniform(-1, 1, K).astype(np.float32)
    task = tunekit.Task("mbconv", args)
    inputs = [x, w_e, b_e, w_d, b_d, w_p, b_p] if args["expand"] else [x, w_d, b_d, w_p, b_p]
    assert [a.shape for a in inputs] == [t.shape for t in task.op.compute(**task.args)[:-1]]
    got = task.op.reference(*inputs, **task.args)[0]
    np.testing.assert_allclose(got, _layers(x, w_e, b_e, w_d, b_d, w_p, b_p, args), rtol=1e-4, atol=1e-4)
    # the tensor expression computes the same (its padding is of the expanded tensor too)
    np.testing.assert_allclose(te.evaluate(task.op.compute(**task.args), inputs)[0], got, rtol=1e-5, atol=1e-5)


def test_flops_are_the_three_layers():
    flops = {op: tunekit.registry().op(op).flops for op in ("mbconv", "conv2d", "depthwise_conv2d")}
    expand = flops["conv2d"](N=1, C=24, H=56, W=56, K_out=144, R=1, S=1)
    dw = flops["depthwise_conv2d"](N=1, C=144, H=56, W=56, R=3, S=3, stride=2, padding=1)
    project = flops["conv2d"](N=1, C=144, H=28, W=28, K_out=32, R=1, S=1)
    assert flops["mbconv"](N=1, C=24, H=56, W=56, E=144, K_out=32, stride=2) == expand + dw + project


BASE = dict(N=1, C=16, H=8, W=8, E=32, K_out=16, layout="NCHW8c")


@pytest.mark.parametrize("args, why", [
    ({"layout": "NCHW"}, 'blocked layout: set layout to "NCHW{b}c"'),
    ({"layout": "NCHW32c"}, "C=16 is not a multiple of the channel block 32 .* use a block that divides C, E and K"),
    ({"E": 36}, "E=36 is not a multiple"),
    ({"expand": False}, "E=32 differs from C=16 but expand is false: .* set E=C, or expand=true"),
    ({"residual": True, "stride": 2}, "needs stride 1 and C == K_out .* stride 2"),
    ({"residual": True, "K_out": 24}, "needs stride 1 and C == K_out .* K_out=24"),
    ({"stride": 3}, "stride"), ({"padding": 1}, "padding")])
def test_bad_args_are_refused_with_the_way_out(args, why):
    with pytest.raises(ArgumentError, match=why):
        tunekit.Task("mbconv", {**BASE, **args})


def test_only_its_own_template_schedules_it():
    assert not tunekit.registry().op("mbconv").generated   # the generated template `auto` does not try it
    assert tunekit.Task("mbconv", {**BASE, "residual": True}).bind(_target()).template.name == "fused"


def _target():
    pytest.importorskip("llvmlite")
    return tunekit.registry().component("target", "x86")()


@x86
@pytest.mark.parametrize("case", CASES[:4], ids=[f"{c[0]}x{c[1]}-b{c[5]}-s{c[6]}" for c in CASES[:4]])
def test_the_template_matches_numpy_interpreted_and_compiled(case):
    tgt = _target()
    ts = tunekit.Task("mbconv", _args(*case), template="fused").bind(tgt)
    args = ts.task.args
    sample = ts.space.sample(random.Random(1), 24)
    by_kind = {}   # one group of expanded channels per task or several; padded first or per task
    for i in sample:
        c = ts.space.get(i)
        by_kind.setdefault((c["tile_e"][0] > 1, c["pad_at"] if args["expand"] else "task"), i)
    assert len(by_kind) == (4 if args["expand"] else 2)
    for index in [ts.space.default(), *by_kind.values()]:
        interpreted_and_compiled(ts, index, tgt)


@pytest.mark.parametrize("name, options, machine", [("arm-cpu", {}, 183), ("x86", {"mcpu": "haswell"}, 62)],
                         ids=["aarch64", "x86-avx2"])
def test_it_cross_compiles(name, options, machine):
    """NEON (4 lanes, 32 registers) and AVX2 (8 lanes, 16 registers) spaces are non-empty and build."""
    pytest.importorskip("llvmlite")
    cls = tunekit.registry().component("target", name)
    target = cls(cls.Options(**options))
    ts = tunekit.Task("mbconv", dict(N=1, C=16, H=14, W=14, E=96, K_out=24, layout="NCHW8c"),
                      template="fused").bind(target)
    data = target.build(ts.program(ts.space.default())).data
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == machine
