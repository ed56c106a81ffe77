"""A compiled graph laid out as the data `tunekit.runtime.Model` runs: every tensor placed
in a weight or in an activation buffer that is reused once its last reader has run, and
the calls of the nodes' kernels on them."""
from __future__ import annotations

import numpy as np

from tunekit.deploy.kernels import Kernel
from tunekit.graph import Graph
from tunekit.memory import empty


def lay_out(g: Graph, kernels: list[Kernel], symbols: list[str], uses: list[int]) -> tuple[dict, list[np.ndarray]]:
    """The plan of `g` (`tunekit.runtime.model.PLAN_KEYS`) and its weights (aligned copies).

    About the two largest activations are live at once. A view lives in its base's buffer,
    which lives from the first write of it or a view of it to the last read. The inputs and
    outputs have buffers of their own, which nothing else uses (a caller may give their arrays:
    `tunekit.runtime.Model.run`).

    Args:
        kernels: the distinct kernels the nodes run.
        symbols: their names in a linked library, in the same order.
        uses: per node of `g`, the index of its kernel.
    """
    last = {g.base(name): k for k, node in enumerate(g.nodes) for name in node.inputs}
    # the weights the nodes read (a frontend or layout pass may leave replaced ones in the graph)
    names = [name for name in dict.fromkeys([*last, *g.outputs]) if name in g.constants]
    weights = [_aligned(g.constants[name]) for name in names]
    weight = {name: k for k, name in enumerate(names)}
    sizes: list[int] = []      # bytes of each buffer
    free: list[int] = []       # buffers past their last reader, the most recently freed last
    raw: dict[str, int] = {}   # tensor -> the buffer it lives at the start of

    def ref(name: str, shape: tuple, dtype: str) -> dict:
        """Where tensor `name` lives, as an array of `shape` (the same size as it has); placed on first use."""
        if name in weight:
            return {"weight": weight[name], "shape": list(shape), "dtype": str(weights[weight[name]].dtype)}
        size, itemsize = int(np.prod(shape)), np.dtype(dtype).itemsize
        base, offset = (g.views[name][:2]) if name in g.views else (name, 0)
        if base not in raw:
            nbytes = int(np.prod(g.shapes[base])) * itemsize if base != name else size * itemsize
            fits = [] if base in kept else [k for k, b in enumerate(free) if sizes[b] >= nbytes]
            if fits:   # the smallest that fits; of equals, the most recently freed (still in cache)
                raw[base] = free.pop(min(fits, key=lambda k: (sizes[free[k]], -k)))
            else:
                raw[base] = len(sizes)
                sizes.append(nbytes)
        return {"buffer": raw[base], "offset": offset * itemsize, "shape": list(shape), "dtype": dtype}

    kept = {g.base(o) for o in [*g.inputs, *g.outputs]} | set(weight)   # never reused
    inputs = {name: ref(name, shape, dtype) for name, (shape, dtype) in g.inputs.items()}
    calls = []
    for k, node in enumerate(g.nodes):
        # a tensor may be read in another shape of the same size (a Flatten before a Gemm): a view
        params = kernels[uses[k]].params
        args = [ref(name, shape, dtype) for name, (_, shape, dtype) in zip(node.inputs, params)]
        args.append(ref(node.output, *params[-1][1:]))
        calls.append({"kernel": uses[k], "layer": node.name or node.output, "op": node.op, "args": args})
        free += [raw[b] for b in {g.base(name) for name in node.inputs} if last.get(b) == k and b not in kept]
    outs = {node.output: kernels[uses[k]].params[-1] for k, node in enumerate(g.nodes)}
    shapes = g.output_shapes or [outs[name][1] for name in g.outputs]
    # an output no node writes whole: a constant, or a tensor its views fill (an appended cache)
    dtype_of = lambda name: outs[name][2] if name in outs else g.dtypes.get(name) or str(g.constants[name].dtype)
    outputs = [[name, ref(name, shape, dtype_of(name))] for name, shape in zip(g.outputs, shapes)]
    table = [{"symbol": sym, "template": k.template, "flops": k.task.flops, "tuned": k.tuned,
              "params": [[n, list(shape), dtype] for n, shape, dtype in k.params]} for k, sym in zip(kernels, symbols)]
    return {"buffers": sizes, "inputs": inputs, "outputs": outputs, "input_bounds": dict(g.input_bounds),
            "kernels": table, "calls": calls}, weights


def _aligned(value: np.ndarray) -> np.ndarray:
    out = empty(value.shape, "uint8" if value.dtype == bool else str(value.dtype))
    out[...] = value
    return out
