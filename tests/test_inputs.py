"""Every input validated before anything is measured: op arguments by their schemas,
per-target dtypes and memory, storable integers, and the arrays given to a kernel."""
from __future__ import annotations

import numpy as np
import pytest

import tunekit
from tunekit.cli import main as cli
from tunekit.errors import ArgumentError, RecipeError
from tunekit.testing import NullTarget

pytestmark = pytest.mark.usefixtures("null_target_plugin")


def problems(args, target="null") -> str:
    with pytest.raises(RecipeError) as e:
        tunekit.Recipe.from_dict({"target": target, "tasks": [{"op": "matmul", "args": args}]}, source="r.toml")
    return str(e.value)


@pytest.mark.parametrize("args, where, what", [
    ({"M": 0, "N": 4, "K": 4}, "tasks[0].args.M", "greater than or equal to 1 (got 0)"),
    ({"M": -3, "N": 4, "K": 4}, "tasks[0].args.M", "greater than or equal to 1"),
    ({"M": 2**63 - 1, "N": 4, "K": 4}, "tasks[0].args.M", "less than or equal to 2147483647"),
    ({"M": 4, "N": 4, "K": 4, "dtype": "float128"}, "tasks[0].args.dtype", "'float32'"),
    ({"M": 2**31 - 1, "N": 2**31 - 1, "K": 2**31 - 1}, "tasks[0].args", "do not fit 64-bit counters")])
def test_bad_op_arguments_name_the_file_and_field(args, where, what):
    msg = problems(args)
    assert msg.startswith(f"r.toml: {where}: ") and what in msg


def test_unsupported_dtype_and_too_large_buffers_are_refused_per_target(monkeypatch):
    monkeypatch.setattr(NullTarget, "dtypes", ("float32",))
    msg = problems({"M": 4, "N": 4, "K": 4, "dtype": "float64"})
    assert "r.toml: tasks[0].args.dtype: dtype 'float64' is not supported by target 'null' (supported: float32)" in msg
    monkeypatch.setattr(NullTarget, "memory_bytes", lambda self: 1 << 20)
    msg = problems({"M": 1024, "N": 1024, "K": 4})
    assert "r.toml: tasks[0].args: the arrays of" in msg and "more than the 0.0 GiB of memory of target 'null'" in msg


def test_the_cli_and_the_library_refuse_bad_arguments_before_measuring(tmp_path, capsys):
    db = tmp_path / "t.db"
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'target = "null"\n[[tasks]]\nop = "matmul"\nargs = {{M = 0, N = 4, K = 4}}\n'
                      f'[database]\npath = "{db}"\n')
    for command in ("validate", "tune"):
        assert cli.main([command, str(recipe)]) == 1
        err = capsys.readouterr().err
        assert f"{recipe}: tasks[0].args.M:" in err and "Traceback" not in err
    with pytest.raises(RecipeError, match=r"tunekit.tune\(\): tasks\[0\].args.M"):
        tunekit.tune([{"op": "matmul", "args": {"M": 0, "N": 4, "K": 4}}], target="null", database=str(db))
    with pytest.raises(ArgumentError, match="op 'matmul': args.dtype"):
        tunekit.Task("matmul", {"M": 4, "N": 4, "K": 4, "dtype": "float128"})
    assert not db.exists()


def test_a_built_kernel_refuses_wrong_arrays():
    pytest.importorskip("llvmlite")
    args = {"M": 8, "N": 6, "K": 4}
    with pytest.raises(ArgumentError, match="args.K"):
        tunekit.build("matmul", {**args, "K": 0}, target="x86")
    kernel = tunekit.build("matmul", args, target="x86")
    A, B, C = tunekit.empty((8, 4)), tunekit.empty((4, 6)), tunekit.empty((8, 6))
    A[...], B[...] = np.random.rand(8, 4), np.random.rand(4, 6)
    kernel(A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    for bad, what in [((A, B), "takes 3 arrays"), ((A, B, np.zeros((8, 6))), "argument 2 (C) must be a C-contiguous "
                      "float32 array of shape [8, 6]; got a float64"), ((B, A, C), "argument 0 (A)"),
                      ((A, np.asfortranarray(B), C), "not C-contiguous")]:
        with pytest.raises(ArgumentError, match=what.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            kernel(*bad)


def test_a_built_kernel_refuses_a_read_only_output():
    pytest.importorskip("llvmlite")
    kernel = tunekit.build("matmul", {"M": 8, "N": 6, "K": 4}, target="x86")
    A, B, C = tunekit.empty((8, 4)), tunekit.empty((4, 6)), tunekit.empty((8, 6))
    A.flags.writeable = B.flags.writeable = False   # read-only inputs are fine
    C.flags.writeable = False
    C_before = C.copy()
    with pytest.raises(ArgumentError, match=r"argument 2 \(C\) is an output, but the array is read-only"):
        kernel(A, B, C)
    np.testing.assert_array_equal(C, C_before)
    C.flags.writeable = True
    kernel(A, B, C)
