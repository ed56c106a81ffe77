"""examples/networks.py's DQN, DCGAN generator and LSTM language model (the paper's other end-to-end
networks): each torch.nn module is seeded, exports to a valid fixed-shape ONNX file, and onnxruntime
runs the file to the module's output (bench/e2e.py times the module against the file)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import require

torch = require("torch", "the DQN, DCGAN and LSTM LM claims")
ort = require("onnxruntime", "the DQN, DCGAN and LSTM LM claims")
onnx = require("onnx", "the DQN, DCGAN and LSTM LM claims")
import networks  # noqa: E402  (examples/, on sys.path by conftest.py)

# the graph's inputs and outputs: name -> (shape, ONNX element type)
IO = {"dqn": ({"x": ([1, 4, 84, 84], onnx.TensorProto.FLOAT)}, {"y": ([1, 18], onnx.TensorProto.FLOAT)}),
      "dcgan": ({"z": ([1, 100, 1, 1], onnx.TensorProto.FLOAT)}, {"y": ([1, 3, 64, 64], onnx.TensorProto.FLOAT)}),
      "lstm_lm": ({"tokens": ([35, 1], onnx.TensorProto.INT64)}, {"y": ([35, 1, 10000], onnx.TensorProto.FLOAT)})}


def declared(values) -> dict:
    return {v.name: ([d.dim_value for d in v.type.tensor_type.shape.dim], v.type.tensor_type.elem_type)
            for v in values}


@pytest.mark.parametrize("net", list(IO))
def test_the_exported_file_runs_in_onnxruntime_to_the_modules_output(tmp_path, net):
    path = getattr(networks, net)(str(tmp_path / f"{net}.onnx"))
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert (declared(model.graph.input), declared(model.graph.output)) == IO[net]   # fixed shapes, no dynamic axes
    feeds = networks.inputs(net, seed=1)
    if net == "lstm_lm":
        assert feeds["tokens"].min() >= 0 and feeds["tokens"].max() < 10000
    (got,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    module = getattr(networks, f"{net}_module")()
    assert not module.training
    with torch.inference_mode():
        want = module(*map(torch.from_numpy, feeds.values())).numpy()
    assert np.ptp(want) > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.ptp(want))


@pytest.mark.parametrize("net", list(IO))
def test_the_seed_decides_the_weights(net):
    make = getattr(networks, f"{net}_module")
    a, b, c = make(0).state_dict(), make(0).state_dict(), make(1).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not any(torch.equal(a[k], c[k]) for k in a if a[k].dtype.is_floating_point)


def test_the_dcgan_batchnorms_have_running_statistics_to_fold():
    bns = [m for m in networks.dcgan_module().modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) == 4 and all(m.running_var.std() > 0.1 and m.running_mean.abs().max() > 0.1 for m in bns)


def test_there_is_no_onnx_helper_writer_for_them(tmp_path):
    with pytest.raises(ValueError, match="only 'torch'"):
        networks.dqn(str(tmp_path / "dqn.onnx"), exporter="onnx")


@pytest.mark.parametrize("net", list(IO))
def test_tunekit_compiles_the_network_and_matches_onnxruntime(tmp_path, net):
    import warnings

    import tunekit
    path = getattr(networks, net)(str(tmp_path / f"{net}.onnx"))
    feeds = networks.inputs(net, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: every kernel a default config
        model = tunekit.compile_model(path, target="x86")
    (got,) = model(**feeds)
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.ptp(want))
