"""The operator library: numpy references against naive loops, tensor expressions
lowered and run in the reference interpreter against the references, named workloads,
argument validation."""
import numpy as np
import pytest

import tunekit
from tunekit import te
from tunekit.errors import ArgumentError
from tunekit.ir import interp
from tunekit.ops.batch_matmul import batch_matmul
from tunekit.ops.conv2d import conv2d
from tunekit.ops.dense import dense
from tunekit.ops.depthwise_conv2d import depthwise_conv2d
from tunekit.ops.group_conv2d import group_conv2d
from tunekit.ops.matmul import matmul
from tunekit.ops.pool import avg_pool2d, global_avg_pool2d, max_pool2d
from tunekit.ops.workloads import workloads


def naive_conv2d(x, w, stride, padding, dilation, depthwise=False):
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    N, _, H, W = x.shape
    K, CW, R, S = w.shape
    OH, OW = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1, (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    out = np.zeros((N, K, OH, OW))
    for n in range(N):
        for k in range(K):
            for y in range(OH):
                for xx in range(OW):
                    acc = 0.0
                    for c in range(CW):
                        for r in range(R):
                            for s in range(S):
                                h, v = y * sh + r * dh - ph, xx * sw + s * dw - pw
                                if 0 <= h < H and 0 <= v < W:
                                    acc += float(x[n, k if depthwise else c, h, v]) * float(w[k, c, r, s])
                    out[n, k, y, xx] = acc
    return out


def naive_batch_matmul(a, w):
    B, M, K = a.shape
    out = np.zeros((B, M, w.shape[2]))
    for b in range(B):
        for i in range(M):
            for j in range(w.shape[2]):
                out[b, i, j] = sum(float(a[b, i, k]) * float(w[b, k, j]) for k in range(K))
    return out


GEOMETRIES = [  # stride, padding, dilation
    (1, 0, 1), (2, 1, 1), (1, 1, 2), (2, 2, 2), ((2, 1), (1, 0), (1, 2)),
]


def _id(op, args):
    geometry = [f"{k}{'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in args.items()
                if k in ("stride", "padding", "dilation")]
    return "-".join([op.name, *geometry])


def naive_group_conv2d(x, w, stride, padding, dilation, groups):
    cg, kg = x.shape[1] // groups, w.shape[0] // groups
    return np.concatenate([naive_conv2d(x[:, g * cg:(g + 1) * cg], w[g * kg:(g + 1) * kg], stride, padding, dilation)
                           for g in range(groups)], axis=1)


def naive_pool(x, R, S, stride, padding, kind, count_include_pad=False):
    (sh, sw), (ph, pw) = stride, padding
    N, C, H, W = x.shape
    OH, OW = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
    out = np.zeros((N, C, OH, OW))
    for n, c, y, xx in np.ndindex(N, C, OH, OW):
        vals = [float(x[n, c, h, v]) for h in range(y * sh - ph, y * sh - ph + R)
                for v in range(xx * sw - pw, xx * sw - pw + S) if 0 <= h < H and 0 <= v < W]
        out[n, c, y, xx] = max(vals) if kind == "max" else sum(vals) / (R * S if count_include_pad else len(vals))
    return out


CASES = [pytest.param(op, args, id=_id(op, args)) for op, args in
         [(batch_matmul, dict(B=2, M=3, N=5, K=4)), (dense, dict(M=3, N=5, K=7))]
         + [(conv2d, dict(N=2, C=3, H=7, W=6, K_out=4, R=3, S=2, stride=st, padding=p, dilation=d))
            for st, p, d in GEOMETRIES]
         + [(depthwise_conv2d, dict(N=2, C=3, H=7, W=6, R=3, S=2, stride=st, padding=p, dilation=d))
            for st, p, d in GEOMETRIES]
         + [(group_conv2d, dict(N=2, C=4, H=7, W=6, K_out=6, R=3, S=2, stride=st, padding=p, dilation=d, groups=2))
            for st, p, d in GEOMETRIES]
         + [(op, dict(N=2, C=3, H=7, W=6, R=3, S=3, stride=st, padding=p)) for op in (max_pool2d, avg_pool2d)
            for st, p, _ in GEOMETRIES]
         + [(avg_pool2d, dict(N=1, C=2, H=7, W=6, R=3, S=3, stride=2, padding=1, count_include_pad=True)),
            (global_avg_pool2d, dict(N=2, C=3, H=5, W=7))]]
# the same, plus each padded convolution again with its pad stage inlined (pools have none)
LOWER_CASES = [pytest.param(*c.values, inline, id=c.id + ("-inline" if inline else ""))
               for c in CASES for inline in (False, True)
               if not inline or c.values[1].get("padding", 0) and "pool" not in c.values[0].name]


def naive(op, args, inputs):
    if op is batch_matmul:
        return naive_batch_matmul(*inputs)
    if op is dense:
        return naive_batch_matmul(inputs[0][None], inputs[1].T[None])[0]
    if op is group_conv2d:
        return naive_group_conv2d(*inputs, args["stride"], args["padding"], args["dilation"], args["groups"])
    if op in (max_pool2d, avg_pool2d):
        return naive_pool(*inputs, args["R"], args["S"], args["stride"], args["padding"], op.name[:3],
                          args.get("count_include_pad", False))
    if op is global_avg_pool2d:
        return inputs[0].astype(np.float64).mean(axis=(2, 3), keepdims=True)
    return naive_conv2d(*inputs, args["stride"], args["padding"], args["dilation"], depthwise=op is depthwise_conv2d)


@pytest.mark.parametrize("op, args", CASES)
def test_reference_matches_naive_loops(op, args):
    args = op.canonical(args)
    inputs = op.random_inputs(args, np.random.default_rng(0))
    (out,) = op.reference(*inputs, **args)
    expected = naive(op, args, inputs)
    assert out.dtype == np.float32 and out.shape == expected.shape == op.output_shapes(args)[0][0]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, args, inline", LOWER_CASES)
def test_default_schedule_runs_like_the_reference(op, args, inline):
    """Default schedule (pad stage at root, or inlined into the conv) in the reference interpreter."""
    args = op.canonical(args)
    tensors = op.compute(**args)
    out = tensors[-1]
    s = te.create_schedule(out)
    if inline:
        pad = out.op.inputs[0]
        assert pad.op.name == "pad"
        s[pad].compute_inline()
    inputs = op.random_inputs(args, np.random.default_rng(1))
    result = np.full(out.shape, np.nan, np.float32)
    interp.run(te.lower(s, tensors), *inputs, result)
    rtol, atol = op.tolerance(args)
    np.testing.assert_allclose(result, op.reference(*inputs, **args)[0], rtol=rtol, atol=atol)


def test_stage_names_and_tensor_order():
    data, weight, out = conv2d.compute(N=1, C=2, H=5, W=5, K_out=3, R=3, S=3, padding=1)
    assert (data.shape, weight.shape, out.shape) == ((1, 2, 5, 5), (3, 2, 3, 3), (1, 3, 5, 5))
    assert out.op.name == "conv" and [t.name for t in out.op.inputs] == ["pad", "weight"]
    assert out.op.inputs[0].op.inputs == [data] and out.op.inputs[0].shape == (1, 2, 7, 7)
    *_, out = conv2d.compute(N=1, C=2, H=5, W=5, K_out=3, R=3, S=3, padding=0)
    assert [t.name for t in out.op.inputs] == ["data", "weight"]       # no pad stage without padding
    data, weight, out = depthwise_conv2d.compute(N=1, C=2, H=5, W=5, R=3, S=3, padding=1)
    assert weight.shape == (2, 1, 3, 3) and out.op.name == "depthwise_conv" and out.op.inputs[0].name == "pad"


def test_canonical_args_normalize_pairs():
    base = dict(N=1, C=3, H=8, W=8, K_out=4, R=3, S=3)
    keys = {conv2d.key({**base, "stride": v, "padding": p, "dilation": 1})
            for v in (2, (2, 2), [2, 2]) for p in (1, (1, 1))}
    assert len(keys) == 1
    assert conv2d.canonical({**base, "stride": 2})["stride"] == (2, 2)
    assert conv2d.canonical(base)["padding"] == (0, 0)
    assert conv2d.key(base) != conv2d.key({**base, "stride": 2})


def taps_conv2d(x, w, stride, padding, dilation, depthwise=False):
    """Convolution as a sum over kernel taps (vectorized, independent of the op's reference)."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    R, S = w.shape[2:]
    OH, OW = (xp.shape[2] - dh * (R - 1) - 1) // sh + 1, (xp.shape[3] - dw * (S - 1) - 1) // sw + 1
    out = 0
    for r in range(R):
        for s in range(S):
            patch = xp[:, :, r * dh: r * dh + sh * (OH - 1) + 1: sh, s * dw: s * dw + sw * (OW - 1) + 1: sw]
            tap = w[:, :, r, s].astype(np.float64)
            out = out + (patch * tap[:, 0, None, None] if depthwise else np.einsum("nchw,kc->nkhw", patch, tap))
    return out


@pytest.mark.parametrize("name", ["resnet18.C1", "resnet18.C6", "mobilenet.D2"])
def test_reference_at_full_size(name):
    task = tunekit.Task(workload=name)
    args = task.args
    inputs = task.op.random_inputs(args, np.random.default_rng(2))
    (out,) = task.op.reference(*inputs, **args)
    expected = taps_conv2d(*inputs, args["stride"], args["padding"], args["dilation"],
                           depthwise=task.op is depthwise_conv2d)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


RESNET_OUT = {"C1": 112, "C2": 56, "C3": 56, "C4": 28, "C5": 28, "C6": 28, "C7": 14, "C8": 14,
              "C9": 14, "C10": 7, "C11": 7, "C12": 7}
RESNET_OC = {"C1": 64, "C2": 64, "C3": 64, "C4": 128, "C5": 128, "C6": 128, "C7": 256, "C8": 256,
             "C9": 256, "C10": 512, "C11": 512, "C12": 512}
MOBILENET_OUT = {"D1": (32, 112), "D2": (64, 56), "D3": (128, 56), "D4": (128, 28), "D5": (256, 28),
                 "D6": (256, 14), "D7": (512, 14), "D8": (512, 7), "D9": (1024, 7)}
EXPECTED_SHAPES = {
    "matmul-1024": (1024, 1024),
    **{f"resnet18.{c}": (1, RESNET_OC[c], hw, hw) for c, hw in RESNET_OUT.items()},
    **{f"mobilenet.{d}": (1, c, hw, hw) for d, (c, hw) in MOBILENET_OUT.items()},
}


def test_workload_names():
    assert set(workloads()) == set(EXPECTED_SHAPES)


@pytest.mark.parametrize("name", sorted(EXPECTED_SHAPES))
def test_named_workload_resolves(name):
    task = tunekit.Task(workload=name)
    op_name, args = workloads()[name]
    assert task.op.name == op_name and task.args == task.op.canonical(args)
    assert task.op.output_shapes(task.args) == [(EXPECTED_SHAPES[name], "float32")]
    assert task.args["dtype"] == "float32"


def test_workload_details():
    c1 = tunekit.Task(workload="resnet18.C1").args
    assert (c1["C"], c1["H"], c1["R"], c1["stride"], c1["padding"]) == (3, 224, 7, (2, 2), (3, 3))
    c6 = tunekit.Task(workload="resnet18.C6")
    assert c6.flops == 2 * 128 * 128 * 9 * 28 * 28 and c6.op.reduction_size(**c6.args) == 128 * 9
    d = tunekit.Task(workload="mobilenet.D4")
    assert d.flops == 2 * 128 * 28 * 28 * 9 and d.op.reduction_size(**d.args) == 9
    assert tunekit.Task(workload="matmul-1024").flops == 2 * 1024 ** 3
    assert batch_matmul.flops(B=3, M=4, N=5, K=6) == 2 * 3 * 4 * 5 * 6
    assert batch_matmul.reduction_size(B=3, M=4, N=5, K=6) == 6


@pytest.mark.parametrize("op, args, match", [
    (conv2d, dict(N=1, C=3, H=8, W=8, R=3, S=3), "K_out"),                        # missing field
    (conv2d, dict(N=1, C=3, H=8, W=8, K_out=4, R=3, S=3, groups=2), "groups"),    # unknown field
    (conv2d, dict(N=1, C=3, H=8, W=8, K_out=4, R=3, S=3, stride=0), "stride"),
    (conv2d, dict(N=1, C=3, H=8, W=8, K_out=4, R=3, S=3, padding=(1, 2, 3)), "padding"),
    (conv2d, dict(N=1, C=3, H=4, W=8, K_out=4, R=3, S=3, dilation=2), "does not fit"),
    (depthwise_conv2d, dict(N=1, C=3, H=8, W=8, R=3, S=3, K_out=3), "K_out"),
    (batch_matmul, dict(B=2, M=3, N=4), "K"),
    (batch_matmul, dict(B=0, M=3, N=4, K=5), "B"),
    (matmul, dict(M="x", N=4, K=5), "M"),
    (group_conv2d, dict(N=1, C=6, H=8, W=8, K_out=4, R=3, S=3, groups=4), "groups=4 must divide both C=6"),
    (group_conv2d, dict(N=1, C=8, H=8, W=8, K_out=8, R=3, S=3, groups=2, layout="NCHW4c"), "NCHW data only"),
    (max_pool2d, dict(N=1, C=3, H=8, W=8, R=2, S=2, padding=2), "smaller than the 2x2 window"),
    (avg_pool2d, dict(N=1, C=3, H=8, W=8, R=2, S=2, dilation=2), "no dilation"),
    (global_avg_pool2d, dict(N=1, C=6, H=8, W=8, layout="NCHW4c"), "C=6 is not a multiple"),
    (dense, dict(M=1, N=4), "K"),
])
def test_bad_args_are_argument_errors_naming_the_field(op, args, match):
    with pytest.raises(ArgumentError, match=f"op '{op.name}': args.*{match}"):
        op.canonical(args)
