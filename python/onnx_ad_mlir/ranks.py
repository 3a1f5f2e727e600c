"""Ranks of results that ONNX shape inference leaves unranked.

ONNX's inference gives up on a result as soon as one input is unranked, or an
op reads a shape-like operand computed at run time (ReduceMean over computed
axes, Split by computed sizes, Reshape to `Shape(x)` at opset 13); everything
downstream is then unranked too. Derivative rules align broadcasts by rank,
so they would refuse such models. The rank alone is usually still fixed by
the operands' ranks: this table gives it (every dim unknown), and the
importer applies it op by op, so ranks flow on through later ops. A DFT of
a run-time length also keeps its other extents (where its axis is an
attribute), and its last says whether the result is real (1) or complex
(2): its adjoint needs that."""
from __future__ import annotations

from typing import Callable

import onnx
from mlir import ir

Ranks = list  # operand ranks, None where unknown or absent

# Ops whose results all have the rank of their first operand.
_SAME_RANK = frozenset("""
    Abs Acos Acosh Asin Asinh Atan Atanh BitwiseNot Cast CastLike Ceil Celu Clip Cos Cosh
    CumSum Dropout Elu Erf Exp Floor Gelu HardSigmoid HardSwish Hardmax Identity IsInf IsNaN
    LayerNormalization LeakyRelu Log LogSoftmax LpNormalization Mish Neg Not
    RMSNormalization Reciprocal Relu ReverseSequence Round ScatterElements ScatterND Selu
    Shrink Sigmoid Sign Sin Sinh Slice Softmax Softplus Softsign Split Sqrt Tan Tanh
    ThresholdedRelu Trilu Pad Tile Transpose
    AveragePool Conv ConvTranspose CumProd DepthToSpace GatherElements GlobalAveragePool
    GlobalLpPool GlobalMaxPool InstanceNormalization LpPool MaxPool MaxUnpool
    MeanVarianceNormalization
    Resize SpaceToDepth TopK Upsample
""".split())

# Multidirectional (numpy) broadcasting: the largest operand rank.
_BROADCAST = frozenset("""
    Add And BitwiseAnd BitwiseOr BitwiseXor Div Equal Greater GreaterOrEqual Less
    LessOrEqual Max Mean Min Mod Mul Or PRelu Pow Sub Sum Where Xor
""".split())

_REDUCTIONS = frozenset("""
    ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd
    ReduceSum ReduceSumSquare
""".split())


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _length(t: ir.Type) -> int | None:
    """The static element count of a 1-D shape-like operand."""
    if isinstance(t, ir.RankedTensorType) and t.rank == 1 and not t.is_dynamic_dim(0):
        return t.get_dim_size(0)
    return None


def _reduction(node: onnx.NodeProto, ranks: Ranks, types: list[ir.Type]) -> int | None:
    if ranks[0] is None:
        return None
    if _attr(node, "keepdims", 1):
        return ranks[0]
    axes = _attr(node, "axes")
    if axes is not None:  # the attribute form (before the axes operand)
        return ranks[0] - len(set(axes))
    n = _length(types[1]) if len(types) > 1 else None
    if len(types) < 2 or isinstance(types[1], ir.NoneType) or n == 0:
        return ranks[0] if _attr(node, "noop_with_empty_axes", 0) else 0
    return None if n is None else ranks[0] - n  # ONNX requires distinct axes


def _unsqueeze(node: onnx.NodeProto, ranks: Ranks, types: list[ir.Type]) -> int | None:
    axes = _attr(node, "axes")
    n = len(axes) if axes is not None else (_length(types[1]) if len(types) > 1 else None)
    return None if ranks[0] is None or n is None else ranks[0] + n


def _squeeze(node: onnx.NodeProto, ranks: Ranks, types: list[ir.Type]) -> int | None:
    axes = _attr(node, "axes")
    n = len(axes) if axes is not None else (
        _length(types[1]) if len(types) > 1 and not isinstance(types[1], ir.NoneType) else None)
    return None if ranks[0] is None or not n else ranks[0] - n  # no axes: size-1 dims, unknown


def _matmul(node: onnx.NodeProto, ranks: Ranks, types: list[ir.Type]) -> int | None:
    a, b = ranks[0], ranks[1]
    if a is None or b is None:
        return None
    if a == 1 or b == 1:  # a 1-D operand is promoted, then its dim removed
        return max(a, b) - 1
    return max(a, b)


def _expand(node: onnx.NodeProto, ranks: Ranks, types: list[ir.Type]) -> int | None:
    n = _length(types[1])
    return None if ranks[0] is None or n is None else max(ranks[0], n)


def _gather(node: onnx.NodeProto, ranks: Ranks, types: list[ir.Type]) -> int | None:
    return None if None in ranks[:2] else ranks[0] + ranks[1] - 1


def _concat(node: onnx.NodeProto, ranks: Ranks, types: list[ir.Type]) -> int | None:
    return next((r for r in ranks if r is not None), None)


_RULES: dict[str, Callable[[onnx.NodeProto, Ranks, list[ir.Type]], int | None]] = {
    **{op: _reduction for op in _REDUCTIONS},
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "MatMul": _matmul, "Expand": _expand,
    "Gather": _gather, "Concat": _concat,
    "Reshape": lambda node, ranks, types: _length(types[1]),
    "Flatten": lambda node, ranks, types: 2,
    # along an axis, the data's rank; without one, the flattened data's 1
    "Compress": lambda node, ranks, types: ranks[0] if _attr(node, "axis") is not None else 1,
}


def _rank(node: onnx.NodeProto, operands: list[ir.Value]) -> int | None:
    types = [v.type for v in operands]
    ranks = [t.rank if isinstance(t, ir.RankedTensorType) else None for t in types]
    op = node.op_type
    if op in _SAME_RANK:
        return ranks[0] if operands else None
    if op in _BROADCAST:
        present = [r for r, t in zip(ranks, types) if not isinstance(t, ir.NoneType)]
        return None if not present or None in present else max(present)
    rule = _RULES.get(op)
    return rule(node, ranks, types) if rule else None


def _dft_dims(node: onnx.NodeProto, operands: list[ir.Value]) -> list[int] | None:
    """A DFT result's extents: the input's, but for the transformed axis
    (unknown) and the last (1 for an inverse onesided DFT, else 2)."""
    x = operands[0].type if operands else None
    if not isinstance(x, ir.RankedTensorType) or x.rank < 2:
        return None
    dyn = ir.ShapedType.get_dynamic_size()
    out = [dyn] * x.rank
    axis = _attr(node, "axis")  # (DFT-17's; DFT-20's is an operand, -2 when absent)
    if axis is not None and -x.rank <= axis < x.rank - 1:
        out = [x.get_dim_size(i) if i != axis % x.rank else dyn for i in range(x.rank)]
    out[-1] = 1 if _attr(node, "inverse", 0) and _attr(node, "onesided", 0) else 2
    return out


def refine_rank(node: onnx.NodeProto, t: ir.Type, operands: list[ir.Value]) -> ir.Type:
    """`t` with the rank the op and its operands' ranks imply, when `t` is
    unranked and they do; else `t`."""
    if not isinstance(t, ir.UnrankedTensorType):
        return t
    if node.op_type == "DFT":
        out = _dft_dims(node, operands)
        return t if out is None else ir.RankedTensorType.get(out, t.element_type)
    rank = _rank(node, operands)
    if rank is None or rank < 0:
        return t
    return ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size()] * rank, t.element_type)
