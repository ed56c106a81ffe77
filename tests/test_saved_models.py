"""Saved models (`CompiledModel.save`, `tunekit compile`) run by `tunekit.runtime` alone: the
same outputs as the compiled model, bit for bit; a numpy-only environment; clear errors for
a file that is corrupt, truncated, for another architecture or for CPU features this one
lacks; the same bytes from the same model and database."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import require

import tunekit
import tunekit.deploy.kernels as deploy_kernels
import tunekit.runtime
from tunekit.runtime import ArtifactError, artifact, host

pytest.importorskip("llvmlite")
require("onnx", "saved models of ONNX files")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")
import networks  # noqa: E402  (examples/, on sys.path by conftest.py)
from small_net import small_net  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def compiled(path: str, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no tuning record.*default config")
        return tunekit.compile_model(path, **kw)


def image(net) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(net.inputs["x"][0]).astype(np.float32)


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """(the ONNX file, its compiled model, the model saved): ResNet-18 at 32x32, untuned."""
    d = tmp_path_factory.mktemp("resnet")
    path = networks.resnet18(str(d / "resnet18.onnx"), size=32, exporter="onnx")
    net = compiled(path)
    net.save(d / "resnet18.tk")
    return path, net, str(d / "resnet18.tk")


@pytest.fixture
def small(tmp_path) -> str:
    """A small net saved: its .tk file."""
    net = compiled(small_net(str(tmp_path / "small.onnx"), size=16))
    net.save(tmp_path / "small.tk")
    return str(tmp_path / "small.tk")


def test_a_saved_resnet18_gives_the_compiled_models_outputs_exactly(resnet):
    _, net, saved = resnet
    loaded = tunekit.runtime.load(saved)
    x = image(net)
    assert len(net.kernels) >= deploy_kernels._PARALLEL_MIN   # built by the build pool's workers
    for a, b in zip(net(x), loaded(x=x)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert loaded.inputs == net.inputs and loaded.weight_bytes == net.weight_bytes
    assert [r["layer"] for r in loaded.profile(repeat=1)] == [r["layer"] for r in net.profile(repeat=1)]
    assert loaded.header["target"] == "x86" and loaded.header["tunekit"] == tunekit.__version__
    assert "sse2" in loaded.header["features"] and not host.missing_features(loaded.header["features"])


def test_the_weights_are_mapped_from_the_file_not_copied(resnet):
    loaded = tunekit.runtime.load(resnet[2])
    weights = loaded._weights
    assert weights and all(not w.flags.writeable and w.base is not None for w in weights)
    assert all(w.ctypes.data % 64 == 0 for w in weights)


def test_the_same_model_and_database_give_the_same_bytes(resnet, tmp_path, monkeypatch):
    """Compiled again, in this process instead of the build pool's workers: the same file."""
    path, _, saved = resnet
    monkeypatch.setattr(deploy_kernels, "_PARALLEL_MIN", 10**9)
    compiled(path).save(tmp_path / "again.tk")
    assert (tmp_path / "again.tk").read_bytes() == Path(saved).read_bytes()


def test_a_saved_bert_gives_the_compiled_models_outputs_exactly(tmp_path):
    for module in ("torch", "transformers", "onnxscript"):
        require(module, "the BERT claims")
    import transformer_nets
    size = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "seq": 16}
    path = transformer_nets.export("bert", str(tmp_path / "bert.onnx"), 0, **size)
    net = compiled(path)
    net.save(tmp_path / "bert.tk")
    loaded = tunekit.runtime.load(tmp_path / "bert.tk")
    feeds = transformer_nets.inputs("bert", 0, **size)
    assert loaded.input_bounds == net.input_bounds
    for a, b in zip(net(**feeds), loaded(**feeds)):
        assert np.array_equal(a, b)


def _rewritten(src: str, dst: Path, **changes) -> str:
    """The saved model `src` written again at `dst` with header fields changed."""
    header, library, weights = artifact.read(src)
    artifact.write(str(dst), {**header, **changes}, library, weights)
    return str(dst)


def test_a_cpu_without_a_feature_the_kernels_use_is_refused_by_name(small, tmp_path):
    header = artifact.read(small)[0]
    absent = next(f for f in ("amx-fp16", "avx512fp16", "amx-bf16", "avx10.2") if host.missing_features([f]))
    edited = _rewritten(small, tmp_path / "edited.tk", features=[*header["features"], absent])
    with pytest.raises(ArtifactError, match=rf"edited.tk was compiled for x86_64 .*lacks: {absent}"):
        tunekit.runtime.load(edited)
    tunekit.runtime.load(_rewritten(small, tmp_path / "same.tk"))   # rewritten alone, it loads


def test_a_model_for_another_architecture_is_refused(small, tmp_path):
    with pytest.raises(ArtifactError, match=r"compiled for aarch64 .*this machine is x86_64"):
        tunekit.runtime.load(_rewritten(small, tmp_path / "arm.tk", machine="aarch64"))


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:len(b) // 2], r"truncated: its (library|weights) section ends at byte \d+, the file has \d+ bytes"),
    (lambda b: b[:100], r"truncated: its header needs"),
    (lambda b: b[:10], r"too short to be a tunekit model file"),
    (lambda b: b[:-5] + bytes([b[-5] ^ 1]) + b[-4:], r"corrupt: its weights section does not match its checksum"),
    (lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:], r"corrupt header \(its checksum does not match\)"),
    (lambda b: b"PK\x03\x04" + b[4:], r"not a tunekit model file"),
    (lambda b: b[:8] + bytes([9]) + b[9:], r"a model file of format 9; this tunekit reads format 1"),
])
def test_a_damaged_file_is_a_clear_error_naming_it(small, tmp_path, damage, message):
    bad = tmp_path / "bad.tk"
    bad.write_bytes(damage(Path(small).read_bytes()))
    with pytest.raises(ArtifactError, match=rf"^{bad}: .*{message}"):
        tunekit.runtime.load(bad)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ArtifactError, match=r"nothing.tk: cannot read it: No such file"):
        tunekit.runtime.load(tmp_path / "nothing.tk")


def test_the_runtime_runs_with_numpy_alone_in_a_fresh_environment(resnet, tmp_path):
    """A virtual environment holding numpy and tunekit installed with `pip install --no-deps`
    (no llvmlite, onnx, pydantic or pluggy): the saved model loads and gives the outputs."""
    _, net, saved = resnet
    x = image(net)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", net(x)[0])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path("
                                "'purelib'))"], check=True, capture_output=True, text=True).stdout.strip())
    here = Path(sysconfig.get_path("platlib"))
    for name in ("numpy", "numpy.libs"):   # numpy as this interpreter has it
        if (here / name).exists():
            os.symlink(here / name, site / name)
    src = tmp_path / "src"   # setuptools writes build/ into the tree it builds: a copy
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "tunekit", "plugins"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
            ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir()
                                        else {}))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", "--target", str(site), str(src)], check=True)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        for name in ("pydantic", "pluggy", "llvmlite", "onnx"):
            try:
                __import__(name)
                raise SystemExit(name + " is installed here")
            except ImportError:
                pass
        import tunekit.runtime
        net = tunekit.runtime.load({saved!r})
        y = net(np.load({str(tmp_path / 'x.npy')!r}))[0]
        assert np.array_equal(y, np.load({str(tmp_path / 'y.npy')!r})), "outputs differ"
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pluggy", "llvmlite", "onnx")))
        print(tunekit.runtime.__file__)
    """)
    done = subprocess.run([venv / "bin" / "python", "-I", "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    modules, where = done.stdout.splitlines()
    assert modules == "[]" and where.startswith(str(site))


def test_tunekit_compile_writes_a_file_that_tunekit_run_runs(tmp_path, capsys):
    from tunekit.cli.main import main
    path = small_net(str(tmp_path / "small.onnx"), size=16)
    assert main(["compile", path, "-o", str(tmp_path / "small.tk")]) == 0
    assert "small.tk: 5 kernels" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "small.tk"), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "ms per run" in out and "a saved model of small.onnx" in out
