"""The `onnx` frontend: ONNX model files (`.onnx`) into tunekit graphs (needs the `onnx` extra)."""
from __future__ import annotations

import tunekit
from tunekit.frontends import Frontend


class OnnxFrontend(Frontend):
    """Reads ONNX models: loaded, checked, constants folded, shapes inferred, and each node
    translated to a tunekit op or a te call of `tunekit.topi`."""
    name = "onnx"
    suffixes = (".onnx",)

    @classmethod
    def available(cls) -> str | None:
        try:
            import onnx  # noqa: F401
        except ImportError:
            return "onnx is not installed; install it with: pip install 'tunekit[onnx]'"
        return None

    def load(self, path: str, dims: dict | None = None):
        from .convert import convert
        return convert(path, dims)


@tunekit.hookimpl
def tunekit_frontends():
    return [OnnxFrontend]
