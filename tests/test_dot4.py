"""The int8 dot instruction: `te.dot4_u8s8` (four unsigned-by-signed byte products summed per
int32 lane) computes the same in numpy (`te.evaluate`), the reference interpreter and the x86
code generator; the generated code uses VNNI's vpdpbusd where the CPU has it, vpmaddwd where it
does not (a CPU named without VNNI), and on ARM usdot or sdot where the CPU has them."""
from __future__ import annotations

import re

import numpy as np
import pytest
from checks import built_here

import tunekit
from tunekit import te
from tunekit.ir import interp

llvm = pytest.importorskip("llvmlite.binding")
from tunekit_plugins.targets.llvm.cpu import X86Target  # noqa: E402

M, N, K4 = 4, 48, 8
RNG = np.random.default_rng(3)


def _product():
    a, b = te.placeholder((M, K4), "a", "int32"), te.placeholder((K4, N), "b", "int32")
    k = te.reduce_axis(K4, "k")
    return [a, b, te.compute((M, N), lambda i, j: te.sum(te.dot4_u8s8(a[i, k], b[k, j]), axis=k), name="c")]


def _operands():
    """uint8 [M, 4*K4] and int8 [4*K4, N] (extremes included) packed four bytes to an int32, and
    their product."""
    a8 = RNG.integers(0, 256, (M, 4 * K4)).astype(np.uint8)
    b8 = RNG.integers(-128, 128, (4 * K4, N)).astype(np.int8)
    a8[0, :4], b8[:4, 0] = 255, -128
    b32 = np.ascontiguousarray(b8.reshape(K4, 4, N).transpose(0, 2, 1)).view(np.int32).reshape(K4, N)
    return a8.view(np.int32), b32, a8.astype(np.int32) @ b8.astype(np.int32)


def _vnni() -> bool:
    features = llvm.get_host_cpu_features()
    return bool(features.get("avx512vnni") or features.get("avxvnni"))


def test_evaluate_and_the_interpreter_compute_the_byte_dot_product():
    a, b, want = _operands()
    assert np.array_equal(te.evaluate(_product(), [a, b])[0], want)
    task = tunekit.Task.from_compute(_product, {}, name="dot4")
    ts = task.bind(X86Target())
    out = np.zeros((M, N), np.int32)
    interp.run(ts.program(ts.space.default()), a, b, out)
    assert np.array_equal(out, want)


#: a CPU named without VNNI -> the instruction its dot products use (the host: vpdpbusd where it has VNNI)
WITHOUT_VNNI = {"haswell": r"vpmaddwd\s+%ymm", "skylake-avx512": r"vpmaddwd\s+%zmm", "x86-64": r"pmaddwd\s+%xmm"}


@pytest.mark.parametrize("mcpu", ["", *WITHOUT_VNNI])
def test_x86_code_uses_vpdpbusd_where_the_cpu_has_vnni_and_vpmaddwd_elsewhere(mcpu):
    target = X86Target(X86Target.Options(mcpu=mcpu))
    a, b, want = _operands()
    ts = tunekit.Task.from_compute(_product, {}, name="dot4").bind(target)
    for index in [ts.space.default(), *(int(i) for i in RNG.integers(0, ts.space.size, 3))]:
        program = ts.program(index)
        asm = target.assembly(program)
        uses = len(re.findall(r"\bvpdpbusd\b", asm))
        if mcpu or not _vnni():   # named CPUs are not known to have VNNI: never the instruction
            assert uses == 0 and "pmulld" not in asm
            if index == ts.space.default():
                assert re.search(WITHOUT_VNNI.get(mcpu, "pmaddwd"), asm)
        elif index == ts.space.default():   # its inner loop: the 48 columns, vectorized
            assert "for j_i in range(48):  # vectorized" in str(program) and uses > 0
        if (artifact := built_here(target, program)) is None:
            continue
        args = [tunekit.empty(shape, "int32") for shape in ((M, K4), (K4, N), (M, N))]
        args[0][...], args[1][...] = a, b
        target.load(artifact)(*args)
        assert np.array_equal(args[2], want), f"config {index}"


def test_dot4_takes_int32_operands():
    with pytest.raises(TypeError, match="int32 expressions"):
        te.dot4_u8s8(te.placeholder((4,), "x")[0], 1)


@pytest.mark.parametrize("mcpu, instruction", [("cortex-a72", None), ("cortex-a76", "sdot"), ("neoverse-n2", "usdot")])
def test_arm_code_uses_usdot_or_sdot_where_the_cpu_has_them_and_runs_under_emulation(mcpu, instruction):
    import platform

    from tunekit_plugins.targets.llvm import qemu
    from tunekit_plugins.targets.llvm.cpu import ArmCpuTarget
    if platform.machine().lower() in ("aarch64", "arm64") or qemu.missing():
        pytest.skip(qemu.missing() or "an ARM host: the x86 tests cover the portable form")
    target = ArmCpuTarget(ArmCpuTarget.Options(mcpu=mcpu, emulate=True))
    a, b, want = _operands()
    ts = tunekit.Task.from_compute(_product, {}, name="dot4").bind(target)
    program = ts.program(ts.space.default())
    found = set(re.findall(r"\b(u?s?dot)\b", target.assembly(program)))
    assert found == ({instruction} if instruction else set())
    args = [tunekit.empty(shape, "int32") for shape in ((M, K4), (K4, N), (M, N))]
    args[0][...], args[1][...] = a, b
    target.load(target.build(program))(*args)
    assert np.array_equal(args[2], want)
