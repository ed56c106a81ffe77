"""What a lowering of one ONNX node to te sees: its attributes, its inputs (te tensors, or the values of
those that are constants), its output shapes, and how to fail. A lowering is `fn(cx: NodeContext) ->
list[te.Tensor]` (one per output of the node) that reads the node and calls `tunekit.topi`, registered
through `lowerings` in `LOWERINGS` under the ONNX op type (see `lowerings.py`)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tunekit import te
from tunekit.errors import ArgumentError, ModelError
from tunekit.topi import elementwise
from tunekit.topi.elementwise import ident

#: the te dtype of each ONNX element type a tensor may have inside a graph
ONNX_DTYPES = {1: "float32", 11: "float64", 10: "float16", 7: "int64", 6: "int32", 9: "bool", 2: "uint8",
               3: "int8"}


class NodeContext:
    """One ONNX node being lowered.

    Args:
        op_type: the node's ONNX op type ("Add").
        name: its name, for messages and te tensor names.
        attrs: its attributes (`onnx.helper.get_attribute_value` of each).
        values: per input, a te.Tensor (data), a numpy array (a constant), or None (an
            absent optional input).
        out_shapes: the shape of each output (static: inferred at import).
        out_dtypes: the te dtype of each output.
        placeholder: makes the te placeholder through which a kernel reads constant input
            k (a weight); None: constants larger than one element are refused.
        where: the file, for messages.
    """

    def __init__(self, op_type: str, name: str, attrs: dict, values: list, out_shapes: list[tuple],
                 out_dtypes: list[str], placeholder: Callable[[int], te.Tensor] | None = None, where: str = ""):
        self.op_type, self.name, self.attrs, self.values = op_type, name, attrs, values
        self.out_shapes, self.out_dtypes = [tuple(s) for s in out_shapes], out_dtypes
        self._placeholder, self.where = placeholder, where

    def attr(self, key: str, default=None):
        """Return attribute `key` (bytes decoded to str), else `default`."""
        v = self.attrs.get(key, default)
        return v.decode() if isinstance(v, bytes) else v

    def has(self, k: int) -> bool:
        """Whether optional input `k` is given."""
        return k < len(self.values) and self.values[k] is not None

    def const(self, k: int) -> np.ndarray | None:
        """Return the value of input `k` if it is a constant (None if it is data or absent)."""
        v = self.values[k] if k < len(self.values) else None
        return v if isinstance(v, np.ndarray) else None

    def need_const(self, k: int, what: str) -> np.ndarray:
        """Return the value of input `k`, which must be a constant (`what` names it in the error)."""
        if (v := self.const(k)) is None:
            raise self.fail(f"its {what} (input {k}) must be a constant (computed from constants and static "
                            "shapes only)")
        return v

    def scalar(self, k: int, what: str):
        """Return the value of input `k`, a constant of one element (`what` names it in the errors)."""
        if (v := self.need_const(k, what)).size != 1:
            raise self.fail(f"its {what} (input {k}) has {v.size} elements; only a single value is supported")
        return v.reshape(()).item()

    def ints(self, k: int, name: str) -> list[int] | None:
        """Return the integers `name`: an attribute in older opsets, constant input `k` in newer; None if absent."""
        if name in self.attrs:
            return [int(v) for v in self.attrs[name]]
        return [int(v) for v in self.need_const(k, name).reshape(-1)] if self.has(k) else None

    def tensor(self, k: int) -> te.Tensor:
        """Return input `k` as a te tensor: data as it is; a one-element constant as a compute that
        returns it (inlined into its reader); a larger constant as a placeholder the kernel reads."""
        v = self.values[k]
        if isinstance(v, te.Tensor):
            return v
        if v.size == 1:
            return elementwise.full(v.shape, v.reshape(()).item(), str(v.dtype), f"{ident(self.name)}_c{k}")
        if self._placeholder is None:
            raise self.fail(f"its input {k} is a constant of {v.size} elements, which this lowering does not read")
        return self._placeholder(k)

    def fail(self, why: str) -> ModelError:
        """The error saying that this node is not supported, and why."""
        return ModelError(f"{self.where + ': ' if self.where else ''}node {self.name!r} ({self.op_type}) is not "
                          f"supported: {why}")


def attrs_of(node) -> dict:
    """The attributes of ONNX node `node` as Python values (strings decoded)."""
    from onnx import helper
    return {a.name: v.decode() if isinstance(v := helper.get_attribute_value(a), bytes) else v for a in node.attribute}


def lowerings(table: dict) -> dict:
    """Return `table` (op type -> lowering) with each lowering raising the ArgumentError of a
    `tunekit.topi` function it calls as the node's ModelError (`NodeContext.fail`)."""
    def translated(fn):
        def lower(cx: NodeContext) -> list[te.Tensor]:
            try:
                return fn(cx)
            except ArgumentError as e:
                raise cx.fail(str(e)) from e
        return lower
    return {op: translated(fn) for op, fn in table.items()}
