"""Values written into zeros at indices: the transposes of gathers and of
slices read at index lists. ScatterElements with reduction="add" where the
opset has it (16); before, a product with OneHot, exact but dense in the
indexed axis' extent; distinct indices (a Slice's) are placed without a
reduction."""
from __future__ import annotations

from mlir import ir

from ..builder import Builder, dims, onehot, rank
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
