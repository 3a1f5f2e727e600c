"""Emitting onnx ops from derivative rules.

The builder inserts at the ambient `ir.InsertionPoint`, picks the op version
matching the module's opset (rules are written once, against ONNX semantics),
computes static result types where it can, and knows the derivative layout:
every tangent or cotangent carries one leading direction axis, so a value of
shape S has derivatives of shape [k] + S, with k the number of seeds.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

import numpy as np
import onnx
from mlir import ir

from onnx_ad_mlir import _op_table
from onnx_ad_mlir.errors import UnsupportedOp
from onnx_ad_mlir.tensors import dense_floats, imported_array

from . import symdims

DYN = ir.ShapedType.get_dynamic_size()
_READING: set = set()  # values whose shape Builder.shape is reading off others
Dims = list  # list[int | None]; None is an unknown extent


# type -> static dims, for one context at a time (types are uniqued per
# context and compare by address: entries must not outlive their context)
_DIMS: dict = {}
_DIMS_CONTEXT: list = [None]


def _current(ctx: ir.Context) -> None:
    """Empties the type and attribute caches when `ctx` is not the one they
    belong to (and, on a miss, when one grew large: _bounded)."""
    if ctx is not _DIMS_CONTEXT[0]:
        _DIMS.clear()
        _TYPES.clear()
        _ATTRS.clear()
        _DIMS_CONTEXT[0] = ctx


def _bounded(cache: dict) -> dict:
    if len(cache) > 4096:
        cache.clear()
    return cache


def dims(value_or_type: ir.Value | ir.Type) -> Dims | None:
    """Static dims (None where unknown), or None for an unranked tensor."""
    t = value_or_type.type if isinstance(value_or_type, ir.Value) else value_or_type
    if t.context is not _DIMS_CONTEXT[0]:
        _current(t.context)
    hit = _DIMS.get(t)
    if hit is not None:
        return list(hit)
    if not isinstance(t, ir.RankedTensorType):
        return None
    d = tuple(None if e == DYN else e for e in t.shape)
    _bounded(_DIMS)[t] = d
    return list(d)


def rank(value: ir.Value) -> int | None:
    d = dims(value)
    return None if d is None else len(d)


def element_type(value: ir.Value) -> ir.Type:
    return value.type.element_type


# (dims, element type) -> tensor type, for the context of _DIMS (rules ask
# for the same few types thousands of times; each get is a binding call)
_TYPES: dict = {}
# Python value -> attribute (constants' and ops' attributes), and constant
# attribute -> its integers; attributes are immutable and uniqued per context
_ATTRS: dict = {}


def _cached_attr(key: tuple, make: Callable[[], object], ctx: ir.Context | None = None):
    _current(ctx or ir.Context.current)
    hit = _ATTRS.get(key)
    if hit is None:
        _bounded(_ATTRS)[key] = hit = make()
    return hit


def tensor_type(shape: Dims | None, elem: ir.Type) -> ir.Type:
    key = (None if shape is None else tuple(shape), elem)
    if elem.context is not _DIMS_CONTEXT[0]:
        _current(elem.context)
    hit = _TYPES.get(key)
    if hit is None:
        hit = ir.UnrankedTensorType.get(elem) if shape is None else \
            ir.RankedTensorType.get([DYN if d is None else d for d in shape], elem)
        _bounded(_TYPES)[key] = hit
    return hit


# The element types derivatives are taken in: those ONNX's arithmetic ops
# compute in. The float8 and float4 types are storage for quantized values:
# a value of one is piecewise constant in what it was made from (zero
# derivative, as through an integer), and no arithmetic op takes one.
_DIFFERENTIABLE = (ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type)


def is_float(value: ir.Value) -> bool:
    t = value.type
    return isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)) and \
        isinstance(t.element_type, _DIFFERENTIABLE)


_FLOAT_ELEMENTS = re.compile(r"[<x](?:b?f16|f32|f64)>")


def carries_float(value: ir.Value) -> bool:
    """Whether a derivative can flow through `value`: a float tensor, or a
    sequence or optional of float tensors (which get no tangents, so an
    active one must be refused, not read as a constant)."""
    if is_float(value):
        return True
    t = value.type
    if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
        return False
    text = str(t)
    return text.startswith(("!onnx.Seq<", "!onnx.Opt<")) and \
        _FLOAT_ELEMENTS.search(text) is not None


def broadcast_dims(*shapes: Dims | None) -> Dims | None:
    """ONNX multidirectional broadcasting of static dims (None = unknown)."""
    if any(s is None for s in shapes):
        return None
    if len(shapes) == 2:
        return _broadcast2(shapes[0], shapes[1])
    out: Dims = []
    for i in range(max(len(s) for s in shapes)):
        ext = [s[len(s) - 1 - i] for s in shapes if i < len(s)]
        known = {e for e in ext if e is not None and e != 1}
        if len(known) > 1:
            raise UnsupportedOp(f"shapes {shapes} do not broadcast")
        if known:
            out.append(known.pop())
        elif any(e is None for e in ext):
            out.append(None)
        else:
            out.append(1)
    return out[::-1]


def _broadcast2(a: Dims, b: Dims) -> Dims:
    """broadcast_dims of two shapes, per axis pair (the common case)."""
    if a == b:
        return list(a)
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    out: Dims = []
    for x, y in zip(a, b):
        if x == y or y == 1 or y is None and x != 1:
            out.append(x)
        elif x == 1 or x is None:
            out.append(y)
        else:
            raise UnsupportedOp(f"shapes {[a, b]} do not broadcast")
    return out


def i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def ints_attr(values: Iterable[int]) -> ir.ArrayAttr:
    """An INTS attribute (ArrayAttr of i64 IntegerAttr), as the importer makes them."""
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64(), int(v)) for v in values])


def _attr(value: object) -> ir.Attribute:
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, bool) or isinstance(value, (int, np.integer)):
        return _cached_attr(("si64", int(value)), lambda: ir.IntegerAttr.get(
            ir.IntegerType.get_signed(64), int(value)))
    if isinstance(value, float):
        return ir.FloatAttr.get_f32(value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, np.integer)) for v in value):
            key = tuple(int(v) for v in value)
            return _cached_attr(("ints_attr", key), lambda: ints_attr(key))
        if all(isinstance(v, float) for v in value):
            return ir.ArrayAttr.get([ir.FloatAttr.get_f32(v) for v in value])
    raise TypeError(f"no attribute kind for {value!r}")


def attribute(op: ir.Operation, name: str):
    """An attribute of an onnx op as a Python value, the schema default if absent."""
    if name in op.attributes:
        a = op.attributes[name]
        if isinstance(a, ir.IntegerAttr):
            return a.value
        if isinstance(a, ir.FloatAttr):
            return a.value
        if isinstance(a, ir.StringAttr):
            return a.value
        if isinstance(a, ir.ArrayAttr):
            return [x.value for x in a]
        return a
    entry = _op_table.OPS[op.name.removeprefix("onnx.")]["attributes"].get(name)
    return None if entry is None else entry[2]


def verbatim_attributes(op: ir.Operation, drop: tuple = ()) -> dict:
    """The op's ONNX attributes: not the passes' own marks (dotted names,
    e.g. the region reversal's tag on the op computing a branch's yield,
    which a copy on other operands must not carry)."""
    attrs = op.attributes
    named = [attrs[i] for i in range(len(attrs))]
    return {na.name: na.attr for na in named if na.name not in drop and "." not in na.name}


def has_attribute(op: ir.Operation, name: str) -> bool:
    """Whether the op's schema version has the attribute (set or defaulted)."""
    return name in _op_table.OPS[op.name.removeprefix("onnx.")]["attributes"]


def axis_attribute(op: ir.Operation, r: int | None, name: str = "axis") -> int:
    """The op's axis in [0, r): the validator checks it against declared
    ranks; a rank known only after import (a Loop result's) is checked here."""
    a = attribute(op, name)
    if r is not None and not -r <= a < r:
        raise UnsupportedOp(f"{name} {a} is out of range for a rank-{r} operand")
    if a < 0:
        if r is None:
            raise UnsupportedOp(f"negative {name} needs the operand's rank")
        a += r
    return a


def known_rank(values) -> int | None:
    """The rank of the first ranked value (Concat's operands and result share it)."""
    return next((rank(v) for v in values if rank(v) is not None), None)


def op_type(op: ir.Operation) -> str:
    """The ONNX op type of an onnx-dialect op (`onnx.ReduceSumV11` -> `ReduceSum`)."""
    return _op_table.OPS[op.name.removeprefix("onnx.")]["op_type"]


_RESOLVED: dict = {}


def resolve(op_type_: str, opset: int) -> str:
    """The MLIR op name implementing `op_type_` at `opset`."""
    hit = _RESOLVED.get((op_type_, opset))
    if hit is not None:
        return hit
    _RESOLVED[(op_type_, opset)] = name = _resolve(op_type_, opset)
    return name


def _resolve(op_type_: str, opset: int) -> str:
    chosen = None
    for since, name in _op_table.VERSIONS[op_type_]:
        if since <= opset:
            chosen = name
    if chosen is None:
        raise UnsupportedOp(f"{op_type_} does not exist at opset {opset}")
    return chosen


_PADDING: dict = {}


def _padding(op_type_: str, opset: int, n: int) -> tuple[str, int]:
    """("onnx." + the op name at `opset`, how many None operands to append
    after `n` given ones: the schema's trailing optional inputs)."""
    key = (op_type_, opset, n)
    hit = _PADDING.get(key)
    if hit is None:
        name = resolve(op_type_, opset)
        schema_inputs = _op_table.OPS[name]["inputs"]
        missing = 0
        if n < len(schema_inputs) and all(kind == "optional" for _, kind in schema_inputs[n:]):
            missing = len(schema_inputs) - n
        _PADDING[key] = hit = ("onnx." + name, missing)
    return hit


_BFLOAT16_OPS: dict[tuple[str, int], bool] = {}


def takes_bfloat16(op_type_: str, opset: int) -> bool:
    """Whether the op at `opset` has a bfloat16 version (most from opset 13,
    Where from 16)."""
    key = (op_type_, opset)
    ok = _BFLOAT16_OPS.get(key)
    if ok is None:
        schema = onnx.defs.get_schema(op_type_, opset, "")
        ok = _BFLOAT16_OPS[key] = any("tensor(bfloat16)" in c.allowed_type_strs
                                      for c in schema.type_constraints)
    return ok


def _check_bfloat16(op_type_: str, opset: int) -> None:
    """A derivative needing an op on bfloat16 that the opset lacks is
    refused, not exported invalid."""
    if not takes_bfloat16(op_type_, opset):
        raise UnsupportedOp(f"its derivative needs {op_type_} on bfloat16, which opset {opset} "
                            "does not have")


def _expand_before_8(b: "Builder", operands: Sequence[ir.Value], result_type: ir.Type,
                     **_) -> ir.Value:
    """Expand before opset 8: x plus zeros of the target shape (a [1, ..., 1]
    zero tiled by the shape; Add broadcasts both ways, as Expand does).
    Exact, but that -0.0 becomes +0.0."""
    x, shape = operands
    sd = dims(shape)
    if sd is None or len(sd) != 1 or sd[0] is None:
        raise UnsupportedOp("Expand before opset 8 needs the length of its target shape")
    r = sd[0]
    one = b.reshape(b.scalar(0.0, x), [1] * r, [1] * r)
    zeros = b.create("Tile", [one, shape], [tensor_type(dims(result_type), element_type(x))])[0]
    return b.create("Add", [x, zeros], [result_type])[0]


def _sign_before_9(b: "Builder", operands: Sequence[ir.Value], result_type: ir.Type,
                   **_) -> ir.Value:
    """Sign before opset 9: (x > 0) - (x < 0), as 0/1 of x's type (NaN: 0)."""
    x, = operands
    zero = b.scalar(0.0, x)
    pos = b.cast_like(b.compare("Greater", x, zero), x)
    return b.create("Sub", [pos, b.cast_like(b.compare("Less", x, zero), x)], [result_type])[0]


def _variadic_before_8(b: "Builder", op_type_: str, operands: Sequence[ir.Value],
                       result_type: ir.Type) -> ir.Value:
    """Sum, Mean, Max, Min before opset 8 take operands of one shape only:
    Sum and Mean as Adds (which broadcast from opset 7), Max and Min on
    operands brought to the result's shape (_expand_before_8)."""
    if all(v.type == result_type for v in operands):
        return b.create(op_type_, list(operands), [result_type])[0]
    if op_type_ in ("Sum", "Mean"):
        out = operands[0]
        for v in operands[1:]:
            out = b.create("Add", [out, v], [result_type])[0]
        if op_type_ == "Mean":
            out = b.create("Div", [out, b.scalar(float(len(operands)), out)], [result_type])[0]
        return out
    r = rank(result_type)
    if r is None:
        raise UnsupportedOp(f"{op_type_} of operands of different shapes before opset 8 "
                            "needs the rank of its result")
    total = operands[0]
    for v in operands[1:]:  # (the shape only: an overflow to inf does not matter)
        total = b.create("Add", [total, v], [result_type])[0]
    shape = b.op("Shape", [total], tensor_type([r], ir.IntegerType.get_signless(64)))
    full = [_expand_before_8(b, [v, shape], result_type) for v in operands]
    return b.create(op_type_, full, [result_type])[0]


def _scatter_elements_before_11(b: "Builder", operands: Sequence[ir.Value],
                                result_type: ir.Type, **attrs) -> ir.Value:
    """ScatterElements without reduction before opset 11: Scatter (opsets 9
    and 10), the same op under its older name."""
    if attrs.get("reduction", "none") != "none":
        raise UnsupportedOp("a scatter-add needs ScatterElements' reduction (opset >= 16)")
    return b.create("Scatter", list(operands), [result_type], axis=attrs.get("axis", 0))[0]


def onehot(b: "Builder", idx: ir.Value, depth: int | ir.Value, like: ir.Value,
           axis: int = -1) -> ir.Value:
    """OneHot(idx, depth) as 0/1 of like's element type (a new axis at `axis`);
    `depth` is an int or a 1-element i64 value read at run time."""
    elem = element_type(like)
    # ONNX Runtime's OneHot kernels produce float (not double): cast after.
    vals = b.constant(ir.DenseElementsAttr.get(np.asarray([0.0, 1.0], np.float32)))
    d = dims(idx)
    out = None
    if d is not None:
        out = list(d)
        out.insert(axis if axis >= 0 else len(d) + 1 + axis,
                   depth if isinstance(depth, int) else None)
    # A scalar depth (ONNX allows one element of rank 1 too): ONNX's reference
    # evaluator reads only a scalar one.
    depth_v = b.int_scalar(depth) if isinstance(depth, int) else \
        b.reshape(depth, b.ints([]), [])
    if element_type(idx) != i64():  # (nor int32 indices with an int64 depth: ONNX Runtime)
        idx = b.op("Cast", [idx], tensor_type(d, i64()), to=7)  # INT64
    if b.opset < 11:  # OneHot counts negative indices from the end from opset 11 on
        idx = _from_the_front(b, idx, depth, depth_v)
    if b.opset < 9:  # OneHot is opset 9: idx compared with 0..depth-1
        if not isinstance(depth, int) or d is None:
            raise UnsupportedOp("scatter-add before opset 9 needs a static extent and rank")
        r = len(d) + 1
        at = axis % r
        positions = b.constant(ir.DenseElementsAttr.get(
            np.arange(depth, dtype=np.int64).reshape([depth] + [1] * (r - 1 - at))))
        hot = b.compare("Equal", b.unsqueeze(idx, [at]), positions)
        return b.cast_like(hot, like)
    hot = b.op("OneHot", [idx, depth_v, vals], tensor_type(out, ir.F32Type.get()), axis=axis)
    return hot if isinstance(elem, ir.F32Type) else b.cast_like(hot, like)


def _from_the_front(b: "Builder", idx: ir.Value, depth: int | ir.Value, n: ir.Value) -> ir.Value:
    """int64 indices counted from the end where negative (a Gather's may be),
    as depth + idx; `n` is depth as a scalar value."""
    c = constant_ints(idx)
    if c is not None and isinstance(depth, int):
        if min(c, default=0) >= 0:
            return idx
        a = np.asarray(c, np.int64).reshape(dims(idx))
        return b.constant(ir.DenseElementsAttr.get(np.where(a < 0, a + depth, a)))
    if b.opset >= 9:
        return b.where(b.compare("Less", idx, b.int_scalar(0)), b.add(idx, n), idx)
    # Less before opset 9 compares floats only (exact for these indices)
    as_float = b.op("Cast", [idx], tensor_type(dims(idx), ir.F32Type.get()), to=1)
    zero = b.constant(ir.DenseElementsAttr.get(np.zeros((), np.float32)))
    negative = b.op("Cast", [b.compare("Less", as_float, zero)], idx.type, to=7)
    return b.add(idx, b.mul(negative, n))


def _gather_elements_before_11(b: "Builder", operands: Sequence[ir.Value], result_type: ir.Type,
                               axis: int = 0, **_) -> ir.Value:
    """GatherElements before opset 11: the data with its axis moved last,
    kept where OneHot(indices) is 1 (Where: an inf or NaN elsewhere in the
    row stays out) and summed over that axis. Exact; dense in the axis'
    extent. On the other axes the data is cut to the indices' extents."""
    data, idx = operands
    dd, idd = dims(data), dims(idx)
    if b.opset < 9 or dd is None or idd is None:
        raise UnsupportedOp("GatherElements before opset 11 needs OneHot and Where (opset 9) and "
                            "known ranks")
    r = len(dd)
    sd, si = symdims.dims(data), symdims.dims(idx)  # (the direction axis: one symbol)
    cut = [a for a in range(r) if a != axis and (dd[a] is None or dd[a] != idd[a]) and
           (sd is None or si is None or sd[a] is None or
            symdims.claimed(sd[a]) != symdims.claimed(si[a]))]
    if cut:
        if any(idd[a] is None for a in cut) and b.opset < 10:
            raise UnsupportedOp("GatherElements at opset 9 needs static index extents")
        dd = [idd[a] if a in cut else e for a, e in enumerate(dd)]
        t = tensor_type(dd, element_type(data))
        if all(idd[a] is not None for a in cut):
            data = b.slice(data, cut, [0] * len(cut), [idd[a] for a in cut], t)
        else:
            ends = b.op("Gather", [b.shape(idx), b.ints(cut)], tensor_type([len(cut)], i64()),
                        axis=0)
            data = b.op("Slice", [data, b.ints([0] * len(cut)), ends, b.ints(cut)], t)
    depth = dd[axis]
    hot = onehot(b, idx, depth if depth is not None else b.shape(data, axis, axis + 1), data)
    mask = b.op("Cast", [hot], tensor_type(dims(hot), ir.IntegerType.get_signless(1)), to=9)
    perm = [a for a in range(r) if a != axis] + [axis]
    moved = b.unsqueeze(b.transpose(data, perm), [axis])
    kept = b.where(mask, moved, b.scalar(0.0, data))
    return b.reduce("ReduceSum", kept, [r], False)


def _range_before_11(b: "Builder", operands: Sequence[ir.Value], result_type: ir.Type,
                     **_) -> ir.Value:
    """Range before opset 11, for the rules' int64 unit steps: start plus
    the positions of max(limit - start, 0) ones (ConstantOfShape and
    NonZero, opset 9)."""
    start, limit, delta = operands
    if b.opset < 9 or constant_ints(delta) != [1] or element_type(start) != i64():
        raise UnsupportedOp("Range before opset 11 needs opset 9 and int64 unit steps")
    n = b.op("Sub", [limit, start], tensor_type([], i64()))
    n = b.where(b.compare("Less", n, b.int_scalar(0)), b.int_scalar(0), n)
    ones = b.op("ConstantOfShape", [b.reshape(n, [1], [1])], tensor_type([None], i64()),
                value=ir.DenseElementsAttr.get(np.ones(1, np.int64)))
    positions = b.reshape(b.op("NonZero", [ones], tensor_type([1, None], i64())), [-1], [None])
    return b.op("Add", [positions, start], result_type)


def _slice_before_10(b: "Builder", operands: Sequence[ir.Value], result_type: ir.Type,
                     **attrs) -> ir.Value:
    """Slice with operands before opset 10: Slice-1 takes its bounds as
    attributes, so constant ones become attributes (steps through
    Builder.slice); bounds read at run time are refused."""
    if len(operands) == 1:  # already Slice-1's form
        return b.create("Slice", list(operands), [result_type], **attrs)[0]
    x, *rest = operands
    values = [constant_ints(v) for v in rest]
    if any(v is None for v in values):
        raise UnsupportedOp(f"its derivative slices at bounds read at run time, which Slice "
                            f"takes from opset 10 on (the model imports {b.opset})")
    starts, ends = values[0], values[1]
    axes = values[2] if len(values) > 2 else list(range(len(starts)))
    steps = values[3] if len(values) > 3 else None
    return b.slice(x, axes, starts, ends, result_type, steps)


def _integer_extreme_before_12(b: "Builder", op_type_: str, operands: Sequence[ir.Value]
                               ) -> ir.Value:
    """Min and Max of integers (trip counts, extents) before opset 12, where
    they take floats only: a Where of a comparison per operand (opset 9)."""
    if b.opset < 9:
        raise UnsupportedOp(f"{op_type_} of integers needs opset 12 (or Where, opset 9)")
    keep = "Less" if op_type_ == "Min" else "Greater"
    out = operands[0]
    for v in operands[1:]:
        out = b.where(b.compare(keep, out, v), out, v)
    return out


def _where_before_9(b: "Builder", operands: Sequence[ir.Value], result_type: ir.Type,
                    **_) -> ir.Value:
    """Where before opset 9 has no exact form where a branch may hold a NaN
    or an infinity (m * a + (1 - m) * c lets it through): refused
    (elementwise._select lowers the activations' own piecewise selections)."""
    raise UnsupportedOp(f"its derivative selects with Where (opset 9) to keep a NaN or an "
                        f"infinity out of its result, which opset {b.opset} cannot write exactly; "
                        f"re-export at opset >= 9")


# Ops the rules emit that an older opset lacks or restricts: (first opset of
# the form the rules use, the same values in the ops the older one has).
_OLDER_FORMS: dict = {
    "Where": (9, _where_before_9), "Slice": (10, _slice_before_10),
    "Expand": (8, _expand_before_8), "Sign": (9, _sign_before_9),
    "ScatterElements": (11, _scatter_elements_before_11),
    "GatherElements": (11, _gather_elements_before_11),
    "Range": (11, _range_before_11),
    **{v: (8, lambda b, ops, t, v=v, **_: _variadic_before_8(b, v, ops, t))
       for v in ("Sum", "Mean", "Max", "Min")},
}


def _onnx_dtype(elem: ir.Type) -> int:
    """The TensorProto data type of an MLIR element type."""
    for t, code in ((ir.F16Type, onnx.TensorProto.FLOAT16), (ir.BF16Type, onnx.TensorProto.BFLOAT16),
                    (ir.F32Type, onnx.TensorProto.FLOAT), (ir.F64Type, onnx.TensorProto.DOUBLE)):
        if isinstance(elem, t):
            return code
    if isinstance(elem, ir.IntegerType):
        signed = not elem.is_unsigned
        return {(1, True): onnx.TensorProto.BOOL, (8, True): onnx.TensorProto.INT8,
                (16, True): onnx.TensorProto.INT16, (32, True): onnx.TensorProto.INT32,
                (64, True): onnx.TensorProto.INT64, (8, False): onnx.TensorProto.UINT8,
                (16, False): onnx.TensorProto.UINT16, (32, False): onnx.TensorProto.UINT32,
                (64, False): onnx.TensorProto.UINT64}[(elem.width, signed)]
    raise UnsupportedOp(f"no ONNX data type for {elem}")


class Builder:
    """Creates onnx ops at the ambient insertion point for one module opset."""

    def __init__(self, opset: int, location: ir.Location | None = None,
                 seed: ir.Value | None = None, linear_k=None):
        self.opset = opset
        self.location = location or ir.Location.unknown()
        self._none: ir.Value | None = None
        # transposition: a seed cotangent, whose axis 0 is the direction
        # count, and the symbol (symdims) of the linear program's direction
        # axis (it ran with one direction)
        self.seed = seed
        self.linear_k = linear_k

    # ---- generic creation -------------------------------------------------
    def create(self, op_type_: str, operands: Sequence[ir.Value | None],
               result_types: Sequence[ir.Type], **attrs) -> list[ir.Value]:
        """An op of the module's opset; None operands become onnx.NoValue."""
        name, missing = _padding(op_type_, self.opset, len(operands))
        if any(isinstance(getattr(t, "element_type", None), ir.BF16Type) for t in result_types):
            _check_bfloat16(op_type_, self.opset)
        if missing:
            operands = list(operands) + [None] * missing
        known = _op_table.OPS[name.removeprefix("onnx.")]["attributes"]
        for k, v in attrs.items():
            if v is not None and k not in known:  # a rule's bug, before the exporter finds it
                raise UnsupportedOp(f"{name} has no attribute '{k}' at opset {self.opset}")
        if any(v is None for v in operands):
            operands = [self.none() if v is None else v for v in operands]
        op = ir.Operation.create(
            name, results=list(result_types), operands=operands,
            attributes={k: _attr(v) for k, v in attrs.items() if v is not None},
            loc=self.location)
        return list(op.results)

    def op(self, op_type_: str, operands: Sequence[ir.Value | None],
           result_type: ir.Type, **attrs) -> ir.Value:
        if op_type_ == "Reshape" and self.opset < 14 and \
                _empty_by_allowzero(operands[0], operands[1], result_type):
            # no data to move: zeros of the target's extents, its zeros that
            # copy x's extents written out (Expand reads 0 as 0)
            return self.zeros(self._copies_written(operands[0], operands[1], result_type),
                              dims(result_type), operands[0])
        if op_type_ in ("Min", "Max") and self.opset < 12 and \
                not isinstance(element_type(operands[0]), ir.FloatType):
            return _integer_extreme_before_12(self, op_type_, operands)
        older = _OLDER_FORMS.get(op_type_)
        if older is not None and self.opset < older[0]:
            return older[1](self, operands, result_type, **attrs)
        return self.create(op_type_, operands, [result_type], **attrs)[0]

    def _copies_written(self, x: ir.Value, target: ir.Value, result_type: ir.Type) -> ir.Value:
        """A Reshape target (before opset 14: _empty_by_allowzero) with each 0
        that copies x's extent replaced by that extent; the 0s the empty
        result has stay."""
        out = result_type.shape if isinstance(result_type, ir.RankedTensorType) else None
        parts = _target_parts(target)
        pieces, at, xd = [], 0, dims(x)
        for part in parts:
            values = constant_ints(part)
            if values is None:
                pieces.append(part)
            else:
                for p, v in enumerate(values, start=at):
                    copy = v == 0 and p < len(xd) and out is not None and p < len(out) and \
                        out[p] != 0
                    if not copy:
                        pieces.append(self.ints([v]))
                    elif xd[p] is not None:
                        pieces.append(self.ints([xd[p]]))
                    else:
                        pieces.append(self.shape(x, p, p + 1))
            n = dims(part)
            if n is None or len(n) != 1 or n[0] is None:
                raise UnsupportedOp("an empty derivative reshaped to extent 0 needs Reshape's "
                                    "allowzero (opset >= 14) or a target of known length")
            at += n[0]
        return self.concat(pieces, 0)

    def none(self) -> ir.Value:
        op = ir.Operation.create("onnx.NoValue", results=[ir.NoneType.get()],
                                 attributes={"value": ir.UnitAttr.get()}, loc=self.location)
        return op.results[0]

    # ---- constants --------------------------------------------------------
    def constant(self, attr: ir.DenseElementsAttr) -> ir.Value:
        op = ir.Operation.create("onnx." + resolve("Constant", self.opset), results=[attr.type],
                                 attributes={"value": attr}, loc=self.location)
        return op.results[0]

    def scalar(self, value: float, like: ir.Value) -> ir.Value:
        """A rank-0 constant of `like`'s element type."""
        elem = element_type(like)
        t = tensor_type([], elem)
        if isinstance(elem, ir.FloatType):
            # repr: -0.0 is not 0.0 here (equal as dict keys)
            return self.constant(_cached_attr(("scalar", elem, repr(float(value))), lambda: (
                ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(elem, value)))))
        return self.constant(_cached_attr(("scalar", elem, int(value)), lambda: (
            ir.DenseElementsAttr.get_splat(t, ir.IntegerAttr.get(elem, int(value))))))

    def ints(self, values: Iterable[int]) -> ir.Value:
        key = tuple(int(v) for v in values)
        return self.constant(_cached_attr(("ints", key), lambda: ir.DenseElementsAttr.get(
            np.asarray(key, dtype=np.int64))))

    def int_scalar(self, value: int) -> ir.Value:
        return self.constant(ir.DenseElementsAttr.get(np.asarray(value, dtype=np.int64)))

    def zeros(self, shape: ir.Value, out: Dims | None, like: ir.Value) -> ir.Value:
        """Zeros of run-time `shape` (static extents `out`), like's element type."""
        return self.expand(self.scalar(0.0, like), shape, out)

    def zeros_over(self, primal: ir.Value, k: ir.Value) -> ir.Value:
        """Zeros [k] + shape(primal), the shape read at run time where unknown."""
        d = dims(primal)
        return self.zeros(self.concat([k, self.shape(primal)], 0), None if d is None else [None] + d,
                          primal)

    # ---- elementwise ------------------------------------------------------
    def ew(self, op_type_: str, *operands: ir.Value, **attrs) -> ir.Value:
        """An elementwise op; result type by broadcasting, element type of operand 0."""
        types = [v.type for v in operands]
        t = types[0]
        if any(u != t for u in types[1:]):
            t = tensor_type(broadcast_dims(*(dims(u) for u in types)), t.element_type)
        return self.op(op_type_, operands, t, **attrs)

    def add(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.ew("Add", a, b)

    def sub(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.ew("Sub", a, b)

    def mul(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.ew("Mul", a, b)

    def div(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.ew("Div", a, b)

    def neg(self, a: ir.Value) -> ir.Value:
        return self.ew("Neg", a)

    def compare(self, op_type_: str, a: ir.Value, b: ir.Value) -> ir.Value:
        shape = broadcast_dims(dims(a), dims(b))
        out = tensor_type(shape, ir.IntegerType.get_signless(1))
        if isinstance(element_type(a), ir.BF16Type):  # (create checks results only)
            _check_bfloat16(op_type_, self.opset)
        if op_type_ == "Equal" and self.opset < 11 and isinstance(element_type(a), ir.FloatType):
            # Equal has no float types before opset 11: not (a < b or a > b) (NaN: equal)
            either = self.op("Or", [self.compare("Less", a, b), self.compare("Greater", a, b)], out)
            return self.op("Not", [either], out)
        return self.op(op_type_, [a, b], out)

    def where(self, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        shape = broadcast_dims(dims(cond), dims(a), dims(b))
        return self.op("Where", [cond, a, b], tensor_type(shape, element_type(a)))

    def sum(self, values: Sequence[ir.Value]) -> ir.Value:
        if len(values) == 1:
            return values[0]
        if len(values) == 2:
            return self.add(values[0], values[1])
        shape = broadcast_dims(*(dims(v) for v in values))
        return self.op("Sum", values, tensor_type(shape, element_type(values[0])))

    def cast_like(self, a: ir.Value, like: ir.Value) -> ir.Value:
        if self.opset < 15:  # CastLike is opset 15: Cast to the static element type
            return self.op("Cast", [a], tensor_type(dims(a), element_type(like)),
                           to=_onnx_dtype(element_type(like)))
        return self.op("CastLike", [a, like], tensor_type(dims(a), element_type(like)))

    # ---- shapes -----------------------------------------------------------
    def shape(self, x: ir.Value, start: int | None = None, end: int | None = None) -> ir.Value:
        """Shape(x)[start:end] as a 1-D i64 tensor (a constant when static)."""
        d = dims(x)
        if d is not None:
            part = d[start:end]
            if all(e is not None for e in part):
                return self.ints(part)
            # extents symdims proves (the linear program's one direction
            # behind a Reshape typed '?', a Where-made expand target)
            proved = [symdims.claimed(e) for e in symdims.dims(x)[start:end]]
            if all(isinstance(e, (int, np.integer)) for e in proved):
                return self.ints(proved)
        if x not in _READING:  # (sources and primals may lead back to x: read it then)
            _READING.add(x)
            try:
                read = self._shape_elsewhere(x, d, start, end)
            finally:
                _READING.discard(x)
            if read is not None:
                return read
        n = None if d is None else len(d[start:end])
        i64 = ir.IntegerType.get_signless(64)
        if self.opset >= 15:
            return self.op("Shape", [x], tensor_type([n], i64), start=start, end=end)
        full = self.op("Shape", [x], tensor_type([None if d is None else len(d)], i64))
        if start is None and end is None:
            return full
        return self.slice(full, [0], [start or 0], [end if end is not None else 2**62],
                          tensor_type([n], i64))

    def _shape_elsewhere(self, x: ir.Value, d: Dims | None, start: int | None,
                         end: int | None) -> ir.Value | None:
        """Shape(x)[start:end] read off other values, or None."""
        if start is not None and start >= 1:
            # A derivative's extents past the direction axis are its primal's:
            # read them there (the linear forward program need not stay alive).
            p = symdims.primal_of(x)
            if p is not None:
                return self.shape(p, start - 1, None if end is None else end - 1)
        if d is not None and not (start in (0, None) and end == 1):  # k: read it from x
            return self._shape_from_sources(x, start, end)
        return None

    def _shape_from_sources(self, x: ir.Value, start: int | None,
                            end: int | None) -> ir.Value | None:
        """Shape(x)[start:end] assembled from constants and the values that
        first had each symbolic extent (symdims.py), when that avoids reading
        x itself: a derivative's run-time shape then comes from primal values
        and arguments, and the linear forward program it belongs to can die."""
        syms = symdims.dims(x)
        if syms is None:
            return None
        lo = 0 if start is None else start % max(1, len(syms)) if start < 0 else start
        part = syms[lo:end]
        pieces, statics, elsewhere = [], [], False
        for j, e in enumerate(part):
            if not isinstance(e, tuple):
                statics.append(int(e))
                continue
            if e[0] == "=":  # an extent shape arithmetic proved (symdims._fill)
                statics.append(e[1])
                elsewhere = True
                continue
            piece = self._product_extent(e, x) if e[0] == "prod" else self._at_source(e, x)
            if piece is None:
                return None
            if statics:
                pieces.append(self.ints(statics))
                statics = []
            pieces.append(piece)
            elsewhere = True
        if not elsewhere:
            return None
        if statics:
            pieces.append(self.ints(statics))
        return pieces[0] if len(pieces) == 1 else self.concat(pieces, 0)

    def _at_source(self, sym: tuple, x: ir.Value) -> ir.Value | None:
        """Symbolic extent `sym` as a [1] i64 value read off the value where
        it first appeared; None where that is x itself or unknown."""
        src = symdims.source(sym)
        if src is None or src[0] == x:
            return None
        return self.shape(src[0], src[1], src[1] + 1)

    def _product_extent(self, e: tuple, x: ir.Value) -> ir.Value | None:
        """A product extent ("prod", factors, coefficient; symdims) as a [1]
        i64 value: its factors read where each first appeared, times the
        coefficient; None where a factor has no source but x."""
        i64 = ir.IntegerType.get_signless(64)
        out = self.ints([e[2]]) if e[2] != 1 else None
        for f, n in sorted(e[1], key=symdims.order_key):
            piece = self._at_source(f, x)
            if piece is None:
                return None
            for _ in range(n):
                out = piece if out is None else self.op("Mul", [out, piece],
                                                        tensor_type([1], i64))
        return out

    def concat(self, values: Sequence[ir.Value], axis: int) -> ir.Value:
        # Shapes assembled from static pieces fold to one constant here, so
        # the derivative graph carries no shape arithmetic when shapes are known.
        pieces = [constant_ints(v) for v in values]
        if all(p is not None for p in pieces) and all(rank(v) == 1 for v in values) and \
                element_type(values[0]) == ir.IntegerType.get_signless(64):
            return self.ints([x for p in pieces for x in p])
        ds = [dims(v) for v in values]
        shape = None
        if all(d is not None for d in ds):
            shape = list(ds[0])
            ax = axis % len(shape)
            parts = [d[ax] for d in ds]
            shape[ax] = None if None in parts else sum(parts)
            for i in range(len(shape)):
                if i != ax and shape[i] is None:
                    shape[i] = next((d[i] for d in ds if d[i] is not None), None)
        return self.op("Concat", values, tensor_type(shape, element_type(values[0])), axis=axis)

    def reshape(self, x: ir.Value, shape: ir.Value | Sequence[int], out: Dims | None) -> ir.Value:
        target = shape if isinstance(shape, ir.Value) else self.ints(shape)
        return self.op("Reshape", [x, target], tensor_type(out, element_type(x)))

    def expand(self, x: ir.Value, shape: ir.Value, out: Dims | None) -> ir.Value:
        return self.op("Expand", [x, shape], tensor_type(out, element_type(x)))

    def transpose(self, x: ir.Value, perm: Sequence[int]) -> ir.Value:
        d = dims(x)
        out = None if d is None else [d[p] for p in perm]
        return self.op("Transpose", [x], tensor_type(out, element_type(x)), perm=list(perm))

    def unsqueeze(self, x: ir.Value, axes: Sequence[int]) -> ir.Value:
        d = dims(x)
        out = None
        if d is not None:
            n = len(d) + len(axes)
            norm = sorted(a % n for a in axes)
            it = iter(d)
            out = [1 if i in norm else next(it) for i in range(n)]
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.ints(axes)], tensor_type(out, element_type(x)))
        return self.op("Unsqueeze", [x], tensor_type(out, element_type(x)), axes=list(axes))

    def squeeze(self, x: ir.Value, axes: Sequence[int]) -> ir.Value:
        d = dims(x)
        out = None
        if d is not None:
            norm = {a % len(d) for a in axes}
            out = [e for i, e in enumerate(d) if i not in norm]
        if self.opset >= 13:
            return self.op("Squeeze", [x, self.ints(axes)], tensor_type(out, element_type(x)))
        return self.op("Squeeze", [x], tensor_type(out, element_type(x)), axes=list(axes))

    def slice(self, x: ir.Value, axes: Sequence[int], starts: Sequence[int],
              ends: Sequence[int], result_type: ir.Type,
              steps: Sequence[int] | None = None) -> ir.Value:
        if self.opset < 10:  # Slice-1: attributes, no steps
            if steps is not None and any(s != 1 for s in steps):
                return self._gather_steps(x, axes, starts, ends, steps, result_type)
            return self.op("Slice", [x], result_type, axes=list(axes), starts=list(starts),
                           ends=list(ends))
        operands = [x, self.ints(starts), self.ints(ends), self.ints(axes)]
        if steps is not None:
            operands.append(self.ints(steps))
        return self.op("Slice", operands, result_type)

    def pad(self, x: ir.Value, pads: Sequence[int | ir.Value], result_type: ir.Type,
            value: float | None = None) -> ir.Value:
        """Constant-mode Pad (attributes before opset 11). A pad may be a 1-D
        i64 value of one element read at run time (opset >= 11)."""
        if all(isinstance(p, int) for p in pads):
            if self.opset < 11:
                extra = {} if value is None else {"value": float(value)}
                return self.op("Pad", [x], result_type, pads=[int(p) for p in pads], **extra)
            pads_v = self.ints(pads)
        else:
            if self.opset < 11:
                raise UnsupportedOp("a Pad by pads read at run time needs opset >= 11")
            pieces: list = []  # runs of constants as one constant
            for p in pads:
                if isinstance(p, int) and pieces and isinstance(pieces[-1], list):
                    pieces[-1].append(p)
                else:
                    pieces.append([p] if isinstance(p, int) else p)
            pads_v = self.concat([self.ints(p) if isinstance(p, list) else p for p in pieces], 0)
        operands = [x, pads_v] + ([self.scalar(value, x)] if value is not None else [])
        return self.op("Pad", operands, result_type)

    def _gather_steps(self, x: ir.Value, axes: Sequence[int], starts: Sequence[int],
                      ends: Sequence[int], steps: Sequence[int], result_type: ir.Type) -> ir.Value:
        """A strided Slice before opset 10: one Gather of the selected indices
        per axis (static extents of the strided axes needed)."""
        d = dims(x)
        out = x
        for a, st, en, sp in zip(axes, starts, ends, steps):
            ax = a % len(d) if d is not None else a
            if d is None or d[ax] is None:
                raise UnsupportedOp("Slice with steps needs opset >= 10 or static extents")
            idx = list(range(d[ax])[slice(st, en, sp)])
            cur = dims(out)
            cur = None if cur is None else cur[:ax] + [len(idx)] + cur[ax + 1:]
            out = self.op("Gather", [out, self.ints(idx)],
                          tensor_type(cur, element_type(x)), axis=ax)
        return out

    def reduce(self, op_type_: str, x: ir.Value, axes: Sequence[int] | ir.Value,
               keepdims: bool, out: Dims | None = None) -> ir.Value:
        """ReduceSum/ReduceMax/... over `axes` (a list, or a 1-D i64 value)."""
        d = dims(x)
        if out is None and d is not None and not isinstance(axes, ir.Value):
            norm = {a % len(d) for a in axes}
            out = [1 if i in norm else e for i, e in enumerate(d) if keepdims or i not in norm]
        t = tensor_type(out, element_type(x))
        axes_as_input = self.opset >= (13 if op_type_ == "ReduceSum" else 18)
        if axes_as_input:
            axes_v = axes if isinstance(axes, ir.Value) else self.ints(axes)
            return self.op(op_type_, [x, axes_v], t, keepdims=int(keepdims),
                           noop_with_empty_axes=1)
        if isinstance(axes, ir.Value):
            raise UnsupportedOp(f"{op_type_} over axes computed at run time needs opset >= 13")
        return self.op(op_type_, [x], t, axes=list(axes), keepdims=int(keepdims))

    # ---- derivative layout: a leading direction axis ----------------------
    def derivative_type(self, primal: ir.Value) -> ir.Type:
        d = dims(primal)
        return tensor_type(None if d is None else [None] + d, element_type(primal))

    def align(self, t: ir.Value, out_rank: int) -> ir.Value:
        """Insert unit axes after the direction axis so `t` has rank 1 + out_rank:
        ONNX broadcasting aligns trailing axes, the direction axis must stay first."""
        r = rank(t)
        if r is None:
            return self._align_at_run_time(t, out_rank) if out_rank > 0 else t
        if r - 1 >= out_rank:
            return t
        return self.unsqueeze(t, list(range(1, 1 + out_rank - (r - 1))))

    def _align_at_run_time(self, t: ir.Value, out_rank: int) -> ir.Value:
        """align() for a derivative of unknown rank (e.g. of a Loop result ONNX
        shape inference left untyped): returning it as is would broadcast its
        direction axis against a data axis (a silently wrong derivative; found
        by the fuzzer). Reshape to [k] + [1] * (out_rank + 1 - rank) + rest."""
        if self.opset < 14:  # needs Reshape's allowzero (a 0 extent would be "copy")
            raise UnsupportedOp("a derivative of unknown rank meets a broadcast (give the "
                                "values ranked types, or use opset >= 14)")
        i64 = ir.IntegerType.get_signless(64)
        shp = self.op("Shape", [t], tensor_type([None], i64))
        size = self.op("Size", [shp], tensor_type([], i64))
        missing = self.op("Sub", [self.int_scalar(out_rank + 1), size], tensor_type([], i64))
        missing = self.op("Max", [missing, self.int_scalar(0)], tensor_type([], i64))
        ones = self.expand(self.ints([1]), self.op("Reshape", [missing, self.ints([1])],
                                                   tensor_type([1], i64)), [None])
        target = self.concat([self.shape(t, 0, 1), ones, self.shape(t, 1)], 0)
        return self.op("Reshape", [t, target], tensor_type([None] * (out_rank + 1),
                                                           element_type(t)), allowzero=1)

    def fit(self, t: ir.Value, primal: ir.Value) -> ir.Value:
        """Broadcast derivative `t` to exactly [k] + shape(primal)."""
        td, pd = dims(t), dims(primal)
        if td is not None and pd is not None and len(td) == len(pd) + 1 and \
                all(a is not None and a == b for a, b in zip(td[1:], pd)):
            return t
        t = self.align(t, len(pd)) if pd is not None else t
        if pd is not None and rank(t) == len(pd) + 1 and \
                (None in pd or None in dims(t)[1:]) and \
                all(p is None or e == p for e, p in zip(dims(t)[1:], pd)) and \
                [symdims.claimed(e) for e in symdims.dims(primal)] == \
                [symdims.claimed(e) for e in symdims.dims(t)[1:]]:
            # the same extents, `?` included (symdims.py), and t's type as
            # static as primal's (rules read static extents off types). The
            # primal's first: a symbol both have is then read off the primal
            # (symdims.source), and reverse mode's linear program can die.
            return t
        return self.expand_directions(t, primal, 0, None if pd is None else [None] + pd)

    def expand_directions(self, t: ir.Value, like: ir.Value, start: int,
                          out: Dims | None) -> ir.Value:
        """Expand derivative `t` to [k] + shape(like)[start:]. The target's
        direction extent is 1: Expand broadcasts, so t keeps its own k, which
        then needs no Shape(t)[0:1] read (one constant target when the
        extents are static)."""
        d = dims(like)
        if d is not None and None not in d[start:]:
            target = self.ints([1] + d[start:])
        else:
            target = self.concat([self.ints([1]), self.shape(like, start or None)], 0)
        return self.expand(t, target, out)

    def unbroadcast(self, ct: ir.Value, target: ir.Value, extents: list | None = None
                    ) -> ir.Value:
        """Sum cotangent `ct` back to the shape of derivative value `target`
        (both carry the direction axis, which is never summed). `extents`:
        ct's symbolic extents past that axis (symdims), where the transpose
        rule knows them by construction (those of the op's result, whose
        cotangent ct is built from): worked out from ct's own ops instead,
        they cost a walk back through the cotangent's whole chain."""
        cd, td = dims(ct), dims(target)
        if cd is not None and td is not None and cd == td and None not in cd[1:]:
            return ct
        if cd is not None and td is not None and None not in cd[1:] and None not in td[1:]:
            lead = len(cd) - len(td)
            axes = list(range(1, 1 + lead))
            axes += [lead + i for i in range(1, len(td)) if td[i] == 1 and cd[lead + i] != 1]
            out = ct
            if axes:
                out = self.reduce("ReduceSum", ct, axes, keepdims=True)
            if lead:
                out = self.squeeze(out, list(range(1, 1 + lead)))
            return out
        if cd is not None and td is not None and len(cd) >= len(td):
            if extents is None or len(extents) + 1 != len(cd):
                extents = symdims.dims(ct)[1:]
            axes = self._symbolic_unbroadcast_axes(extents, symdims.dims(target)[1:])
            if axes is not None:
                lead = len(cd) - len(td)
                out = self.reduce("ReduceSum", ct, axes, keepdims=True) if axes else ct
                if lead:
                    out = self.squeeze(out, list(range(1, 1 + lead)))
                return out
        return self._unbroadcast_dynamic(ct, target)

    @staticmethod
    def _symbolic_unbroadcast_axes(sc: list, st: list) -> list[int] | None:
        """The axes (counting the direction axis) of a cotangent of symbolic
        extents `sc` to sum to `st`, when the symbols decide them all."""
        lead = len(sc) - len(st)
        axes = list(range(1, 1 + lead))
        for i in range(len(st)):
            c, t = symdims.claimed(sc[lead + i]), symdims.claimed(st[i])
            if c == t or symdims.min_of(c, t):
                continue
            if t == 1:
                axes.append(lead + i + 1)
                continue
            return None
        return axes

    def _unbroadcast_dynamic(self, ct: ir.Value, target: ir.Value) -> ir.Value:
        """Axes computed at run time: those where target's extent is 1 and ct's
        is not, over the ranks aligned to the right; then a Reshape. The
        direction axis is ct's: in reverse mode `target` may be a stand-in."""
        cr, tr = rank(ct), rank(target)
        if self.opset < 13:
            return self._unbroadcast_per_axis(ct, target)
        i1, i64 = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(64)
        k = self.shape(ct, 0, 1)
        padded = [k, self.shape(target, 1)]
        if tr is None or cr is None:  # ranks known at run time only: pad with ones
            size = lambda v: self.op("Size", [self.shape(v)], tensor_type([], i64))
            missing = self.sub(self.ints([cr]) if cr is not None else
                               self.unsqueeze(size(ct), [0]), size(target))
            ones = ir.DenseElementsAttr.get(np.asarray([1], dtype=np.int64))
            padded.insert(1, self.op("ConstantOfShape", [missing], tensor_type([None], i64),
                                     value=ones))
        elif cr > tr:
            padded.insert(1, self.ints([1] * (cr - tr)))
        tshape = self.concat(padded, 0)
        differs = self.op("Not", [self.compare("Equal", tshape, self.shape(ct))],
                          tensor_type([cr], i1))
        mask = self.op("And", [self.compare("Equal", tshape, self.ints([1])), differs],
                       tensor_type([cr], i1))
        axes = self.reshape(self.op("NonZero", [mask], tensor_type([1, None], i64)),
                            [-1], [None])
        summed = self.reduce("ReduceSum", ct, axes, keepdims=True,
                             out=None if cr is None else [None] * cr)
        return self.reshape_to(summed, self.like_shape(ct, target),
                               None if tr is None else [None] + (dims(target)[1:]))

    def _unbroadcast_per_axis(self, ct: ir.Value, target: ir.Value) -> ir.Value:
        """_unbroadcast_dynamic before opset 13, where ReduceSum's axes are
        an attribute: every axis that may be a broadcast one is summed, and
        the sum taken where target's extent is 1 at run time (Where
        broadcasts it back, a Slice to target's extent keeps one copy)."""
        cd, td = dims(ct), dims(target)
        if cd is None or td is None or len(cd) < len(td) or self.opset < 10:
            raise UnsupportedOp("summing a broadcast cotangent over axes known only at run "
                                "time needs opset >= 13 (or >= 10 with ranked values)")
        lead = len(cd) - len(td)
        out = self.reduce("ReduceSum", ct, list(range(1, 1 + lead)), keepdims=False) \
            if lead else ct
        for i in range(1, len(td)):
            c, t = dims(out)[i], td[i]
            if c == 1 or (t is not None and t != 1):
                continue  # nothing to sum: the extents agree (or ct's is 1)
            summed = self.reduce("ReduceSum", out, [i], keepdims=True)
            if t == 1:
                out = summed
                continue
            extent = self.shape(target, i, i + 1)
            picked = self.where(self.compare("Equal", extent, self.ints([1])), summed, out)
            out = self.op("Slice", [picked, self.ints([0]), extent, self.ints([i])],
                          tensor_type(dims(out)[:i] + [None] + dims(out)[i + 1:],
                                      element_type(out)))
        return out

    def reshape_to(self, x: ir.Value, shape: ir.Value, out: Dims | None) -> ir.Value:
        """Reshape to a shape read at run time (like_shape, Shape slices):
        every entry is an extent. A 0 there (a real 0 extent, possibly folded
        into a literal) needs allowzero, else it copies x's extent at that
        position (a wrong shape; ONNX Runtime's Reshape fusion then even
        turns the leading Shape slice into -1 and fails on 0 elements)."""
        zero = out is None or any(e is None or e == 0 for e in out[1:])
        allow = {"allowzero": 1} if self.opset >= 14 and zero else {}
        return self.op("Reshape", [x, shape], tensor_type(out, element_type(x)), **allow)

    def merge_directions(self, t: ir.Value) -> ir.Value:
        """A derivative t [k, N, ...] as [k*N, ...], for an op that runs the
        directions as a batch. With one direction (k static 1: the linear
        program reverse mode transposes) and extents known at run time only,
        the target is t's extents past k, which symdims reads off the
        primal: the transposes' shape reads then keep no linear op alive."""
        td = dims(t)
        out = None if td is None else [None] + td[2:]
        if td is not None and None in td[2:] and self.opset >= 14 and symdims.one_direction(t):
            return self.op("Reshape", [t, self.shape(t, 1)], tensor_type(out, element_type(t)),
                           allowzero=1)
        return self.reshape(t, self.concat([self.ints([-1]), self.shape(t, 2)], 0), out)

    def on_merged_batch(self, t: ir.Value, y: ir.Value,
                        make: Callable[[ir.Value, ir.Type], ir.Value]) -> ir.Value:
        """An op linear in its data operand, on that operand's derivative
        t [k, N, ...] with k merged into the batch: make(merged, result type)
        builds it, and its result is split back to [k] + y's extents."""
        merged = self.merge_directions(t)
        yd = dims(y)
        res = make(merged, tensor_type(None if yd is None else [None] + yd[1:], element_type(t)))
        symdims.alike(res, y)  # (so transposes read its extents off y, a primal value)
        return self.reshape_k(res, t, y, None if yd is None else [None] + yd)

    def node_on_merged_batch(self, op: ir.Operation, t: ir.Value,
                             rest: Callable[[ir.Value], list] | None = None) -> ir.Value:
        """The node itself (same op, attributes and other operands, or those
        `rest` makes for the merged operand) on_merged_batch: for ops linear
        in their data operand whose windows or scales need no static extents."""
        def make(merged: ir.Value, result: ir.Type) -> ir.Value:
            others = list(op.operands[1:]) if rest is None else rest(merged)
            return ir.Operation.create(op.name, results=[result], operands=[merged] + others,
                                       attributes=verbatim_attributes(op),
                                       loc=self.location).results[0]
        return self.on_merged_batch(t, op.results[0], make)

    def reshape_k(self, x: ir.Value, k_of: ir.Value, like: ir.Value, out: Dims | None) -> ir.Value:
        """x reshaped to [k] + shape(like), k read from axis 0 of `k_of`. The
        target reads like's run-time extents (symdims follows them), so it
        holds real extents: allowzero, else an extent of 0 (a batch of 0, a
        Loop that did not run) would copy x's extent there."""
        return self.reshape_to(x, self.concat([self.leading_k(k_of, x), self.shape(like)], 0), out)

    def leading_k(self, k_of: ir.Value, x: ir.Value | None) -> ir.Value:
        """Axis 0 of k_of, the first entry of a Reshape target for x. Before
        opset 14 (no allowzero) k read from x itself is written 0, "copy":
        ONNX Runtime's Reshape fusion would turn that lone Shape read into
        -1, which it refuses on 0 elements."""
        return self.ints([0]) if k_of is x and self.opset < 14 else self.shape(k_of, 0, 1)

    def like_shape(self, ct: ir.Value, target: ir.Value,
                   reshaped: ir.Value | None = None) -> ir.Value:
        """[k of ct] + shape(target)[1:]: the run-time shape of a cotangent for
        the derivative value `target`, as the Reshape target of `reshaped`
        (leading_k)."""
        return self.concat([self.leading_k(ct, reshaped), self.shape(target, 1)], 0)


def _target_parts(target: ir.Value) -> list[ir.Value]:
    """A Reshape target's parts: the operands of the Concat that builds it,
    or the target itself."""
    o = defining_op(target)
    return list(o.operands) if o is not None and o.name.startswith("onnx.Concat") else [target]


def _empty_by_allowzero(x: ir.Value, target: ir.Value, result_type: ir.Type) -> bool:
    """Whether a Reshape needs allowzero (opset 14) for its empty result:
    before 14 a 0 in the target copies x's extent there (one past x's rank
    is invalid), so the 0 extent an empty derivative needs, on an axis where
    x's is not known to be 0, cannot be written. The rules' other zeros mean
    "copy", and they write no -1 beside a 0. The target is a constant or a
    Concat of constants and Shapes. Refused where a constant part holds a
    -1 (it needs the data's count)."""
    r, xd = rank(x), dims(x)
    out = result_type.shape if isinstance(result_type, ir.RankedTensorType) else None
    if r is None:
        return False
    parts = _target_parts(target)
    at, empty, inferred = 0, False, False
    for part in parts:
        values, n = constant_ints(part), dims(part)
        if values is not None:
            inferred = inferred or -1 in values
            empty = empty or any(values[p - at] == 0 and (
                p >= r or out is not None and p < len(out) and out[p] == 0 and
                (xd is None or xd[p] != 0)) for p in range(at, at + len(values)))
        if n is None or len(n) != 1 or n[0] is None:
            break
        at += n[0]
    if empty and inferred:
        raise UnsupportedOp("an empty derivative reshaped to extent 0 beside a -1 needs Reshape's "
                            "allowzero (opset >= 14)")
    return empty


def nested_ops(root: ir.Operation) -> list[ir.Operation]:
    """The ops under `root`, each after the ops nested in its regions."""
    out: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        out.append(op)
        return ir.WalkResult.ADVANCE

    # MLIR's own walk: a quarter of the time of iterating the blocks here
    root.operation.walk(visit, ir.WalkOrder.POST_ORDER)
    out.pop()  # root, visited last
    return out


def defining_op(v: ir.Value) -> ir.Operation | None:
    """The op whose result v is; None for a block argument."""
    owner = v.owner
    return owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else None


def producer(v: ir.Value, *kinds: str) -> ir.Operation | None:
    """The onnx op defining v when its ONNX type is one of `kinds`, else None."""
    op = defining_op(v)
    if op is not None and op.name.startswith("onnx.") and op_type(op) in kinds:
        return op
    return None


def is_constant_op(op: ir.Operation) -> bool:
    """onnx.Constant of any kept version (onnx.ConstantV9 at opset 9...)."""
    name = op.name
    return name == "onnx.Constant" or (name.startswith("onnx.ConstantV") and name[14:].isdigit())


def constant_value(value: ir.Value) -> ir.Attribute | None:
    """The `value` attribute of the onnx.Constant defining `value` (through
    Identity ops: exporters alias shared initializers with them), else None."""
    while True:
        owner = value.owner
        if not isinstance(owner, (ir.OpView, ir.Operation)):
            return None
        op = owner.operation
        if not op.name.startswith("onnx.Identity"):
            break
        value = op.operands[0]
    if not is_constant_op(op) or "value" not in op.attributes:
        return None
    return op.attributes["value"]


def constant_uniform(value: ir.Value) -> float | None:
    """The one value of a floating-point constant whose elements are all
    equal (a splat, or e.g. LayerNormalization's ones scale stored in full),
    else None."""
    attr = constant_value(value)
    if attr is None or not isinstance(ir.ShapedType(attr.type).element_type, ir.FloatType):
        return None
    if isinstance(attr, ir.DenseFPElementsAttr) and attr.is_splat:
        return float(attr.get_splat_value().value)
    arr = imported_array(attr)  # dense, or an imported blob (a wide model's scale)
    if arr is None or not arr.size:
        return None
    first = arr.reshape(-1)[0]
    return float(first) if bool(np.all(arr == first)) else None


def constant_ints(value: ir.Value) -> list[int] | None:
    """The integers of a value defined by onnx.Constant, else None."""
    attr = constant_value(value)
    if isinstance(attr, ir.DenseIntElementsAttr):
        return list(_cached_attr(("ints of", attr), lambda: tuple(
            int(v) for v in np.asarray(attr).reshape(-1)), attr.context))
    return None


def constant_floats(value: ir.Value) -> list[float] | None:
    """The floats of a value defined by onnx.Constant, else None."""
    attr = constant_value(value)
    if isinstance(attr, ir.DenseFPElementsAttr):
        return [float(v) for v in dense_floats(attr).reshape(-1)]
    return None


def resize_scales(op: ir.Operation) -> list[float] | None:
    """A Resize/Upsample's constant scales; None when sizes are given or the
    scales are computed at run time (Resize-10 and Upsample-9 take (X,
    scales), Upsample-7 an attribute, Resize-11/12 an empty scales beside
    sizes)."""
    if "scales" in op.attributes:
        return [a.value for a in ir.ArrayAttr(op.attributes["scales"])]
    index = 1 if op.name.startswith("onnx.Upsample") or len(op.operands) == 2 else 2
    sc = operand_or_none(op, index)
    return (None if sc is None else constant_floats(sc)) or None


def operand_or_none(op: ir.Operation, index: int) -> ir.Value | None:
    """Operand `index`, None when absent (past the end or onnx.NoValue)."""
    if index >= len(op.operands):
        return None
    v = op.operands[index]
    return None if isinstance(v.type, ir.NoneType) else v
