"""qmatmul, the int8 product on the dot instruction: its computation and its numpy reference
agree with a plain integer product (less the data's zero point, requantized or not), compiled for
x86 through the generated space; where the CPU has VNNI the kernel uses vpdpbusd."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import tunekit
from tunekit import te
from tunekit.errors import ArgumentError, BuildError
from tunekit.ir import interp
from tunekit.ops.qmatmul import pack_weights, unpack

llvm = pytest.importorskip("llvmlite.binding")
from tunekit_plugins.targets.llvm.cpu import X86Target  # noqa: E402

RNG = np.random.default_rng(7)
M, N, K = 6, 48, 32


def _inputs(out_dtype: str):
    a8, b8 = RNG.integers(0, 256, (M, K)).astype(np.uint8), RNG.integers(-128, 128, (K, N)).astype(np.int8)
    a0 = np.array(131, np.uint8)
    acc = (a8.astype(np.int64) - 131) @ b8.astype(np.int64)
    ins = [a8.view(np.int32), pack_weights(b8), b8.astype(np.int32).sum(0).astype(np.int32), a0]
    if out_dtype == "int32":
        return ins, acc.astype(np.int32)
    scale = np.full(N, 2e-4, np.float32)
    return [*ins, scale], np.clip(np.rint(acc.astype(np.float32) * scale) + 5, -128, 127).astype(np.int8)


def test_weights_pack_into_the_instructions_layout_and_back():
    a8, b8 = RNG.integers(0, 256, (3, 8)).astype(np.uint8), RNG.integers(-128, 128, (8, 5)).astype(np.int8)
    packed = pack_weights(b8)
    assert packed.shape == (2, 5) and packed.dtype == np.int32
    assert packed[1, 2].tobytes() == b8[4:8, 2].tobytes()   # the four k of a column in one int32
    assert all(np.array_equal(x, y) for x, y in zip(unpack(a8.view(np.int32), packed), (a8, b8)))


@pytest.mark.parametrize("out_dtype", ["int32", "int8"])
def test_qmatmul_computes_the_integer_product_less_the_zero_point(out_dtype):
    args = dict(M=M, N=N, K=K, out_dtype=out_dtype, **({"zero": 5} if out_dtype == "int8" else {}))
    task = tunekit.Task("qmatmul", args)
    ins, want = _inputs(out_dtype)
    assert np.array_equal(task.op.reference(*ins, **task.args)[0], want)
    assert np.array_equal(te.evaluate(task.op.compute(**task.args), ins)[0], want)
    target = X86Target()
    ts = task.bind(target)
    features = llvm.get_host_cpu_features()
    for index in [ts.space.default(), *(int(i) for i in RNG.integers(0, ts.space.size, 2))]:
        program = ts.program(index)
        if (features.get("avx512vnni") or features.get("avxvnni")) and \
                re.search(r"range\((16|32|48)\):  # vectorized\n.*dot4_u8s8", str(program)):
            assert "vpdpbusd" in target.assembly(program)
        arrays = [tunekit.empty(x.shape, x.dtype) for x in [*ins, want]]
        for array, value in zip(arrays, ins):
            array[...] = value
        target.load(target.build(program))(*arrays)
        assert np.array_equal(arrays[-1], want), f"config {index}"


def test_qmatmul_takes_k_in_fours():
    with pytest.raises(ArgumentError, match="K = 30 is not a multiple of 4"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tunekit.Task("qmatmul", dict(M=2, N=8, K=30))


AMX = {"amx-tile", "amx-int8"} <= {f for f, on in llvm.get_host_cpu_features().items() if on}


def _tiles_task(target, M=32, N=64, K=128):
    """A qmatmul whose space offers AMX tiles wherever `target`'s device has them."""
    return tunekit.Task("qmatmul", dict(M=M, N=N, K=K)).bind(target)


@pytest.mark.skipif(not AMX, reason="the CPU has no AMX tiles (amx-tile, amx-int8)")
def test_amx_configs_run_the_product_on_tiles_and_match_the_reference():
    target = X86Target()
    assert "amx-int8" in target.device().extra["tiles"].split()
    ts = _tiles_task(target)
    M, N, K = 32, 64, 128
    a8, b8 = RNG.integers(0, 256, (M, K)).astype(np.uint8), RNG.integers(-128, 128, (K, N)).astype(np.int8)
    ins = [a8.view(np.int32), pack_weights(b8), b8.astype(np.int32).sum(0).astype(np.int32), np.array(9, np.uint8)]
    want = ((a8.astype(np.int64) - 9) @ b8.astype(np.int64)).astype(np.int32)
    tiled = [i for i in range(ts.space.size) if ts.space.valid(i) and ts.space.get(i)["amx"]]
    assert tiled and ts.space.default() in tiled   # untuned too: tiles
    for index in tiled[::max(1, len(tiled) // 6)]:
        program = ts.program(index)
        assert "tensorized amx" in str(program)
        asm = target.assembly(program)
        assert "tdpbusd" in asm and "ldtilecfg" in asm
        arrays = [tunekit.empty(x.shape, x.dtype) for x in [*ins, want]]
        for array, value in zip(arrays, ins):
            array[...] = value
        target.load(target.build(program))(*arrays)
        assert np.array_equal(arrays[-1], want), f"config {index}"
        # the interpreter runs the same nest as plain loops
        plain = [*ins, np.zeros_like(want)]
        interp.run(program, *plain)
        assert np.array_equal(plain[-1], want)


def _tile_product(N: int):
    """A 32 x N int8 product over 32 k groups, its reduction loop outermost: (schedule, tensors, C)."""
    A, B = te.placeholder((32, 32), "A", "int32"), te.placeholder((32, N), "B", "int32")
    k = te.reduce_axis(32, "k")
    C = te.compute((32, N), lambda i, j: te.sum(te.dot4_u8s8(A[i, k], B[k, j]), axis=k), name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    s[C].reorder(k, i, j)
    return s, [A, B, C], k


def test_a_cpu_without_amx_offers_no_tiles_and_refuses_to_build_them():
    plain = X86Target(X86Target.Options(mcpu="skylake-avx512"))
    assert "tiles" not in plain.device().extra
    ts = _tiles_task(plain)
    assert {ts.space.get(i)["amx"] for i in range(ts.space.size)} == {0}
    s, tensors, k = _tile_product(32)
    s[tensors[-1]].tensorize(k, "amx")
    with pytest.raises(BuildError, match="lacks amx-int8, amx-tile"):
        plain.build(te.lower(s, tensors))


def test_a_nest_that_is_not_a_tile_product_is_refused_by_name():
    s, tensors, k = _tile_product(24)
    s[tensors[-1]].tensorize(k, "amx")
    target = X86Target()
    with pytest.raises(BuildError, match=r"multiples of 16: j \(24\)"):
        target.build(te.lower(s, tensors))
    s2, tensors, _ = _tile_product(24)
    C = tensors[-1]
    s2[C].tensorize(s2[C].leaf[1], "amx")      # the reduction's init sits inside: not one update
    with pytest.raises(BuildError, match="is not three nested loops"):
        target.build(te.lower(s2, tensors))
