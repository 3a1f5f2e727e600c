"""Reductions and scans. ReduceSum, ReduceMean and CumSum are linear; the
others differentiate through a weight built from primal values, so each JVP
is `reduce(t * weight)` (or a scan of it), whose transpose is lean.

Axes may be attributes, constant inputs, or inputs computed at run time
(derivative programs contain such reductions, e.g. unbroadcasting over a
symbolic batch): `Axes` hides the difference.
"""
from __future__ import annotations

import onnx
from mlir import ir

from onnx_ad_mlir.errors import ImportFailure, UnsupportedOp

from ..builder import (Builder, attribute, axis_attribute, constant_ints, dims, op_type,
                       operand_or_none, rank, tensor_type)
from ..registry import jvp, transpose
from .elementwise import zero_where_zero

I64 = lambda: ir.IntegerType.get_signless(64)  # noqa: E731
I1 = lambda: ir.IntegerType.get_signless(1)  # noqa: E731


def reduce_axes(op: ir.Operation) -> list[int]:
    """The reduced axes, normalized, for both the attribute and input forms
    (constant axes only; see `Axes` for run-time ones)."""
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


class Axes:
    """The axes a reduction reduces over: a static list, or a 1-D i64 value of
    normalized (non-negative) axes computed at run time."""

    def __init__(self, b: Builder, op: ir.Operation):
        self.b, self.op = b, op
        self.r = rank(op.operands[0])
        if self.r is None:
            raise UnsupportedOp("a reduction needs its operand's rank")
        v = None if "axes" in op.attributes else operand_or_none(op, 1)
        if v is None or constant_ints(v) is not None:
            self.static, self.value = reduce_axes(op), None
        else:
            self.static, self.value = None, self._dynamic(v)

    def _dynamic(self, ax: ir.Value) -> ir.Value:
        b, r = self.b, self.r
        if b.opset < 13:
            raise UnsupportedOp("reduction axes computed at run time need opset >= 13")
        n = dims(ax)[0] if dims(ax) else None
        zero = b.int_scalar(0)
        norm = b.where(b.compare("Less", ax, zero), b.add(ax, b.int_scalar(r)), ax)
        hit = b.compare("Equal", b.unsqueeze(norm, [1]), b.ints(range(r)))
        count = b.reduce("ReduceSum", b.op("Cast", [hit], tensor_type([n, r], I64()),
                                           to=onnx.TensorProto.INT64), [0], False, [r])
        mask = b.compare("Greater", count, zero)
        if attribute(self.op, "noop_with_empty_axes") != 1:
            size = b.op("Size", [ax], tensor_type([], I64()))
            mask = b.op("Or", [mask, b.compare("Equal", size, zero)], tensor_type([r], I1()))
        self.mask = mask
        nz = b.op("NonZero", [mask], tensor_type([1, None], I64()))
        return b.reshape(nz, [-1], [None])

    @property
    def empty(self) -> bool:
        return self.static == []

    def primal(self):
        return self.static if self.static is not None else self.value

    def shifted(self):
        if self.static is not None:
            return [a + 1 for a in self.static]
        return self.b.add(self.value, self.b.ints([1]))

    def keepdims(self) -> bool:
        return attribute(self.op, "keepdims") != 0

    def expand_back(self, v: ir.Value) -> ir.Value:
        """A primal reduction result broadcastable against the operand again."""
        if self.keepdims() or self.empty:
            return v
        if self.static is not None:
            return self.b.unsqueeze(v, self.static)
        # A Reshape to a shape of static length keeps the rank visible to
        # ONNX shape inference (an Unsqueeze by run-time axes would not).
        b, x = self.b, self.op.operands[0]
        kept = b.where(self.mask, b.ints([1]), b.shape(x))
        return b.reshape(v, kept, [None] * self.r)

    def reduce_primal(self, op_type: str, x: ir.Value) -> ir.Value:
        """op_type over these axes, keepdims, in the primal layout."""
        if self.static is not None:
            return self.b.reduce(op_type, x, self.static, True)
        b = self.b
        v = b.reduce(op_type, x, self.value, True, [None] * self.r)
        return b.reshape(v, b.where(self.mask, b.ints([1]), b.shape(self.op.operands[0])),
                         [None] * self.r)  # the rank visible to ONNX inference

    def reduce_tangent(self, t: ir.Value) -> ir.Value:
        """ReduceSum of a derivative over the shifted axes, with the op's keepdims."""
        if self.empty:
            return t
        if self.static is not None:
            return self.b.reduce("ReduceSum", t, self.shifted(), self.keepdims())
        d = [None] * self.r if self.keepdims() else dims(self.op.results[0])
        if d is None:
            raise UnsupportedOp("a reduction over run-time axes without keepdims needs its "
                                "result's rank")
        return self.b.reduce("ReduceSum", t, self.shifted(), self.keepdims(), [None] + d)


def _count(b: Builder, op, axes: Axes) -> ir.Value:
    """The number of reduced elements, as a scalar of the result's type."""
    d = dims(op.operands[0])
    if axes.static is not None and d is not None and all(d[a] is not None for a in axes.static):
        n = 1
        for a in axes.static:
            n *= d[a]
        return b.scalar(float(n), op.results[0])
    y = op.results[0]
    size = lambda v: b.cast_like(b.op("Size", [v], tensor_type([], I64())), y)  # noqa: E731
    return b.div(size(op.operands[0]), size(y))


@jvp("ReduceSum", "ReduceMean")
def _reduce_linear(b: Builder, op, tangents):
    if tangents[0] is None:
        return [None]
    axes = Axes(b, op)
    t = axes.reduce_tangent(tangents[0])
    if op_type(op) == "ReduceMean" and not axes.empty:
        t = b.div(t, _count(b, op, axes))
    return [t]


@transpose("ReduceSum")
def _t_reduce_sum(b: Builder, op, cts, linear):
    # Linear ReduceSums come from JVPs and unbroadcasting: their axes are
    # already in the derivative layout (constant, or non-negative at run time).
    x = op.operands[0]
    ct = cts[0]
    v = None if "axes" in op.attributes else operand_or_none(op, 1)
    if v is not None and constant_ints(v) is None:
        if attribute(op, "keepdims") == 0:
            # Reshape to x's shape with ones at the axes: the rank stays static
            # (an Unsqueeze by run-time axes would hide it from ONNX inference).
            i64 = tensor_type([rank(x)], I64())
            ones = b.expand(b.ints([1]), b.op("Shape", [v], tensor_type([1], I64())), [None])
            kept = b.op("ScatterElements", [b.like_shape(ct, x), v, ones], i64, axis=0)
            ct = b.reshape(ct, kept, [None] * rank(x))
    else:
        axes = reduce_axes(op)
        if attribute(op, "keepdims") == 0 and axes:
            ct = b.unsqueeze(ct, axes)
    d = dims(x)
    out = b.expand_directions(ct, x, 1, None if d is None else [None] + d[1:])
    return [out] + [None] * (len(op.operands) - 1)


def _weighted(b: Builder, op, tangents, weight, pointwise=None) -> list:
    """JVP reduce(t * weight(axes)) for a nonlinear reduction. With no axis
    reduced (noop_with_empty_axes, or a rank-0 input) the op is pointwise:
    x^2 for ReduceSumSquare, |x| for ReduceL1/L2, log x for ReduceLogSum
    (ONNX Runtime's and ONNX's reference results), the identity for the
    others; `pointwise()` is then its derivative."""
    if tangents[0] is None:
        return [None]
    axes = Axes(b, op)
    if axes.empty:
        return [tangents[0] if pointwise is None else b.mul(tangents[0], pointwise())]
    return [axes.reduce_tangent(b.mul(tangents[0], weight(axes)))]


@jvp("ReduceMax", "ReduceMin")
def _reduce_extremum(b: Builder, op, tangents):
    # The derivative is shared among the positions attaining the extremum.
    x, y = op.operands[0], op.results[0]

    def weight(axes):
        hit = b.cast_like(b.compare("Equal", x, axes.expand_back(y)), x)
        return b.div(hit, axes.reduce_primal("ReduceSum", hit))
    return _weighted(b, op, tangents, weight)


@jvp("ReduceSumSquare")
def _reduce_sum_square(b: Builder, op, tangents):
    x = op.operands[0]
    two_x = lambda *_: b.mul(b.scalar(2.0, x), x)  # noqa: E731
    return _weighted(b, op, tangents, two_x, two_x)


@jvp("ReduceL2")
def _reduce_l2(b: Builder, op, tangents):
    # x / ||x||, taken as 0 where the norm is (x is 0 there: PyTorch's choice
    # of subgradient), not 0 / 0: F.normalize's zero rows (swin_v2's padded
    # windows) made forward mode NaN
    x, y = op.operands[0], op.results[0]

    def weight(axes):
        n = axes.expand_back(y)
        return zero_where_zero(b, b.div(x, n), n)
    return _weighted(b, op, tangents, weight, lambda: b.ew("Sign", x))


@jvp("ReduceL1")
def _reduce_l1(b: Builder, op, tangents):
    x = op.operands[0]
    return _weighted(b, op, tangents, lambda axes: b.ew("Sign", x), lambda: b.ew("Sign", x))


@jvp("ReduceLogSumExp")
def _reduce_logsumexp(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    return _weighted(b, op, tangents, lambda axes: b.ew("Exp", b.sub(x, axes.expand_back(y))))


@jvp("ReduceLogSum")
def _reduce_logsum(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    return _weighted(b, op, tangents,
                     lambda axes: b.ew("Reciprocal", b.ew("Exp", axes.expand_back(y))),
                     lambda: b.ew("Reciprocal", x))


def zero_aware(b: Builder, x: ir.Value):
    """(is_zero as 0/1, x with zeros replaced by one)."""
    zero = b.scalar(0.0, x)
    isz = b.compare("Equal", x, zero)
    return b.cast_like(isz, x), b.where(isz, b.scalar(1.0, x), x)


@jvp("ReduceProd")
def _reduce_prod(b: Builder, op, tangents):
    # dy = sum_i t_i prod_{j != i} x_j, exact with zeros: with P' the product
    # of the non-zero factors and z the number of zeros, the weight of t_i is
    # P'/x_i if z = 0, P' at the zero if z = 1, and 0 if z >= 2.
    x = op.operands[0]

    def weight(axes):
        isz, nonzero = zero_aware(b, x)
        prod = axes.reduce_primal("ReduceProd", nonzero)
        z = axes.reduce_primal("ReduceSum", isz)
        zero = b.scalar(0.0, x)
        w = b.where(b.compare("Equal", z, zero), b.div(prod, nonzero),
                    b.where(b.compare("Equal", z, b.scalar(1.0, x)), b.mul(prod, isz), zero))
        return w
    return _weighted(b, op, tangents, weight)


# ---- scans -------------------------------------------------------------------

def _shift_axis(b: Builder, axis: ir.Value) -> ir.Value:
    """A scan axis operand moved past the direction axis."""
    c = constant_ints(axis)
    if c is not None:
        a = c[0] if c[0] < 0 else c[0] + 1
        return b.int_scalar(a) if dims(axis) == [] else b.ints([a])
    one = b.cast_like(b.int_scalar(1), axis)
    return b.where(b.compare("Less", axis, b.cast_like(b.int_scalar(0), axis)), axis,
                   b.add(axis, one))


def _cumsum(b: Builder, t: ir.Value, axis: ir.Value, exclusive: int, reverse: int) -> ir.Value:
    return b.op("CumSum", [t, axis], t.type, exclusive=exclusive, reverse=reverse)


@jvp("CumSum")
def _cumsum_jvp(b: Builder, op, tangents):
    if tangents[0] is None:
        return [None]
    return [_cumsum(b, tangents[0], _shift_axis(b, op.operands[1]),
                    attribute(op, "exclusive"), attribute(op, "reverse"))]


@transpose("CumSum")
def _t_cumsum(b: Builder, op, cts, linear):
    # The adjoint of an (exclusive) running sum is the running sum the other way.
    return [_cumsum(b, cts[0], op.operands[1], attribute(op, "exclusive"),
                    1 - attribute(op, "reverse")), None]


@jvp("CumProd")
def _cumprod_jvp(b: Builder, op, tangents):
    # dy_i = sum_{j in S_i} t_j prod_{l in S_i, l != j} x_l, S_i the prefix
    # the scan multiplies. Exact with zeros: with y' the scan of x (zeros as
    # ones) and z_i the number of zeros in S_i, dy_i = y'_i cumsum(t/x')_i if
    # z_i = 0, y'_i cumsum(t [x = 0])_i if z_i = 1, 0 otherwise.
    if tangents[0] is None:
        return [None]
    x, t = op.operands[0], tangents[0]
    axis, ex, rev = op.operands[1], attribute(op, "exclusive"), attribute(op, "reverse")
    isz, nonzero = zero_aware(b, x)
    scanned = b.op("CumProd", [nonzero, axis], x.type, exclusive=ex, reverse=rev)
    z = b.op("CumSum", [isz, axis], x.type, exclusive=ex, reverse=rev)
    zero = b.scalar(0.0, x)
    none = b.mul(scanned, b.cast_like(b.compare("Equal", z, zero), x))
    one = b.mul(scanned, b.cast_like(b.compare("Equal", z, b.scalar(1.0, x)), x))
    taxis = _shift_axis(b, axis)
    terms = [b.mul(_cumsum(b, b.div(t, nonzero), taxis, ex, rev), none),
             b.mul(_cumsum(b, b.mul(t, isz), taxis, ex, rev), one)]
    return [b.add(*terms)]


# ---- selection: TopK through GatherElements ------------------------------------

def _directed_indices(b: Builder, idx: ir.Value, t: ir.Value) -> ir.Value:
    """Indices broadcast to the derivative layout [k] + shape(idx), k from t."""
    d = dims(idx)
    target = b.concat([b.shape(t, 0, 1), b.shape(idx)], 0)
    return b.expand(b.unsqueeze(idx, [0]), target, None if d is None else [None] + d)


@jvp("TopK")
def _topk(b: Builder, op, tangents):
    x, idx = op.operands[0], op.results[1]
    if tangents[0] is None:
        return [None, None]
    r = rank(x)
    if r is None:
        raise UnsupportedOp("TopK needs its operand's rank")
    k = constant_ints(op.operands[1]) if len(op.operands) > 1 else [attribute(op, "k")]
    axis = axis_attribute(op, r)
    extent = dims(x)[axis]
    if k is not None and len(k) == 1 and None not in (k[0], extent) and k[0] > extent:
        # an invalid model ONNX's inference types as given (ONNX Runtime refuses it)
        raise ImportFailure(f"K = {k[0]} is larger than the extent {extent} of axis "
                            f"{attribute(op, 'axis')}")
    return [_gather_elements(b, tangents[0], _directed_indices(b, idx, tangents[0]),
                             axis + 1, op.results[0]), None]


def _gather_elements(b: Builder, t, idx, axis, primal) -> ir.Value:
    return b.op("GatherElements", [t, idx], b.derivative_type(primal), axis=axis)
