"""arm-cpu kernels run for real under qemu-aarch64 (`emulate = true`): every arm-cpu
template tunes with every trial checked against numpy by the core, a loaded kernel
computes in place and says clearly what is wrong, and emulated records carry their
own device fingerprint."""
from __future__ import annotations

import platform
import random

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from tunekit_plugins.targets.llvm import qemu
from tunekit_plugins.targets.llvm.cpu import ArmCpuTarget, KernelArgumentError, KernelLoadError

import tunekit
from tunekit import ir
from tunekit.errors import ArgumentError
from tunekit.ops.epilogue import has_epilogue
from tunekit.records import WRONG_ANSWER
from tunekit.testing import TargetContract

if platform.machine().lower() in ("aarch64", "arm64"):
    pytest.skip("an ARM host runs arm-cpu kernels natively", allow_module_level=True)
if qemu.missing():
    pytest.skip(qemu.missing(), allow_module_level=True)

EMULATED = {"name": "arm-cpu", "emulate": True}
SHAPES = {"matmul": {"M": 13, "N": 37, "K": 7}, "batch_matmul": {"B": 2, "M": 20, "N": 33, "K": 9},
          "conv2d": {"N": 1, "C": 3, "H": 7, "W": 9, "K_out": 5, "R": 3, "S": 3, "padding": 1},
          "depthwise_conv2d": {"N": 1, "C": 4, "H": 8, "W": 7, "R": 3, "S": 3, "stride": 2, "padding": 1},
          "max_pool2d": {"N": 1, "C": 3, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1},
          "avg_pool2d": {"N": 1, "C": 3, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1},
          "global_avg_pool2d": {"N": 1, "C": 3, "H": 7, "W": 7},
          "dense": {"M": 1, "N": 37, "K": 24},
          "group_conv2d": {"N": 1, "C": 4, "H": 7, "W": 9, "K_out": 6, "R": 3, "S": 3, "padding": 1, "groups": 2},
          "lstm_step": {"B": 1, "H": 21}, "qmatmul": {"M": 5, "N": 19, "K": 12, "out_dtype": "int8", "zero": 1},
          "bmatmul": {"M": 5, "N": 19, "K": 12, "bias": True},
          "qconv2d": {"N": 1, "H": 7, "W": 6, "C": 8, "K_out": 19, "R": 3, "S": 3, "padding": 1, "pad_value": 5},
          "qdepthwise_conv2d": {"N": 1, "H": 7, "W": 6, "C": 19, "R": 3, "S": 3, "padding": 1, "pad_value": 5}}
BLOCKED = {"conv2d": {"N": 1, "C": 8, "H": 7, "W": 9, "K_out": 8, "R": 3, "S": 3, "padding": 1, "layout": "NCHW4c"},
           "bconv2d": {"N": 1, "C": 8, "H": 7, "W": 9, "K_out": 8, "R": 3, "S": 3, "padding": 1, "layout": "NCHW4c"},
           "depthwise_conv2d": {"N": 1, "C": 8, "H": 8, "W": 7, "R": 3, "S": 3, "stride": 2, "padding": 1,
                                "layout": "NCHW4c"},
           "max_pool2d": {"N": 1, "C": 4, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1,
                          "layout": "NCHW4c"},
           "avg_pool2d": {"N": 1, "C": 4, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1,
                          "layout": "NCHW4c"},
           "global_avg_pool2d": {"N": 1, "C": 8, "H": 7, "W": 7, "layout": "NCHW4c"},
           "conv2d_winograd": {"N": 1, "C": 8, "H": 7, "W": 9, "K_out": 8, "R": 3, "S": 3, "padding": 1,
                               "layout": "NCHW4c", "tile": 2},
           "mbconv": {"N": 1, "C": 8, "H": 7, "W": 9, "E": 16, "K_out": 8, "residual": True, "layout": "NCHW4c"}}
EPILOGUES = [{"activation": "relu"}, {"bias": True, "residual": True, "activation": "relu6"}]
TRIALS = 4


def emulated() -> ArmCpuTarget:
    return ArmCpuTarget(ArmCpuTarget.Options(emulate=True))


def arm_tasks() -> list[tunekit.Task]:
    """One small task per template that serves arm-cpu, and its fused epilogues where it has them
    (the generated template: a matmul with an epilogue and a conv2d)."""
    target, tasks, seen = emulated(), [], set()
    for t in tunekit.registry().templates:
        if t.generic and t.serves(target):
            tasks += [tunekit.Task("matmul", {**SHAPES["matmul"], **EPILOGUES[1]}, template=t.name),
                      tunekit.Task("conv2d", SHAPES["conv2d"], template=t.name)]
            continue
        if (t.op, t.name) in seen or not t.serves(target):
            continue
        seen.add((t.op, t.name))
        shape = (BLOCKED if t.blocked else SHAPES)[t.op]
        for args in [shape] + [{**shape, **e} for e in EPILOGUES]:
            if t.serves(target, args) and not (args is not shape and _refused(t.op, args)):
                tasks.append(tunekit.Task(t.op, args, template=t.name))
    return tasks


def _refused(op: str, args: dict) -> bool:
    """Whether `op` takes no such args (mbconv has a residual of its own, but no bias or activation)."""
    try:
        tunekit.Task(op, args)
    except ArgumentError:
        return True
    return False


def matmul_artifact(target: ArmCpuTarget) -> tunekit.Artifact:
    ts = tunekit.Task("matmul", SHAPES["matmul"], template="packed").bind(target)
    return target.build(ts.program(ts.space.sample(random.Random(0), 1)[0]))


def test_every_arm_template_tunes_under_emulation_with_no_wrong_answer(tmp_path):
    tasks = arm_tasks()
    served = {(t.op.name, t.template_name) for t in tasks}
    assert {("matmul", "tiled"), ("matmul", "packed"), ("batch_matmul", "packed"), ("conv2d", "direct"),
            ("conv2d", "nchwc"), ("depthwise_conv2d", "rows"), ("max_pool2d", "rows"), ("conv2d", "blocked"),
            ("depthwise_conv2d", "blocked"), ("max_pool2d", "blocked"), ("avg_pool2d", "rows"),
            ("avg_pool2d", "blocked"), ("global_avg_pool2d", "rows"), ("global_avg_pool2d", "blocked"),
            ("dense", "rows"), ("group_conv2d", "direct"), ("matmul", "auto"), ("conv2d", "auto"),
            ("conv2d_winograd", "winograd"), ("mbconv", "fused"), ("lstm_step", "panels")} <= served
    # the fused epilogues of matmul (tiled, packed), dense, conv2d (direct, nchwc, blocked), conv2d_winograd,
    # group_conv2d, depthwise (rows, blocked), bmatmul, bconv2d; the generated matmul's; mbconv's residual and
    # the bias of bmatmul's own shape
    assert sum(has_epilogue(t.args) for t in tasks) == 12 * len(EPILOGUES) + 3
    states = tunekit.tune(tasks, target=EMULATED, trials=TRIALS, database=str(tmp_path / "arm.db"),
                          measure={"number": 1, "repeat": 2, "min_repeat_ms": 0, "warmup": 0, "retries": 0,
                                   "timeout_s": 60, "runner": {"name": "local", "warmup_s": 0}})
    for st in states:
        name = f"{st.ts.task.name} ({st.ts.template.name})"
        assert st.key.device == emulated().device().fingerprint()   # recorded as emulated, apart from boards
        wrong = [t.message for t in st.trials if t.error == WRONG_ANSWER]
        assert not wrong, f"{name}: {len(wrong)} wrong answers: {wrong[0]}"
        assert st.done >= 1 and all(t.ok for t in st.trials), f"{name}: {[t.message for t in st.trials if not t.ok]}"
        assert st.best is not None and st.best.cost > 0


def test_a_loaded_kernel_runs_aarch64_code_in_place_and_checks_its_arrays():
    target = emulated()
    art = matmul_artifact(target)
    exe = qemu.executable(art).read_bytes()
    assert exe[:4] == b"\x7fELF" and int.from_bytes(exe[18:20], "little") == 183   # EM_AARCH64: emulated
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (13, 7)).astype("float32"), rng.uniform(-1, 1, (7, 37)).astype("float32")
    c = np.full((13, 37), np.nan, "float32")
    kernel = target.load(art)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(KernelArgumentError, match=r"argument 2 \(C\) .* shape \(13, 37\); got a float32 array "
                                                  r"of shape \(37, 13\)"):
        kernel(a, b, np.zeros((37, 13), "float32"))
    with pytest.raises(KernelArgumentError, match="takes 3 arrays"):
        kernel(a, b)
    costs = target.run(art, [a, b, c], tunekit.RunSettings(number=2, repeat=3, min_repeat_ms=1, warmup=1))
    assert len(costs) == 3 and all(x > 0 for x in costs)


def test_a_crashing_kernel_is_a_clear_error():
    out = ir.Buffer("O", (8,), "float32")
    crash = ir.Program("crash", [out], ir.Store(out, ir.const(1 << 40), ir.const(1.0)))   # far out of bounds
    target = emulated()
    with pytest.raises(KernelLoadError, match=r"crash failed under qemu-aarch64 with signal 11"):
        target.load(target.build(crash))(np.zeros(8, "float32"))
    broken = tunekit.Artifact("arm-cpu", "nothing", b"not an object file", {"params": [("O", (8,), "float32")]})
    with pytest.raises(KernelLoadError, match="linking for qemu failed"):
        target.load(broken)


def test_emulation_is_an_option_with_its_own_device_fingerprint():
    assert "emulate = true" in ArmCpuTarget.available()          # the class speaks for the default options
    assert ArmCpuTarget().available() == ArmCpuTarget.available()
    assert emulated().available() is None
    assert emulated().device().fingerprint() != ArmCpuTarget().device().fingerprint()
    assert emulated().device().extra["emulated"] is True and "emulated" not in ArmCpuTarget().device().extra
    with pytest.raises(KernelLoadError, match="ARM device"):
        ArmCpuTarget().load(matmul_artifact(ArmCpuTarget()))


class TestEmulatedArmContract(TargetContract):
    target_class = ArmCpuTarget

    def make_options(self):
        return ArmCpuTarget.Options(emulate=True)

    @pytest.fixture
    def usable(self) -> None:
        assert self.make().available() is None   # the module is skipped when emulation cannot run
