"""The generated (`auto`) template: every op of the library, and random small
computations (hypothesis), scheduled by the CPU and GPU rules; random configs of
each generated space lowered and run in the reference interpreter match numpy."""
import platform
import random
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tunekit
from tunekit import DeviceInfo, Op, OpArgs, registry, te
from tunekit.ir import interp
from tunekit.space import ConfigSpace

CPU = DeviceInfo("cpu", "cpu", vector_bits=256, cores=2)
AVX512 = DeviceInfo("cpu", "cpu", vector_bits=512, cores=2)
GPU = DeviceInfo("gpu", "gpu", vector_bits=128, cores=4, max_threads_per_block=256, max_shared_memory=48 << 10,
                 warp_size=32)
GPU_GLOBAL_LOCAL = DeviceInfo("pocl", "gpu", vector_bits=512, cores=2, max_threads_per_block=4096,
                              max_shared_memory=1 << 20, extra={"local_memory": "global"})
DEVICES = {"cpu": CPU, "avx512": AVX512, "gpu": GPU, "gpu-global-local": GPU_GLOBAL_LOCAL}

#: small args of every op in tunekit's op library (a new op must be added here)
SMALL = {
    "matmul": dict(M=6, N=20, K=10, bias=True, activation="relu"),
    "batch_matmul": dict(B=2, M=4, N=12, K=6),
    "dense": dict(M=2, N=10, K=32),
    "conv2d": dict(N=1, C=3, H=6, W=7, K_out=4, R=3, S=3, stride=1, padding=1, dilation=1, residual=True),
    "group_conv2d": dict(N=1, C=4, H=5, W=5, K_out=4, R=3, S=3, stride=1, padding=1, dilation=1, groups=2),
    "depthwise_conv2d": dict(N=1, C=4, H=6, W=6, R=3, S=3, stride=2, padding=1, dilation=1, bias=True),
    "max_pool2d": dict(N=1, C=2, H=6, W=6, R=3, S=3, stride=2, padding=1),
    "avg_pool2d": dict(N=1, C=2, H=5, W=5, R=2, S=2, stride=2, padding=0),
    "global_avg_pool2d": dict(N=1, C=3, H=4, W=8),
    "lstm_step": dict(B=1, H=20),
    "qmatmul": dict(M=3, N=20, K=16, out_dtype="int8", zero=2),
    "qconv2d": dict(N=1, H=6, W=7, C=8, K_out=20, R=3, S=3, stride=1, padding=1, out_dtype="int8", zero=2,
                    pad_value=3),
    "qdepthwise_conv2d": dict(N=1, H=6, W=7, C=20, R=3, S=3, stride=2, padding=1, dtype="int8", pad_value=-3),
    "bmatmul": dict(M=3, N=20, K=10, bias=True),
    "bconv2d": dict(N=1, C=8, H=4, W=5, K_out=16, R=3, S=3, padding=1, layout="NCHW8c", bias=True),
}
BLOCKED = {"conv2d": dict(N=1, C=8, H=4, W=4, K_out=16, R=1, S=1, stride=1, padding=0, dilation=1,
                          layout="NCHW8c", bias=True, activation="relu6")}


def auto_template(op):
    (t,) = [t for t in registry().templates if t.generic]
    return t.bound(op)


def check_configs(op, args, device, n=4, seed=0):
    """Lower `n` random configs of the generated space and compare them with `op.reference`."""
    args = op.canonical(args)
    template = auto_template(op)
    space = ConfigSpace()
    template.fn(space, device, **args)
    assert space.size >= 1
    rng = np.random.default_rng(seed)
    inputs = op.random_inputs(args, rng)
    want = op.reference(*inputs, **args)
    rtol, atol = op.tolerance(args)
    for index in sorted(set(space.sample(random.Random(seed), n))):
        sched, tensors = template.fn(space.get(index), device, **args)
        outs = [np.full(shape, np.nan, dtype) for shape, dtype in op.output_shapes(args)]
        interp.run(te.lower(sched, tensors), *inputs, *outs)
        for o, w in zip(outs, want):
            np.testing.assert_allclose(o, w, rtol=rtol, atol=atol, err_msg=f"{op.name} config {space.get(index)}")


def test_every_library_op_has_small_args():
    assert {name for name in registry().ops if registry().op(name).generated} == set(SMALL)


def test_auto_keeps_off_an_op_that_is_not_generated():
    # conv2d_winograd: only its own template makes its unrolled transforms fast
    assert not registry().op("conv2d_winograd").generated
    task = tunekit.Task("conv2d_winograd", dict(N=1, C=8, H=6, W=6, K_out=8, R=3, S=3, padding=1,
                                                layout="NCHW8c", tile=2))
    assert [t.name for t in task.serving(registry().component("target", "x86"))] == ["winograd"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(SMALL))
def test_every_op_random_configs_match_reference(op, device):
    check_configs(registry().op(op), SMALL[op], DEVICES[device])
    if op in BLOCKED:
        check_configs(registry().op(op), BLOCKED[op], DEVICES[device])


def test_auto_serves_every_op_at_the_lowest_priority():
    x86 = registry().component("target", "x86")
    for name, args in SMALL.items():
        task = tunekit.Task(name, args)
        serving = task.serving(x86)
        assert "auto" in [t.name for t in serving]
        assert task.template_on(x86).name != "auto"          # a hand template stays the default
        assert len(task.variants(x86)) == len(serving)       # and auto is tuned beside them


# -- random small computations ---------------------------------------------------------------

def op_of(name, build, reference, outputs=1):
    """An Op without args around `build() -> tensors` (inputs, then outputs)."""
    class Args(OpArgs):
        pass
    return Op(name, Args, lambda dtype="float32": build(), lambda *xs, dtype="float32": reference(*xs),
              lambda dtype="float32": 1, num_outputs=outputs)


UNARY = {"relu": (lambda x: tunekit.ir.max_(x, 0.0), lambda x: np.maximum(x, 0)),
         "neg": (lambda x: -x, lambda x: -x),
         "sq": (lambda x: x * x, lambda x: x * x),
         "exp": (lambda x: tunekit.ir.Call("exp", (x,), "float32"), np.exp)}
BINARY = {"add": (lambda a, b: a + b, np.add), "mul": (lambda a, b: a * b, np.multiply),
          "max": (tunekit.ir.max_, np.maximum)}

PROPERTY = settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def check_random(op, data):
    device = DEVICES[data.draw(st.sampled_from(sorted(DEVICES)))]
    check_configs(op, {}, device, n=2, seed=data.draw(st.integers(0, 1000)))


@PROPERTY
@given(data=st.data(), shape=st.tuples(st.integers(1, 5), st.integers(1, 9)),
       chain=st.lists(st.tuples(st.sampled_from(sorted(UNARY)), st.sampled_from(sorted(BINARY)),
                                st.sampled_from(["row", "col", "full"])), min_size=1, max_size=3))
def test_elementwise_chains_with_broadcasting(data, shape, chain):
    M, N = shape
    shapes = {"row": (N,), "col": (M, 1), "full": (M, N)}
    index = {"row": lambda i, j: (j,), "col": lambda i, j: (i, 0), "full": lambda i, j: (i, j)}

    def step(prev, y, u, b, kind):
        return lambda i, j: BINARY[b][0](UNARY[u][0](prev[i, j]), y[index[kind](i, j)])

    def build():
        x = te.placeholder((M, N), "x")
        ins, cur = [x], x
        for n, (u, b, kind) in enumerate(chain):
            y = te.placeholder(shapes[kind], f"y{n}")
            ins.append(y)
            cur = te.compute((M, N), step(cur, y, u, b, kind), name=f"e{n}")
        return [*ins, cur]

    def reference(x, *ys):
        cur = x.astype(np.float64)
        for (u, b, _), y in zip(chain, ys):
            cur = BINARY[b][1](UNARY[u][1](cur), y)
        return [cur.astype(np.float32)]
    check_random(op_of("chain", build, reference), data)


@PROPERTY
@given(data=st.data(), shape=st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 17)),
       axes=st.sets(st.integers(0, 2), min_size=1, max_size=3), combiner=st.sampled_from(["sum", "max"]))
def test_reductions_over_axes(data, shape, axes, combiner):
    keep = [d for d in range(3) if d not in axes]
    out_shape = tuple(shape[d] for d in keep) or (1,)

    def build():
        x = te.placeholder(shape, "x")
        red = {d: te.reduce_axis(shape[d], f"r{d}") for d in sorted(axes)}

        def body(*idx):
            it = iter(idx)
            at = tuple(red[d] if d in red else next(it) for d in range(3))
            return getattr(te, combiner)(x[at] * 2.0, axis=list(red.values()))
        f = body if keep else (lambda _: body())
        return [x, te.compute(out_shape, f, name="r")]

    def reference(x):
        r = getattr(np, combiner)(x.astype(np.float64) * 2, axis=tuple(sorted(axes)))
        return [np.asarray(r, np.float32).reshape(out_shape)]
    check_random(op_of("reduce", build, reference), data)


@PROPERTY
@given(data=st.data(), dims=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 17), st.integers(1, 9)),
       ta=st.booleans(), tb=st.booleans(), batched=st.booleans())
def test_contractions_with_transposed_operands(data, dims, ta, tb, batched):
    B, M, N, K = dims
    B = B if batched else 1
    a_shape = (B, K, M) if ta else (B, M, K)
    b_shape = (B, N, K) if tb else (B, K, N)

    def build():
        a, b = te.placeholder(a_shape, "a"), te.placeholder(b_shape, "b")
        k = te.reduce_axis(K, "k")
        c = te.compute((B, M, N), lambda z, i, j: te.sum((a[z, k, i] if ta else a[z, i, k])
                                                          * (b[z, j, k] if tb else b[z, k, j]), axis=k), name="c")
        return [a, b, c]

    def reference(a, b):
        a = a.transpose(0, 2, 1) if ta else a
        b = b.transpose(0, 2, 1) if tb else b
        return [(a.astype(np.float64) @ b).astype(np.float32)]
    check_random(op_of("contract", build, reference), data)


@PROPERTY
@given(data=st.data(), shape=st.tuples(st.integers(1, 5), st.integers(1, 33)), norm=st.booleans())
def test_reduction_then_elementwise(data, shape, norm):
    """Softmax (max, exp, sum, divide) and layer norm (mean, variance, scale)."""
    M, N = shape

    def build():
        x = te.placeholder((M, N), "x")
        k, k2 = te.reduce_axis(N, "k"), te.reduce_axis(N, "k2")
        if norm:
            g = te.placeholder((N,), "g")
            total = te.compute((M,), lambda i: te.sum(x[i, k], axis=k), name="total")
            d = te.compute((M, N), lambda i, j: x[i, j] - total[i] / float(N), name="d")
            var = te.compute((M,), lambda i: te.sum(d[i, k2] * d[i, k2], axis=k2), name="var")
            out = te.compute((M, N), lambda i, j: d[i, j] / tunekit.ir.Call("sqrt", (var[i] / float(N) + 1e-5,),
                                                                              "float32") * g[j], name="out")
            return [x, g, out]
        mx = te.compute((M,), lambda i: te.max(x[i, k], axis=k), name="mx")
        e = te.compute((M, N), lambda i, j: tunekit.ir.Call("exp", (x[i, j] - mx[i],), "float32"), name="e")
        s = te.compute((M,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
        return [x, te.compute((M, N), lambda i, j: e[i, j] / s[i], name="softmax")]

    def reference(x, g=None):
        x = x.astype(np.float64)
        if norm:
            d = x - x.mean(1, keepdims=True)
            return [(d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5) * g).astype(np.float32)]
        e = np.exp(x - x.max(1, keepdims=True))
        return [(e / e.sum(1, keepdims=True)).astype(np.float32)]
    check_random(op_of("rownorm", build, reference), data)


@pytest.mark.parametrize("op", ["matmul", "conv2d", "depthwise_conv2d", "dense"])
def test_a_fused_epilogue_keeps_the_generated_space(op):
    """A fused op (conv + bias + relu) is tuned in the space of its anchor, so the anchor's records serve it."""
    x86 = registry().component("target", "x86")()
    plain = {k: v for k, v in SMALL[op].items() if k not in ("bias", "residual", "activation")}
    fused = {**plain, "bias": True, "activation": "relu"}
    spaces = [tunekit.Task(op, a, template="auto").bind(x86).space for a in (plain, fused)]
    assert spaces[0].fingerprint() == spaces[1].fingerprint()


@pytest.mark.parametrize("target", ["x86", "opencl"])
def test_every_op_tunes_with_auto_on_real_targets(target, tmp_path):
    """A few trials of every op through `auto`, built and run for real (LLVM; OpenCL on PoCL),
    each checked against numpy: no wrong answer."""
    cls = registry().component("target", target)
    if why := cls.available():
        pytest.skip(why)
    tasks = [tunekit.Task(op, args, template="auto") for op, args in [*SMALL.items(), *BLOCKED.items()]]
    states = tunekit.tune(tasks, target=target, trials=3, database=str(tmp_path / "t.db"),
                          measure={"number": 1, "repeat": 1, "min_repeat_ms": 0, "warmup": 0})
    for state in states:
        name = state.ts.task.name
        assert state.done >= 1 and state.best is not None, name
        assert all(t.ok for t in state.trials), f"{name}: {[t.message for t in state.trials if not t.ok]}"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="runs x86 kernels")
def test_a_strided_blocked_depthwise_reads_its_padding_in_place():
    """MobileNet's stride-2 depthwise layers: with the padding inlined (the `inline_pad`
    knob), a config allocates no padded copy of the data; the tiles on the border read
    zeros through guarded loads, and the output matches numpy there."""
    from checks import interpreted_and_compiled

    from tunekit.ir.visitor import Visitor

    tgt = registry().component("target", "x86")()
    args = dict(N=1, C=32, H=9, W=11, R=3, S=3, stride=2, padding=1, layout="NCHW16c")
    ts = tunekit.Task("depthwise_conv2d", args, template="auto").bind(tgt)
    sample = ts.space.sample(random.Random(3), 64)
    kinds = {ts.space.get(i)["inline_pad"]: i for i in sample}
    assert set(kinds) == {True, False}

    def allocations(program) -> set[str]:
        found = set()

        class V(Visitor):
            def visit_Allocate(self, node):
                found.add(node.buffer.name)
                self.generic_visit(node)
        V().visit(program.body)
        return found
    assert not any("pad" in a for a in allocations(ts.program(kinds[True])))
    assert any("pad" in a for a in allocations(ts.program(kinds[False])))   # the check can fail
    for index in kinds.values():
        interpreted_and_compiled(ts, index, tgt)


def test_a_whole_tensor_reduction_runs_in_vectors_untuned_and_a_scalar_of_inputs_inlines():
    """Dynamic quantization's range (a reduction to a scalar) is split per vector lane in the
    default config; a scalar computed from inputs only (a product of scales) inlines as before."""
    from tunekit.topi import quantize

    def build():
        x, s = te.placeholder((6, 32), "x"), te.placeholder((), "s")
        q, scale, zero = quantize.dynamic_quantize(x, "q")
        both = te.compute((), lambda: s[()] * scale[()], name="both")
        return [x, s, q, te.compute((6, 32), lambda i, j: ir_cast(q[i, j]) * both[()], name="out")]

    def reference(x, s):
        scale = (max(x.max(), 0) - min(x.min(), 0)) / 255.0
        zero = np.clip(np.rint(-min(x.min(), 0) / scale), 0, 255)
        q = np.clip(np.rint(x / scale) + zero, 0, 255).astype(np.uint8)
        return [q, (q.astype(np.float32) * (s * np.float32(scale))).astype(np.float32)]

    def ir_cast(v):
        return tunekit.ir.cast(v, "float32")
    op = op_of("dynq", build, reference, outputs=2)
    check_configs(op, {}, AVX512, n=3, seed=4)
    template, space = auto_template(op), ConfigSpace()
    template.fn(space, AVX512)
    text = str(te.lower(*template.fn(space.get(space.default()), AVX512)))
    assert re.search(r"# vectorized\n\s+q_max_rf\[", text) and re.search(r"# vectorized\n\s+q_negmin_rf\[", text)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="runs x86 kernels")
def test_a_row_that_is_no_multiple_of_a_vector_is_tiled_in_whole_vectors_too():
    """A conv1d's rows of 20 floats: beside tiles that divide the row, the space has whole vectors
    over the row rounded up, the last one masked; those configs give the right output."""
    from checks import interpreted_and_compiled
    from computations import conv1d
    tgt = registry().component("target", "x86")()
    lanes = tgt.device().lanes("float32")
    ts = tunekit.Task.from_compute(conv1d, dict(N=1, C=4, L=22, K_out=3, R=3), name="conv1d").bind(tgt)
    (knob,) = [k.name for k in ts.space.knobs if k.name.endswith("tile_i")]
    pad = -(-20 // lanes) * lanes
    assert {v[-1] for v in ts.space.values(knob)} == \
        {d for d in (1, 2, 4, 5, 10, 20) if d <= lanes} | {m * lanes for m in (1, 2, 3, 4) if pad % (m * lanes) == 0}
    whole = [i for i in ts.space.sample(random.Random(0), 200) if ts.space.get(i)[knob][-1] % lanes == 0]
    assert whole
    for index in whole[:6]:
        interpreted_and_compiled(ts, index, tgt)
