"""Matrix products. MatMul and Gemm are bilinear: the JVP applies the op to
one tangent at a time, the transpose multiplies by the other factor,
transposed, and sums over broadcast batch axes."""
from __future__ import annotations

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from .. import symdims
from ..builder import (Builder, attribute, broadcast_dims, defining_op, dims, element_type,
                       is_float, op_type, operand_or_none, producer, rank, tensor_type)
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
        raise UnsupportedOp(f"MatMul needs the ranks of its operands (known: {ra}, {rc})")
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
    extents = _cotangent_extents(op, 0 if linear[0] else 1)
    if linear[0]:
        return [b.unbroadcast(matmul(b, ct, _swap_last(b, c)), a, extents), None]
    return [None, b.unbroadcast(matmul(b, _swap_last(b, a), ct), c, extents)]


def _cotangent_extents(op: ir.Operation, which: int) -> list | None:
    """Symbolic extents, past the direction axis, of the product the
    transpose above sums to operand `which`: the result's batch axes (every
    operand's batch broadcasts into them), then [M, K] or [K, N]."""
    r, a, c = (symdims.dims(v) for v in (op.results[0], *op.operands))
    if r is None or a is None or c is None:
        return None
    return r[1:-1] + [c[-2]] if which == 0 else r[1:-2] + [a[-1], r[-1]]


@jvp("Gemm")
def _gemm(b: Builder, op, tangents):
    # Y = alpha op(A) op(B) + beta C, op = optional transpose.
    a, c = op.operands[0], op.operands[1]
    alpha, beta = attribute(op, "alpha"), attribute(op, "beta")
    y = op.results[0]

    def factor(v: ir.Value, flag: str, r: int) -> ir.Value:
        # Gemm operands are matrices: the rank is known even when the type
        # does not say (e.g. a Loop result ONNX inference left unranked)
        return b.transpose(v, list(range(r - 2)) + [r - 1, r - 2]) if attribute(op, flag) else v

    terms = []
    if tangents[0] is not None:
        terms.append(matmul(b, factor(tangents[0], "transA", 3), factor(c, "transB", 2)))
    if tangents[1] is not None:
        terms.append(matmul(b, factor(a, "transA", 2), factor(tangents[1], "transB", 3)))
    t = total(b, terms)
    if t is not None and alpha != 1.0:
        t = b.mul(t, b.scalar(alpha, y))
    bias = operand_or_none(op, 2)
    if len(tangents) > 2 and tangents[2] is not None and bias is not None:
        tb = b.align(tangents[2], 2)
        tb = tb if beta == 1.0 else b.mul(tb, b.scalar(beta, y))
        t = tb if t is None else b.add(t, tb)
    return [None if t is None else b.fit(t, y)]


# ---- convolution --------------------------------------------------------------
#
# Conv and ConvTranspose are bilinear in (X, W). A tangent of X has its
# direction axis merged into the batch ([k, N, C, ...] -> [k*N, C, ...]); a
# tangent of W folds k into the output channels (group-major, so grouped
# convolutions stay grouped) and the result is unfolded again. Transposes:
# Conv w.r.t. X is ConvTranspose (and vice versa), w.r.t. W a Conv of the
# input and the cotangent with batch and channel axes swapped (strides and
# dilations exchanged). No dense matrices; geometry is made explicit
# (auto_pad/output_shape resolved to pads) whenever spatial extents are static.

_GEOMETRY = ("kernel_shape", "strides", "dilations", "pads", "group", "auto_pad",
             "output_padding", "output_shape")


def _verbatim(op: ir.Operation) -> dict:
    return {k: attribute(op, k) for k in _GEOMETRY if k in op.attributes}


def conv_geometry(op: ir.Operation, transposed: bool) -> dict | None:
    """Explicit attributes (kernel_shape, strides, dilations, pads, group and
    output_padding for ConvTranspose) with auto_pad/output_shape resolved, or
    None when that needs spatial extents that are not static."""
    x, w = op.operands[0], op.operands[1]
    xd, wd = dims(x), dims(w)
    if xd is None or wd is None:
        return None
    n = len(wd) - 2
    kernel = attribute(op, "kernel_shape") or wd[2:]
    if None in kernel:
        return None
    strides = attribute(op, "strides") or [1] * n
    dil = attribute(op, "dilations") or [1] * n
    pads = list(attribute(op, "pads") or [0] * (2 * n))
    auto = attribute(op, "auto_pad") or "NOTSET"
    group = attribute(op, "group") or 1
    out = {"kernel_shape": list(kernel), "strides": list(strides), "dilations": list(dil),
           "group": group}
    spatial = xd[2:]
    if not transposed:
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            for i in range(n):
                if strides[i] == 1:  # the output keeps the input's extent, whatever it is
                    tot = (kernel[i] - 1) * dil[i]
                elif spatial[i] is None:
                    return None
                else:
                    o = -(-spatial[i] // strides[i])
                    tot = max(0, (o - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 -
                              spatial[i])
                lo = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
                pads[i], pads[n + i] = lo, tot - lo
        elif auto == "VALID":
            pads = [0] * (2 * n)
        out["pads"] = pads
        return out
    opad = list(attribute(op, "output_padding") or [0] * n)
    oshape = attribute(op, "output_shape")
    if oshape or auto in ("SAME_UPPER", "SAME_LOWER"):
        if oshape and None in spatial:
            return None
        for i in range(n):
            tot = opad[i] + (kernel[i] - 1) * dil[i] + 1
            if oshape:
                tot += strides[i] * (spatial[i] - 1) - oshape[-n + i]
            else:  # the target is in * stride: the extent cancels
                tot -= strides[i]
            if tot < 0:
                # An output_shape beyond the natural extent: ONNX Runtime pads
                # nothing and leaves the extra trailing rows empty, which is
                # what a larger output_padding does (pads stay >= 0).
                opad[i] -= tot
                tot = 0
            lo = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
            pads[i], pads[n + i] = lo, tot - lo
    elif auto == "VALID":
        pads = [0] * (2 * n)
    out["pads"] = pads
    out["output_padding"] = opad
    return out


def _conv_attrs(op: ir.Operation, transposed: bool) -> dict:
    return conv_geometry(op, transposed) or _verbatim(op)


def _k(b: Builder, t: ir.Value) -> ir.Value:
    return b.shape(t, 0, 1)


def _channel_factor(s: ir.Value, r: int, c: int) -> bool:
    """s broadcasts onto a rank-r [N, C, ...] value as one factor per channel
    (or one in all): no direction axis, so it is not the derivative factor."""
    d = dims(s)
    if d is None or len(d) > r or not is_float(s):
        return False
    full = [1] * (r - len(d)) + list(d)
    return full[0] == 1 and full[1] in (1, c) and all(e == 1 for e in full[2:])


def _factors(v: ir.Value, top: bool = True) -> list[ir.Value]:
    """The leaves of the Mul tree defining v, descending only into products
    nothing else reads (so none is computed twice after a regrouping)."""
    mul = producer(v, "Mul")
    if mul is None or (not top and sum(1 for _ in v.uses) != 1):
        return [v]
    return [f for a in mul.operands for f in _factors(a, False)]


def _scale_into_weight(b: Builder, op: ir.Operation, t: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(t', w') with Conv(t, W) == Conv(t', w'): the per-input-channel factors
    of the product t (an eval-mode BatchNormalization's gain, its affine
    Mul's, with a Relu's elementwise mask between) move into the weights,
    W * s, which the runtime constant-folds: one pass over the tangent less
    per factor (BatchNormalization -> Relu -> Conv: DenseNet). Only when
    this Conv is t's only user (none yet, and no later primal user of x
    whose rule would read t); otherwise (t, W)."""
    x, w = op.operands[0], op.operands[1]
    xd = dims(x)
    unchanged = (t, w)
    if op_type(op) != "Conv" or (attribute(op, "group") or 1) != 1 or xd is None or \
            xd[1] is None or element_type(w) != element_type(t) or any(True for _ in t.uses):
        return unchanged
    for use in x.uses:
        user = getattr(use.owner, "operation", use.owner)
        if user.block == op.block and op.is_before_in_block(user):
            return unchanged
    leaves = _factors(t)
    scales = [f for f in leaves if _channel_factor(f, len(xd), xd[1]) and
              element_type(f) == element_type(t)]
    rest = [f for f in leaves if f not in scales]
    td = dims(t)
    if not scales or not rest or td is None or None in td[2:] or \
            broadcast_dims(*(dims(f) for f in rest)) != td:
        return unchanged  # the factors also set extents of t
    product = rest[0]
    for f in rest[1:]:
        product = b.mul(product, f)
    for f in scales:
        w = b.mul(w, f)
    return product, w




def _fold_conv(b: Builder, kind: str, x: ir.Value, t: ir.Value, y: ir.Value, attrs: dict,
               group: int) -> ir.Value:
    """Conv(x, t) for t = [k, M, C/g', *K] with k folded into the output
    channels ([k*M, ...]) and `group` groups, unfolded to [k, N, M, *S']."""
    td, yd = dims(t), dims(y)
    elem = element_type(t)
    folded = b.reshape(t, b.concat([b.ints([-1]), b.shape(t, 2)], 0), [None] + td[2:])
    attrs = dict(attrs, group=group)
    km = None if td[0] is None or td[1] is None else td[0] * td[1]
    conv = b.op(kind, [x, folded, None], tensor_type([yd[0], km] + yd[2:], elem), **attrs)
    r = len(yd)
    front = b.transpose(conv, [1, 0] + list(range(2, r)))
    split = b.reshape(front, b.concat([_k(b, t), b.shape(t, 1, 2), b.shape(x, 0, 1),
                                       b.shape(y, 2)], 0), [None, td[1], yd[0]] + yd[2:])
    return b.transpose(split, [0, 2, 1] + list(range(3, r + 1)))


def _conv_on_weight(b: Builder, kind: str, x: ir.Value, t: ir.Value, y: ir.Value,
                    attrs: dict) -> ir.Value:
    """kind(x, t) for a tangent t of the weights. Every Reshape on the way
    keeps the direction axis inside axis 0 of its operand (with k-free
    trailing extents), so the generic Reshape transpose stays exact."""
    g = attrs.get("group") or 1
    td, yd = dims(t), dims(y)
    r = len(td)
    elem = element_type(t)
    if kind == "Conv":  # W [M, C/g, *K], M group-major
        if g == 1:
            return _fold_conv(b, kind, x, t, y, attrs, 1)
        geom = conv_geometry_of(attrs, x)
        if geom is not None:
            return _grouped_weight_tangent(b, x, t, y, geom)
        # Spatial extents unknown: one convolution per group, on equal
        # Splits (the channel counts may be unknown too)
        xd = dims(x)
        mg = None if td[1] is None else td[1] // g
        cg = td[2] if td[2] is not None else None if xd[1] is None else xd[1] // g
        parts = zip(_equal_parts(b, t, g, [None, mg] + td[2:]),
                    _equal_parts(b, x, g, [xd[0], cg] + xd[2:]),
                    _equal_parts(b, y, g, [yd[0], mg] + yd[2:]))
        return b.concat([_fold_conv(b, kind, xi, ti, yi, attrs, 1) for ti, xi, yi in parts], 2)
    # ConvTranspose: W [C, M/g, *K]; output channels (group, k, M/g)
    moved = b.transpose(t, [0, 2, 1] + list(range(3, r)))
    merged = b.reshape(moved, b.concat([b.ints([-1]), b.shape(moved, 2)], 0),
                       [None, td[1]] + td[3:])
    folded = b.transpose(merged, [1, 0] + list(range(2, r - 1)))
    ry = len(yd)
    conv = b.op(kind, [x, folded, None], tensor_type([yd[0], None] + yd[2:], elem), **attrs)
    front = b.transpose(conv, [1, 0] + list(range(2, ry)))
    mg = td[2]
    split = b.reshape(front, b.concat([b.ints([g]), _k(b, t), b.shape(t, 2, 3), b.shape(x, 0, 1),
                                       b.shape(y, 2)], 0), [g, None, mg, yd[0]] + yd[2:])
    back = b.transpose(split, [1, 3, 0, 2] + list(range(4, ry + 2)))
    return b.reshape_k(back, t, y, [None] + yd)


def _equal_parts(b: Builder, v: ir.Value, g: int, part: list) -> list[ir.Value]:
    """v split into g equal parts along axis 1 (Split without sizes: no
    extent needed)."""
    sizes = {"num_outputs": g} if b.opset >= 18 else {}
    return b.create("Split", [v], [tensor_type(part, element_type(v))] * g, axis=1, **sizes)


def conv_geometry_of(attrs: dict, x: ir.Value) -> dict | None:
    """attrs if explicit (pads, kernel_shape...) and x's extents static."""
    xd = dims(x)
    if "pads" not in attrs or "kernel_shape" not in attrs or xd is None or None in xd[1:]:
        return None
    return attrs


def _grouped_weight_tangent(b: Builder, x: ir.Value, t: ir.Value, y: ir.Value,
                            geom: dict) -> ir.Value:
    """Conv(x, t) for grouped convolutions as one MatMul of the tangent with
    the primal patches of x (im2col): k-uniform, so it transposes exactly."""
    g, ks, s, d, p = (geom[n] for n in ("group", "kernel_shape", "strides", "dilations", "pads"))
    xd, td, yd = dims(x), dims(t), dims(y)
    n = len(ks)
    elem = element_type(x)
    outs = yd[2:]
    if None in outs:
        raise UnsupportedOp("grouped Conv needs static output extents")
    padded_dims = [xd[0], xd[1]] + [xd[2 + i] + p[i] + p[n + i] for i in range(n)]
    xp = x
    if any(p):
        xp = b.pad(x, [0, 0] + p[:n] + [0, 0] + p[n:], tensor_type(padded_dims, elem))
    offsets = np.indices(ks).reshape(n, -1).T
    patches = []
    for off in offsets:
        starts = [int(o) * di for o, di in zip(off, d)]
        ends = [st + (o - 1) * si + 1 for st, o, si in zip(starts, outs, s)]
        sl = b.slice(xp, list(range(2, 2 + n)), starts, ends, tensor_type(xd[:2] + outs, elem), s)
        patches.append(b.unsqueeze(sl, [2]))
    kk = len(offsets)
    stack = b.concat(patches, 2) if kk > 1 else patches[0]  # [N, C, K, *O]
    c, m = xd[1], td[1]
    o = int(np.prod(outs))
    grouped = b.reshape(stack, b.ints([0, g, (c // g) * kk, o]), [xd[0], g, (c // g) * kk, o])
    moved = b.transpose(grouped, [1, 2, 0, 3])  # [g, C/g*K, N, O]
    no = None if xd[0] is None else xd[0] * o
    pmat = b.reshape(moved, b.ints([g, (c // g) * kk, -1]), [g, (c // g) * kk, no])
    tw = b.reshape(t, b.ints([-1, g, m // g, (c // g) * kk]), [td[0], g, m // g, (c // g) * kk])
    prod = matmul(b, tw, pmat)  # [k, g, M/g, N*O]
    split = b.reshape(prod, b.concat([b.ints([-1, g, m // g]), b.shape(x, 0, 1), b.ints(outs)], 0),
                      [td[0], g, m // g, xd[0]] + outs)
    back = b.transpose(split, [0, 3, 1, 2] + list(range(4, 4 + n)))
    return b.reshape_k(back, t, y, [None] + yd)


def _bias_tangent(b: Builder, t: ir.Value, y: ir.Value) -> ir.Value:
    r = rank(y)
    return b.unsqueeze(t, [1] + list(range(3, r + 1)))  # [k, M] -> [k, 1, M, 1...]


def _check_channels(kind: str, x: ir.Value, w: ir.Value, group: int) -> None:
    """Static channel counts that contradict the group: ONNX shape inference
    lets them through and ONNX Runtime fails only when the model runs; the
    rules would build derivative convolutions of the same bad shapes."""
    c, (w0, w1) = dims(x)[1], dims(w)[:2]
    if kind == "Conv":
        bad = c is not None and w1 is not None and c != w1 * group or \
            w0 is not None and w0 % group != 0
        what = f"W {dims(w)} (C = W[1] * group, W[0] a multiple of group)"
    else:  # ConvTranspose: W [C, M/group, *K]
        bad = c is not None and (w0 is not None and c != w0 or c % group != 0)
        what = f"W {dims(w)} (C = W[0], a multiple of group)"
    if bad:
        raise UnsupportedOp(f"input channels {c} and group {group} do not fit {what}")


def _conv_jvp(kind: str):
    def rule(b: Builder, op, tangents):
        x, w = op.operands[0], op.operands[1]
        y = op.results[0]
        if rank(x) is None or rank(w) is None or rank(y) is None:
            raise UnsupportedOp(f"{kind} needs the ranks of its operands")
        if rank(x) != rank(w):
            raise UnsupportedOp(f"input of rank {rank(x)} and weight of rank {rank(w)}: "
                                "both have two leading axes and the same spatial ones")
        if rank(x) >= 2:
            _check_channels(kind, x, w, attribute(op, "group") or 1)
        kernel = attribute(op, "kernel_shape") if "kernel_shape" in op.attributes else None
        if kernel is not None and any(k != e for k, e in zip(kernel, dims(w)[2:])
                                      if e is not None):
            # ONNX Runtime refuses it; inference sizes the result by the attribute
            raise UnsupportedOp(f"kernel_shape {list(kernel)} contradicts W {dims(w)}")
        attrs = _conv_attrs(op, kind == "ConvTranspose")
        terms = []
        if tangents[0] is not None:
            t, wt = _scale_into_weight(b, op, tangents[0])
            terms.append(b.on_merged_batch(t, y, lambda merged, result: b.op(
                kind, [merged, wt, None], result, **attrs)))
        if tangents[1] is not None:
            terms.append(_conv_on_weight(b, kind, x, tangents[1], y, attrs))
        if len(tangents) > 2 and tangents[2] is not None and operand_or_none(op, 2) is not None:
            terms.append(_bias_tangent(b, tangents[2], y))
        return [total(b, terms)]
    return rule


jvp("Conv")(_conv_jvp("Conv"))
jvp("ConvTranspose")(_conv_jvp("ConvTranspose"))


def _static_geometry(op: ir.Operation, transposed: bool) -> dict:
    g = conv_geometry(op, transposed)
    if g is None:
        raise UnsupportedOp("reverse mode through convolution needs a static kernel, and "
                            "static spatial extents with output_shape")
    return g


def run_time_pads(b: Builder, x: ir.Value, y: ir.Value, kernel: list[int], strides: list[int],
                  dilations: list[int], auto_pad: str, pads: list[int], pool: bool
                  ) -> tuple[ir.Value, ir.Value]:
    """(begins, total) [n] i64: the pads with which the windows of a Conv or
    a pool tile x's padded spatial extents exactly into y's, read at run
    time: total = (out - 1) * stride + (kernel - 1) * dilation + 1 - in.
    Without auto_pad SAME, begins are the pads attribute and the ends the
    rest (negative: ceil_mode windows that skip the end of the input). With
    it, ONNX Runtime halves the total -- the odd one at the end for
    SAME_UPPER, rounded toward zero -- after clamping it at 0 for a Conv (as
    conv_geometry does) but not for a pool, whose windows may then start
    past the input's start."""
    n = len(kernel)
    span = b.ints([(k - 1) * d + 1 for k, d in zip(kernel, dilations)])
    total = b.sub(b.add(b.mul(b.sub(b.shape(y, 2, 2 + n), b.ints([1] * n)), b.ints(strides)),
                        span), b.shape(x, 2, 2 + n))
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return b.ints(pads[:n] if auto_pad != "VALID" else [0] * n), total
    if pool and any(d != 1 for d in dilations):
        raise UnsupportedOp("auto_pad SAME with dilations on spatial extents known only at "
                            "run time: ONNX Runtime pads for the undilated window, ONNX for "
                            "the dilated one (refused rather than built on either)")
    zero, two = b.ints([0] * n), b.ints([2] * n)
    if not pool:
        total = b.where(b.compare("Less", total, zero), zero, total)
    half = total if auto_pad == "SAME_UPPER" else b.add(total, b.ints([1] * n))
    if not pool:  # half >= 0: any integer Div rounds it down
        return b.div(half, two), total
    # toward zero whatever the runtime's integer Div rounds a negative half to
    return b.where(b.compare("Less", half, zero), b.neg(b.div(b.neg(half), two)),
                   b.div(half, two)), total


def spatial_pads(b: Builder, begins: ir.Value, total: ir.Value) -> ir.Value:
    """The Pad operand of an [N, C, *S] value padded by run_time_pads."""
    zeros = b.ints([0, 0])
    return b.concat([zeros, begins, zeros, b.sub(total, begins)], 0)


def _run_time_geometry(op: ir.Operation) -> dict:
    """A Conv's explicit geometry when only its auto_pad SAME pads need the
    run-time extents (pads 0: run_time_pads places the windows)."""
    wd = dims(op.operands[1])
    kernel = attribute(op, "kernel_shape") or (None if wd is None else wd[2:])
    if attribute(op, "auto_pad") not in ("SAME_UPPER", "SAME_LOWER") or kernel is None or \
            None in kernel or dims(op.operands[0]) is None:
        raise UnsupportedOp("reverse mode through Conv needs the ranks of its operands and "
                            "a static kernel")
    n = len(kernel)
    return {"kernel_shape": list(kernel), "strides": attribute(op, "strides") or [1] * n,
            "dilations": attribute(op, "dilations") or [1] * n,
            "group": attribute(op, "group") or 1, "pads": [0] * (2 * n)}


def conv_weight_grad(b: Builder, inp: ir.Value, cot: ir.Value, geom: dict,
                     w_like: ir.Value) -> ir.Value:
    """dW[m, c, *K] = sum_n,o cot[n, m, o] inp_padded[n, g(m)*C/g + c, o*s + K*d]:
    a Conv with batch and channels swapped, strides and dilations exchanged."""
    g = geom["group"]
    idd, wd = dims(inp), dims(w_like)
    r = len(idd)
    elem = element_type(cot)
    cin = idd[1]
    cd = dims(cot)
    if g == 1 and cin is not None and None not in idd[2:] and None not in cd[2:]:
        return _weight_grad_matmul(b, inp, cot, geom, w_like)
    if g == 1:
        data = b.transpose(inp, [1, 0] + list(range(2, r)))
    else:
        cg = None if cin is None else cin // g
        split = b.reshape(inp, b.concat([b.ints([0, g, -1]), b.shape(inp, 2)], 0),
                          [idd[0], g, cg] + idd[2:])
        moved = b.transpose(split, [2, 1, 0] + list(range(3, r + 1)))
        data = b.reshape(moved, b.concat([b.ints([0, -1]), b.shape(inp, 2)], 0),
                         [cg, None] + idd[2:])
    cd = dims(cot)
    kern = _swap01(b, cot)
    n = r - 2
    full = b.op("Conv", [data, kern, None], tensor_type([wd[1], cd[1]] + [None] * n, elem),
                strides=geom["dilations"], dilations=geom["strides"], pads=geom["pads"], group=g)
    k = geom["kernel_shape"]
    cut = b.slice(full, list(range(2, r)), [0] * n, k, tensor_type([wd[1], cd[1]] + k, elem))
    return b.transpose(cut, [1, 0] + list(range(2, r)))


def _weight_grad_matmul(b: Builder, inp: ir.Value, cot: ir.Value, geom: dict,
                        w_like: ir.Value) -> ir.Value:
    """Ungrouped weight gradient as one MatMul: cot [M, N*O] times the patches
    of the channels-last input [N*O, C*K] (im2col). One fat GEMM instead of a
    Conv whose kernel is the whole cotangent image (slow skinny GEMMs)."""
    idd, cd = dims(inp), dims(cot)
    r = len(idd)
    n = r - 2
    elem = element_type(cot)
    c, m, outs = idd[1], cd[1], cd[2:]
    k, s, d, p = geom["kernel_shape"], geom["strides"], geom["dilations"], geom["pads"]
    last = b.transpose(inp, [0] + list(range(2, r)) + [1])          # [N, *H, C]
    if any(p):
        pads = [0] + p[:n] + [0] + [0] + p[n:] + [0]
        last = b.pad(last, pads, tensor_type(
            [idd[0]] + [idd[2 + i] + p[i] + p[n + i] for i in range(n)] + [c], elem))
    parts = []
    for off in np.indices(k).reshape(n, -1).T:
        starts = [int(o) * di for o, di in zip(off, d)]
        ends = [st + (o - 1) * si + 1 for st, o, si in zip(starts, outs, s)]
        sl = b.slice(last, list(range(1, 1 + n)), starts, ends,
                     tensor_type([idd[0]] + outs + [c], elem), s)
        parts.append(b.unsqueeze(sl, [r]))
    kk = len(parts)
    stack = b.concat(parts, r) if kk > 1 else parts[0]                 # [N, *O, C, K]
    cols = b.reshape(stack, [-1, c * kk], [None, c * kk])               # [N*O, C*K]
    rows = b.reshape(_swap01(b, cot), [0, -1], [m, None])               # [M, N*O]
    dw = matmul(b, rows, cols)                                          # [M, C*K]
    return b.reshape(dw, [0, c] + list(k), [m, c] + list(k))


def _swap01(b: Builder, v: ir.Value) -> ir.Value:
    """v with axes 0 and 1 swapped; undoes such a Transpose instead of stacking one."""
    r = rank(v)
    perm = [1, 0] + list(range(2, r))
    owner = defining_op(v)
    if owner is not None and owner.name == "onnx.Transpose" and \
            attribute(owner, "perm") == perm:
        return owner.operands[0]
    return b.transpose(v, perm)


def _explicit(geom: dict, *names: str) -> dict:
    return {k: geom[k] for k in ("kernel_shape", "strides", "dilations", "pads", "group") + names
            if k in geom}


@transpose("Conv")
def _t_conv(b: Builder, op, cts, linear):
    x, w = op.operands[0], op.operands[1]
    ct = cts[0]
    if linear[0] and linear[1]:
        raise UnsupportedOp("Conv of two linear values is not linear")
    geom = conv_geometry(op, False)
    begins = total = None  # auto_pad SAME pads placed at run time
    if geom is None:
        geom = _run_time_geometry(op)
        if b.opset < 11:
            raise UnsupportedOp("reverse mode through auto_pad SAME on run-time spatial "
                                "extents needs opset >= 11 (pads read at run time)")
        begins, total = run_time_pads(b, x, ct, geom["kernel_shape"], geom["strides"],
                                      geom["dilations"], attribute(op, "auto_pad"), [], pool=False)
    out = [None] * len(op.operands)
    if linear[0]:
        out[0] = _conv_input_grad(b, x, w, ct, geom, begins)
    if linear[1]:
        inp = x
        if begins is not None:
            inp = b.op("Pad", [x, spatial_pads(b, begins, total)],
                       tensor_type(dims(x)[:2] + [None] * (rank(x) - 2), element_type(x)))
        out[1] = conv_weight_grad(b, inp, ct, geom, w)
    return out


def _conv_input_grad(b: Builder, x: ir.Value, w: ir.Value, ct: ir.Value, geom: dict,
                     begins: ir.Value | None) -> ir.Value:
    """The ConvTranspose of ct back onto x's extents. Static extents: the
    output_padding that reaches them. Run-time ones with stride 1: none
    needed. Otherwise the largest output_padding, then x's extents cut out
    at `begins` (the run-time pads when geom's are 0; else 0), the rest
    being outside x."""
    xd, cd = dims(x), dims(ct)
    s, d, p, k = geom["strides"], geom["dilations"], geom["pads"], geom["kernel_shape"]
    n = len(k)
    elem = element_type(ct)
    if begins is None and None not in xd[2:] and None not in cd[2:]:
        opad = [xd[2 + i] + p[i] + p[n + i] - s[i] * (cd[2 + i] - 1) - (k[i] - 1) * d[i] - 1
                for i in range(n)]
        return b.op("ConvTranspose", [ct, w, None], tensor_type([cd[0]] + xd[1:], elem),
                    output_padding=opad, **_explicit(geom))
    if begins is None and all(si == 1 for si in s):
        # stride 1: the transposed windows cover x's extents exactly, whatever they are
        grad = b.op("ConvTranspose", [ct, w, None], tensor_type([cd[0]] + xd[1:], elem),
                    output_padding=[0] * n, **_explicit(geom))
        symdims.alike(grad, x)
        return grad
    full = b.op("ConvTranspose", [ct, w, None], tensor_type([cd[0], xd[1]] + [None] * n, elem),
                output_padding=[si - 1 for si in s], **_explicit(geom))
    if begins is None:
        begins = b.ints([0] * n)
    return b.op("Slice", [full, begins, b.add(begins, b.shape(x, 2)),
                          b.ints(list(range(2, 2 + n)))], tensor_type([cd[0]] + xd[1:], elem))


@transpose("ConvTranspose")
def _t_conv_transpose(b: Builder, op, cts, linear):
    x, w = op.operands[0], op.operands[1]
    ct = cts[0]
    geom = _static_geometry(op, True)
    out = [None] * len(op.operands)
    if linear[0] and linear[1]:
        raise UnsupportedOp("ConvTranspose of two linear values is not linear")
    if linear[0]:
        if any(o >= s for o, s in zip(geom["output_padding"], geom["strides"])):
            raise UnsupportedOp("transposing ConvTranspose with output_padding >= strides")
        out[0] = b.op("Conv", [ct, w, None], tensor_type([dims(ct)[0]] + dims(x)[1:],
                                                         element_type(ct)), **_explicit(geom))
    if linear[1]:
        out[1] = conv_weight_grad(b, ct, x, geom, w)
    return out
