"""Values written into zeros at indices: the transposes of gathers and of
slices read at index lists. ScatterElements with reduction="add" where the
opset has it (16); before, a product with OneHot, exact but dense in the
indexed axis' extent; distinct indices (a Slice's) are placed without a
reduction."""
from __future__ import annotations

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from ..builder import Builder, constant_ints, dims, element_type, i64, rank, tensor_type
from .linalg import matmul


def scatter_add_at(b: Builder, shape: ir.Value, out: list | None, flat: ir.Value,
                   idx: ir.Value, axis: int) -> ir.Value:
    """Zeros of run-time `shape` (static extents `out`) plus flat [.., m at
    axis, ..] scatter-added at the m indices idx (any shape) along axis:
    ScatterElements with reduction (opset >= 16)."""
    r = rank(flat)
    ix = b.reshape(idx, [1] * axis + [-1] + [1] * (r - axis - 1),
                   [1] * axis + [None] + [1] * (r - axis - 1))
    zeros = b.zeros(shape, out, flat)
    return b.op("ScatterElements", [zeros, b.expand(ix, b.shape(flat), dims(flat)), flat],
                zeros.type, axis=axis, reduction="add")


def onehot(b: Builder, idx: ir.Value, depth: int | ir.Value, like: ir.Value,
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


def _from_the_front(b: Builder, idx: ir.Value, depth: int | ir.Value, n: ir.Value) -> ir.Value:
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


def onehot_scatter(b: Builder, flat: ir.Value, idx: ir.Value, axis: int,
                   depth: int | ir.Value) -> ir.Value:
    """Before opset 16 (no scatter reduction): flat [.., n at axis, ..] times
    OneHot(idx) [n, depth] -- duplicates accumulate. `depth`: see onehot."""
    fd = dims(flat)
    r = len(fd)
    perm = [i for i in range(r) if i != axis] + [axis]
    moved = b.transpose(flat, perm)
    prod = matmul(b, moved, onehot(b, idx, depth, flat))
    inverse = [perm.index(i) for i in range(r)]
    return b.transpose(prod, inverse)


def place_at(b: Builder, ct: ir.Value, target: ir.Value, tdims: list | None,
             idx: ir.Value, axis: int) -> ir.Value:
    """ct (distinct indices idx [n] taken along `axis`) placed into zeros of
    run-time shape `target`."""
    cd = dims(ct)
    r = len(cd)
    ix = b.reshape(idx, [1] * axis + [-1] + [1] * (r - axis - 1), [1] * axis + [None] + [1] * (r - axis - 1))
    ix = b.expand(ix, b.shape(ct), cd)
    zeros = b.zeros(target, tdims, ct)
    # The indices of a Slice are distinct: a plain placement, no accumulation
    # (also runs where ONNX Runtime has no reduction kernel, e.g. float16).
    return b.op("ScatterElements", [zeros, ix, ct], zeros.type, axis=axis)
