"""Reductions. ReduceSum and ReduceMean are linear; the others differentiate
through a mask or a closed form built from the primal result."""
from __future__ import annotations

from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from ..builder import Builder, attribute, constant_ints, dims, operand_or_none, rank
from ..registry import jvp, transpose


def reduce_axes(op: ir.Operation) -> list[int]:
    """The reduced axes, normalized, for both the attribute and input forms."""
    r = rank(op.operands[0])
    if r is None:
        raise UnsupportedOp("a reduction needs its operand's rank")
    if "axes" in op.attributes:
        axes = attribute(op, "axes")
    else:
        v = operand_or_none(op, 1)
        axes = None if v is None else constant_ints(v)
        if v is not None and axes is None:
            raise UnsupportedOp("reduction axes computed at run time")
    if not axes:
        return [] if attribute(op, "noop_with_empty_axes") == 1 else list(range(r))
    return sorted(a + r if a < 0 else a for a in axes)


def _keepdims(op: ir.Operation) -> bool:
    return attribute(op, "keepdims") != 0


def _count(op: ir.Operation, axes: list[int]) -> int:
    d = dims(op.operands[0])
    n = 1
    for a in axes:
        if d[a] is None:
            raise UnsupportedOp("ReduceMean over an axis of unknown extent")
        n *= d[a]
    return n


@jvp("ReduceSum", "ReduceMean")
def _reduce_linear(b: Builder, op, tangents):
    axes = reduce_axes(op)
    t = tangents[0]
    if axes:
        t = b.reduce("ReduceSum", t, [a + 1 for a in axes], _keepdims(op))
    if op.name.startswith("onnx.ReduceMean") and axes:
        t = b.div(t, b.scalar(float(_count(op, axes)), op.results[0]))
    return [t]


@transpose("ReduceSum")
def _t_reduce_sum(b: Builder, op, cts, linear):
    # Linear ReduceSums come from JVPs: axes are constant and already shifted.
    x = op.operands[0]
    axes = reduce_axes(op)
    ct = cts[0]
    if not _keepdims(op) and axes:
        ct = b.unsqueeze(ct, axes)
    d = dims(x)
    out = b.expand(ct, b.like_shape(ct, x), [None] + d[1:])
    return [out] + [None] * (len(op.operands) - 1)


def _expand_back(b: Builder, op, v: ir.Value, axes: list[int]) -> ir.Value:
    """A primal reduction result broadcastable against the operand again."""
    if not _keepdims(op) and axes:
        return b.unsqueeze(v, axes)
    return v


@jvp("ReduceMax", "ReduceMin")
def _reduce_extremum(b: Builder, op, tangents):
    # The derivative is shared among the positions attaining the extremum.
    x, y = op.operands[0], op.results[0]
    axes = reduce_axes(op) or list(range(rank(x)))
    hit = b.cast_like(b.compare("Equal", x, _expand_back(b, op, y, axes)), x)
    weight = b.div(hit, b.reduce("ReduceSum", hit, axes, True))
    t = b.reduce("ReduceSum", b.mul(tangents[0], weight), [a + 1 for a in axes], _keepdims(op))
    return [t]


@jvp("ReduceSumSquare")
def _reduce_sum_square(b: Builder, op, tangents):
    x = op.operands[0]
    axes = reduce_axes(op)
    t = b.mul(tangents[0], b.mul(b.scalar(2.0, x), x))
    return [b.reduce("ReduceSum", t, [a + 1 for a in axes], _keepdims(op)) if axes else t]


@jvp("ReduceL2")
def _reduce_l2(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    axes = reduce_axes(op)
    coef = b.div(x, _expand_back(b, op, y, axes))
    return [b.reduce("ReduceSum", b.mul(tangents[0], coef), [a + 1 for a in axes], _keepdims(op))]


@jvp("ReduceL1")
def _reduce_l1(b: Builder, op, tangents):
    x = op.operands[0]
    axes = reduce_axes(op)
    return [b.reduce("ReduceSum", b.mul(tangents[0], b.ew("Sign", x)), [a + 1 for a in axes],
                     _keepdims(op))]


@jvp("ReduceLogSumExp")
def _reduce_logsumexp(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    axes = reduce_axes(op)
    p = b.ew("Exp", b.sub(x, _expand_back(b, op, y, axes)))
    return [b.reduce("ReduceSum", b.mul(tangents[0], p), [a + 1 for a in axes], _keepdims(op))]


@jvp("ReduceLogSum")
def _reduce_logsum(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    axes = reduce_axes(op)
    s = b.ew("Exp", _expand_back(b, op, y, axes))
    return [b.reduce("ReduceSum", b.div(tangents[0], s), [a + 1 for a in axes], _keepdims(op))]
