"""GPT-2 generating tokens with its key/value cache: a small GPT-2 exported with the cache
(symbolic "past" from 0 and "sequence"), compiled once, decodes greedily the tokens that
onnxruntime decodes running the same file step by step, saved and loaded too; compiled for
generation, each step appends the new entries to the cache in place; and the errors of a
model or sizes that cannot generate."""
from __future__ import annotations

import platform
import warnings

import numpy as np
import pytest
from conftest import require

import tunekit
from tunekit.errors import ArgumentError

onnx = require("onnx", "the generation claims")
require("onnxruntime", "the generation claims")
pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")
import transformer_nets  # noqa: E402  (examples/, on sys.path by conftest.py)

from tunekit.cli.run import onnxruntime_tokens  # noqa: E402
from tunekit.runtime.generate import cache_pairs, generate  # noqa: E402

# wider initial weights than transformers' (0.02): a small random model then varies its tokens
SIZE = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "vocab": 1000, "init": 0.3}
DIMS = {"dims": {"past": (0, 40), "sequence": (1, 16)}, "at": {"past": 12, "sequence": 4}}


def _compile(path: str, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no tuning record.*default config")
        return tunekit.compile_model(path, target="x86", **kw)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    for module in ("torch", "transformers", "onnxscript"):
        require(module, "the generation claims")
    return transformer_nets.gpt2_cache(str(tmp_path_factory.mktemp("gen") / "gpt2_cache.onnx"), 1, **SIZE)


@pytest.fixture(scope="module")
def gpt2(path):
    """Compiled for generation: the cache appended to in place."""
    return path, _compile(path, **DIMS, generation=True)


@pytest.fixture(scope="module")
def plain(path):
    """Compiled as exported: each step's Concat writes the whole present."""
    return path, _compile(path, **DIMS)


def _prompt(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, SIZE["vocab"], (1, n), dtype=np.int64)


def test_gpt2_with_its_cache_generates_the_tokens_onnxruntime_does(gpt2, plain):
    path, model = gpt2
    assert [p for p, _ in cache_pairs(model)][:2] == ["past_key_values.0.key", "past_key_values.0.value"]
    assert model.dims == {"past": (0, 40), "sequence": (1, 16)}
    for n, new in [(12, 24), (16, 25), (1, 8)]:
        want = onnxruntime_tokens(path, _prompt(n, n), new)
        for net in (model, plain[1]):
            out = generate(net, _prompt(n, n), new)
            np.testing.assert_array_equal(out.tokens, want, err_msg=f"{n} prompt tokens")
            assert len(out.token_s) == new - 1 and out.first_token_s > 0
        assert len(set(want.tolist())) > 2   # a model that varies its tokens, so the match says something


def test_compiled_for_generation_a_step_writes_only_the_new_entries(gpt2, plain):
    for net, appends in ((gpt2[1], True), (plain[1], False)):
        refs = {**net.plan["inputs"], **dict(net.plan["outputs"])}
        for past, present in cache_pairs(net):
            buffer = refs[present]["buffer"]
            writes = [c["args"][-1] for c in net.plan["calls"] if c["args"][-1].get("buffer") == buffer]
            if appends:   # the past in place, the only write the new tokens' rows after it
                assert refs[past]["buffer"] == buffer and net.inputs[past][0] == ("past", 1, 4, 16)
                assert [(w["offset"], w["shape"]) for w in writes] == [("256*past", ["sequence", 1, 4, 16])]
            else:         # the exported Concat: the whole present written anew
                assert refs[past]["buffer"] != buffer and [w["shape"] for w in writes] == [[1, 4, "past+sequence", 16]]


def test_the_cache_is_read_and_written_in_place(plain):
    _, model = plain
    past = np.random.default_rng(0).standard_normal((1, 4, 5, 16)).astype(np.float32)
    feeds = {name: past for name in model.inputs if "." in name}
    ids = _prompt(3)
    want = model(ids, **feeds)
    given = np.zeros(1 << 12, np.float32)   # larger than the present: its leading part is used
    outputs = model.run({"input_ids": ids}, {**feeds, "present.1.value": given})
    k = model.output_names.index("present.1.value")
    assert np.shares_memory(outputs[k], given) and outputs[k].shape == (1, 4, 8, 16)
    np.testing.assert_array_equal(given[:4 * 8 * 16].reshape(1, 4, 8, 16), want[k])
    np.testing.assert_array_equal(given[4 * 8 * 16:], 0)   # nothing written past it
    with pytest.raises(ArgumentError, match=r"has 256 bytes; the tensor it holds needs 2048"):
        model.run({"input_ids": ids}, {**feeds, "present.1.value": np.zeros(64, np.float32)})
    with pytest.raises(ArgumentError, match="no input or output 'present.9.key'"):
        model.run({"input_ids": ids}, {**feeds, "present.9.key": given})


def test_a_saved_model_generates_the_same_tokens(gpt2, tmp_path):
    import tunekit.runtime
    _, model = gpt2
    model.save(tmp_path / "gpt2.tk")
    loaded = tunekit.runtime.load(tmp_path / "gpt2.tk")
    np.testing.assert_array_equal(generate(loaded, _prompt(9), 12).tokens, generate(model, _prompt(9), 12).tokens)


def test_tunekit_generate_checks_its_tokens_against_onnxruntime(gpt2, capsys):
    from tunekit.cli.main import main
    path, _ = gpt2
    assert main(["generate", path, "--prompt-tokens", "6", "--new-tokens", "10"]) == 0
    out = capsys.readouterr().out
    assert "compiled" in out and "{'past': (0, 14), 'sequence': (1, 6)} for generation" in out
    assert "ms per token" in out and "the 10 tokens match onnxruntime's" in out


def test_sizes_that_cannot_generate_are_clear_errors(gpt2, tmp_path):
    with pytest.raises(ArgumentError, match=r"generation=True needs the cache's symbolic dimensions"):
        _compile(gpt2[0], generation=True)
    path, model = gpt2
    with pytest.raises(ArgumentError, match=r"20 prompt tokens and 4 new need .*'sequence' up to 20 .*compile it "
                                            r"with dims=\{'past': \(0, 22\), 'sequence': \(1, 20\)\}"):
        generate(model, _prompt(20), 4)
    with pytest.raises(ArgumentError, match=r"need the model's 'past' from 0 to 48"):
        generate(model, _prompt(10), 40)
    cacheless = _compile(path, dims={"past": (1, 8), "sequence": (1, 4)}, at={"past": 4, "sequence": 2})
    with pytest.raises(ArgumentError, match=r"'past' from 0 .*it has 1\.\.8"):
        generate(cacheless, _prompt(2), 2)
    bert = transformer_nets.export("bert", str(tmp_path / "bert.onnx"), 0, layers=1, hidden=32, heads=2,
                                   intermediate=64, seq=8, vocab=100)
    with pytest.raises(ArgumentError, match="the model has no key/value cache .*gpt2_cache"):
        generate(_compile(bert), _prompt(2), 2)
