"""Pooling: MaxPool, AveragePool, LpPool, the global pools, MaxUnpool.

MaxPool with windows that tile the input reshapes them and weights by an
argmax mask. Otherwise it gathers the tangent at the primal's argmax (its
Indices output; a MaxPool producing Indices is added when the node has none);
that Gather transposes through MaxUnpool, one per window phase (windows of a
phase are disjoint, so their argmaxes are distinct), summed: no scatter-add. AveragePool and
LpPool use a window sum: a Conv with a ones kernel on [k*N*C, 1, *S] (k-uniform
reshapes, so Conv's transpose -- ConvTranspose -- handles reverse mode), scaled
per output position by a primal map. For AveragePool that map is
AveragePool(ones) / windowsum(ones): whatever divisor the runtime uses
(count_include_pad, ceil_mode, pads) it is matched exactly. Global pools are
reductions. AveragePool windows placed by auto_pad or ceil_mode on run-time
extents: before opset 11, forward mode runs the node itself on the tangent
with k merged into the batch and reverse mode refuses; from 11 on, Pad takes
run-time pads that place them, and the window sums are declared to have the
pool's extents.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from .. import symdims
from ..builder import (Builder, attribute, constant_value, dims, element_type, i64, producer, rank,
                       tensor_type, verbatim_attributes)
from ..registry import jvp, transpose
from .indexing import GATHER_TRANSPOSE_HOOKS
from .linalg import run_time_pads, spatial_pads
from .resampling import resample


# ---- MaxPool --------------------------------------------------------------------

def _window(op: ir.Operation) -> tuple[list[int], list[int], list[int], list[int], str]:
    """A pool's kernel_shape, strides, dilations and pads (defaults filled
    in; pads a fresh list) and auto_pad."""
    kernel = list(attribute(op, "kernel_shape"))
    n = len(kernel)
    strides = list(attribute(op, "strides") or [1] * n)
    dil = list((attribute(op, "dilations") if "dilations" in op.attributes else None) or [1] * n)
    pads = list(attribute(op, "pads") or [0] * (2 * n))
    return kernel, strides, dil, pads, attribute(op, "auto_pad") or "NOTSET"


def _check_output_extents(op: ir.Operation, x: ir.Value, y: ir.Value) -> None:
    """The pool's output extents as ONNX Runtime computes them, against the
    types (ONNX shape inference's). They differ for ceil_mode before opset
    22 (ONNX Runtime drops a last window that would start in the end
    padding, the rule opset 22 adopted) and for SAME padding with dilations
    (ONNX Runtime pads for the undilated window). There the model's types
    contradict what runs: refused rather than built on either."""
    xd, yd = dims(x), dims(y)
    if xd is None or yd is None:
        return
    kernel, strides, dil, pads, auto = _window(op)
    n = len(kernel)
    ceil = "ceil_mode" in op.attributes and attribute(op, "ceil_mode")
    for i in range(n):
        e, k, st, d = xd[2 + i], kernel[i], strides[i], dil[i]
        if e is None or yd[2 + i] is None:
            continue
        head = pads[i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = (-(-e // st) - 1) * st + k - e
            head = total // 2 if auto == "SAME_UPPER" else total - total // 2
        else:
            total = 0 if auto == "VALID" else pads[i] + pads[n + i]
        span = e + total - d * (k - 1) - 1
        runs = (-(-span // st) if ceil else int(span / st)) + 1
        if ceil and (runs - 1) * st >= e + head:
            runs -= 1
        if runs != yd[2 + i]:
            raise UnsupportedOp(
                f"the output extent on spatial axis {i} is {yd[2 + i]} by ONNX shape inference "
                f"but {runs} in ONNX Runtime (" + (
                    "ceil_mode: its last window would start in the end padding; opset 22 "
                    "settles this as ONNX Runtime does)" if ceil else
                    f"auto_pad {auto} with dilations: it pads for the undilated window)"))


@jvp("MaxPool")
def _max_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    _check_output_extents(op, x, y)
    idx = None
    if len(op.results) > 1 and not isinstance(op.results[1].type, ir.NoneType) and \
            (attribute(op, "storage_order") or 0) == 0:
        idx = op.results[1]
    kernel = _tiling_kernel(op, x, y)
    t, pos = _through_relu(b, tangents[0], x, y)
    if kernel is not None and _exact_tiles(x, y, kernel) and b.opset >= 13:
        return [_max_pool_tiles(b, t, x, y, kernel, pos)] + [None] * (len(op.results) - 1)
    if kernel is not None:  # windows tile the input: reshapes, a mask, a ReduceSum
        xv = _window_view(b, x, 2, kernel, dims(y)[2:])
        n = len(kernel)
        yv = b.unsqueeze(y, [3 + 2 * i for i in range(n)])
        hit = b.cast_like(_at_max(b, xv, yv), x)
        weight = b.div(hit, b.reduce("ReduceSum", hit, [3 + 2 * i for i in range(n)], True))
        tv = _window_view(b, tangents[0], 3, kernel, dims(y)[2:])
        return [b.reduce("ReduceSum", b.mul(tv, weight), [4 + 2 * i for i in range(n)], False)] + \
            [None] * (len(op.results) - 1)
    patches = _max_pool_conv_patches(b, op, t, x, y, pos)
    if patches is not None:
        return [patches] + [None] * (len(op.results) - 1)
    if idx is None and (b.opset < 8 or _unpool_groups(op, x, y) is None) and b.opset < 16:
        # no scatter-add and no MaxUnpool transpose: window masks
        return [_max_pool_masks(b, op, tangents[0], x, y)] + [None] * (len(op.results) - 1)
    if idx is None:
        if len(op.results) < 2:
            raise UnsupportedOp("MaxPool before opset 8 has no Indices output")
        made = b.create("MaxPool", [x], [y.type, tensor_type(dims(y), i64())],
                        **verbatim_attributes(op, ("storage_order",)))
        idx = made[1]
    t, xd = tangents[0], dims(x)
    if xd is not None and None in xd and symdims.one_direction(t):
        # reverse mode's linear program, run-time extents: the flat extent
        # read off x flattened (a primal value), so the transpose's shape
        # read keeps no linear op alive
        x_flat = b.reshape(x, [-1], [None])
        flat = b.reshape(t, b.concat([b.shape(t, 0, 1), b.shape(x_flat)], 0), [None, None])
    else:
        flat = b.reshape(t, [0, -1], [None, None])
    return [b.op("Gather", [flat, idx], b.derivative_type(y), axis=1)] + [None] * (len(op.results) - 1)


def _at_max(b: Builder, x: ir.Value, m: ir.Value) -> ir.Value:
    """x == m for m >= x (a max over windows containing x): Equal, or before
    opset 11 (no float Equal) not(x < m)."""
    if b.opset >= 11:
        return b.compare("Equal", x, m)
    less = b.compare("Less", x, m)
    return b.op("Not", [less], tensor_type(dims(less), ir.IntegerType.get_signless(1)))


def _exact_tiles(x: ir.Value, y: ir.Value, kernel: list[int]) -> bool:
    """Windows tile x exactly (no remainder) and C and the spatial extents are static."""
    xd, yd = dims(x), dims(y)
    return None not in xd[1:] and None not in yd[1:] and \
        all(xd[2 + i] == yd[2 + i] * k for i, k in enumerate(kernel))


def _upsample(b: Builder, v: ir.Value, kernel: list[int], out: list) -> ir.Value:
    """Each element of v [N, C, *O] repeated over its window: [N, C, *(O * kernel)]
    (before Resize-11, nearest is asymmetric and rounds down by definition)."""
    nearest = {"mode": "nearest"} if b.opset < 11 else dict(
        mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return resample(b, v, [1.0, 1.0] + [float(k) for k in kernel],
                     tensor_type(out, element_type(v)), nearest)


def _tile_pool(b: Builder, t: ir.Value, kernel: list[int], y: ir.Value) -> ir.Value:
    """Window means of a derivative t [k, N, C, *S]: one AveragePool over [k*N, C, *S]."""
    td, yd = dims(t), dims(y)
    merged = b.reshape(t, [-1] + td[2:], [None] + td[2:])
    pooled = b.op("AveragePool", [merged], tensor_type([None] + yd[1:], element_type(t)),
                  kernel_shape=list(kernel), strides=list(kernel))
    return b.reshape_k(pooled, t, y, [td[0]] + yd)


def _plain_layout(b: Builder, y: ir.Value) -> ir.Value:
    """y through a Reshape to its own extents ([-1] + static trailing ones).
    ONNX Runtime runs a Resize of a pooled value in its blocked layout
    (NCHWc) and then converts the full-size result back for the Equal; the
    Reshape (which it keeps) makes it convert the pooled value, 1/K the
    size, and upsample in NCHW: 144 -> 117 us at [8, 16, 32, 32] (ORT 1.32,
    1 thread)."""
    yd = dims(y)
    if yd is None or None in yd[1:] or 0 in yd[1:]:
        return y
    return b.reshape(y, [-1] + yd[1:], yd)


def _max_pool_tiles(b: Builder, t: ir.Value, x: ir.Value, y: ir.Value, kernel: list[int],
                    pos: ir.Value | None = None) -> ir.Value:
    """MaxPool whose windows tile x exactly: the tangent at the window's max
    (shared among ties) = mean(t * hit) / mean(hit) per window, hit = (x ==
    upsampled y). Only 4-D elementwise ops, AveragePool and Resize, which
    the runtime has fast kernels for (no 6-D broadcasts, no Indices). `pos`
    (pooled-size 0/1, see _through_relu) joins the per-window factor."""
    hit = b.cast_like(_at_max(b, x, _upsample(b, _plain_layout(b, y), kernel, dims(x))), x)
    share = b.div(b.scalar(1.0, x) if pos is None else pos,
                  b.op("AveragePool", [hit], y.type, kernel_shape=list(kernel),
                       strides=list(kernel)))
    return b.mul(_tile_pool(b, b.mul(t, hit), kernel, y), share)


MAX_PATCH_WINDOW = 27  # window sizes up to 3x3x3 take the patch-Conv path


def _max_pool_conv_patches(b: Builder, op, t: ir.Value, x: ir.Value, y: ir.Value,
                           pos: ir.Value | None) -> ir.Value | None:
    """Overlapping (or padded, dilated, ceil-mode) windows with static extents:
    the K window taps of every output as channels of one Conv with a one-hot
    kernel E [K, 1, *kernel] on [N*C, 1, *S] (x padded with the lowest finite
    value, so padding never ties with a max); weights hit / count per tap
    (ties share); tangent = sum_K weights * Conv(t, E). Its transpose is one
    ConvTranspose of E: no MaxPool Indices (20x slower than the blocked
    MaxPool in ONNX Runtime), Gathers or MaxUnpool phases. `pos`: see
    _through_relu (t is then the Relu's operand tangent). None when
    extents are not static or the window is large."""
    xd, yd, td = dims(x), dims(y), dims(t)
    if xd is None or yd is None or td is None or None in xd[1:] or None in yd[1:] or \
            not isinstance(element_type(x), ir.F32Type) or b.opset < 9:
        return None  # ONNX Runtime's Conv and ConvTranspose: float32 only (on CPU)
    geom = _pool_pads(op, x, y)
    ks, s, d = geom["kernel_shape"], geom["strides"], geom["dilations"]
    n = len(ks)
    kk = int(np.prod(ks))
    if kk > MAX_PATCH_WINDOW or len(xd) != n + 2:
        return None
    elem = element_type(x)
    np_elem = np.float32
    onehot = np.eye(kk, dtype=np_elem).reshape([kk, 1] + list(ks))
    kernel = b.constant(ir.DenseElementsAttr.get(onehot, type=ir.RankedTensorType.get(
        list(onehot.shape), elem)))
    sp, od = xd[2:], yd[2:]
    conv_attrs = dict(kernel_shape=list(ks), strides=list(s), dilations=list(d), group=1,
                      pads=[0] * (2 * n))

    def taps(v: ir.Value, fill: float | None, lift: bool = False) -> ir.Value:
        """[M, 1, *S] -> [M, K, *O]. `lift`: as a Conv over [M, 1, 1, *S]
        (one more spatial axis, of extent 1). ONNX Runtime runs a 2-D Conv
        in its blocked layout (NCHWc), K channels padded to 16, and the
        primal's taps must come back out of it for the comparison: that
        reorder cost twice the Conv (squeezenet reverse 4.83 -> 4.47 x primal
        lifted)."""
        v, kept = _cropped(b, v, 2, geom)
        p = kept["pads"]
        if any(p):
            padded = [dims(v)[2 + i] + p[i] + p[n + i] for i in range(n)]
            v = b.pad(v, [0, 0] + p[:n] + [0, 0] + p[n:],
                      tensor_type([dims(v)[0], 1] + padded, element_type(v)), fill)
        if not lift:
            return b.op("Conv", [v, kernel, None],
                        tensor_type([dims(v)[0], kk] + od, element_type(v)), **conv_attrs)
        w = b.constant(ir.DenseElementsAttr.get(onehot[:, :, None], type=ir.RankedTensorType.get(
            [kk, 1, 1] + list(ks), elem)))
        lifted = b.op("Conv", [b.unsqueeze(v, [2]), w, None],
                      tensor_type([dims(v)[0], kk, 1] + od, element_type(v)),
                      kernel_shape=[1] + list(ks), strides=[1] + list(s),
                      dilations=[1] + list(d), group=1, pads=[0] * (2 * n + 2))
        return b.squeeze(lifted, [2])

    m = None if xd[0] is None else xd[0] * xd[1]
    if m is None and b.opset < 13:
        return None  # the Mul's transpose would reduce over run-time axes
    lowest = float(np.finfo(np_elem).min)
    xs = taps(b.reshape(x, [-1, 1] + sp, [m, 1] + sp), lowest, lift=n == 2)
    # With a run-time N*C in the linear program of reverse mode (one
    # direction), y and pos are reshaped to xs's, not -1: one symbolic
    # extent for all of them (symdims), which the transposes then read off
    # xs, a primal value, not off the linear program, which can die
    # (googlenet with a dynamic batch: 1,576 -> 1,064 reverse nodes)
    by_xs = m is None and symdims.one_direction(t)
    merged = b.concat([b.shape(xs, 0, 1), b.ints([1] + od)], 0) if by_xs else [-1, 1] + od
    hit = b.cast_like(_at_max(b, xs, b.reshape(y, merged, [m, 1] + od)), x)
    count = b.reduce("ReduceSum", hit, [1], True)                           # [N*C, 1, *O]
    if pos is None:
        weight = b.div(hit, count)
    else:
        weight = b.mul(hit, b.div(b.reshape(pos, merged, [m, 1] + od), count))
    ts = taps(b.reshape(t, [-1, 1] + sp, [None, 1] + sp), None)             # [k*N*C, K, *O]
    k = b.shape(t, 0, 1)
    tail = [b.shape(hit, 0, 1), b.ints([kk] + od)] if by_xs else [b.ints([-1, kk] + od)]
    tv = b.reshape(ts, b.concat([k] + tail, 0), [td[0], m, kk] + od)   # [k, N*C, K, *O]
    summed = b.reduce("ReduceSum", b.mul(tv, weight), [2], False)            # [k, N*C, *O]
    return b.reshape(summed, b.concat([k, b.shape(y)], 0), [td[0]] + yd)


def _through_relu(b: Builder, t: ir.Value, x: ir.Value, y: ir.Value
                  ) -> tuple[ir.Value, ir.Value | None]:
    """MaxPool(Relu(z)): the Relu's tangent t = t_z * [x > 0] (or [z > 0]) is
    (t_z, [y > 0]). Exact: a window whose max y is > 0 takes it where x = y > 0,
    so the mask is 1 there; one with y = 0 contributes 0 either way. The
    full-size mask product (and, when nothing else uses it, the mask) is then
    left out for a pooled-size one. (t, None) for any other tangent."""
    owner, xo = producer(t, "Mul"), producer(x, "Relu")
    if owner is None or xo is None or \
            not isinstance(element_type(y), ir.FloatType) or dims(t) is None or \
            dims(y) is None or len(dims(t)) != len(dims(y)) + 1:
        return t, None
    for a, m in (tuple(owner.operands), tuple(owner.operands)[::-1]):
        cast = producer(m, "Cast", "CastLike")
        if cast is None:
            continue
        cmp = producer(cast.operands[0], "Greater")
        if cmp is None or cmp.operands[0] not in (x, xo.operands[0]):
            continue
        zero = constant_value(cmp.operands[1])
        try:
            if zero is None or np.any(np.asarray(ir.DenseElementsAttr(zero)) != 0):
                continue
        except Exception:  # noqa: BLE001 - an attribute numpy cannot read
            continue
        if dims(a) is None or dims(a) != dims(t):
            continue
        return a, b.cast_like(b.compare("Greater", y, b.scalar(0.0, y)), y)
    return t, None


@transpose("AveragePool")
def _t_average_pool(b: Builder, op, cts, linear):
    """Only the pools _tile_pool emits (windows tiling the input exactly, no
    padding): each window's cotangent spread evenly over it."""
    x, y = op.operands[0], op.results[0]
    kernel = _tiling_kernel(op, x, y)
    if kernel is None or not _exact_tiles(x, y, kernel):
        # (the other pools on derivatives: auto_pad or ceil_mode on run-time
        # extents before opset 11)
        raise UnsupportedOp("reverse mode through AveragePool with auto_pad or ceil_mode on "
                            "run-time extents needs opset >= 11 (forward mode does without)")
    scaled = b.mul(cts[0], b.scalar(1.0 / float(np.prod(kernel)), cts[0]))  # on the small side
    return [_upsample(b, scaled, kernel, [dims(cts[0])[0]] + dims(x)[1:])]


def _patches(b: Builder, v: ir.Value, first: int, geom: dict, y: ir.Value,
             fill: float | None) -> ir.Value:
    """Windows of v (spatial axes from `first`) stacked on a new axis first-1+... :
    [.., C, K, *O] by strided Slices of v padded with `fill` (0 when None);
    O the pool output y's spatial extents, read at run time where not static."""
    v, geom = _cropped(b, v, first, geom)
    vd = dims(v)
    outs = dims(y)[2:]
    n = len(outs)
    # ends = start + (O - 1) * stride + 1: O * stride as one tensor when run-time
    spans = None if None not in outs else b.mul(b.shape(y, 2), b.ints(geom["strides"]))
    k, s, d, p = geom["kernel_shape"], geom["strides"], geom["dilations"], geom["pads"]
    elem = element_type(v)
    if any(p):
        pads = [0] * (2 * len(vd))
        for i in range(n):
            pads[first + i], pads[len(vd) + first + i] = p[i], p[n + i]
        pd = vd[:first] + [None if vd[first + i] is None else vd[first + i] + p[i] + p[n + i]
                           for i in range(n)]
        v = b.pad(v, pads, tensor_type(pd, elem), fill)
    parts = []
    axes = list(range(first, first + n))
    for off in np.indices(k).reshape(n, -1).T:
        starts = [int(o) * di for o, di in zip(off, d)]
        part = tensor_type(vd[:first] + outs, elem)
        if spans is None:
            ends = [st + (o - 1) * si + 1 for st, o, si in zip(starts, outs, s)]
            sl = b.slice(v, axes, starts, ends, part, s)
        else:
            ends = b.add(spans, b.ints([st - si + 1 for st, si in zip(starts, s)]))
            sl = b.op("Slice", [v, b.ints(starts), ends, b.ints(axes), b.ints(s)], part)
        parts.append(b.unsqueeze(sl, [first]))
    return b.concat(parts, first) if len(parts) > 1 else parts[0]


def _max_pool_masks(b: Builder, op, t: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    """MaxPool's tangent without Indices: per window, the tangent at the
    positions equal to the max (shared among ties); Slices and a ReduceSum."""
    yd = dims(y)
    if yd is None or (None in yd[2:] and b.opset < 11):
        # (Slice-10's transpose needs Range, from opset 11)
        raise UnsupportedOp("MaxPool before opset 11 needs static output extents")
    geom = _pool_pads(op, x, y)
    if min(geom["pads"]) < 0 and None in dims(x)[2:]:
        raise UnsupportedOp("MaxPool with negative pads needs static extents")
    xs = _patches(b, x, 2, geom, y, float("-inf"))         # [N, C, K, *O]
    hit = b.cast_like(_at_max(b, xs, b.unsqueeze(y, [2])), x)
    weight = b.div(hit, b.reduce("ReduceSum", hit, [2], True))
    ts = _patches(b, t, 3, geom, y, None)                  # [k, N, C, K, *O]
    return b.reduce("ReduceSum", b.mul(ts, weight), [3], False)


def _tiling_kernel(op: ir.Operation, x: ir.Value, y: ir.Value) -> list[int] | None:
    """The kernel when the pool's windows tile the input (strides == kernel, no
    padding or dilation, floor-sized output), with static extents; else None."""
    xd, yd = dims(x), dims(y)
    if xd is None or yd is None or None in xd[2:] or None in yd[2:]:
        return None
    kernel, strides, dil, pads, auto = _window(op)
    n = len(kernel)
    if list(strides) != list(kernel) or any(v != 1 for v in dil) or any(pads) or \
            auto not in ("NOTSET", "VALID"):
        return None
    if any(yd[2 + i] != xd[2 + i] // kernel[i] for i in range(n)):
        return None
    return list(kernel)


def _window_view(b: Builder, v: ir.Value, first: int, kernel: list[int], outs: list[int]
                 ) -> ir.Value:
    """v [.., *S] (spatial from `first`) as [.., o0, k0, o1, k1, ..] (the
    remainder cut off): leading extents copied, so it is k-uniform."""
    vd = dims(v)
    n = len(kernel)
    elem = element_type(v)
    if any(vd[first + i] != outs[i] * kernel[i] for i in range(n)):
        cut = [o * k for o, k in zip(outs, kernel)]
        v = b.slice(v, list(range(first, first + n)), [0] * n, cut,
                    tensor_type(vd[:first] + cut, elem))
    split = [e for o, k in zip(outs, kernel) for e in (o, k)]
    return b.reshape(v, [0] * first + split, vd[:first] + split)


def _unpool_groups(op: ir.Operation, x: ir.Value, y: ir.Value) -> list[int] | None:
    """Per spatial axis, how many window phases overlap (ceil(extent/stride)),
    when MaxPool's geometry and extents are static; else None."""
    xd, yd = dims(x), dims(y)
    if xd is None or yd is None or None in xd[1:] or None in yd[1:]:
        return None
    kernel, strides, dil, _, _ = _window(op)
    return [-(-((k - 1) * d + 1) // s) for k, d, s in zip(kernel, dil, strides)]


def _maxpool_gather_transpose(b: Builder, gather: ir.Operation, ct: ir.Value):
    """Gather(flat tangent, MaxPool Indices) transposed without scatter-add:
    windows split into phases whose windows are disjoint, so their argmaxes are
    distinct; one MaxUnpool (a plain placement) per phase, summed."""
    idx = gather.operands[1]
    owner = getattr(idx.owner, "operation", idx.owner)
    if not isinstance(owner, ir.Operation) or not owner.name.startswith("onnx.MaxPool") or \
            len(owner.results) < 2 or owner.results[1] != idx or attribute(gather, "axis") != 1 or \
            (attribute(owner, "storage_order") or 0) != 0:
        return None
    x, y = owner.operands[0], owner.results[0]
    groups = _unpool_groups(owner, x, y)
    if groups is None or b.opset < 9 or not isinstance(element_type(ct), ir.F32Type):
        return None  # ONNX Runtime's MaxUnpool is float32 only: scatter-add instead
    xd, yd = dims(x), dims(y)
    n = len(groups)
    i64 = ir.IntegerType.get_signless(64)
    elem = element_type(ct)
    total = int(np.prod(xd))
    k = b.shape(ct, 0, 1)
    merged = b.reshape(ct, [-1] + yd[1:], [None] + yd[1:])                 # [k*N, C, *O]
    # Indices per direction: offset by kk * |x| so the merged batch stays flat.
    kk = b.op("Range", [b.int_scalar(0), b.squeeze(k, [0]), b.int_scalar(1)], tensor_type([None], i64))
    shift = b.reshape(b.mul(kk, b.int_scalar(total)), [-1] + [1] * len(yd), [None] + [1] * len(yd))
    ids = b.reshape(b.add(b.unsqueeze(idx, [0]), shift), [-1] + yd[1:], [None] + yd[1:])
    out_shape = b.concat([b.shape(merged, 0, 1), b.ints(xd[1:])], 0)
    attrs = {a: attribute(owner, a) for a in ("kernel_shape", "strides", "pads")
             if a in owner.attributes}
    parts = []
    for phase in np.indices(groups).reshape(n, -1).T:
        if all(g == 1 for g in groups):
            cg, ig = merged, ids
        else:
            ends = [2**62] * n
            od = [None] + yd[1:2] + [-(-(o - int(p)) // g) for o, p, g in zip(yd[2:], phase, groups)]
            if any(e <= 0 for e in od[2:]):
                continue  # an empty phase (more phases than windows): ORT's MaxUnpool refuses it
            cg = b.slice(merged, list(range(2, 2 + n)), [int(p) for p in phase], ends,
                         tensor_type(od, elem), groups)
            ig = b.slice(ids, list(range(2, 2 + n)), [int(p) for p in phase], ends,
                         tensor_type(od, i64), groups)
        un = b.op("MaxUnpool", [cg, ig, out_shape], tensor_type([None] + xd[1:], elem), **attrs)
        # a constant-target Reshape keeps the rank visible to shape inference after export
        parts.append(b.reshape(un, [-1] + xd[1:], [None] + xd[1:]))
    summed = b.sum(parts)
    return b.reshape(summed, b.concat([k, b.ints([-1])], 0), [None, total])


GATHER_TRANSPOSE_HOOKS.append(_maxpool_gather_transpose)


# ---- window sums: AveragePool, LpPool ---------------------------------------------

def _pool_pads(op: ir.Operation, x: ir.Value, y: ir.Value) -> dict:
    """Explicit Conv geometry reproducing the pool's windows and output extents."""
    xd, yd = dims(x), dims(y)
    kernel, strides, dil, pads, auto = _window(op)
    n = len(kernel)
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
            tot = (o - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - xd[2 + i]
            # halves rounded toward zero, as ONNX Runtime does; a stride longer
            # than the window makes the total negative: the windows skip input
            lo = int(tot / 2) if auto == "SAME_UPPER" else int((tot + 1) / 2)
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


def _cropped(b: Builder, v: ir.Value, first: int, geom: dict) -> tuple[ir.Value, dict]:
    """v (spatial axes from `first`) with the input that negative pads drop
    sliced off, and the geometry with those pads 0 (Conv takes no negative
    pads); v and geom as they are without negative pads."""
    pads, n = geom["pads"], len(geom["kernel_shape"])
    if min(pads) >= 0:
        return v, geom
    vd = dims(v)
    starts = [max(0, -pads[i]) for i in range(n)]
    ends = [vd[first + i] - max(0, -pads[n + i]) for i in range(n)]
    v = b.slice(v, list(range(first, first + n)), starts, ends,
                tensor_type(vd[:first] + [e - s for s, e in zip(starts, ends)], element_type(v)))
    return v, {**geom, "pads": [max(0, p) for p in pads]}


def window_sum(b: Builder, u: ir.Value, y: ir.Value, geom: dict) -> ir.Value:
    """Sum of the derivative u [k, N, C, *S] over each pooling window: [k] + shape(y)."""
    u, geom = _cropped(b, u, 3, geom)
    ud, yd = dims(u), dims(y)
    merged = b.reshape(u, b.concat([b.ints([-1, 1]), b.shape(u, 3)], 0),
                       [None, 1] + ud[3:])
    conv = b.op("Conv", [merged, _ones_kernel(b, geom["kernel_shape"], u), None],
                tensor_type([None, 1] + yd[2:], element_type(u)), **geom)
    return b.reshape_k(conv, u, y, [None] + yd)


def _ones_image(b: Builder, x: ir.Value) -> ir.Value:
    xd = dims(x)
    shape = b.concat([b.ints([1, 1]), b.shape(x, 2)], 0)
    return b.expand(b.scalar(1.0, x), shape, [1, 1] + xd[2:])


@jvp("AveragePool")
def _average_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    if rank(x) is None or rank(y) is None:
        raise UnsupportedOp("AveragePool needs static ranks")
    _check_output_extents(op, x, y)
    kernel = _tiling_kernel(op, x, y)
    if kernel is not None and _exact_tiles(x, y, kernel):
        # the pool itself on the merged directions: its transpose is one
        # nearest upsample (densenet121 reverse -3%, forward -1 to -2% against
        # a ReduceSum of a window view, whose transpose is a 6-D Expand)
        return [_tile_pool(b, tangents[0], kernel, y)]
    xd, yd = dims(x), dims(y)
    if (None in xd[2:] or None in yd[2:]) and _auto_or_ceil(op):
        if b.opset < 11:  # (no run-time pads): the pool itself, forward mode only
            return [b.node_on_merged_batch(op, tangents[0])]
        # windows placed at run time: scale * window sum, as below
        pads = _run_time_pads(b, op, x, y)
        ones = _ones_image(b, x)
        avg = b.op("AveragePool", [ones], tensor_type([1, 1] + yd[2:], element_type(x)),
                   **verbatim_attributes(op))
        count, padded_ones = _padded_window_sum(b, ones, pads, op, y)
        scale = b.div(avg, b.ew("Max", count, b.scalar(1.0, x)))
        return [b.mul(_run_time_window_sum(b, tangents[0], pads, op, y, padded_ones), scale)]
    if kernel is not None:  # windows tile the input with a remainder: a ReduceSum of a reshape
        n = len(kernel)
        tv = _window_view(b, tangents[0], 3, kernel, dims(y)[2:])
        s = b.reduce("ReduceSum", tv, [4 + 2 * i for i in range(n)], False)
        return [b.mul(s, b.scalar(1.0 / float(np.prod(kernel)), y))]
    geom = _pool_pads(op, x, y)
    yd = dims(y)
    ones = _ones_image(b, x)
    avg = b.op("AveragePool", [ones], tensor_type([1, 1] + yd[2:], element_type(x)), **verbatim_attributes(op))
    kept, kept_geom = _cropped(b, ones, 2, geom)
    count = b.op("Conv", [kept, _ones_kernel(b, geom["kernel_shape"], x), None],
                 tensor_type([1, 1] + yd[2:], element_type(x)), **kept_geom)
    scale = b.div(avg, b.ew("Max", count, b.scalar(1.0, x)))
    return [b.mul(window_sum(b, tangents[0], y, geom), scale)]


def _run_time_pads(b: Builder, op, x: ir.Value, y: ir.Value) -> ir.Value:
    """The Pad operand placing a pool's windows on x's run-time extents."""
    kernel, strides, dil, pads, auto = _window(op)
    return spatial_pads(b, *run_time_pads(b, x, y, kernel, strides, dil, auto, pads, pool=True))


def _padded_window_sum(b: Builder, v: ir.Value, pads: ir.Value, op, y: ir.Value,
                       padded_like: ir.Value | None = None) -> tuple[ir.Value, ir.Value]:
    """Window sums of v [M, 1, *S] over windows placed by _run_time_pads:
    a zero Pad of run-time extents (negative pads crop), then an unpadded
    ones-kernel Conv: both linear with transposes of their own. Returns
    the sums and the padded v. The extents the run-time pads alone do not
    tell are declared (transposes then read them off primal values): the
    sums have the pool's (y's), the padded v those of `padded_like` (the
    padded ones image), when given."""
    kernel, strides, dil, _, _ = _window(op)
    n = len(kernel)
    vd = dims(v)
    padded = _padded(b, v, pads)
    if padded_like is not None:
        symdims.alike(padded, padded_like, first=2)
    summed = b.op("Conv", [padded, _ones_kernel(b, kernel, v), None],
                  tensor_type(vd[:1] + [1] + dims(y)[2:], element_type(v)), kernel_shape=kernel,
                  strides=strides, dilations=dil, group=1, pads=[0] * (2 * n))
    symdims.alike(summed, y, first=2)
    return summed, padded


def _padded(b: Builder, v: ir.Value, pads: ir.Value) -> ir.Value:
    """v [M, C, *S] zero-padded by run-time pads (_run_time_pads)."""
    vd = dims(v)
    return b.op("Pad", [v, pads], tensor_type(vd[:2] + [None] * (len(vd) - 2), element_type(v)))


def _run_time_window_sum(b: Builder, u: ir.Value, pads: ir.Value, op, y: ir.Value,
                         padded_ones: ir.Value) -> ir.Value:
    """window_sum for windows placed at run time (_run_time_pads);
    `padded_ones`: _padded_window_sum's padded ones image."""
    ud = dims(u)
    merged = b.reshape(u, b.concat([b.ints([-1, 1]), b.shape(u, 3)], 0), [None, 1] + ud[3:])
    summed, _ = _padded_window_sum(b, merged, pads, op, y, padded_ones)
    return b.reshape_k(summed, u, y, [None] + dims(y))


def _auto_or_ceil(op) -> bool:
    auto = attribute(op, "auto_pad") or "NOTSET"
    ceil = attribute(op, "ceil_mode") if "ceil_mode" in op.attributes else 0
    return auto in ("SAME_UPPER", "SAME_LOWER") or bool(ceil)


@jvp("LpPool")
def _lp_pool(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    if rank(x) is None or rank(y) is None:
        raise UnsupportedOp("LpPool needs static ranks")
    _check_output_extents(op, x, y)
    p = attribute(op, "p")
    p = 2 if p is None else p
    xd, yd = dims(x), dims(y)
    if (None in xd[2:] or None in yd[2:]) and _auto_or_ceil(op) and b.opset >= 11:
        pads = _run_time_pads(b, op, x, y)
        padded_ones = _padded(b, _ones_image(b, x), pads)
        return [_lp_tangent(b, tangents[0], x, y, p,
                            lambda u: _run_time_window_sum(b, u, pads, op, y, padded_ones))]
    geom = _pool_pads(op, x, y)
    return [_lp_tangent(b, tangents[0], x, y, p, lambda u: window_sum(b, u, y, geom))]


def _lp_tangent(b: Builder, t, x, y, p, summed):
    """d (sum |x|^p)^(1/p) = sum(|x|^(p-1) sign(x) t) * y^(1-p)."""
    if p == 1:
        return summed(b.mul(t, b.ew("Sign", x)))
    coef = x if p == 2 else b.mul(b.ew("Pow", b.ew("Abs", x), b.scalar(float(p - 1), x)),
                                   b.ew("Sign", x))
    s = summed(b.mul(t, coef))
    zero = _at_max(b, b.scalar(0.0, y), y)  # y >= 0: y == 0
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
    hit = b.cast_like(_at_max(b, x, y), x)
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
    idx = op.operands[1]
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
