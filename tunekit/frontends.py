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

    def load(self, path: str, dims: dict[str, int] | None = None) -> Graph:
        """Translate the model at `path` into a Graph: one node per model node, at the sizes
        `dims` (name -> int) gives its symbolic dimensions.

        A node is a tunekit op call (weights as constants in the layout the op
        declares) or a te call of the op library (`tunekit.graph.TeCall`, computed
        by `tunekit.topi`, its `pattern` saying what the passes may fold). Fold and
        fuse nothing: the core's passes do (`tunekit.deploy.plan.PASSES`); build it with
        `tunekit.graph.builder.GraphBuilder`. Give each
        Node the model's name and type for it (`name`, `kind`): the loader then checks
        every node's args and names the file and the node for a bad one.
        Raises:
            tunekit.errors.ModelError: the file cannot be read, holds a node this frontend does
                not support (name it, its type, and what is supported), or has a symbolic
                dimension `dims` does not size (name it, and `dims` as the fix).
        """
        raise NotImplementedError
