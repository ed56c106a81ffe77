"""The Frontend contract: turn a model file into a `tunekit.graph.Graph`.

`tunekit.compile_model(path, ...)` and `tunekit.extract_tasks(path)` pick the
frontend whose `suffixes` hold the file's suffix; the built-in `onnx` frontend
reads `.onnx` files (the `onnx` extra).
"""
from __future__ import annotations

from typing import ClassVar

from tunekit.component import Component
from tunekit.graph import Graph


class Frontend(Component):
    """Reads one kind of model file."""

    #: file suffixes this frontend reads, lower case with the dot (".onnx")
    suffixes: ClassVar[tuple[str, ...]] = ()

    def load(self, path: str) -> Graph:
        """Read the model at `path` into a Graph of tunekit ops.

        Weights become constants in the layouts the ops declare (transformed once
        here); BatchNormalization-like layers are folded, and what follows an
        anchor op (bias, residual add, activation) is fused into its epilogue.
        Give each Node the model's name and type for it (`name`, `kind`): the loader
        then checks every node's args and names the file and the node for a bad one.
        Raises:
            tunekit.errors.ModelError: the file cannot be read, or holds a node
                this frontend does not support (name it, its type, and what is supported).
        """
        raise NotImplementedError
