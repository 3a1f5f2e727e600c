"""Pooling and resampling.

MaxPool gathers the tangent at the primal's argmax (its Indices output; a
MaxPool producing Indices is added when the node has none). AveragePool and
LpPool use a window sum: a Conv with a ones kernel on [k*N*C, 1, *S] (k-uniform
reshapes, so Conv's transpose -- ConvTranspose -- handles reverse mode), scaled
per output position by a primal map. For AveragePool that map is
AveragePool(ones) / windowsum(ones): whatever divisor the runtime uses
(count_include_pad, ceil_mode, pads) it is matched exactly. Global pools are
reductions. Resize/Upsample are linear in X for fixed scales/sizes and separable:
one small interpolation matrix per resized axis, built by resizing an identity
with the node's own attributes, applied with MatMul (no dense operator).
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from ..builder import (Builder, attribute, constant_ints, dims, element_type, is_constant_op, op_type,
                       operand_or_none, rank, tensor_type)
from ..registry import jvp
from .linalg import matmul


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _verbatim(op: ir.Operation, drop: tuple = ()) -> dict:
    attrs = op.attributes
    named = [attrs[i] for i in range(len(attrs))]
    return {na.name: na.attr for na in named if na.name not in drop}


# ---- MaxPool --------------------------------------------------------------------

@jvp("MaxPool")
def _max_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    idx = None
    if len(op.results) > 1 and not isinstance(op.results[1].type, ir.NoneType) and \
            (attribute(op, "storage_order") or 0) == 0:
        idx = op.results[1]
    if idx is None:
        if len(op.results) < 2:
            raise UnsupportedOp("MaxPool before opset 8 has no Indices output")
        made = b.create("MaxPool", [x], [y.type, tensor_type(dims(y), _i64())],
                        **_verbatim(op, ("storage_order",)))
        idx = made[1]
    flat = b.reshape(tangents[0], [0, -1], [None, None])
    return [b.op("Gather", [flat, idx], b.derivative_type(y), axis=1)] + [None] * (len(op.results) - 1)


# ---- window sums: AveragePool, LpPool ---------------------------------------------

def _pool_pads(op: ir.Operation, x: ir.Value, y: ir.Value) -> dict:
    """Explicit Conv geometry reproducing the pool's windows and output extents."""
    xd, yd = dims(x), dims(y)
    kernel = attribute(op, "kernel_shape")
    n = len(kernel)
    strides = attribute(op, "strides") or [1] * n
    dil = (attribute(op, "dilations") if "dilations" in op.attributes else None) or [1] * n
    pads = list(attribute(op, "pads") or [0] * (2 * n))
    auto = attribute(op, "auto_pad") or "NOTSET"
    ceil = attribute(op, "ceil_mode") if "ceil_mode" in op.attributes else 0
    static = xd is not None and yd is not None and None not in xd[2:] and None not in yd[2:]
    if auto in ("SAME_UPPER", "SAME_LOWER") or ceil:
        if not static:
            raise UnsupportedOp("pooling with auto_pad or ceil_mode needs static spatial extents")
    if auto == "VALID":
        pads = [0] * (2 * n)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(n):
            o = -(-xd[2 + i] // strides[i])
            tot = max(0, (o - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - xd[2 + i])
            lo = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
            pads[i], pads[n + i] = lo, tot - lo
    if static:  # ceil_mode: extra end padding so that Conv's floor gives the pool's extents
        for i in range(n):
            need = (yd[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - xd[2 + i] - pads[i]
            pads[n + i] = max(pads[n + i], need)
    return {"kernel_shape": list(kernel), "strides": list(strides), "dilations": list(dil),
            "pads": pads}


def _ones_kernel(b: Builder, kernel: list[int], like: ir.Value) -> ir.Value:
    elem = element_type(like)
    t = ir.RankedTensorType.get([1, 1] + kernel, elem)
    return b.constant(ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(elem, 1.0)))


def window_sum(b: Builder, u: ir.Value, y: ir.Value, geom: dict) -> ir.Value:
    """Sum of the derivative u [k, N, C, *S] over each pooling window: [k] + shape(y)."""
    ud, yd = dims(u), dims(y)
    merged = b.reshape(u, b.concat([b.ints([-1, 1]), b.shape(u, 3)], 0),
                       [None, 1] + ud[3:])
    conv = b.op("Conv", [merged, _ones_kernel(b, geom["kernel_shape"], u), None],
                tensor_type([None, 1] + yd[2:], element_type(u)), **geom)
    return b.reshape(conv, b.concat([b.shape(u, 0, 1), b.shape(y)], 0), [None] + yd)


def _ones_image(b: Builder, x: ir.Value) -> ir.Value:
    xd = dims(x)
    shape = b.concat([b.ints([1, 1]), b.shape(x, 2)], 0)
    return b.expand(b.scalar(1.0, x), shape, [1, 1] + xd[2:])


@jvp("AveragePool")
def _average_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    if rank(x) is None or rank(y) is None:
        raise UnsupportedOp("AveragePool needs static ranks")
    geom = _pool_pads(op, x, y)
    yd = dims(y)
    ones = _ones_image(b, x)
    avg = b.op("AveragePool", [ones], tensor_type([1, 1] + yd[2:], element_type(x)), **_verbatim(op))
    count = b.op("Conv", [ones, _ones_kernel(b, geom["kernel_shape"], x), None],
                 tensor_type([1, 1] + yd[2:], element_type(x)), **geom)
    scale = b.div(avg, b.ew("Max", count, b.scalar(1.0, x)))
    return [b.mul(window_sum(b, tangents[0], y, geom), scale)]


@jvp("LpPool")
def _lp_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    if rank(x) is None or rank(y) is None:
        raise UnsupportedOp("LpPool needs static ranks")
    p = attribute(op, "p")
    p = 2 if p is None else p
    geom = _pool_pads(op, x, y)
    return [_lp_tangent(b, tangents[0], x, y, p, lambda u: window_sum(b, u, y, geom))]


def _lp_tangent(b: Builder, t, x, y, p, summed):
    """d (sum |x|^p)^(1/p) = sum(|x|^(p-1) sign(x) t) * y^(1-p)."""
    if p == 1:
        return summed(b.mul(t, b.ew("Sign", x)))
    coef = x if p == 2 else b.mul(b.ew("Pow", b.ew("Abs", x), b.scalar(float(p - 1), x)),
                                   b.ew("Sign", x))
    s = summed(b.mul(t, coef))
    zero = b.compare("Equal", y, b.scalar(0.0, y))
    safe = b.where(zero, b.scalar(1.0, y), y)
    factor = b.ew("Reciprocal", safe) if p == 2 else b.ew("Pow", safe, b.scalar(float(1 - p), y))
    return b.mul(s, b.where(zero, b.scalar(0.0, y), factor))


# ---- global pools ----------------------------------------------------------------------

def _spatial_axes(x: ir.Value) -> list[int]:
    r = rank(x)
    if r is None:
        raise UnsupportedOp("global pooling needs its operand's rank")
    return list(range(2, r))


@jvp("GlobalAveragePool")
def _global_average_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    axes = _spatial_axes(x)
    s = b.reduce("ReduceSum", tangents[0], [a + 1 for a in axes], True)
    d = dims(x)
    if None not in d[2:]:
        return [b.mul(s, b.scalar(1.0 / float(np.prod(d[2:])), y))]
    n = b.cast_like(b.reduce("ReduceProd", b.shape(x, 2), [0], False, out=[]), y)
    return [b.div(s, n)]


@jvp("GlobalMaxPool")
def _global_max_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    axes = _spatial_axes(x)
    hit = b.cast_like(b.compare("Equal", x, y), x)
    weight = b.div(hit, b.reduce("ReduceSum", hit, axes, True))
    return [b.reduce("ReduceSum", b.mul(tangents[0], weight), [a + 1 for a in axes], True)]


@jvp("GlobalLpPool")
def _global_lp_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    axes = [a + 1 for a in _spatial_axes(x)]
    p = attribute(op, "p")
    p = 2 if p is None else p
    return [_lp_tangent(b, tangents[0], x, y, p, lambda u: b.reduce("ReduceSum", u, axes, True))]


# ---- MaxUnpool -------------------------------------------------------------------

@jvp("MaxUnpool")
def _max_unpool(b: Builder, op, tangents):
    x, idx = op.operands[0], op.operands[1]
    y = op.results[0]
    t = tangents[0]
    if t is None:
        return [None]
    yd = dims(y)
    k = b.shape(t, 0, 1)
    flat_t = b.reshape(t, [0, -1], [None, None])
    ix = b.reshape(idx, [1, -1], [1, None])
    ix = b.expand(ix, b.shape(flat_t), [None, None])
    total = b.reduce("ReduceProd", b.shape(y), [0], True, out=[1]) if yd is None or None in yd \
        else b.ints([int(np.prod(yd))])
    zeros = b.expand(b.scalar(0.0, y), b.concat([k, total], 0), [None, None])
    scattered = b.op("ScatterElements", [zeros, ix, flat_t], zeros.type, axis=1)
    return [b.reshape(scattered, b.concat([k, b.shape(y)], 0), None if yd is None else [None] + yd)]


# ---- Resize / Upsample -------------------------------------------------------------

def _float_constant(v: ir.Value) -> list[float] | None:
    owner = v.owner
    op = getattr(owner, "operation", owner)
    if not isinstance(op, ir.Operation) or not is_constant_op(op):
        return None
    attr = op.attributes["value"]
    try:
        return [float(a) for a in np.asarray(ir.DenseFPElementsAttr(attr)).reshape(-1)]
    except (ValueError, TypeError):
        return None


@jvp("Resize", "Upsample")
def _resize(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    t = tangents[0]
    if t is None:
        return [None] * len(op.results)
    xd, yd = dims(x), dims(y)
    kind = op_type(op)
    if xd is None or yd is None or None in xd or None in yd:
        raise UnsupportedOp(f"{kind} needs static extents")
    if kind == "Resize" and (attribute(op, "coordinate_transformation_mode") or "") == \
            "tf_crop_and_resize":
        raise UnsupportedOp("Resize with tf_crop_and_resize is affine (extrapolation)")
    if kind == "Resize" and (attribute(op, "keep_aspect_ratio_policy") or "stretch") != "stretch":
        raise UnsupportedOp("Resize with keep_aspect_ratio_policy")
    if kind == "Resize" and attribute(op, "axes"):
        raise UnsupportedOp("Resize with axes")
    r = len(xd)
    scales = None
    if kind == "Resize":
        sc = operand_or_none(op, 2)
        scales = None if sc is None else _float_constant(sc)
        if scales == []:
            scales = None
        if scales is None and (sc is not None and operand_or_none(op, 3) is None):
            raise UnsupportedOp("Resize with scales computed at run time")
        if scales is None and operand_or_none(op, 3) is not None and \
                constant_ints(op.operands[3]) is None:
            raise UnsupportedOp("Resize with sizes computed at run time")
    elif "scales" in op.attributes:
        scales = list(attribute(op, "scales"))
    else:
        scales = _float_constant(op.operands[1])
        if scales is None:
            raise UnsupportedOp("Upsample with scales computed at run time")
    out = t
    elem = element_type(t)
    for a in range(r):
        if xd[a] == yd[a] and (scales is None or scales[a] == 1.0):
            continue
        m_t = _interpolation_matrix(b, op, kind, x, a, xd[a], yd[a],
                                    None if scales is None else scales[a])  # [in, out]
        od = dims(out)
        perm = [i for i in range(r + 1) if i != a + 1] + [a + 1]
        moved = b.transpose(out, perm)
        prod = matmul(b, moved, m_t)
        inverse = [perm.index(i) for i in range(r + 1)]
        out = b.transpose(prod, inverse)
        del od
    return [out] + [None] * (len(op.results) - 1)


def _interpolation_matrix(b: Builder, op, kind: str, x: ir.Value, a: int, n_in: int,
                          n_out: int, scale: float | None) -> ir.Value:
    """M^T [n_in, n_out] of the resize along axis a: the node's attributes
    applied to an identity laid out [n_in, 1.., n_in at axis a, ..1]."""
    r = rank(x)
    batch = 0 if a != 0 else 1
    shape = [1] * r
    shape[batch] = n_in
    shape[a] = n_in
    eye = np.eye(n_in).reshape(shape) if batch < a else np.eye(n_in).T.reshape(shape)
    elem = element_type(x)
    dtype = np.float64 if isinstance(elem, ir.F64Type) else np.float32
    e = b.constant(ir.DenseElementsAttr.get(eye.astype(dtype)))
    e = e if isinstance(elem, (ir.F64Type, ir.F32Type)) else b.cast_like(e, x)
    out_shape = list(shape)
    out_shape[a] = n_out
    f32 = ir.F32Type.get()
    if kind == "Resize":
        if scale is not None:
            sv = [1.0] * r
            sv[a] = scale
            operands = [e, None, b.constant(ir.DenseElementsAttr.get(np.asarray(sv, np.float32))), None]
        else:
            operands = [e, None, None, b.ints(out_shape)]
        if b.opset < 13:  # Resize-11 needs roi and scales tensors (may be empty)
            operands[1] = operands[1] or b.constant(ir.DenseElementsAttr.get(np.zeros([0], np.float32)))
            operands[2] = operands[2] or b.constant(ir.DenseElementsAttr.get(np.zeros([0], np.float32)))
        res = b.op("Resize", operands, tensor_type(out_shape, elem), **_verbatim(op))
    else:
        sv = [1.0] * r
        sv[a] = scale
        if "scales" in op.attributes:
            res = b.op("Upsample", [e], tensor_type(out_shape, elem), mode=attribute(op, "mode"),
                       scales=sv)
        else:
            res = b.op("Upsample", [e, b.constant(ir.DenseElementsAttr.get(np.asarray(sv, np.float32)))],
                       tensor_type(out_shape, elem), mode=attribute(op, "mode"))
    del f32
    m = b.reshape(res, [n_in, n_out] if batch < a else [n_out, n_in], None)
    if batch > a:
        m = b.transpose(m, [1, 0])
    return b.reshape(m, [n_in, n_out], [n_in, n_out])
