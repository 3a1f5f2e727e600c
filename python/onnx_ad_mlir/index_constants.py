"""Folds small integer arithmetic on constants before shape inference.

Exporters compute index and shape vectors from constants with ops that ONNX
data propagation does not evaluate: PyTorch's legacy exporter of
nn.MultiheadAttention slices a shape at `Reshape(Mod(2, 3), [1])`. Shape
inference then loses the length of the sliced shape, the rank of the Reshape
it feeds and of everything after: reverse mode needs those ranks. Its F.pad
builds reflect/edge/wrap pads with ConstantOfShape, a Slice of step -1 and a
Transpose: those Pad rules need constant pads. Such nodes become the
Constants they compute, after which inference recovers the ranks.
Shape of values inference typed statically is such a constant too:
torch's TorchScript exporter writes `x.chunk(2, 1)` as Slice(x, 0,
(Shape(x)[1] + 1) / 2), which inference cannot type (its data propagation
stops at Div), and whose run-time bounds make the Slice's transpose a
scatter (2,769 reverse-mode nodes instead of 796 on torchvision's
shufflenet_v2_x0_5). Its expand(b, -1) targets, Where(Equal(s, -1), 1, s),
fold too (Hugging Face BERT: 354 reverse nodes instead of 215).
Only the main graph's integer (and boolean) vectors are folded (the weights
and every other value stay as given), after validation has accepted the model; a node
that does not evaluate cleanly (a zero divisor, an index out of range) is
left for the runtime.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from .validate import InitRow, NodeRow

_INT = {onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}
_MAX_ELEMENTS = 64  # shape and index vectors, never data
_SAME_TYPE = {"Add", "Sub", "Mul", "Mod", "Div", "Concat", "Equal", "Range"}


def _attr(attributes: list[onnx.AttributeProto], name: str, default=None):
    a = next((a for a in attributes if a.name == name), None)
    return default if a is None else onnx.helper.get_attribute_value(a)


def _reshape(a: np.ndarray, shape: np.ndarray, attrs) -> np.ndarray:
    target = [int(s) for s in shape]
    if not _attr(attrs, "allowzero", 0):
        target = [a.shape[i] if s == 0 else s for i, s in enumerate(target)]
    return a.reshape(target)


def _axes(inputs: list[np.ndarray], attrs) -> list[int]:
    return [int(v) for v in (inputs[1] if len(inputs) > 1 else _attr(attrs, "axes", []))]


def _unsqueeze(inputs: list[np.ndarray], attrs) -> np.ndarray:
    a, axes = inputs[0], _axes(inputs, attrs)
    rank = a.ndim + len(axes)
    return np.expand_dims(a, tuple(sorted(x % rank for x in axes)))


def _squeeze(inputs: list[np.ndarray], attrs) -> np.ndarray:
    a = inputs[0]
    if len(inputs) > 1 and inputs[1].size == 0:
        raise ValueError("empty axes: runtimes disagree")
    axes = _axes(inputs, attrs) if len(inputs) > 1 or _attr(attrs, "axes") else \
        [i for i, e in enumerate(a.shape) if e == 1]
    return np.squeeze(a, tuple(x % a.ndim for x in axes))


def _mod(inputs: list[np.ndarray], attrs) -> np.ndarray:
    a, b = inputs
    if not np.all(b != 0):
        raise ZeroDivisionError
    return np.fmod(a, b) if _attr(attrs, "fmod", 0) else np.mod(a, b)


def _div(inputs: list[np.ndarray], attrs) -> np.ndarray:
    # ONNX leaves the rounding of integer Div to the runtime (C's truncates,
    # Python's floors): exact quotients, or of non-negative operands, where
    # they agree (torch's chunk bounds: (n + 1) / 2)
    a, b = inputs
    if not np.all(b != 0) or np.any(a % b) and (np.any(a < 0) or np.any(b < 0)):
        raise ArithmeticError
    return a // b


def _slice(inputs: list[np.ndarray], attrs) -> np.ndarray:
    # Python's slices clamp out-of-range starts and ends as ONNX specifies
    a = inputs[0]
    if len(inputs) == 1:  # Slice-1: attributes
        starts, ends = _attr(attrs, "starts"), _attr(attrs, "ends")
        axes, steps = _attr(attrs, "axes"), None
    else:
        starts, ends = inputs[1], inputs[2]
        axes = inputs[3] if len(inputs) > 3 else None
        steps = inputs[4] if len(inputs) > 4 else None
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * a.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        index[int(axis) % a.ndim] = slice(int(start), int(end), int(step))
    return a[tuple(index)]


def _constant_of_shape(inputs: list[np.ndarray], attrs) -> np.ndarray:
    value = _attr(attrs, "value")
    fill = np.zeros(1, np.float32) if value is None else numpy_helper.to_array(value)
    if int(np.prod(inputs[0])) > _MAX_ELEMENTS:
        raise ValueError("not an index vector")
    return np.full([int(e) for e in inputs[0]], fill.reshape(-1)[0], fill.dtype)


def _range(inputs: list[np.ndarray], attrs) -> np.ndarray:
    if any(i.ndim for i in inputs) or inputs[2] == 0:
        raise ValueError("Range takes nonzero scalars")
    start, limit, delta = (int(i) for i in inputs)  # (Python's: no overflow)
    if -((start - limit) // delta) > _MAX_ELEMENTS:  # ceil((limit - start) / delta)
        raise ValueError("not an index vector")
    return np.arange(start, limit, delta, dtype=inputs[0].dtype)


def _cast(inputs: list[np.ndarray], attrs) -> np.ndarray:
    return inputs[0].astype(_INT[_attr(attrs, "to")])


_FOLDS: dict[str, Callable[[list[np.ndarray], list], np.ndarray]] = {
    "Add": lambda i, _: i[0] + i[1],
    "Sub": lambda i, _: i[0] - i[1],
    "Mul": lambda i, _: i[0] * i[1],
    "Neg": lambda i, _: -i[0],
    "Mod": _mod,
    "Div": _div,
    "Reshape": lambda i, attrs: _reshape(i[0], i[1], attrs),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda i, attrs: np.concatenate(i, _attr(attrs, "axis")),
    "Gather": lambda i, attrs: np.take(i[0], i[1], _attr(attrs, "axis", 0)),
    "Cast": _cast,
    "Slice": _slice,
    "Transpose": lambda i, attrs: np.transpose(i[0], _attr(attrs, "perm")),
    # torch's dynamo export of slice_scatter: ScatterND at Range(0, Shape(x)[i])
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    # torch's TorchScript export of expand(): Where(Equal(shape, -1), 1, shape)
    "Equal": lambda i, _: np.equal(i[0], i[1]),
    "Where": lambda i, _: _where(*i),
}


def _where(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype != b.dtype or c.dtype != np.bool_:
        raise TypeError("never numpy's type promotion")
    return np.where(c, a, b)


def _small_int(t: onnx.TensorProto) -> np.ndarray | None:
    if t.data_type not in _INT or t.data_location == onnx.TensorProto.EXTERNAL or \
            int(np.prod(t.dims)) > _MAX_ELEMENTS:
        return None
    try:
        return numpy_helper.to_array(t)
    except ValueError:  # bytes that do not fit the dims: the importer refuses them
        return None


def _constant(attrs: list[onnx.AttributeProto]) -> np.ndarray | None:
    for a in attrs:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return _small_int(a.t)
        if a.name == "value_int":
            return np.asarray(a.i, np.int64)
        if a.name == "value_ints" and len(a.ints) <= _MAX_ELEMENTS:
            return np.asarray(a.ints, np.int64)
    return None


def _extents(graph: onnx.GraphProto, overridable: set[str]) -> dict[str, list[int | None]]:
    """Per main-graph value of known rank, its extents as inference (or the
    declaration of an input) gives them, None where not a value; an
    initializer a graph input overrides has the input's."""
    shapes: dict[str, list[int | None]] = {}
    for t in graph.initializer:
        if t.name not in overridable:
            shapes[t.name] = list(t.dims)
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            shapes[v.name] = [d.dim_value if d.HasField("dim_value") else None
                              for d in t.shape.dim]
    return shapes


def _shape_part(inputs: list[np.ndarray], op: str, attrs) -> np.ndarray:
    """Gather or Slice of a shape some of whose extents are unknown (None):
    the picked ones, when all are known (Shape(x)[2] of a [batch, 16, 64] x)."""
    part = np.asarray(_FOLDS[op](inputs, attrs))
    if any(e is None for e in part.reshape(-1)):
        raise ValueError("an unknown extent")
    return part.astype(np.int64)


def fold(model: onnx.ModelProto, rows: list[NodeRow], inits: list[InitRow],
         constants: dict[str, np.ndarray | None] | None = None) -> onnx.ModelProto | None:
    """A copy of the model with the foldable nodes of its main graph (`rows`,
    `inits`: its node_fields, producers first, and initializer_fields)
    replaced by Constants; None when there are none (no copy is made).
    `constants` keeps the values of Constant nodes (None: not a small
    integer vector) for the next round of the same model."""
    constants = {} if constants is None else constants
    known: dict[str, np.ndarray] = {}
    overridable = {vi.name for vi in model.graph.input}  # initializers they name are defaults only
    for tensor, name, data_type, _ in inits:
        if data_type in _INT and name not in overridable:
            value = _small_int(tensor)
            if value is not None:
                known[name] = value
    extents = _extents(model.graph, overridable)
    partial: dict[str, np.ndarray] = {}  # Shapes with unknown extents (object arrays)
    folded: dict[str, onnx.NodeProto] = {}  # by output name (unique in a valid graph)
    for _, op, domain, inputs, outputs, name, _, attrs, _ in rows:
        if domain not in ("", "ai.onnx") or len(outputs) != 1:
            continue
        if op == "Constant":
            if outputs[0] not in constants:
                constants[outputs[0]] = _constant(attrs)
            value = constants[outputs[0]]
            if value is not None:
                known[outputs[0]] = value
            continue
        if op == "Shape":
            # (not Size: ONNX's own AffineGrid body tests Size(size) == 4 in
            # an If whose branches disagree on a rank, which ONNX Runtime then
            # folds into an invalid Range)
            dims = extents.get(inputs[0]) if len(inputs) == 1 else None
            if dims is None:
                continue
            # (Python's slice clamps start and end as Shape-15 specifies)
            dims = dims[_attr(attrs, "start", 0):_attr(attrs, "end", None)]
            if None in dims:
                partial[outputs[0]] = np.asarray(dims, dtype=object)
                continue
            value = np.asarray(dims, np.int64)
        else:
            rule = _FOLDS.get(op)
            if rule is None or not inputs:
                continue
            shape = partial.get(inputs[0]) if op in ("Gather", "Slice") else None
            rest = inputs[1:] if shape is not None else inputs
            if any(i not in known for i in rest):
                continue
            args = ([] if shape is None else [shape]) + [known[i] for i in rest]
            if op in _SAME_TYPE and len({a.dtype for a in args}) > 1:
                continue  # (validation refuses these) never numpy's type promotion
            try:
                value = np.asarray(rule(args, attrs) if shape is None else
                                   _shape_part(args, op, attrs))
            except Exception:  # noqa: BLE001 - left for the runtime to report
                continue
        if value.dtype.type not in (*_INT.values(), np.bool_) or value.size > _MAX_ELEMENTS:
            continue
        known[outputs[0]] = value
        folded[outputs[0]] = onnx.helper.make_node(
            "Constant", [], list(outputs), name=name,
            value=numpy_helper.from_array(value, outputs[0]))
    if not folded:
        return None
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if len(node.output) == 1 and node.output[0] in folded:
            node.CopyFrom(folded[node.output[0]])
    return copy
