"""Fused epilogues (bias, residual, relu/relu6) of conv2d, depthwise_conv2d and matmul: computed in
the CPU templates' output stage, checked against numpy in the interpreter and compiled;
the config space and the records of the plain op serve every epilogue."""
from __future__ import annotations

import platform
import random
from types import SimpleNamespace

import numpy as np
import pytest

import tunekit
from tunekit.errors import RecipeError
from tunekit.ir import interp

EPILOGUES = [{"bias": True}, {"residual": True}, {"activation": "relu"}, {"activation": "relu6"},
             {"bias": True, "residual": True, "activation": "relu6"}]
CASES = [("conv2d", {"N": 1, "C": 3, "H": 7, "W": 9, "K_out": 5, "R": 3, "S": 3, "padding": 1}, "direct"),
         ("conv2d", {"N": 1, "C": 3, "H": 7, "W": 9, "K_out": 5, "R": 3, "S": 3, "padding": 1}, "nchwc"),
         ("depthwise_conv2d", {"N": 1, "C": 4, "H": 8, "W": 7, "R": 3, "S": 3, "stride": 2, "padding": 1}, "rows"),
         ("conv2d", {"N": 1, "C": 8, "H": 7, "W": 9, "K_out": 16, "R": 3, "S": 3, "padding": 1, "layout": "NCHW8c"},
          "blocked"),
         ("conv2d", {"N": 1, "C": 3, "H": 7, "W": 9, "K_out": 8, "R": 1, "S": 1, "layout": "NCHW4c",
                     "data_layout": "NCHW"}, "blocked"),
         ("depthwise_conv2d", {"N": 1, "C": 8, "H": 8, "W": 7, "R": 3, "S": 3, "stride": 2, "padding": 1,
                               "layout": "NCHW8c"}, "blocked"),
         ("matmul", {"M": 7, "N": 13, "K": 5}, "tiled"),
         ("matmul", {"M": 9, "N": 20, "K": 6}, "packed")]
x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")


def target():
    pytest.importorskip("llvmlite")
    return tunekit.registry().component("target", "x86")()


@x86
@pytest.mark.parametrize("epilogue", EPILOGUES, ids=lambda e: "+".join(f"{k}={v}" for k, v in e.items()))
@pytest.mark.parametrize("op, args, template", CASES, ids=lambda c: c if isinstance(c, str) else "")
def test_every_epilogue_matches_numpy_interpreted_and_compiled(op, args, template, epilogue):
    tgt = target()
    ts = tunekit.Task(op, {**args, **epilogue}, template=template).bind(tgt)
    rng = np.random.default_rng(0)
    inputs = [x * 8 for x in ts.task.op.random_inputs(ts.task.args, rng)]   # wide enough to clip at 6
    ref = ts.task.op.reference(*inputs, **ts.task.args)[0]
    if epilogue.get("activation") == "relu6":
        assert ref.min() == 0 and ref.max() == 6
    for index in ts.space.sample(random.Random(1), 2):
        program = ts.program(index)
        assert [b.name for b in program.params][2:-1] == [n for n in ("bias", "residual") if epilogue.get(n)]
        out = np.full(ref.shape, np.nan, np.float32)
        interp.run(program, *inputs, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        arrays = [tunekit.empty(x.shape) for x in [*inputs, ref]]
        for a, x in zip(arrays, inputs):
            a[...] = x
        tgt.load(tgt.build(program))(*arrays)
        np.testing.assert_allclose(arrays[-1], ref, rtol=1e-4, atol=1e-4)


@x86
def test_the_space_and_the_workload_key_do_not_depend_on_the_epilogue():
    tgt = target()
    assert tunekit.Task(workload="resnet18.C6").key == "96cb404d9de468cb"   # as before epilogues existed
    assert tunekit.Task(workload="mobilenet.D3").key == "827a7e6315cad834"
    for op, args, template in CASES:
        plain = tunekit.Task(op, args, template=template).bind(tgt).space
        fused = tunekit.Task(op, {**args, **EPILOGUES[-1]}, template=template).bind(tgt).space
        assert plain.size == fused.size and [k.name for k in plain.knobs] == [k.name for k in fused.knobs]
        assert tunekit.Task(op, {**args, "activation": "none"}).key == tunekit.Task(op, args).key


@x86
def test_a_fused_task_tunes_and_builds_from_the_plain_ops_record(tmp_path):
    args = {"N": 1, "C": 8, "H": 10, "W": 10, "K_out": 16, "R": 3, "S": 3, "padding": 1}
    db = str(tmp_path / "t.db")
    fused = tunekit.tune([tunekit.Task("conv2d", {**args, "bias": True, "activation": "relu"}, template="direct")],
                         trials=3,
                         database=db, measure={"repeat": 1, "min_repeat_ms": 1})[0]
    assert fused.done == 3 and fused.errors == 0                   # checked against the fused reference
    plain = tunekit.tune([tunekit.Task("conv2d", args, template="direct")], trials=3, database=db,
                         measure={"repeat": 1, "min_repeat_ms": 1}, seed=1)[0]
    with tunekit.apply_history_best(db):
        kernel = tunekit.build("conv2d", {**args, "residual": True, "activation": "relu6"})
    assert kernel.tuned and kernel.config.index == plain.best.index
    assert [n for n, _, _ in kernel.params] == ["data", "weight", "residual", "conv"]


def test_targets_without_an_epilogue_template_refuse_fused_tasks(fake):
    plain = tunekit.Template("conv2d", "plain", ("fake-gpu",), lambda cfg, device, **args: None)
    tunekit.register_plugin(SimpleNamespace(tunekit_templates=tunekit.hookimpl(lambda: [plain])), "plain-conv")
    task = {"op": "conv2d", "args": {"N": 1, "C": 4, "H": 8, "W": 8, "K_out": 4, "R": 3, "S": 3, "bias": True}}
    recipe = {"target": "fake-gpu", "model": "fake-model", "explorer": "fake-explorer"}
    tunekit.Recipe.from_dict({**recipe, "tasks": [{**task, "args": {**task["args"], "bias": False}}]})
    with pytest.raises(RecipeError, match="no schedule template that computes a fused epilogue .* 'fake-gpu'"):
        tunekit.Recipe.from_dict({**recipe, "tasks": [task]}, source="r.toml")
