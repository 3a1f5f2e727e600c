"""Matrix products. MatMul and Gemm are bilinear: the JVP applies the op to
one tangent at a time, the transpose multiplies by the other factor,
transposed, and sums over broadcast batch axes."""
from __future__ import annotations

from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from ..builder import (Builder, attribute, broadcast_dims, dims, element_type, operand_or_none,
                       rank, tensor_type)
from ..registry import jvp, transpose
from .elementwise import total


def matmul(b: Builder, a: ir.Value, c: ir.Value) -> ir.Value:
    da, dc = dims(a), dims(c)
    out = None
    if da is not None and dc is not None and len(da) >= 2 and len(dc) >= 2:
        out = broadcast_dims(da[:-2], dc[:-2]) + [da[-2], dc[-1]]
    return b.op("MatMul", [a, c], tensor_type(out, element_type(a)))


def _swap_last(b: Builder, v: ir.Value) -> ir.Value:
    r = rank(v)
    return b.transpose(v, list(range(r - 2)) + [r - 1, r - 2])


def _as_matrix(b: Builder, v: ir.Value, vector_axis: int) -> ir.Value:
    """A rank-1 MatMul operand as the matrix ONNX treats it as."""
    return b.unsqueeze(v, [vector_axis]) if rank(v) == 1 else v


@jvp("MatMul")
def _matmul(b: Builder, op, tangents):
    a, c = op.operands
    ra, rc = rank(a), rank(c)
    if ra is None or rc is None:
        raise UnsupportedOp("MatMul needs the ranks of its operands")
    y = op.results[0]
    terms = []
    # The direction axis must not meet a rank-1 operand's vector semantics:
    # promote vectors to matrices, then reshape the product back.
    am, cm = _as_matrix(b, a, 0), _as_matrix(b, c, 1)
    product_rank = max(rank(am), rank(cm))
    for t, which in zip(tangents, (0, 1)):
        if t is None:
            continue
        if which == 0:
            tm = b.align(b.unsqueeze(t, [1]) if ra == 1 else t, product_rank)
            prod = matmul(b, tm, cm)
        else:
            tm = b.align(b.unsqueeze(t, [2]) if rc == 1 else t, product_rank)
            prod = matmul(b, am, tm)
        terms.append(b.fit(_squeeze_vectors(b, prod, ra, rc, y), y))
    return [total(b, terms)]


def _squeeze_vectors(b: Builder, prod: ir.Value, ra: int, rc: int, y: ir.Value) -> ir.Value:
    axes = []
    r = rank(prod)
    if ra == 1:
        axes.append(r - 2)
    if rc == 1:
        axes.append(r - 1)
    return b.squeeze(prod, axes) if axes else prod


@transpose("MatMul")
def _t_matmul(b: Builder, op, cts, linear):
    # Linear MatMuls come from the JVP above: both operands have rank >= 2.
    a, c = op.operands
    if rank(a) is None or rank(c) is None or rank(a) < 2 or rank(c) < 2:
        raise UnsupportedOp("transposing MatMul of rank < 2 operands")
    ct = cts[0]
    if linear[0] and linear[1]:
        raise UnsupportedOp("MatMul of two linear values is not linear")
    if linear[0]:
        return [b.unbroadcast(matmul(b, ct, _swap_last(b, c)), a), None]
    return [None, b.unbroadcast(matmul(b, _swap_last(b, a), ct), c)]


@jvp("Gemm")
def _gemm(b: Builder, op, tangents):
    # Y = alpha op(A) op(B) + beta C, op = optional transpose.
    a, c = op.operands[0], op.operands[1]
    alpha, beta = attribute(op, "alpha"), attribute(op, "beta")
    y = op.results[0]

    def factor(v: ir.Value, flag: str) -> ir.Value:
        return _swap_last(b, v) if attribute(op, flag) else v

    terms = []
    if tangents[0] is not None:
        terms.append(matmul(b, factor(tangents[0], "transA"), factor(c, "transB")))
    if tangents[1] is not None:
        terms.append(matmul(b, factor(a, "transA"), factor(tangents[1], "transB")))
    t = total(b, terms)
    if t is not None and alpha != 1.0:
        t = b.mul(t, b.scalar(alpha, y))
    bias = operand_or_none(op, 2)
    if len(tangents) > 2 and tangents[2] is not None and bias is not None:
        tb = b.align(tangents[2], 2)
        tb = tb if beta == 1.0 else b.mul(tb, b.scalar(beta, y))
        t = tb if t is None else b.add(t, tb)
    return [None if t is None else b.fit(t, y)]
