"""The cuda target without a GPU: the contract suite (running skips unless pycuda
and a device are here), every GPU template's CUDA source compiled to PTX for sm_90
with nvcc (or NVRTC), the device profile without a driver, and errors."""
from __future__ import annotations

import random

import numpy as np
import pydantic
import pytest
from computations import softmax
from tunekit_plugins.targets.csource import emit
from tunekit_plugins.targets.cuda import compile as cc
from tunekit_plugins.targets.cuda import target as cuda_target
from tunekit_plugins.targets.cuda.target import CudaTarget

import tunekit
from tunekit import Task, ir, registry, te
from tunekit.errors import BuildError
from tunekit.testing.contract import TargetContract

needs_nvcc = pytest.mark.skipif(cc.nvcc_path() is None, reason="nvcc is not on PATH (nor in CUDA_HOME/bin)")
needs_nvrtc = pytest.mark.skipif(cc.nvrtc_library() is None, reason="libnvrtc was not found "
                                 "(pip install nvidia-cuda-nvrtc, or the CUDA toolkit)")
needs_gpu = pytest.mark.skipif(CudaTarget.available() is not None, reason=f"cuda: {CudaTarget.available()}")
SM90 = CudaTarget.Options(arch="sm_90")


class TestCudaContract(TargetContract):
    target_class = CudaTarget


SHAPES = {
    "matmul": dict(M=256, N=512, K=128),
    "conv2d": dict(N=1, C=64, H=28, W=28, K_out=128, R=3, S=3, stride=1, padding=1),
    "conv2d-s2": dict(N=1, C=32, H=56, W=56, K_out=64, R=1, S=1, stride=2),
    "depthwise_conv2d": dict(N=1, C=128, H=56, W=56, R=3, S=3, stride=2, padding=1),
    "conv2d-fused": dict(N=1, C=64, H=28, W=28, K_out=128, R=3, S=3, padding=1, bias=True, residual=True,
                         activation="relu"),
    "depthwise_conv2d-fused": dict(N=1, C=128, H=56, W=56, R=3, S=3, padding=1, bias=True, activation="relu6"),
    "matmul-fused": dict(M=256, N=512, K=128, bias=True, activation="relu"),
    "dense-fused": dict(M=1, N=1000, K=512, bias=True),
    "group_conv2d-fused": dict(N=1, C=64, H=28, W=28, K_out=64, R=3, S=3, padding=1, groups=4, bias=True,
                               activation="relu"),
    "max_pool2d": dict(N=1, C=64, H=112, W=112, R=3, S=3, stride=2, padding=1),
    "avg_pool2d": dict(N=1, C=64, H=56, W=56, R=3, S=3, stride=2, padding=1),
    "global_avg_pool2d": dict(N=1, C=512, H=7, W=7),
}


@needs_nvcc
@pytest.mark.parametrize("case", list(SHAPES))
def test_every_template_compiles_for_sm90(case):
    """Random configs of every cuda template, as one translation unit per op (one nvcc call)."""
    target = CudaTarget(SM90)
    op = case.split("-")[0]
    templates = [t.name for t in registry().templates
                 if t.op == op and "cuda" in t.targets or t.generic and t.serves(target)]   # auto too
    assert templates, f"no cuda template for {op}"
    units, names = [], []
    for template in templates:
        ts = Task(op, SHAPES[case], template=template).bind(target)
        for index in ts.space.sample(random.Random(case + template), 4):
            name = f"{op}_{template}_{index}"
            src = emit(te.lower(*ts.schedule(index), name=name), "cuda")
            assert all(k.threads <= 1024 for k in src.kernels)
            units.append(src.code)
            names += [k.name for k in src.kernels]
    ptx, used = cc.to_ptx("\n".join(units), op, "sm_90", "nvcc")
    assert used == "nvcc" and ".target sm_90" in ptx
    for name in names:
        assert f".entry {name}(" in ptx, name


@needs_nvcc
def test_build_gives_ptx_and_launch_meta():
    target = CudaTarget(SM90)
    ts = Task("matmul", dict(M=64, N=64, K=64), template="shared").bind(target)
    art = target.build(ts.program(ts.space.sample(random.Random(0), 1)[0]))
    assert art.target == "cuda" and isinstance(art.data, str) and f".entry {art.entry}(" in art.data
    assert art.meta["arch"] == "sm_90" and art.meta["compiler"] == "nvcc"
    assert "__shared__" in art.meta["source"] and len(art.meta["kernels"]) == 1


@needs_nvrtc
def test_nvrtc_compiles_the_same_source():
    ts = Task("conv2d", SHAPES["conv2d"], template="shared").bind(CudaTarget(SM90))
    src = emit(ts.program(ts.space.sample(random.Random(0), 1)[0]), "cuda")
    ptx, used = cc.to_ptx(src.code, "conv", "sm_90", "nvrtc")
    assert used == "nvrtc" and f".entry {src.kernels[0].name}(" in ptx
    with pytest.raises(BuildError, match="NVRTC rejected"):
        cc.to_ptx("__global__ void k() { this is not C; }", "bad", "sm_90", "nvrtc")


@needs_nvcc
def test_compile_errors_are_build_errors():
    with pytest.raises(BuildError, match="nvcc rejected bad"):
        cc.to_ptx('extern "C" __global__ void k() { this is not C; }', "bad", "sm_90", "nvcc")


def test_missing_compiler_is_a_build_error(monkeypatch):
    monkeypatch.setattr(cc, "compiler", lambda choice, nvcc="nvcc": None)
    with pytest.raises(BuildError, match="no nvcc or NVRTC found"):
        cc.to_ptx("", "k", "sm_90")


def test_device_profile_without_a_driver(monkeypatch):
    monkeypatch.setattr(cuda_target, "_driver", lambda: (None, "no CUDA device"))
    info = CudaTarget(CudaTarget.Options(arch="sm_80")).device()
    assert (info.max_threads_per_block, info.max_shared_memory, info.warp_size, info.cores) == (1024, 48 << 10, 32, 108)
    assert info.extra["max_block"] == [1024, 1024, 64] and CudaTarget().arch() == "sm_90"
    assert CudaTarget.available() == "no CUDA device"


def test_available_says_pycuda_is_missing(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_pycuda(name, *a, **k):
        if name.startswith("pycuda"):
            raise ImportError("No module named 'pycuda'")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_pycuda)
    cuda_target._driver.cache_clear()
    try:
        assert "pycuda is not installed" in CudaTarget.available()
    finally:
        cuda_target._driver.cache_clear()


def test_grid_limits_are_build_errors():
    A = te.placeholder((70000 * 2,), "A")
    B = te.compute((70000, 2), lambda i, j: A[i * 2 + j], name="B")
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[0], "blockIdx.y")
    with pytest.raises(BuildError, match="65535"):
        CudaTarget(SM90).build(te.lower(s, [A, B]))


def test_options_validate():
    with pytest.raises(pydantic.ValidationError):
        CudaTarget.Options(arch="ampere")
    assert CudaTarget.Options(arch="sm_86", compiler="nvrtc", flags=["--use_fast_math"]).arch == "sm_86"


@needs_gpu
def test_templates_run_on_the_gpu():
    target = CudaTarget()
    for op, args in SHAPES.items():
        ts = Task(op.split("-")[0], args).bind(target)
        o = ts.task.op
        inputs = o.random_inputs(ts.task.args, np.random.default_rng(0))
        ref = o.reference(*inputs, **ts.task.args)[0]
        for index in ts.space.sample(random.Random(0), 3):
            out = np.full(ref.shape, np.nan, np.float32)
            target.load(target.build(ts.program(index)))(*inputs, out)
            np.testing.assert_allclose(out, ref, *o.tolerance(ts.task.args))


def test_program_names_stay_valid_identifiers():
    buf = ir.Buffer("x", (4,), "float32")
    i = ir.Var("i")
    src = emit(ir.Program("matmul 3x3/fast", [buf], ir.For(i, 4, ir.SERIAL, ir.Store(buf, i, ir.const(0.0)))), "cuda")
    assert src.kernels[0].name == "matmul_3x3_fast"


@needs_nvcc
def test_generated_softmax_compiles_for_sm90():
    """`auto`'s split row reductions (per-thread partials in shared memory) compile with nvcc."""
    target = CudaTarget(SM90)
    ts = tunekit.Task.from_compute(softmax, dict(M=128, N=768), name="softmax").bind(target)
    units = []
    for index in ts.space.sample(random.Random(0), 4):
        units.append(emit(te.lower(*ts.schedule(index), name=f"softmax_{index}"), "cuda").code)
    ptx, used = cc.to_ptx("\n".join(units), "softmax", "sm_90", "nvcc")
    assert used == "nvcc" and ptx.count(".entry softmax_") == len(units)
