"""The opencl and mali targets on whatever OpenCL device is here (PoCL on a CPU in
CI): the contract suite, every GPU template run for real on random configs and
checked against numpy and the reference interpreter, device arrays, errors, and
a short tuning run through the build workers and the isolated runner."""
from __future__ import annotations

import random

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl")

from tunekit_plugins.targets.opencl import target as cl_target  # noqa: E402
from tunekit_plugins.targets.opencl.target import KernelLoadError, MaliTarget, OpenCLTarget  # noqa: E402

import tunekit  # noqa: E402
from tunekit import RunSettings, Task  # noqa: E402
from tunekit.errors import BuildError  # noqa: E402
from tunekit.ir import interp  # noqa: E402
from tunekit.testing.contract import TargetContract  # noqa: E402

needs_device = pytest.mark.skipif(OpenCLTarget.available() is not None,
                                  reason=f"opencl: {OpenCLTarget.available()}")


class TestOpenCLContract(TargetContract):
    target_class = OpenCLTarget


class TestMaliContract(TargetContract):
    target_class = MaliTarget


CASES = {
    "matmul": dict(M=24, N=32, K=16),
    "conv2d": dict(N=1, C=3, H=7, W=7, K_out=8, R=3, S=3, stride=1, padding=1),
    "conv2d-s2": dict(N=1, C=4, H=9, W=8, K_out=4, R=3, S=3, stride=2, padding=1),
    "conv2d-1x1": dict(N=2, C=8, H=5, W=5, K_out=4, R=1, S=1),
    "depthwise_conv2d": dict(N=1, C=8, H=7, W=7, R=3, S=3, stride=1, padding=1),
    "depthwise_conv2d-s2": dict(N=1, C=4, H=9, W=9, R=3, S=3, stride=2, padding=1),
    # fused epilogues, applied as the register tile is written out
    "conv2d-fused": dict(N=1, C=4, H=9, W=8, K_out=8, R=3, S=3, stride=2, padding=1, bias=True, residual=True,
                         activation="relu6"),
    "depthwise_conv2d-fused": dict(N=1, C=8, H=7, W=7, R=3, S=3, padding=1, bias=True, activation="relu"),
    "matmul-fused": dict(M=24, N=32, K=16, bias=True, residual=True, activation="relu"),
    "dense": dict(M=3, N=20, K=24),
    "dense-fused": dict(M=1, N=37, K=64, bias=True, activation="relu"),
    "group_conv2d-fused": dict(N=1, C=6, H=7, W=8, K_out=9, R=3, S=3, padding=1, groups=3, bias=True,
                               activation="relu"),
    "max_pool2d": dict(N=1, C=3, H=9, W=10, R=3, S=3, stride=2, padding=1),
    "avg_pool2d": dict(N=1, C=3, H=9, W=10, R=3, S=3, stride=2, padding=1),
    "global_avg_pool2d": dict(N=2, C=5, H=7, W=7),
}


def _templates(op: str, target: str) -> list[str]:
    """The shared and register templates of `op` on `target` where it has them, else its one "gpu"."""
    names = {t.name for t in tunekit.registry().templates if t.op == op and target in t.targets}
    return sorted(names & {"shared", "register"}) or ["gpu"]


RUNS = [(target, case, template) for target in ("opencl", "mali") for case in CASES
        for template in (_templates(case.split("-")[0], target) if target == "opencl" else ["gpu"])]


@pytest.fixture(scope="module")
def targets():
    return {"opencl": OpenCLTarget(), "mali": MaliTarget()}


@needs_device
@pytest.mark.parametrize("target_name,case,template", RUNS, ids=["-".join(r) for r in RUNS])
def test_templates_match_numpy_and_interpreter(targets, target_name, case, template):
    target = targets[target_name]
    ts = Task(case.split("-")[0], CASES[case], template=template).bind(target)
    op, args = ts.task.op, ts.task.args
    rng = np.random.default_rng(0)
    rtol, atol = op.tolerance(args)
    for index in ts.space.sample(random.Random(f"{case}{template}"), 3):
        program = ts.program(index)
        art = target.build(program)
        inputs = op.random_inputs(args, rng)
        ref = op.reference(*inputs, **args)[0]
        out = np.full(ref.shape, np.nan, np.float32)
        target.load(art)(*inputs, out)
        np.testing.assert_allclose(out, ref, rtol, atol, err_msg=f"{ts.space.get(index)}\n{art.data}")
        if index == ts.space.sample(random.Random(f"{case}{template}"), 1)[0]:   # the interpreter is slow
            out[:] = np.nan
            interp.run(program, *inputs, out)
            np.testing.assert_allclose(out, ref, rtol, atol, err_msg=f"interpreter: {ts.space.get(index)}")


def test_mali_profile():
    for arch, wg in (("midgard", 256), ("bifrost", 384)):
        info = MaliTarget(MaliTarget.Options(arch=arch, cores=12)).device()
        assert (info.max_threads_per_block, info.vector_bits, info.cores) == (wg, 128, 12)
        assert info.extra["local_memory"] == "global" and info.lanes("float32") == 4
    # mali templates never tile into shared memory and vectorize at most float4
    ts = Task("matmul", dict(M=64, N=64, K=64)).bind(MaliTarget())
    assert ts.template.name == "gpu"
    for index in ts.space.sample(random.Random(0), 5):
        src = ts.target.build(ts.program(index)).data
        assert "__local" not in src and "float8" not in src and "float16" not in src


@needs_device
def test_device_facts_come_from_the_device():
    info = OpenCLTarget().device()
    _, dev = OpenCLTarget().cl_device()
    assert info.name == dev.name.strip() and info.cores == dev.max_compute_units
    assert info.max_threads_per_block == dev.max_work_group_size and info.max_shared_memory == dev.local_mem_size
    assert info.warp_size >= 1 and len(info.extra["max_block"]) == 3


def test_device_selection_by_index_and_name():
    assert cl_target.find_device("", "no-such-device-xyz") is None
    found = cl_target.find_device("0", "0")
    assert found is None or found == cl_target.find_device(found[0].name[:4], found[1].name[:5])
    assert OpenCLTarget(OpenCLTarget.Options(device="no-such-device-xyz")).device().name.endswith("(no device found)")


@needs_device
def test_device_arrays_run_in_place_and_bad_arguments_are_errors():
    import pyopencl.array as cla
    target = OpenCLTarget()
    ts = Task("matmul", dict(M=16, N=16, K=8), template="register").bind(target)
    art = target.build(ts.program(ts.space.sample(random.Random(0), 1)[0]))
    kernel = target.load(art)
    rng = np.random.default_rng(0)
    a, b = rng.random((16, 8), np.float32), rng.random((8, 16), np.float32)
    q = target._queue()
    da, db, dc = cla.to_device(q, a), cla.to_device(q, b), cla.empty(q, (16, 16), np.float32)
    kernel(da, db, dc)
    np.testing.assert_allclose(dc.get(), a @ b, rtol=1e-5)
    with pytest.raises(KernelLoadError, match=r"argument 1 \(B\).*shape \(8, 16\)"):
        kernel(a, a, np.empty((16, 16), np.float32))
    with pytest.raises(KernelLoadError, match="takes 3 arrays"):
        kernel(a, b)


@needs_device
def test_run_times_with_events_and_writes_outputs():
    target = OpenCLTarget()
    ts = Task("matmul", dict(M=32, N=32, K=32)).bind(target)
    art = target.build(ts.program(ts.space.sample(random.Random(1), 1)[0]))
    a, b = np.ones((32, 32), np.float32), np.full((32, 32), 2, np.float32)
    c = np.full((32, 32), np.nan, np.float32)
    costs = target.run(art, [a, b, c], RunSettings(number=2, repeat=3, min_repeat_ms=1))
    assert len(costs) == 3 and all(0 < x < 1 for x in costs)
    np.testing.assert_array_equal(c, np.full((32, 32), 64, np.float32))


@needs_device
def test_compile_errors_are_build_errors(monkeypatch):
    target = OpenCLTarget()
    ts = Task("matmul", dict(M=8, N=8, K=8)).bind(target)
    real = cl_target.emit

    def broken(program, dialect):
        src = real(program, dialect)
        src.code = src.code.replace("{", "{ this is not C;", 1)
        return src
    monkeypatch.setattr(cl_target, "emit", broken)
    with pytest.raises(BuildError, match="OpenCL compiler rejected"):
        target.build(ts.program(ts.space.sample(random.Random(0), 1)[0]))
    art = OpenCLTarget(OpenCLTarget.Options(compile_check=False)).build(ts.program(0))
    assert "this is not C" in art.data   # no check: the error would come at load time


def test_available_says_why(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_pyopencl(name, *a, **k):
        if name.startswith("pyopencl"):
            raise ImportError("No module named 'pyopencl'")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_pyopencl)
    assert "pyopencl is not installed" in OpenCLTarget.available()
    assert "pyopencl is not installed" in MaliTarget.available()


@needs_device
@pytest.mark.slow
def test_tuning_through_workers_and_runner(tmp_path):
    states = tunekit.tune([Task("matmul", dict(M=64, N=64, K=64))], target="opencl", trials=8, seed=0,
                          database=str(tmp_path / "t.db"), measure={"min_repeat_ms": 2, "repeat": 2})
    # the task names no template: its 8 trials are shared by the templates that serve it
    assert {st.ts.template.name for st in states} == {"gpu", "shared", "register", "auto"}
    assert sum(st.done for st in states) == 8
    assert not any(st.errors for st in states), [t.message for st in states for t in st.trials if t.error]
    assert max(st.best_gflops for st in states if st.done) > 0


@needs_device
def test_a_network_runs_with_fused_epilogues_on_opencl(tmp_path):
    pytest.importorskip("onnx")
    import warnings

    from test_onnx import depthwise_block, reference
    path = depthwise_block(tmp_path / "m.onnx")   # a depthwise conv + ReLU6, then a 1x1 conv with its bias
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # no records: default configs
        net = tunekit.compile_model(path, target="opencl")
    assert [(n.op, n.args.get("layout", "NCHW"), n.args["bias"]) for n in net.graph.nodes] == [
        ("depthwise_conv2d", "NCHW", True), ("conv2d", "NCHW", True)]   # GPUs keep NCHW
    x = np.random.default_rng(0).standard_normal((1, 8, 14, 14)).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-4)


@needs_device
@pytest.mark.parametrize("make", ["pool_and_head", "grouped_and_padded"])
def test_a_network_with_pools_grouped_convs_and_dense_runs_on_opencl(tmp_path, make):
    pytest.importorskip("onnx")
    import warnings

    import test_onnx
    path = getattr(test_onnx, make)(tmp_path / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(path, target="opencl")
    assert {n.op for n in net.graph.nodes} >= {"dense", "avg_pool2d"}
    shape = next(iter(net.graph.inputs.values()))[0]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(net(x)[0], test_onnx.reference(path, x), rtol=1e-4, atol=1e-4)
