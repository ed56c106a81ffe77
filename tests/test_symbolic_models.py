"""Models with symbolic dimensions, compiled once for every size in their ranges: a small BERT
exported with symbolic batch and sequence and a small GPT-2 with a symbolic sequence (its causal
mask computed from it), against onnxruntime on the same files at several sizes; saved and loaded
as one file; and the errors of unbounded dimensions and sizes out of range."""
from __future__ import annotations

import platform
import warnings

import numpy as np
import pytest
from conftest import require

import tunekit
from tunekit.errors import ArgumentError, ModelError

onnx = require("onnx", "the symbolic-shape claims")
ort = require("onnxruntime", "the symbolic-shape claims")
pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")
import transformer_nets  # noqa: E402  (examples/, on sys.path by conftest.py)

SIZE = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "seq": 16, "vocab": 1000}
RNG = np.random.default_rng(7)


def _export(net: str, tmp_path_factory) -> str:
    for module in ("torch", "transformers", "onnxscript"):
        require(module, "the symbolic-shape claims")
    return transformer_nets.export(net, str(tmp_path_factory.mktemp(net) / f"{net}_dynamic.onnx"), 0,
                                   dynamic=True, **SIZE)


def _compile(path: str, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no tuning record.*default config")
        return tunekit.compile_model(path, target="x86", **kw)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    path = _export("bert", tmp_path_factory)
    return path, _compile(path, dims={"batch": (1, 3), "sequence": (1, 24)}, at={"batch": 2, "sequence": 16})


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    path = _export("gpt2", tmp_path_factory)
    return path, _compile(path, dims={"sequence": (1, 24)}, at={"sequence": 16})


def _bert_feeds(batch: int, seq: int) -> dict:
    mask = np.ones((batch, seq), np.int64)
    mask[0, max(1, seq - seq // 3):] = 0     # padding in the first sequence
    return {"input_ids": RNG.integers(0, SIZE["vocab"], (batch, seq), dtype=np.int64), "attention_mask": mask}


def test_one_compiled_bert_runs_every_batch_and_sequence_length(bert):
    path, model = bert
    assert model.dims == {"batch": (1, 3), "sequence": (1, 24)}
    assert model.inputs["input_ids"] == (("batch", "sequence"), "int64")
    sess = ort.InferenceSession(path)
    for batch, seq in [(2, 16), (1, 16), (3, 24), (1, 1), (2, 9), (3, 17)]:
        feeds = _bert_feeds(batch, seq)
        (got,) = model(**feeds)
        (want,) = sess.run(None, feeds)
        assert got.shape == (batch, seq, SIZE["hidden"])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch}, sequence {seq}")


def test_one_compiled_gpt2_runs_every_sequence_length(gpt2):
    path, model = gpt2
    sess = ort.InferenceSession(path)
    for seq in (16, 1, 2, 7, 24, 19):
        ids = RNG.integers(0, SIZE["vocab"], (1, seq), dtype=np.int64)
        (got,) = model(ids)
        (want,) = sess.run(None, {"input_ids": ids})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"sequence {seq}")


def test_a_symbolic_model_saves_and_loads_as_one_file(bert, tmp_path):
    import tunekit.runtime
    _, model = bert
    model.save(tmp_path / "bert.tk")
    loaded = tunekit.runtime.load(tmp_path / "bert.tk")
    assert loaded.dims == model.dims
    for batch, seq in [(1, 5), (3, 24)]:
        feeds = _bert_feeds(batch, seq)
        np.testing.assert_array_equal(loaded(**feeds)[0], model(**feeds)[0])


def test_sizes_out_of_range_or_disagreeing_are_clear_errors(bert):
    _, model = bert
    with pytest.raises(ArgumentError, match=r"dimension 'sequence' is 25, out of the range 1\.\.24"):
        model(**_bert_feeds(1, 25))
    with pytest.raises(ArgumentError, match=r"dimension 'batch' is 4, out of the range 1\.\.3"):
        model(**_bert_feeds(4, 8))
    feeds = _bert_feeds(2, 8)
    feeds["attention_mask"] = feeds["attention_mask"][:, :7]
    with pytest.raises(ArgumentError, match="'sequence' is 7 here and 8 in another input"):
        model(**feeds)


def test_few_rows_at_the_representative_sizes_run_as_dense_at_every_size(tmp_path):
    path = _small_symbolic(tmp_path)   # 8 rows run as dense, 256 as matmul (the target's dense_rows: 16)
    sess = ort.InferenceSession(path)
    for at, op in [({"batch": 2, "seq": 4}, "dense"), ({"batch": 4, "seq": 64}, "matmul")]:
        model = _compile(path, dims={"batch": (1, 4), "seq": (1, 64)}, at=at)
        assert [c["op"] for c in model.plan["calls"]][0] == op
        for shape in [(4, 64, 8), (1, 3, 8)]:
            x = RNG.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(model(x)[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_an_unbounded_dimension_is_an_error_that_names_it_and_the_fix(bert):
    path, _ = bert
    with pytest.raises(ModelError, match=r"input 'input_ids' has symbolic dimensions \['batch', 'sequence'\]; "
                                         r"give each a range, e\.g\. compile_model\(path, dims="):
        _compile(path)
    with pytest.raises(ModelError, match=r"symbolic dimensions \['batch'\]"):
        _compile(path, dims={"sequence": (1, 24)})
    with pytest.raises(ArgumentError, match=r"dims\['sequence'\] = \(24, 1\): give a range"):
        _compile(path, dims={"batch": (1, 2), "sequence": (24, 1)})
    with pytest.raises(ArgumentError, match=r"dims\['sequence'\] = \(0, 0\): give a range .* 1 <= hi"):
        _compile(path, dims={"batch": (1, 2), "sequence": (0, 0)})
    with pytest.raises(ModelError, match=r"dims names \['past'\], which no input of the model has \(its symbolic "
                                         r"dimensions: batch, sequence\)"):
        _compile(path, dims={"batch": (1, 2), "sequence": (1, 24), "past": (1, 8)})
    with pytest.raises(ArgumentError, match=r"at\['batch'\] = 1: .*schedule it at 2 or more"):
        _compile(path, dims={"batch": (1, 2), "sequence": (1, 24)}, at={"batch": 1})


def test_tunekit_compile_and_run_take_the_dimensions(gpt2, tmp_path, capsys):
    from tunekit.cli.main import main
    path, _ = gpt2
    out = str(tmp_path / "gpt2.tk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["compile", path, "-o", out, "--dims", "sequence=1:24", "--at", "sequence=16"]) == 0
    assert "gpt2.tk:" in capsys.readouterr().out
    assert main(["run", out, "--size", "sequence=5", "--repeat", "2"]) == 0
    assert "ms per run" in capsys.readouterr().out
    assert main(["compile", path, "-o", out, "--dims", "sequence=24"]) == 1
    assert "--dims sequence=24: write it NAME=LO:HI" in capsys.readouterr().err


def _small_symbolic(tmp_path) -> str:
    """x[batch, seq, 8] @ W[8, 16] + b, a softmax over the sequence: symbolic batch and sequence."""
    from checks import save_onnx
    from onnx import TensorProto, helper
    F = TensorProto.FLOAT
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Softmax", ["a"], ["y"], axis=1)]
    inits = {"w": RNG.standard_normal((8, 16)).astype(np.float32), "b": RNG.standard_normal(16).astype(np.float32)}
    return save_onnx(str(tmp_path / "small.onnx"), nodes, {"x": (["batch", "seq", 8], F)},
                     {"y": (["batch", "seq", 16], F)}, inits)


def test_a_small_symbolic_model_matches_onnxruntime_without_torch(tmp_path):
    path = _small_symbolic(tmp_path)
    model = _compile(path, dims={"batch": (1, 4), "seq": (1, 20)}, at={"batch": 2, "seq": 8})
    sess = ort.InferenceSession(path)
    for shape in [(2, 8, 8), (1, 1, 8), (4, 20, 8), (3, 13, 8)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(model(x)[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_recipe_tunes_a_model_at_the_sizes_it_names(tmp_path):
    from tunekit.plugin.registry import make_component
    from tunekit.recipe.model import TaskSpec
    path = _small_symbolic(tmp_path)
    for seqs, op in [([8, 32], "dense"), ([32, 8], "matmul")]:   # as the first sizes run it (8 rows: dense)
        entry = TaskSpec.model_validate({"model": path, "dims": {"batch": [1], "seq": seqs},
                                         "dim_weights": {"seq": [1, 3]}})
        entry.on_target(make_component("target", "x86"))
        products = {(t.op.name, t.args["M"]): t.weight for t in entry.tasks() if "M" in t.args}
        assert products == {(op, seqs[0]): 1, (op, seqs[1]): 3}
    with pytest.raises(Exception, match="give one weight per size of dims.seq"):
        TaskSpec.model_validate({"model": path, "dims": {"batch": [1], "seq": [8]}, "dim_weights": {"seq": [1, 2]}})
    with pytest.raises(Exception, match="goes with model"):
        TaskSpec.model_validate({"op": "matmul", "args": {"M": 8, "N": 8, "K": 8}, "dims": {"seq": [8]}})


def test_kernels_scheduled_at_several_sizes_run_at_the_nearest(tmp_path):
    import tunekit.runtime
    path = _small_symbolic(tmp_path)
    model = _compile(path, dims={"batch": (1, 4), "seq": (1, 64)}, at={"batch": 2, "seq": [12, 48]})
    assert [v["at"] for v in model.plan["variants"]] == [{"batch": 2, "seq": 12}, {"batch": 2, "seq": 48}]
    model.save(tmp_path / "small.tk")
    loaded = tunekit.runtime.load(tmp_path / "small.tk")
    sess = ort.InferenceSession(path)
    for shape, near in [((2, 3, 8), 12), ((1, 60, 8), 48), ((4, 20, 8), 12), ((3, 30, 8), 48)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        for net in (model, loaded):
            np.testing.assert_allclose(net(x)[0], want, rtol=1e-5, atol=1e-6)
            assert net.scheduled_at == {"batch": 2, "seq": near}


def test_a_cnn_with_a_symbolic_batch_matches_onnxruntime(tmp_path):
    # convolutions (blocked channels, their templates) with the batch a kernel argument
    from pathlib import Path
    model = onnx.load(str(Path(__file__).parent / "models" / "tiny_mobilenet_v2.onnx"))
    for v in [*model.graph.input, *model.graph.output]:
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    del model.graph.value_info[:]
    path = str(tmp_path / "mobilenet_batch.onnx")
    onnx.save(model, path)
    net = _compile(path, dims={"batch": (1, 4)}, at={"batch": 2})
    sess, x = ort.InferenceSession(path), model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim][1:]
    for batch in (2, 1, 3, 4):
        feed = RNG.standard_normal((batch, *shape)).astype(np.float32)
        np.testing.assert_allclose(net(feed)[0], sess.run(None, {x.name: feed})[0], rtol=1e-4, atol=1e-5)


def test_a_dimension_of_one_size_is_a_constant(tmp_path):
    path = _small_symbolic(tmp_path)
    model = _compile(path, dims={"batch": (1, 1), "seq": (1, 40)}, at={"seq": [16, 32]})
    assert model.dims == {"seq": (1, 40)} and model.inputs["x"] == ((1, "seq", 8), "float32")
    x = RNG.standard_normal((1, 13, 8)).astype(np.float32)
    np.testing.assert_allclose(model(x)[0], ort.InferenceSession(path).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
