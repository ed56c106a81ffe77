"""The GPU source emitter (CUDA C / OpenCL C from the loop IR) and the GPU templates'
spaces, without any device: the constructs the emitter writes, launch geometry,
lazy selects, floor division, vector accesses, kernel splitting, and the reference
interpreter on the templates' programs."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest
from tunekit_plugins.targets.csource import emit
from tunekit_plugins.targets.gpu_templates import (
    conv2d_register,
    conv2d_shared,
    dense_register,
    dense_shared,
    depthwise_register,
    matmul_register,
    matmul_shared,
    on_chip_shared,
    pool_template,
    templates,
)

from tunekit import DeviceInfo, ir, te
from tunekit.errors import BuildError
from tunekit.ir import interp
from tunekit.ops import pool
from tunekit.ops.conv2d import reference as conv_ref
from tunekit.ops.dense import reference as dense_ref
from tunekit.ops.depthwise_conv2d import reference as dw_ref
from tunekit.ops.matmul import reference as mm_ref
from tunekit.space import ConfigSpace

GPU = DeviceInfo("test gpu", "gpu", vector_bits=128, cores=4, max_threads_per_block=256,
                 max_shared_memory=16 << 10, warp_size=32, extra={"max_block": [256, 256, 64]})
MALI = DeviceInfo("Mali bifrost", "gpu", vector_bits=128, cores=4, max_threads_per_block=384,
                  max_shared_memory=32 << 10, warp_size=4, extra={"local_memory": "global"})


FUSED = dict(bias=True, residual=True, activation="relu6")


def config(fn, values: dict | None = None, device=GPU, seed: int = 0, **args):
    """Lower template `fn` for `args` with the given knob values (else a random valid config)."""
    space = ConfigSpace()
    fn(space, device, **args)
    cfg = space.from_json(values) if values else space.get(space.sample(random.Random(seed), 1)[0])
    s, tensors = fn(cfg, device, **args)
    return te.lower(s, tensors, name="kern"), tensors


MM = dict(M=32, N=32, K=16)
MM_SHARED = {"tile_y": [2, 1, 4, 4], "tile_x": [2, 1, 8, 2], "tile_k": [4, 4], "vec": 1, "unroll_k": True}


def test_shared_memory_kernel_constructs():
    p, _ = config(matmul_shared, MM_SHARED, **MM)
    cu = emit(p, "cuda")
    assert cu.kernels[0].grid == (2, 2, 1) and cu.kernels[0].block == (8, 4, 1)
    code = cu.code
    for construct in ('extern "C" __global__ void __launch_bounds__(32) kern(',
                      "__shared__ __align__(16) float A_shared[", "__shared__ __align__(16) float B_shared[",
                      "__syncthreads();", "(int)threadIdx.x",
                      "(int)threadIdx.y", "(int)blockIdx.x", "(int)blockIdx.y", "float C_local[8];",
                      "const float* __restrict__ A", "float* __restrict__ C", "#pragma unroll"):
        assert construct in code, construct
    assert "__shared__" not in code.split("{", 1)[1].split("const int")[1], "shared arrays sit at kernel scope"
    cl = emit(p, "opencl").code
    for construct in ("__kernel __attribute__((reqd_work_group_size(8, 4, 1))) void kern(",
                      "__local float A_shared[", "__attribute__((aligned(16)))", "barrier(CLK_LOCAL_MEM_FENCE);",
                      "(int)get_local_id(0)", "(int)get_local_id(1)", "(int)get_group_id(0)",
                      "__global const float* restrict A", "__global float* restrict C"):
        assert construct in cl, construct
    # barriers around the copies into shared memory, never two in a row
    assert code.count("__syncthreads();") == 3
    assert not re.search(r"__syncthreads\(\);\s*__syncthreads\(\);", code)


def test_meta_describes_buffers_and_launch():
    p, _ = config(matmul_shared, MM_SHARED, **MM)
    meta = emit(p, "opencl").meta()
    assert [b[0] for b in meta["buffers"]] == ["A", "B", "C"] and meta["num_params"] == 3
    assert meta["read"] == [0, 1] and meta["written"] == [2]
    assert meta["kernels"] == [{"name": "kern", "grid": (2, 2, 1), "block": (8, 4, 1)}]


def test_vector_loads_and_stores():
    vals = dict(MM_SHARED, vec=4, tile_x=[2, 1, 4, 4])
    p, _ = config(matmul_shared, vals, **MM)
    cu = emit(p, "cuda").code
    assert "*(const float4*)(A +" in cu and "*(float4*)(A_shared +" in cu and "*(float4*)(C +" in cu
    cl = emit(p, "opencl").code
    assert "vload4(0, B +" in cl and "vstore4(" in cl
    # register tiles accessed only as aligned vectors become arrays of vectors in OpenCL
    assert "float4 C_local[" in cl


def test_unaligned_vector_access_is_scalar_in_cuda():
    A = te.placeholder((10,), "A")
    B = te.compute((8,), lambda i: A[i + 1] * 2.0, name="B")
    s = te.create_schedule(B)
    _, v = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(v)
    p = te.lower(s, [A, B], name="shift")
    cu = emit(p, "cuda").code
    assert "*(const float4*)(A" not in cu and "*(float4*)(B +" in cu   # A[i+1] is not 16-byte aligned
    assert "vload4(0, A +" in emit(p, "opencl").code                  # vloadN needs no alignment


def test_select_is_lazy_and_padding_reads_stay_guarded():
    args = dict(N=1, C=2, H=5, W=5, K_out=2, R=3, S=3, stride=1, padding=1)
    p, _ = config(conv2d_register, device=MALI, seed=3, **args)
    for dialect in ("cuda", "opencl"):
        code = emit(p, dialect).code
        guarded = re.findall(r"\? data\[", code)
        assert guarded, code
        assert not re.search(r"vload\d+\(0, data", code), "a guarded load must not be hoisted into a vector load"


def _program(body_fn):
    buf = ir.Buffer("out", (8,), "int64")
    i = ir.Var("i")
    return ir.Program("divs", [buf], ir.For(i, 8, ir.SERIAL, ir.Store(buf, i, body_fn(i))))


def test_floor_division_semantics():
    nonneg = emit(_program(lambda i: (i + 3) // 4 + (i + 3) % 4), "cuda").code
    assert "((i + 3) / 4)" in nonneg and "((i + 3) % 4)" in nonneg
    neg = emit(_program(lambda i: (i - 3) // 4 + (i - 3) % 4), "opencl").code
    assert "!= 0) && (" in neg      # sign-adjusted floor division / modulo
    small = emit(_program(lambda i: i // 8 + i % 8), "cuda").code
    assert "(0 + i)" in small        # 0 <= i < 8: i // 8 == 0 and i % 8 == i


def test_barrier_under_a_thread_condition_is_a_build_error():
    buf = ir.Buffer("a", (32,), "float32")
    sh = ir.Buffer("s", (32,), "float32", "shared")
    t = ir.Var("t")
    body = ir.Allocate(sh, ir.IfThenElse(t < 16, ir.seq(ir.Store(sh, t, ir.Load(buf, t)), ir.Barrier())))
    p = ir.Program("bad", [buf], ir.For(t, 32, ir.THREAD, body, "threadIdx.x"))
    with pytest.raises(BuildError, match="barrier"):
        emit(p, "cuda")


def test_root_stages_become_kernels_and_temporaries_arguments():
    A = te.placeholder((64,), "A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((64,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C)
    for t, n in ((B, 16), (C, 32)):
        bx, tx = s[t].split(t.op.axis[0], factor=n)
        s[t].bind(bx, "blockIdx.x")
        s[t].bind(tx, "threadIdx.x")
    src = emit(te.lower(s, [A, C], name="two"), "opencl")
    assert [(k.name, k.grid, k.block) for k in src.kernels] == [("two_k0", (4, 1, 1), (16, 1, 1)),
                                                               ("two_k1", (2, 1, 1), (32, 1, 1))]
    assert [b[0] for b in src.buffers] == ["A", "C", "B"] and src.num_params == 2
    assert src.code.count("__global float* restrict B") == 2


def test_reserved_and_clashing_names_are_renamed():
    a = ir.Buffer("float", (4,), "float32")
    i = ir.Var("int")
    p = ir.Program("kernel", [a], ir.For(i, 4, ir.SERIAL, ir.Store(a, i, ir.const(1.0))))
    code = emit(p, "opencl").code
    assert "void kernel_fn(__global float* restrict float_1)" in code and "int int_1 = 0" in code


@pytest.mark.parametrize("fn", [matmul_shared, matmul_register, dense_shared, dense_register, conv2d_shared,
                                conv2d_register, depthwise_register])
def test_constraints_hold_for_sampled_configs(fn):
    args = MM if fn.__name__.startswith(("matmul", "dense")) else dict(N=1, C=16, H=14, W=14, R=3, S=3, padding=1)
    if fn.__name__.startswith("conv2d"):
        args = dict(args, K_out=32)
    space = ConfigSpace()
    fn(space, GPU, **args)
    assert 0 < space.valid_fraction() <= 1
    for idx in space.sample(random.Random(1), 10):
        s, tensors = fn(space.get(idx), GPU, **args)
        for k in emit(te.lower(s, tensors), "cuda").kernels:
            assert k.threads <= GPU.max_threads_per_block and all(b <= m for b, m in zip(k.block, (256, 256, 64)))


def test_templates_pick_shared_memory_by_device():
    assert on_chip_shared(GPU) and not on_chip_shared(MALI)
    ts = {(t.op, t.name): t for t in templates(("cuda",))}
    assert {op for op, _ in ts} == {"matmul", "dense", "conv2d", "group_conv2d", "depthwise_conv2d", "max_pool2d",
                                    "avg_pool2d", "global_avg_pool2d"}
    assert all(ts[(op, "gpu")].priority > t.priority for (op, name), t in ts.items() if name != "gpu")
    for dev, shared in ((GPU, True), (MALI, False)):
        space = ConfigSpace()
        ts[("matmul", "gpu")].fn(space, dev, **MM)
        s, tensors = ts[("matmul", "gpu")].fn(space.get(space.sample(random.Random(0), 1)[0]), dev, **MM)
        assert ("__shared__" in emit(te.lower(s, tensors), "cuda").code) == shared


@pytest.mark.parametrize("fn,args,ref", [
    (matmul_shared, MM, lambda a, b, **_: [a @ b]),
    (matmul_register, MM, lambda a, b, **_: [a @ b]),
    (conv2d_shared, dict(N=1, C=3, H=6, W=6, K_out=4, R=3, S=3, stride=1, padding=1), conv_ref),
    (conv2d_register, dict(N=1, C=3, H=7, W=7, K_out=4, R=3, S=3, stride=2, padding=1), conv_ref),
    (depthwise_register, dict(N=1, C=4, H=6, W=6, R=3, S=3, stride=1, padding=1), dw_ref),
    (conv2d_shared, dict(N=1, C=3, H=6, W=6, K_out=4, R=3, S=3, padding=1, **FUSED), conv_ref),
    (conv2d_register, dict(N=1, C=3, H=7, W=7, K_out=4, R=3, S=3, stride=2, padding=1, **FUSED), conv_ref),
    (depthwise_register, dict(N=1, C=4, H=6, W=6, R=3, S=3, padding=1, bias=True, activation="relu"), dw_ref),
    (matmul_shared, dict(MM, **FUSED), mm_ref),
    (matmul_register, dict(MM, **FUSED), mm_ref),
    (dense_shared, dict(MM, **FUSED), dense_ref),
    (dense_register, dict(MM, **FUSED), dense_ref),
    (conv2d_register, dict(N=1, C=4, H=7, W=7, K_out=6, R=3, S=3, padding=1, groups=2, **FUSED), conv_ref),
    (pool_template(pool.compute), dict(N=1, C=3, H=7, W=8, R=3, S=3, stride=2, padding=1), pool.reference),
    (pool_template(pool.avg_compute), dict(N=1, C=3, H=7, W=8, R=3, S=2, stride=2, padding=1), pool.avg_reference),
    (pool_template(pool.global_compute), dict(N=2, C=3, H=5, W=6), pool.global_reference),
], ids=["matmul_shared", "matmul_register", "conv2d_shared", "conv2d_register", "depthwise", "conv2d_shared-fused",
        "conv2d_register-fused", "depthwise-fused", "matmul_shared-fused", "matmul_register-fused",
        "dense_shared-fused", "dense_register-fused", "group_conv2d-fused", "max_pool", "avg_pool", "global_avg_pool"])
def test_templates_in_the_reference_interpreter(fn, args, ref):
    rng = np.random.default_rng(1)
    for seed in range(2):
        p, tensors = config(fn, seed=seed, **args)
        ins = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in tensors[:-1]]
        out = np.full(tensors[-1].shape, np.nan, np.float32)
        interp.run(p, *ins, out)
        np.testing.assert_allclose(out, ref(*ins, **args)[0], rtol=1e-4, atol=1e-4)
