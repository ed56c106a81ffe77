"""Shared test checks: a config's program against the op's numpy reference."""
from __future__ import annotations

import numpy as np
import pytest

import tunekit
from tunekit.ir import interp
from tunekit.measure.timing import mismatch


def interpreted_and_compiled(ts, index: int, tgt) -> None:
    """Run config `index` of task space `ts` in the interpreter and compiled for `tgt`, on the
    op's random inputs, and compare both with its reference within its tolerance."""
    op, args = ts.task.op, ts.task.args
    inputs = op.random_inputs(args, np.random.default_rng(index))
    ref = op.reference(*inputs, **args)[0]
    rtol, atol = op.tolerance(args, inputs)
    program, where = ts.program(index), str(ts.space.get(index))
    out = np.full(ref.shape, np.nan, ref.dtype)
    interp.run(program, *inputs, out)
    assert not (bad := mismatch([out], [ref], rtol, atol)), f"interpreted, {where}: {bad}"
    arrays = [tunekit.empty(a.shape, a.dtype) for a in [*inputs, ref]]
    for a, v in zip(arrays, inputs):
        a[...] = v
    tgt.load(tgt.build(program))(*arrays)
    assert not (bad := mismatch([arrays[-1]], [ref], rtol, atol)), f"compiled, {where}: {bad}"


def compiled_with_costs(path: str, tgt, tmp_path, monkeypatch, seconds):
    """`path` compiled for `tgt` as if every task's best record took `seconds(task)`: the
    network's choices (algorithms, fused chains, layouts) follow those costs, and each
    kernel runs its default config (the database is empty)."""
    import warnings

    from tunekit.deploy.plan import NetworkPlan
    from tunekit.store.database import Database
    monkeypatch.setattr(NetworkPlan, "seconds", lambda plan, task: seconds(task))
    db = str(tmp_path / "records.db")
    Database(db).close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: default configs
        return tunekit.compile_model(path, target=tgt, database=db)


def translated(path: str, passes=("epilogues", "merge-siblings", "fuse-te", "dense-rows")):
    """The graph of the model at `path` after `passes` for x86: the frontend's translation with its
    epilogues folded and its te calls grouped, a product of few rows as the dense the target runs."""
    from tunekit.deploy.network import load_graph
    from tunekit.deploy.plan import NetworkPlan
    from tunekit.plugin.registry import make_component
    return NetworkPlan(load_graph(str(path)), make_component("target", "x86"), passes=list(passes)).compiled()


def save_onnx(path: str, nodes, inputs: dict, outputs: dict, inits=(), opset: int = 17) -> str:
    """Write an ONNX model of `nodes` to `path` and return `path`; `inputs`/`outputs`: name -> (shape,
    element type); `inits`: name -> array (the initializers)."""
    import onnx
    from onnx import helper, numpy_helper
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, t, s) for k, (s, t) in inputs.items()],
                              [helper.make_tensor_value_info(k, t, s) for k, (s, t) in outputs.items()],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def run_built(target, artifact, ins: list, out_shape: tuple, dtype: str = "float32") -> np.ndarray:
    """Run `artifact` (built by `target`) on arrays holding `ins` and return its output (of `out_shape`)."""
    arrays = [tunekit.empty(x.shape, x.dtype) for x in ins] + [tunekit.empty(out_shape, dtype)]
    for array, value in zip(arrays, ins):
        array[...] = value
    target.load(artifact)(*arrays)
    return arrays[-1]


def built_here(target, program):
    """`program`'s kernel for `target`, or None where this CPU lacks a feature it needs (a named CPU's AVX-512,
    say); then check that loading it is refused by name, since running it would kill the process (SIGILL)."""
    from tunekit_plugins.targets.llvm.cpu import KernelLoadError

    from tunekit.runtime import host
    artifact = target.build(program)
    missing = host.missing_features(artifact.meta["needs"])
    if not missing:
        return artifact
    with pytest.raises(KernelLoadError, match=rf"built for \S+ with .*{missing[0]}.*, which this CPU lacks"):
        target.load(artifact)
    return None


def bench_script(name: str):
    """Load `bench/<name>.py` as a module (bench/ is no package: it goes on sys.path, as its scripts
    import bench/common.py and each other)."""
    import importlib.util
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "bench"
    if str(bench) not in sys.path:
        sys.path.insert(0, str(bench))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", bench / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
