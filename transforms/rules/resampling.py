"""Resampling and sampling geometry: Resize/Upsample, AffineGrid, RoiAlign,
Col2Im.

Resize/Upsample are linear in X for fixed scales/sizes and separable:
one small interpolation matrix per resized axis, built by resizing an identity
with the node's own attributes, applied with MatMul (no dense operator);
`axes` (opset 18) lists the axes the scales/sizes are for, and
tf_crop_and_resize is affine in X (samples outside its constant roi take
extrapolation_value): its matrices sample that crop with 0 outside.
Where a resized extent is known only at run time (no matrix), forward mode
runs the node itself on the tangent with k merged into the batch; reverse
mode refuses it (no transpose without the matrix). AffineGrid is
linear in theta: the node on the tangent, transposed by contracting with the
grid of an identity theta (its sizes may be known only at run time).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from .. import symdims
from ..builder import (Builder, attribute, constant_floats, constant_ints, dims, element_type, i64,
                       op_type, operand_or_none, producer, rank, resize_scales, tensor_type,
                       verbatim_attributes)
from ..registry import jvp, transpose
from .linalg import matmul


def resample(b: Builder, v: ir.Value, scales: list[float], result: ir.Type,
             attrs: dict, roi: ir.Value | None = None) -> ir.Value:
    """v resized by constant `scales` with the op the opset has: Upsample
    (its scales an attribute before opset 9), Resize-10 (X, scales), Resize-11
    and 12 (an roi operand, unused but for tf_crop_and_resize), Resize."""
    if b.opset < 9:
        return b.op("Upsample", [v], result, scales=list(scales), **attrs)
    sc = b.constant(ir.DenseElementsAttr.get(np.asarray(scales, np.float32)))
    if b.opset < 11:
        return b.op("Upsample" if b.opset < 10 else "Resize", [v, sc], result, **attrs)
    if roi is None and b.opset < 13:
        roi = empty_floats(b)
    return b.op("Resize", [v, roi, sc, None], result, **attrs)


def empty_floats(b: Builder) -> ir.Value:
    """A float32 tensor of extent 0 (Resize-11/12's roi, and its scales when sizes are given)."""
    return b.constant(ir.DenseElementsAttr.get(np.zeros([0], np.float32)))


# ---- Resize / Upsample -------------------------------------------------------------

def _resize_sizes(op: ir.Operation) -> ir.Value | None:
    """Resize's sizes operand (11 and later), None where absent."""
    return operand_or_none(op, 3) if op_type(op) == "Resize" else None


def _listed(op: ir.Operation, values: list | None, r: int, default) -> list | None:
    """A Resize's per-axis values (scales, crops) over all r axes: those of
    its `axes` attribute (opset 18) given, `default` on the others."""
    axes = attribute(op, "axes")
    if values is None or not axes:
        return values
    full = [default] * r
    for a, v in zip(axes, values):
        full[a % r] = v
    return full


def _crop(op: ir.Operation, r: int) -> list[tuple[float, float]] | None:
    """tf_crop_and_resize's constant roi as (start, end) per axis (the whole
    extent, (0, 1), on axes its `axes` does not list); None in other modes."""
    if op_type(op) != "Resize" or \
            (attribute(op, "coordinate_transformation_mode") or "") != "tf_crop_and_resize":
        return None
    roi = operand_or_none(op, 1)
    values = None if roi is None else constant_floats(roi)
    n = len(attribute(op, "axes") or range(r))
    if values is None or len(values) != 2 * n:
        raise UnsupportedOp("Resize with tf_crop_and_resize needs a constant roi of "
                            f"{2 * n} values")
    return _listed(op, list(zip(values[:n], values[n:])), r, (0.0, 1.0))


def _resized_axes(op: ir.Operation) -> list[int]:
    """The axes the resize may change: all but those whose scale is 1 or
    whose output extent is proved equal to the input's (constant sizes, or
    sizes read from shapes, as FPNs resize to another value's extent), and
    whose crop (tf_crop_and_resize) is the whole extent."""
    x, y = op.operands[0], op.results[0]
    r = rank(x)
    scales = _listed(op, resize_scales(op), r, 1.0)
    crop = _crop(op, r) or [(0.0, 1.0)] * r
    if scales is not None:  # scale 1 maps every index to itself in every mode
        return [a for a, f in enumerate(scales) if f != 1.0 or crop[a] != (0.0, 1.0)]
    sx, sy = symdims.dims(x), symdims.dims(y)
    return [a for a in range(r) if sx is None or sy is None or sx[a] is None or
            symdims.claimed(sx[a]) != symdims.claimed(sy[a]) or crop[a] != (0.0, 1.0)]


@jvp("Resize", "Upsample")
def _resize(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    moved = [i for i, u in enumerate(tangents[1:], 1) if u is not None]
    if moved:  # (the output moves with them: no silent zero)
        raise UnsupportedOp(f"the derivative with respect to its operand {moved[0]} (the roi "
                            f"or scales that place the samples) is not implemented")
    t = tangents[0]
    if t is None:
        return [None] * len(op.results)
    xd, yd = dims(x), dims(y)
    kind = op_type(op)
    if xd is None or yd is None:
        raise UnsupportedOp(f"{kind} needs the ranks of its input and output")
    if kind == "Resize" and (attribute(op, "keep_aspect_ratio_policy") or "stretch") != "stretch":
        raise UnsupportedOp("Resize with keep_aspect_ratio_policy")
    r = len(xd)
    scales = resize_scales(op)
    sizes = _resize_sizes(op)
    known_sizes = None if sizes is None else constant_ints(sizes)
    axes = attribute(op, "axes") or []
    if len(set(a % r for a in axes if -r <= a < r)) != len(axes):
        raise UnsupportedOp(f"{kind} has axes {list(axes)} for its rank-{r} input")
    for role, values in (("scales", scales), ("sizes", known_sizes)):
        if values is not None and len(values) != (len(axes) or r):  # (ONNX Runtime refuses it)
            raise UnsupportedOp(f"{kind} has {len(values)} {role} for its rank-{r} input"
                                + (f" and {len(axes)} axes" if axes else ""))
    scales = _listed(op, scales, r, 1.0)
    crop = _crop(op, r)
    resized = _resized_axes(op)
    # (sizes computed at run time, torch's for a dynamic batch, Concat(Shape(x)[:2],
    # [h, w]): the matrices need only the resized axes' extents, static in the types)
    static = (scales is not None or sizes is not None) and \
        all(xd[a] is not None and yd[a] is not None for a in resized)
    if not static:
        if axes or crop is not None:  # (the node itself on merged directions reads them)
            raise UnsupportedOp(f"{kind} with " + ("axes" if axes else "tf_crop_and_resize") +
                                " needs static extents and constant scales or sizes")
        if 0 in resized:
            raise UnsupportedOp(f"{kind} of the batch axis needs static extents and constant "
                                "scales or sizes")
        # no interpolation matrix at transform time: the node itself on the
        # merged directions (batch not resized); _t_resize builds the
        # matrices at run time
        def merged_sizes(merged: ir.Value) -> list:
            tail = b.slice(sizes, [0], [1], [r], tensor_type([r - 1], i64()))
            return list(op.operands[1:3]) + [b.concat([b.shape(merged, 0, 1), tail], 0)]
        rest = merged_sizes if sizes is not None and scales is None else None
        return [b.node_on_merged_batch(op, t, rest)] + [None] * (len(op.results) - 1)
    out = t
    for a in resized:
        m_t = _interpolation_matrix(b, op, kind, x, a, xd[a], yd[a],
                                    None if scales is None else scales[a],
                                    None if crop is None else crop[a])  # [in, out]
        perm = [i for i in range(r + 1) if i != a + 1] + [a + 1]
        moved = _permute(b, out, perm)
        prod = matmul(b, moved, m_t)
        out = _permute(b, prod, [perm.index(i) for i in range(r + 1)])
    return [out] + [None] * (len(op.results) - 1)


@transpose("Resize", "Upsample")
def _t_resize(b: Builder, op, cts, linear):
    """Only the resizes _resize emits on run-time extents or scales/sizes
    (batch not resized): per resized axis, the interpolation matrix is built
    at run time by resizing an identity of the input's extent, and the
    cotangent multiplied by it (the static path's matrices, read at run time)."""
    x, ct = op.operands[0], cts[0]
    r = rank(x)
    resized = _resized_axes(op)
    if r is None or 0 in resized:
        raise UnsupportedOp(f"reverse mode through {op_type(op)} of the batch axis needs "
                            "static extents")
    for a in resized:
        m = _run_time_interpolation_matrix(b, op, x, a)  # [n_in, n_out]
        perm = [i for i in range(r) if i != a] + [a]
        prod = matmul(b, _permute(b, ct, perm), b.transpose(m, [1, 0]))
        ct = _permute(b, prod, [perm.index(i) for i in range(r)])
    return [ct] + [None] * (len(op.operands) - 1)


def _run_time_interpolation_matrix(b: Builder, op, x: ir.Value, a: int) -> ir.Value:
    """M^T [n_in, n_out] of the resize along axis a >= 1 of x, n_in (and
    the output extent, for sizes) read at run time: an EyeLike identity
    laid out [n_in, 1.., n_in at a, ..1] resized as the node resizes."""
    r = rank(x)
    n = b.shape(x, a, a + 1)
    elem = element_type(x)
    square = b.expand(b.scalar(0.0, x), b.concat([n, n], 0), [None, None])
    eye = b.op("EyeLike", [square], tensor_type([None, None], elem))
    one = b.ints([1])
    layout = [one] * r
    layout[0] = layout[a] = n
    shape = [1] * r
    shape[0] = shape[a] = None
    e = b.reshape(eye, b.concat(layout, 0), shape)
    result = tensor_type(shape, elem)
    scales = resize_scales(op)
    sizes = _resize_sizes(op)
    attrs = verbatim_attributes(op, ("scales",))
    if scales is not None:
        sv = [1.0] * r
        sv[a] = scales[a]
        res = resample(b, e, sv, result, attrs)
    else:  # sizes (scales computed at run time leave the batch unproved: refused)
        sz = list(layout)
        sz[a] = _shape_entry(b, sizes, a)
        empty = None if b.opset >= 13 else empty_floats(b)
        res = b.op("Resize", [e, empty, empty, b.concat(sz, 0)], result, **attrs)
    return b.reshape(res, b.concat([n, b.shape(res, a, a + 1)], 0), [None, None])


def _shape_entry(b: Builder, v: ir.Value, i: int) -> ir.Value:
    """Entry i of a 1-D i64 vector, out of the Concat piece that holds it:
    the JVP's sizes read k*N off the linear program, which a Slice of the
    whole Concat would keep alive."""
    concat = producer(v, "Concat")
    if concat is not None:
        first = 0
        for piece in concat.operands:
            d = dims(piece)
            if d is None or len(d) != 1 or d[0] is None:
                break
            if i < first + d[0]:
                return _shape_entry(b, piece, i - first)
            first += d[0]
    return b.slice(v, [0], [i], [i + 1], tensor_type([1], i64()))


def _permute(b: Builder, v: ir.Value, perm: list[int]) -> ir.Value:
    return v if perm == list(range(len(perm))) else b.transpose(v, perm)


# Entries of the largest interpolation matrix a Resize derivative embeds (64 MiB of float32).
MAX_MATRIX_ENTRIES = 1 << 24


def _interpolation_matrix(b: Builder, op, kind: str, x: ir.Value, a: int, n_in: int,
                          n_out: int, scale: float | None,
                          crop: tuple[float, float] | None = None) -> ir.Value:
    """M^T [n_in, n_out] of the resize along axis a: the node's attributes
    applied to an identity laid out [n_in, 1.., n_in at axis a, ..1] (over
    all axes; tf_crop_and_resize: its crop of axis a, the whole extent of
    the others, and samples outside it 0, the extrapolation a constant)."""
    if n_in * n_in > MAX_MATRIX_ENTRIES:
        raise UnsupportedOp(f"{kind} along axis {a} of extent {n_in}: its derivative's "
                            f"{n_in} x {n_in} interpolation matrix is too large")
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
    result = tensor_type(out_shape, elem)
    attrs = verbatim_attributes(op, ("scales", "axes", "extrapolation_value"))
    roi = None
    if crop is not None:
        starts, ends = [0.0] * r, [1.0] * r
        starts[a], ends[a] = crop
        roi = b.constant(ir.DenseElementsAttr.get(np.asarray(starts + ends, np.float32)))
    if kind == "Resize" and scale is None and b.opset >= 11:  # by sizes
        empty = None if b.opset >= 13 else empty_floats(b)  # Resize-11/12: roi, scales
        res = b.op("Resize", [e, roi or empty, empty, b.ints(out_shape)], result, **attrs)
    else:  # (Resize-10 takes scales only)
        sv = [1.0] * r
        sv[a] = scale if scale is not None else n_out / n_in
        res = resample(b, e, sv, result, attrs, roi)
    if batch < a:
        return b.reshape(res, [n_in, n_out], [n_in, n_out])
    return b.transpose(b.reshape(res, [n_out, n_in], [n_out, n_in]), [1, 0])


# ---- AffineGrid ---------------------------------------------------------------------

@jvp("AffineGrid")
def _affine_grid(b: Builder, op, tangents):
    """Linear in theta for a fixed size: the node itself on the tangent,
    k merged into the batch (the size's N with it)."""
    theta, size = op.operands
    t = tangents[0]
    if t is None:
        return [None]
    sd, thd = dims(size), dims(theta)
    if sd is None or sd[0] is None or thd is None or thd[1] is None:
        raise UnsupportedOp("AffineGrid needs the length of its size operand and theta's "
                            "spatial rank")
    n = sd[0]
    return [b.node_on_merged_batch(op, t, lambda merged: [b.concat(
        [b.shape(merged, 0, 1), b.slice(size, [0], [1], [n], tensor_type([n - 1], i64()))], 0)])]


@transpose("AffineGrid")
def _t_affine_grid(b: Builder, op, cts, linear):
    """grid[n, p, i] = sum_j theta[n, i, j] base[p, j], base = (coordinates, 1):
    adj theta[n] = ct[n]^T base, the coordinates read off the node on an
    identity theta, the constant column a sum of the cotangent."""
    theta, size, ct = op.operands[0], op.operands[1], cts[0]
    s = dims(theta)[1]  # spatial rank: theta [N, s, s + 1], grid [N, *spatial, s]
    spatial = dims(ct)[1:-1]
    points = int(np.prod(spatial)) if None not in spatial else None
    n_points = b.ints([points]) if points is not None else \
        b.reduce("ReduceProd", b.shape(ct, 1, s + 1), [0], True, out=[1])
    elem = element_type(theta)
    dtype = np.float64 if isinstance(elem, ir.F64Type) else np.float32
    eye = b.constant(ir.DenseElementsAttr.get(np.eye(s, s + 1, dtype=dtype)[None]))
    eye = eye if isinstance(elem, (ir.F64Type, ir.F32Type)) else b.cast_like(eye, theta)
    one_size = b.concat([b.ints([1, 1]), b.slice(size, [0], [2], [s + 2],
                                                 tensor_type([s], i64()))], 0)
    coords = b.op("AffineGrid", [eye, one_size], tensor_type([1] + spatial + [s], elem),
                  **verbatim_attributes(op))
    coords = b.reshape_to(coords, b.concat([n_points, b.ints([s])], 0), [points, s])
    flat = b.reshape_to(ct, b.concat([b.shape(ct, 0, 1), n_points, b.ints([s])], 0),
                        [None, points, s])
    by_coords = matmul(b, b.transpose(coords, [1, 0]), flat)  # [N, s (j), s (i)]
    by_one = b.reduce("ReduceSum", flat, [1], True)  # [N, 1, s]
    adj = b.transpose(b.concat([by_coords, by_one], 1), [0, 2, 1])
    return [adj, None]


# ---- RoiAlign (average mode, w.r.t. X) -------------------------------------------------

@jvp("RoiAlign")
def _roi_align(b: Builder, op, tangents):
    """Linear in X for fixed rois: per roi a matrix M [H*W, oh*ow], obtained by
    running the node on the H*W basis images; the tangent gathered at each
    roi's batch index is multiplied by it (Gather and MatMul transpose)."""
    x, _, bi = op.operands
    y = op.results[0]
    if tangents[1] is not None:
        raise UnsupportedOp("RoiAlign: derivative with respect to the rois")
    t = tangents[0]
    if t is None:
        return [None]
    if (attribute(op, "mode") or "avg") != "avg":
        raise UnsupportedOp("RoiAlign with mode='max'")
    xd, yd = dims(x), dims(y)
    if xd is None or yd is None or len(xd) != 4:
        raise UnsupportedOp("RoiAlign needs its input's rank (4)")
    if None in xd[2:]:
        return [_roi_align_at_run_time(b, op, t)]
    h, w = xd[2], xd[3]
    p = h * w
    if p * p > MAX_MATRIX_ENTRIES:
        raise UnsupportedOp(f"RoiAlign over {h} x {w} images: its derivative's {p} basis "
                            f"images of {p} pixels are too large")
    elem = element_type(x)
    dtype = np.float64 if isinstance(elem, ir.F64Type) else np.float32
    basis = b.constant(ir.DenseElementsAttr.get(np.eye(p, dtype=dtype).reshape(1, p, h, w)))
    if not isinstance(elem, (ir.F64Type, ir.F32Type)):
        basis = b.cast_like(basis, x)
    m = _on_images(b, op)(basis, p)
    o = None if None in yd[2:] else yd[2] * yd[3]
    mr = b.reshape(m, [0, p, -1], [yd[0], p, o])
    tg = b.op("Gather", [t, bi], tensor_type([None, yd[0]] + xd[1:], elem), axis=1)
    tr = b.reshape(tg, [0, 0, 0, -1], [None, yd[0], xd[1], p])
    prod = matmul(b, tr, mr)
    return [b.reshape_k(prod, t, y, [None] + yd)]


def _on_images(b: Builder, op) -> Callable[[ir.Value, int | None], ir.Value]:
    """The node with its rois and attributes, as a function of images [1, n,
    H, W] and n: every roi reads image 0, so its result [R, n, oh, ow] holds
    each roi's weights applied to each of the n images."""
    _, rois, bi = op.operands
    yd = dims(op.results[0])
    zeros = b.expand(b.int_scalar(0), b.shape(bi), dims(bi))
    return lambda images, n: b.op("RoiAlign", [images, rois, zeros],
                                  tensor_type([yd[0], n] + yd[2:], element_type(images)),
                                  **verbatim_attributes(op))


def _roi_align_at_run_time(b: Builder, op, t: ir.Value) -> ir.Value:
    """The same map over H x W known only at run time, without its H*W x H*W
    basis: RoiAlign's bilinear weights, its out-of-image test and its sample
    count factor into a row part A[ph, h] and a column part B[pw, w] (y = A
    x B^T per roi and channel). Run on the H row images (P = A Sb, Sb the
    row sums of B), the W column images (Q = Sa B) and a ones image (O = Sa
    Sb), the node gives A[ph, h] B[pw, w] = P Q / O, and 0 where O is 0 (the
    weights are not negative: A's or B's row is 0 there). The H + W + 1
    images hold H W (H + W + 1) entries, against (H W)^2 for the basis."""
    x, _, bi = op.operands
    y = op.results[0]
    xd, yd = dims(x), dims(y)
    elem = element_type(x)
    hv, wv = b.shape(x, 2, 3), b.shape(x, 3, 4)
    one = b.ints([1])
    run_on = _on_images(b, op)
    rows = b.expand(b.unsqueeze(_identity(b, hv, x), [0, 3]),  # image j: 1 on row j
                    b.concat([one, hv, hv, wv], 0), [1, None, None, None])
    cols = b.expand(b.unsqueeze(_identity(b, wv, x), [0, 2]),  # image j: 1 on column j
                    b.concat([one, wv, hv, wv], 0), [1, None, None, None])
    ones = b.expand(b.scalar(1.0, x), b.concat([one, one, hv, wv], 0), [1, 1, None, None])
    p, q, o = run_on(rows, None), run_on(cols, None), run_on(ones, 1)
    empty = b.compare("Equal", o, b.scalar(0.0, o))
    p = b.mul(p, b.where(empty, b.scalar(0.0, o), b.div(b.scalar(1.0, o), o)))
    tg = b.op("Gather", [t, bi], tensor_type([None, yd[0]] + xd[1:], elem), axis=1)
    # sum_h P[r, h, ij] sum_w T[k, r, c, h, w] Q[r, w, ij]: a MatMul, then a
    # product summed over h (no Einsum before opset 12)
    o2 = yd[2] * yd[3]

    def flat(v: ir.Value) -> ir.Value:  # [R, n, oh, ow] -> [1, R, 1, n, oh * ow]
        return b.unsqueeze(b.reshape(v, [0, 0, -1], [yd[0], None, o2]), [0, 2])
    by_w = matmul(b, tg, flat(q))
    summed = b.reduce("ReduceSum", b.mul(by_w, flat(p)), [3], False)
    return b.reshape(summed, b.concat([b.shape(summed, 0, 3), b.ints(yd[2:])], 0), [None] + yd)


def _identity(b: Builder, n: ir.Value, like: ir.Value) -> ir.Value:
    """The n x n identity (n a 1-D extent read at run time) in like's type."""
    iota = b.op("Range", [b.int_scalar(0), b.squeeze(n, [0]), b.int_scalar(1)],
                tensor_type([None], i64()))
    eye = b.compare("Equal", b.unsqueeze(iota, [1]), b.unsqueeze(iota, [0]))
    return b.cast_like(eye, like)


# ---- Col2Im ---------------------------------------------------------------------------

def _col2im_geometry(op) -> tuple[list[int], list[int], list[int], list[int], list[int],
                                  list[int]]:
    """image_shape, block_shape, strides, dilations, pads and the block
    count per image axis; the input's block count checked against them."""
    img, blk = constant_ints(op.operands[1]), constant_ints(op.operands[2])
    if img is None or blk is None:
        raise UnsupportedOp("Col2Im with image_shape/block_shape computed at run time")
    n = len(img)
    strides = attribute(op, "strides") or [1] * n
    dil = attribute(op, "dilations") or [1] * n
    pads = attribute(op, "pads") or [0] * (2 * n)
    outs = [(img[i] + pads[i] + pads[n + i] - dil[i] * (blk[i] - 1) - 1) // strides[i] + 1
            for i in range(n)]
    xd = dims(op.operands[0])
    if xd is not None and len(xd) == 3 and xd[2] is not None and xd[2] != math.prod(outs):
        # ONNX's inference does not compare them; ONNX Runtime refuses the model
        raise UnsupportedOp(f"its input has {xd[2]} blocks where image_shape {img}, "
                            f"block_shape {blk} and the strides, dilations and pads give "
                            f"{math.prod(outs)}")
    return img, blk, list(strides), list(dil), list(pads), outs


@jvp("Col2Im")
def _col2im(b: Builder, op, tangents):
    t = tangents[0]
    if t is None:
        return [None, None, None]
    _col2im_geometry(op)  # (checks the block count)
    return [b.node_on_merged_batch(op, t), None, None]


@transpose("Col2Im")
def _t_col2im(b: Builder, op, cts, linear):
    """The adjoint of Col2Im is im2col: strided Slices of the padded cotangent."""
    img, blk, s, d, p, outs = _col2im_geometry(op)
    ct = cts[0]
    cd = dims(ct)
    n = len(img)
    elem = element_type(ct)
    xp = ct
    if any(p):
        xp = b.pad(ct, [0, 0] + p[:n] + [0, 0] + p[n:], tensor_type(
            cd[:2] + [img[i] + p[i] + p[n + i] for i in range(n)], elem))
    patches = []
    for off in np.indices(blk).reshape(n, -1).T:
        starts = [int(o) * di for o, di in zip(off, d)]
        ends = [st + (o - 1) * si + 1 for st, o, si in zip(starts, outs, s)]
        sl = b.slice(xp, list(range(2, 2 + n)), starts, ends, tensor_type(cd[:2] + outs, elem), s)
        patches.append(b.unsqueeze(sl, [2]))
    stack = b.concat(patches, 2) if len(patches) > 1 else patches[0]
    kk = int(np.prod(blk))
    cols = b.reshape(stack, [0, -1, int(np.prod(outs))],
                     [cd[0], None if cd[1] is None else cd[1] * kk, int(np.prod(outs))])
    return [cols, None, None]


# ---- DFT ----------------------------------------------------------------------------
#
# Linear in its input (real pairs). The real adjoint of a complex-linear map
# is its conjugate transpose: DFT^H = n * inverse DFT, IDFT^H = DFT / n; a
# onesided output is zero-padded back to n, a real input keeps the real part,
# and padding/truncation to dft_length is undone.

def _dft_axis(op: ir.Operation, r: int) -> int:
    """The signal axis of a DFT, normalized, for an input of rank r."""
    if "axis" in _op_attrs_of(op):
        a = attribute(op, "axis")
    else:
        v = operand_or_none(op, 2)
        a = -2 if v is None else (constant_ints(v) or [None])[0]
        if a is None:
            raise UnsupportedOp("DFT with an axis computed at run time")
    return a + r if a < 0 else a


def _op_attrs_of(op: ir.Operation) -> dict:
    from onnx_ad_mlir import _op_table
    return _op_table.OPS[op.name.removeprefix("onnx.")]["attributes"]


def _emit_dft(b: Builder, v: ir.Value, length: ir.Value | None, axis: int, inverse: int,
              onesided: int, out: ir.Type) -> ir.Value:
    if b.opset >= 20:
        return b.op("DFT", [v, length, b.int_scalar(axis)], out, inverse=inverse, onesided=onesided)
    return b.op("DFT", [v, length], out, axis=axis, inverse=inverse, onesided=onesided)


@jvp("DFT")
def _dft(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    t = tangents[0]
    if t is None:
        return [None] * len(op.results)
    axis = _dft_axis(op, rank(x))
    return [_emit_dft(b, t, operand_or_none(op, 1), axis + 1, attribute(op, "inverse") or 0,
                      attribute(op, "onesided") or 0, b.derivative_type(y))]


@transpose("DFT")
def _t_dft(b: Builder, op, cts, linear):
    x, y = op.operands[0], op.results[0]
    xd, yd = dims(x), dims(y)
    if xd is None or yd is None:
        raise UnsupportedOp("transposing DFT needs its input's and result's ranks")
    r = len(xd)
    axis = _dft_axis(op, r)
    ln = operand_or_none(op, 1)
    n = xd[axis] if ln is None else (constant_ints(ln) or [None])[0]
    m = xd[axis]
    inverse, onesided = attribute(op, "inverse") or 0, attribute(op, "onesided") or 0
    if xd[-1] not in (1, 2):
        raise UnsupportedOp("transposing DFT needs its input's last extent (1: real, 2: complex)")
    if inverse and onesided and xd[-1] != 2:
        raise UnsupportedOp("transposing an inverse onesided DFT needs a complex input")
    rest = [None] * (len(op.operands) - 1)
    if n is None or m is None or yd[axis] is None:
        return [_t_dft_at_run_time(b, op, cts[0], axis, inverse, onesided)] + rest
    ct = cts[0]
    elem = element_type(ct)
    if inverse and onesided:
        return [_t_irfft(b, ct, xd, yd, axis)] + rest
    if onesided and yd[axis] < n:
        ct = _fit_axis(b, ct, axis, n)
    back = _emit_dft(b, ct, b.int_scalar(n), axis, 1 - inverse, 0,
                     tensor_type(dims(ct), elem))
    back = b.mul(back, b.scalar(float(n) if not inverse else 1.0 / n, back))
    if xd[-1] == 1:
        cd = list(dims(back))
        cd[-1] = 1
        back = b.slice(back, [r - 1], [0], [1], tensor_type(cd, elem))
    return [_fit_axis(b, back, axis, m)] + rest


def _fit_axis(b: Builder, v: ir.Value, axis: int, m: int) -> ir.Value:
    """v cut to, or zero-padded up to, m entries along a static axis."""
    cd = list(dims(v))
    n = cd[axis]
    if m == n:
        return v
    cd[axis] = m
    if m < n:
        return b.slice(v, [axis], [0], [m], tensor_type(cd, element_type(v)))
    pads = [0] * (2 * len(cd))
    pads[len(cd) + axis] = m - n
    return b.pad(v, pads, tensor_type(cd, element_type(v)))


def _t_irfft(b: Builder, ct: ir.Value, xd: list, yd: list, axis: int) -> ir.Value:
    """Adjoint of the inverse onesided DFT (irfft: m half-spectrum bins -> n
    real samples, y_j = 1/n sum_k c_k Re(X_k e^{2 pi i kj/n}) with c_k = 1 for
    k = 0 and k = n/2, else 2): the onesided forward DFT of the real
    cotangent, bin k scaled by c_k / n, cut or zero-padded to m bins.
    That map is ONNX's reference (numpy's irfft). ONNX Runtime 1.32 computes
    it where m = n // 2 + 1, the half spectrum an rfft gives, but another map
    at most other m (measured for n < 12): there this is the reference's adjoint."""
    n, m = yd[axis], xd[axis]
    r = len(xd)
    elem = element_type(ct)
    h = n // 2 + 1
    cd = list(dims(ct))
    cd[axis], cd[-1] = h, 2
    spec = _emit_dft(b, ct, b.int_scalar(n), axis, 0, 1, tensor_type(cd, elem))
    c = np.full(h, 2.0 / n)
    c[0] = 1.0 / n
    if n % 2 == 0:
        c[-1] = 1.0 / n
    shape = [h] + [1] * (r - 1 - axis)
    scale = b.cast_like(b.constant(ir.DenseElementsAttr.get(c.reshape(shape))), spec) \
        if not isinstance(elem, ir.F64Type) else \
        b.constant(ir.DenseElementsAttr.get(c.reshape(shape)))
    return _fit_axis(b, b.mul(spec, scale), axis, m)


# With a signal length known only at run time (a Fourier layer exported for
# any resolution), the same adjoints read n and m off the values' shapes.

def _t_dft_at_run_time(b: Builder, op, ct: ir.Value, axis: int, inverse: int,
                       onesided: int) -> ir.Value:
    x = op.operands[0]
    elem = element_type(ct)
    r = rank(x)
    m = b.shape(x, axis, axis + 1)
    ln = operand_or_none(op, 1)
    if inverse and onesided:
        back = _t_irfft_at_run_time(b, ct, axis)
    else:
        if onesided:  # the half spectrum zero-padded back to all n bins
            n = m if ln is None else b.reshape(ln, [1], [1])
            ct = _fit_axis_at_run_time(b, ct, axis, n)
        back = _emit_dft(b, ct, None, axis, 1 - inverse, 0,
                         tensor_type(_unknown_at(ct, axis), elem))
        n = b.cast_like(b.shape(back, axis, axis + 1), back)
        back = b.div(back, n) if inverse else b.mul(back, n)
        if dims(x)[-1] == 1:
            back = b.slice(back, [r - 1], [0], [1], tensor_type(dims(back)[:-1] + [1], elem))
        if ln is None:
            return back
    return _fit_axis_at_run_time(b, back, axis, m)


def _t_irfft_at_run_time(b: Builder, ct: ir.Value, axis: int) -> ir.Value:
    """_t_irfft with n read off the cotangent and the bin weights c_k / n
    built at run time: 1 at k = 0 and at 2k = n, else 2."""
    r = rank(ct)
    spec_dims = _unknown_at(ct, axis)
    spec_dims[-1] = 2
    spec = _emit_dft(b, ct, None, axis, 0, 1, tensor_type(spec_dims, element_type(ct)))
    n = b.shape(ct, axis, axis + 1)
    bins = b.op("Range", [b.int_scalar(0), b.squeeze(b.shape(spec, axis, axis + 1), [0]),
                          b.int_scalar(1)], tensor_type([None], i64()))
    ends = b.ew("Or", b.compare("Equal", bins, b.ints([0])),
                b.compare("Equal", b.add(bins, bins), n))
    c = b.where(ends, b.scalar(1.0, spec), b.scalar(2.0, spec))
    c = b.div(c, b.cast_like(n, spec))
    c = b.unsqueeze(c, list(range(1, r - axis)))
    return b.mul(spec, c)


def _unknown_at(v: ir.Value, axis: int) -> list:
    d = list(dims(v))
    d[axis] = None
    return d


def _fit_axis_at_run_time(b: Builder, v: ir.Value, axis: int, m: ir.Value) -> ir.Value:
    """v cut to, or zero-padded up to, m entries along axis (m: a 1-D i64
    value of one element)."""
    r = rank(v)
    pads: list = [0] * (2 * r)
    pads[r + axis] = b.ew("Max", b.sub(m, b.shape(v, axis, axis + 1)), b.ints([0]))
    out = tensor_type(_unknown_at(v, axis), element_type(v))
    padded = b.pad(v, pads, out)
    return b.op("Slice", [padded, b.ints([0]), m, b.ints([axis])], out)
