"""Reading an ONNX file: decoded and checked, everything computed from constants and static
shapes folded into constants (Shape -> Gather -> Concat -> Reshape chains, ConstantOfShape,
Range, an attention mask's arithmetic), and every tensor's shape inferred and static."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tunekit.errors import ModelError
from tunekit.topi.quantize import dequantize_array, quantize_array

from .qoperator import as_qdq

REDO = "export the model to ONNX again (e.g. with torch.onnx.export)"
#: bytes above which an initializer's value is kept apart from the model (`_take_weights`)
_LARGE = 4096
#: what is never folded: a value that changes from run to run
_NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def node_name(n) -> str:
    return f"node {n.name or n.output[0]!r} ({n.op_type})"


def load(path: str, dims: dict | None = None):
    """The checked ONNX model at `path`, its QOperator nodes in the QDQ form (`qoperator.py`), its
    constants folded, with every tensor's shape inferred, its constants as arrays by name, and those
    folded from a DequantizeLinear, each with that node's inputs and axis (a quantized model's
    weights: the QDQ pass reads their integers). `dims` (name -> int) sizes its symbolic dimensions."""
    import onnx
    from google.protobuf.message import DecodeError
    try:
        with open(path, "rb") as f:
            empty = not f.read(1)
    except OSError as e:
        raise ModelError(f"{path}: cannot read the file: {e.strerror or e}") from None
    if empty:
        raise ModelError(f"{path}: the file is empty (0 bytes), not an ONNX model; {REDO}")
    try:
        model = onnx.load(path)
    except DecodeError:
        raise ModelError(f"{path}: not an ONNX model: it does not decode as one (the file is corrupt, truncated "
                         f"or in another format); {REDO}") from None
    except Exception as e:   # external data that cannot be read, or what else the onnx package raises
        raise ModelError(f"{path}: cannot read it as an ONNX model ({type(e).__name__}: "
                         f"{' '.join(str(e).split())}); {REDO}") from None
    if not model.ir_version:   # protobuf decodes some other files to an empty model
        raise ModelError(f"{path}: not an ONNX model: it holds no ONNX version or graph (the file is corrupt, "
                         f"truncated or in another format); {REDO}")
    _fix_dims(model, dims or {}, path)
    weights = _take_weights(model, path)
    try:
        onnx.checker.check_model(_checkable(model, weights))
        model = as_qdq(model, path)
        model, consts, dequantized = fold(onnx.shape_inference.infer_shapes(model), path, weights, bool(dims))
        return onnx.shape_inference.infer_shapes(model, strict_mode=True), consts, dequantized
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ModelError(f"{path}: not a valid ONNX model: {' '.join(str(e).split())}; {REDO} (a truncated or "
                         "edited file fails these checks)") from None


def _fix_dims(model, dims: dict, path: str) -> None:
    """Give the inputs' symbolic dimensions the sizes of `dims`; forget the others' (inference finds them)."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    named = {d.dim_param for v in inputs for d in v.type.tensor_type.shape.dim if d.dim_param}
    if unknown := sorted(set(dims) - named):
        raise ModelError(f"{path}: dims names {unknown}, which no input of the model has (its symbolic dimensions: "
                         f"{', '.join(sorted(named)) or 'none'})")
    for v in inputs:
        shape = v.type.tensor_type.shape.dim
        if names := [d.dim_param or "?" for d in shape if not d.HasField("dim_value") and d.dim_param not in dims]:
            raise ModelError(f"{path}: input {v.name!r} has symbolic dimensions {names}; give each a range, e.g. "
                             f"compile_model(path, dims={{{names[0]!r}: (1, 512)}}) (a recipe task's `dims`), or "
                             "export the model with fixed sizes")
        for d in shape:
            if d.dim_param:
                d.dim_value = int(dims[d.dim_param])
    for v in [*model.graph.output, *model.graph.value_info]:
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param:
                if d.dim_param in dims:
                    d.dim_value = int(dims[d.dim_param])
                else:
                    d.Clear()


def _take_weights(model, path: str) -> dict[str, np.ndarray]:
    """The initializers' values by name, the large ones' bytes then left out of `model`: onnx's checker
    and shape inference serialize the model they are given, and need their types and shapes only
    (BERT-base's 440 MB, each time)."""
    from onnx import numpy_helper
    values = {}
    for t in model.graph.initializer:
        try:
            values[t.name] = numpy_helper.to_array(t)
        except Exception as e:   # bytes that do not make the shape it says: a damaged file
            raise ModelError(f"{path}: not a valid ONNX model: initializer {t.name!r} does not hold a tensor of "
                             f"its shape ({type(e).__name__}: {e}); {REDO}") from None
        if values[t.name].nbytes > _LARGE:
            t.ClearField("raw_data")
    return values


def _checkable(model, weights: dict):
    """A copy of `model` for onnx's checker: the initializers `_take_weights` emptied as graph inputs
    of their type and shape (the checker wants an initializer's bytes; numpy read them already)."""
    from onnx import ModelProto, helper
    light = ModelProto()
    light.CopyFrom(model)   # cheap: the large bytes are gone
    g, inputs = light.graph, {v.name for v in light.graph.input}
    gone = [t for t in g.initializer if weights[t.name].nbytes > _LARGE]
    kept = [t for t in g.initializer if weights[t.name].nbytes <= _LARGE]
    del g.initializer[:]
    g.initializer.extend(kept)
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in gone
                   if t.name not in inputs)
    return light


def _initializer(value: np.ndarray, name: str):
    """An initializer of `value`: its bytes only when it is small (`_take_weights`)."""
    from onnx import TensorProto, helper, numpy_helper
    if value.nbytes <= _LARGE:
        return numpy_helper.from_array(value, name)
    return TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(value.dtype), dims=value.shape)


def constant_value(n, path: str) -> np.ndarray:
    """The value of the Constant node `n` (a tensor, or value_float(s) / value_int(s))."""
    from onnx import helper, numpy_helper
    a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
    if "value" in a:
        return numpy_helper.to_array(a["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in a:
            return np.array(a[key], dtype)
    raise ModelError(f"{path}: {node_name(n)} is not supported: a Constant of {', '.join(a) or 'no value'} "
                     "(supported: value, value_float(s), value_int(s))")


def _static_shapes(model) -> dict[str, tuple]:
    shapes = {}
    for v in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[v.name] = tuple(int(d.dim_value) for d in t.shape.dim)
    return shapes


def _shape_of(n, shape: tuple) -> np.ndarray:
    """A Shape node's value for an input of static `shape` (opset 15's start/end included)."""
    from onnx import helper
    a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
    return np.array(shape[slice(a.get("start", 0), a.get("end"))], np.int64)


def _gather_elements(n, data, index) -> list[np.ndarray]:
    axis = next((a.i for a in n.attribute if a.name == "axis"), 0) % data.ndim
    d = data.shape[axis]
    if index.size and not ((-d <= index).all() and (index < d).all()):
        raise ValueError(f"indices outside [{-d}, {d}) for axis {axis} of size {d}")
    # the output has the indices' shape: off the axis, they may be shorter than the data
    data = data[tuple(slice(None) if k == axis else slice(0, e) for k, e in enumerate(index.shape))]
    return [np.take_along_axis(data, np.where(index < 0, index + d, index), axis)]


def _quantize(n, x, scale, zero=None) -> list[np.ndarray]:
    return [quantize_array(x, scale, zero, next((a.i for a in n.attribute if a.name == "axis"), 1))]


def _dequantize(n, x, scale, zero=None) -> list[np.ndarray]:
    return [dequantize_array(x, scale, zero, next((a.i for a in n.attribute if a.name == "axis"), 1))]


# onnx.reference's GatherElements fails when the axis has over 64 entries (np.choose's limit);
# PyTorch's export of a BERT gathers its position ids from a [1, 512] constant. onnx.reference has
# no QuantizeLinear and DequantizeLinear before opset 19 (a QDQ model's weights are DequantizeLinear
# of constants)
_NUMPY = {"GatherElements": _gather_elements, "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize}


def _evaluate(n, values: list, opsets, path: str) -> list[np.ndarray]:
    """Run node `n` on constant `values` with onnx's reference implementation (numpy for the
    node types in `_NUMPY`)."""
    try:
        return _NUMPY[n.op_type](n, *values) if n.op_type in _NUMPY else _reference(n, values, opsets)
    except Exception as e:   # the evaluation's own errors: the node is bad
        raise ModelError(f"{path}: {node_name(n)}: computing it from its constant inputs failed "
                         f"({type(e).__name__}: {' '.join(str(e).split())})") from None


def _reference(n, values: list, opsets) -> list[np.ndarray]:
    """Node `n` on `values` by onnx.reference, in a model of that node alone."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    ins = [helper.make_tensor_value_info(f"in{k}", helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in enumerate(values) if v is not None]
    names = iter(f"in{k}" for k, v in enumerate(values) if v is not None)
    node = helper.make_node(n.op_type, [next(names) if v is not None else "" for v in values],
                            [f"out{k}" for k in range(len(n.output))], domain=n.domain)
    node.attribute.extend(n.attribute)
    outs = [helper.make_empty_tensor_value_info(f"out{k}") for k in range(len(n.output))]
    graph = helper.make_graph([node], "fold", ins, outs)
    model = helper.make_model(graph, opset_imports=opsets)
    got = ReferenceEvaluator(model).run(None, {f"in{k}": v for k, v in enumerate(values) if v is not None})
    return [numpy_helper.to_array(numpy_helper.from_array(np.asarray(v))) for v in got]


def fold(model, path: str, weights: dict | None = None, sized: bool = False):
    """Return `model` with every node computable at load time (its inputs constants, or a Shape
    or Size of a static shape) replaced by initializers, shapes re-inferred until nothing folds,
    its constants as arrays by name (the initializers, the folded values), and the folded
    DequantizeLinear outputs, each with (quantized, scale, zero point or "", axis). `weights`: the
    initializers' values, where the model's large ones hold no bytes (`_take_weights`).

    `sized`: the shapes are sizes given for symbolic dimensions, and one compiled model must serve
    every size. Then a broadcast (Expand) stays a node: its result would be a constant as large as
    the sizes. So does arithmetic of a tensor with a value read from a shape (positions after a
    cache: `arange(sequence) + past`): as a constant its values would follow no size."""
    import onnx
    g = model.graph
    consts = dict(weights) if weights is not None else _take_weights(model, path)   # read once: weights are large
    dequantized = {}
    of_shapes: set[str] = set()   # values computed from tensors' shapes
    while True:
        shapes = _static_shapes(model)
        folded, keep = {}, []
        for n in g.node:
            value = None
            if n.op_type == "Constant":
                value = [constant_value(n, path)]
            elif n.op_type in ("Shape", "Size") and n.input[0] in shapes:
                shape = shapes[n.input[0]]
                value = [_shape_of(n, shape) if n.op_type == "Shape" else np.array(int(np.prod(shape)), np.int64)]
            elif n.op_type not in _NOT_FOLDED and n.input and n.domain in ("", "ai.onnx") and \
                    all(not i or i in consts for i in n.input) and \
                    not (sized and _follows_a_size(n, consts, of_shapes)):
                value = _evaluate(n, [consts[i] if i else None for i in n.input], model.opset_import, path)
            if value is None:
                keep.append(n)
                continue
            for name, v in zip(n.output, value):
                consts[name] = folded[name] = v
            if n.op_type in ("Shape", "Size") or of_shapes.intersection(n.input):
                of_shapes.update(n.output)
            if n.op_type == "DequantizeLinear":
                axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
                dequantized[n.output[0]] = (*n.input, "")[:3] + (axis,)
        if not folded:
            return model, consts, dequantized
        used = {i for n in keep for i in n.input} | {o.name for o in g.output}
        del g.node[:]
        g.node.extend(keep)
        g.initializer.extend(_initializer(v, name) for name, v in folded.items() if name in used)
        del g.value_info[:]
        model = onnx.shape_inference.infer_shapes(model)
        g = model.graph


def _follows_a_size(n, consts: dict, of_shapes: set) -> bool:
    """Whether node `n`'s value would change with the sizes in a way a constant cannot: a broadcast
    to them, or arithmetic on a tensor by a value read from a shape."""
    if n.op_type == "Expand":
        return True
    return n.op_type in _ARITHMETIC and any(i in of_shapes and consts[i].size == 1 for i in n.input) and \
        any(consts[i].size > 1 for i in n.input if i)


_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div"})


def check_dtypes(g, path: str) -> None:
    """Refuse a model whose data is not float32 where it must be (inputs that are not indices,
    outputs, weights) or whose tensors have types tunekit's kernels cannot hold, naming the
    first such tensor."""
    from .context import ONNX_DTYPES
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.value_info, *g.output]}
    inits = {t.name for t in g.initializer}
    index = {TensorProto.INT64, TensorProto.INT32}
    fix = "export the model in float32 (in PyTorch: model.float() before torch.onnx.export)"
    for v in g.input:
        if v.name not in inits and types[v.name] != TensorProto.FLOAT and types[v.name] not in index:
            raise ModelError(f"{path}: input {v.name!r} is {_dtype_name(types[v.name])}; {_ONLY}: {fix}")
    for v in g.output:
        if types[v.name] != TensorProto.FLOAT:
            raise ModelError(f"{path}: output {v.name!r} is {_dtype_name(types[v.name])}; {_ONLY}: {fix}")
    found = [(f"initializer {t.name!r}", t.data_type) for t in g.initializer]
    found += [(f"tensor {o!r} of {node_name(n)}", types[o]) for n in g.node for o in n.output if o in types]
    for what, elem_type in found:
        if elem_type not in ONNX_DTYPES or elem_type in (TensorProto.FLOAT16, TensorProto.DOUBLE):
            raise ModelError(f"{path}: {what} is {_dtype_name(elem_type)}; {_ONLY}: {fix}")


_ONLY = "tunekit runs float32 models only for now (int64/int32 inputs and tensors inside for indices and masks)"


def _dtype_name(elem_type: int) -> str:
    names = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.STRING: "string"}
    return names.get(elem_type) or TensorProto.DataType.Name(elem_type).lower()
