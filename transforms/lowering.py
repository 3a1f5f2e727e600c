"""Lowerings of ops the ONNX spec defines in prose, into differentiable ops.

Each lowering turns one node into ONNX nodes (the expand machinery of
expand.py imports them and splices them in place of the MLIR op, so they
run inside `onnx-ad-expand` and before the AD modes, for ops without a JVP
rule). Only ops with derivative rules are emitted, in every float type
ONNX Runtime runs (no Conv: it has no double kernel):

  LRN            x / (bias + alpha/size * window_sum(x^2))^beta; the channel
                 window sum is a sum of shifted slices of the padded square.
  GridSample     N-D (cubic: 2-D, as the spec), every mode (bilinear/linear,
                 nearest, bicubic/cubic),
                 padding zeros/border/reflection, align_corners: the
                 coordinate is unnormalised (and, except cubic, clamped or
                 reflected), taps are gathered with GatherElements from the
                 flattened image, weighted, and summed; out-of-range taps of
                 `zeros` get weight 0, those of border/reflection read the
                 clamped/reflected pixel. Static shapes but the batch.
  DeformConv     2-D: bilinear samples at the offset kernel positions
                 (zeros outside), times the mask, then a grouped MatMul with
                 the weights, plus bias. Static shapes but the batch.
  STFT           frames gathered from the signal (indices constant when
                 frame_step and the length are, computed at run time
                 otherwise), then a DFT as a MatMul with the (windowed)
                 cos/sin matrix; real or complex input, onesided. The frame
                 length must be static (window shape or constant).
  TensorScatter  ScatterElements at write_indices[b] + i (mod the cache
                 length in circular mode) along the sequence axis.
"""
from __future__ import annotations

import itertools

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from onnx_ad_mlir.errors import UnsupportedOp

from .expand import LOWERINGS


def lowering(op_type: str):
    def register(fn):
        LOWERINGS[op_type] = fn
        return fn
    return register


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


class _G:
    """Emits nodes for one lowering; values are names."""

    def __init__(self, node, ctx):
        self.node, self.ctx, self.opset = node, ctx, ctx.opset
        self.nodes = []
        self.label = f"node '{node.name}' ({node.op_type})"

    def refuse(self, why: str):
        raise UnsupportedOp(f"{self.label}: {why}")

    def op(self, op_type, inputs, out=None, n=1, **attrs):
        outs = [out] if out else [self.ctx.fresh(op_type.lower()) for _ in range(n)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0] if n == 1 else outs

    def const(self, value) -> str:
        return self.op("Constant", [], value=numpy_helper.from_array(np.asarray(value)))

    def ints(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64))

    def scalar(self, value, dtype) -> str:
        return self.const(np.asarray(value, dtype=dtype))

    # version-aware helpers
    def unsqueeze(self, x, axes):
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.ints(axes)])
        return self.op("Unsqueeze", [x], axes=list(axes))

    def squeeze(self, x, axes):
        if self.opset >= 13:
            return self.op("Squeeze", [x, self.ints(axes)])
        return self.op("Squeeze", [x], axes=list(axes))

    def slice(self, x, starts, ends, axes, steps=None):
        if self.opset < 10:  # Slice-1: attributes, no steps
            if steps is not None and any(s != 1 for s in steps):
                self.refuse("Slice with steps needs opset >= 10")
            return self.op("Slice", [x], starts=list(starts), ends=list(ends), axes=list(axes))
        ins = [x, self.ints(starts), self.ints(ends), self.ints(axes)]
        if steps is not None:
            ins.append(self.ints(steps))
        return self.op("Slice", ins)

    def reshape(self, x, shape):
        return self.op("Reshape", [x, self.ints(shape)])

    def reduce_sum(self, x, axes, keepdims=1):
        if self.opset >= 13:
            return self.op("ReduceSum", [x, self.ints(axes)], keepdims=keepdims)
        return self.op("ReduceSum", [x], axes=list(axes), keepdims=keepdims)

    def dtype(self, name):
        elem = self.ctx.elem(name)
        if elem is None:
            self.refuse(f"the type of '{name}' is unknown")
        return helper.tensor_dtype_to_np_dtype(elem)

    def static(self, name, what):
        s = self.ctx.static(name)
        if s is None:
            self.refuse(f"needs a static shape for {what}")
        return s

    def static_but_batch(self, name, what):
        """Static dims except perhaps the first (None)."""
        s = self.ctx.shape(name)
        if s is None or None in s[1:]:
            self.refuse(f"needs a static shape for {what} (all but the batch axis)")
        return s

    def batch_shape(self, like, rest):
        """[dim 0 of `like`] + rest as a 1-D int64 value (a constant when static)."""
        n = self.ctx.shape(like)[0]
        if n is not None:
            return self.ints([n] + list(rest))
        return self.op("Concat", [self.slice(self.op("Shape", [like]), [0], [1], [0]),
                                  self.ints(rest)], axis=0)

    def constant_value(self, name, what):
        if not name:
            return None
        if name not in self.ctx.consts:
            self.refuse(f"{what} must be a constant")
        return self.ctx.consts[name]


# --------------------------------------------------------------------------- LRN
_LRN_MAX_TERMS = 256  # window positions over a channel count known only at run time


@lowering("LRN")
def _lrn(node, ctx):
    g = _G(node, ctx)
    x = node.input[0]
    size = int(_attr(node, "size"))
    alpha = _attr(node, "alpha", 1e-4)
    beta = _attr(node, "beta", 0.75)
    bias = _attr(node, "bias", 1.0)
    shape = ctx.shape(x)
    if shape is None:
        g.refuse("needs the input's rank")
    r = len(shape)
    dt = g.dtype(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    channels = shape[1] if r > 1 else None
    if channels is not None:  # a window reaching past the channels reads only padding
        lo, hi = min(lo, max(channels - 1, 0)), min(hi, max(channels - 1, 0))
    elif size > _LRN_MAX_TERMS:
        g.refuse(f"size {size} over a channel count known only at run time (one term "
                 f"per window position; at most {_LRN_MAX_TERMS})")
    width = lo + hi + 1
    sq = g.op("Mul", [x, x])
    pads = [0] * (2 * r)
    pads[1], pads[r + 1] = lo, hi
    if g.opset >= 11:
        padded = g.op("Pad", [sq, g.ints(pads)])
    else:
        padded = g.op("Pad", [sq], pads=pads)
    big = np.iinfo(np.int64).max
    terms = [g.slice(padded, [j], [j - (width - 1) if j < width - 1 else big], [1])
             for j in range(width)]
    window = terms[0] if len(terms) == 1 else g.op("Sum", terms)
    scaled = g.op("Mul", [window, g.scalar(alpha / size, dt)])
    base = g.op("Add", [scaled, g.scalar(bias, dt)])
    den = g.op("Pow", [base, g.scalar(beta, dt)])
    g.op("Div", [x, den], out=node.output[0])
    return g.nodes


# --------------------------------------------------------------------------- sampling
def _reflect(g, x, lo, hi, dt):
    """Folds coordinate x back into [lo, hi] by reflection, as often as needed."""
    rng = hi - lo
    if rng <= 0:
        return g.op("Mul", [x, g.scalar(0.0, dt)]) if lo == 0 else \
            g.op("Add", [g.op("Mul", [x, g.scalar(0.0, dt)]), g.scalar(lo, dt)])
    c_lo, c_hi, c_rng = g.scalar(lo, dt), g.scalar(hi, dt), g.scalar(rng, dt)
    zero, two = g.scalar(0.0, dt), g.scalar(2.0, dt)

    def fold(d, near, far):
        n = g.op("Floor", [g.op("Div", [d, c_rng])])
        rem = g.op("Sub", [d, g.op("Mul", [n, c_rng])])
        even = g.op("Equal", [g.op("Mod", [n, two], fmod=1), zero])
        return rem, even
    d_lo = g.op("Sub", [c_lo, x])
    r_lo, e_lo = fold(d_lo, lo, hi)
    below = g.op("Where", [e_lo, g.op("Add", [c_lo, r_lo]), g.op("Sub", [c_hi, r_lo])])
    d_hi = g.op("Sub", [x, c_hi])
    r_hi, e_hi = fold(d_hi, hi, lo)
    above = g.op("Where", [e_hi, g.op("Sub", [c_hi, r_hi]), g.op("Add", [c_lo, r_hi])])
    inside = g.op("Where", [g.op("Greater", [x, c_hi]), above, x])
    return g.op("Where", [g.op("Less", [x, c_lo]), below, inside])


def _cubic_weights(g, t, dt):
    """Cubic convolution weights (A = -0.75) of taps -1, 0, 1, 2 at fraction t."""
    a = -0.75

    def poly(u, coeffs):  # Horner
        acc = g.scalar(coeffs[0], dt)
        for c in coeffs[1:]:
            acc = g.op("Add", [g.op("Mul", [acc, u]), g.scalar(c, dt)])
        return acc
    one, two = g.scalar(1.0, dt), g.scalar(2.0, dt)
    outer = [a, -5 * a, 8 * a, -4 * a]          # |u| in [1, 2]
    inner = [a + 2, -(a + 3), 0.0, 1.0]          # |u| in [0, 1]
    return [poly(g.op("Add", [t, one]), outer), poly(t, inner),
            poly(g.op("Sub", [one, t]), inner), poly(g.op("Sub", [two, t]), outer)]


def _taps(g, coord, mode, dt):
    """[(index as float, weight or None)] along one axis."""
    if mode == "nearest":
        return [(g.op("Round", [coord]), None)]
    base = g.op("Floor", [coord])
    t = g.op("Sub", [coord, base])
    if mode == "linear":
        one = g.scalar(1.0, dt)
        return [(base, g.op("Sub", [one, t])), (g.op("Add", [base, one]), t)]
    ws = _cubic_weights(g, t, dt)
    return [(g.op("Add", [base, g.scalar(float(k), dt)]), w) for k, w in zip((-1, 0, 1, 2), ws)]


def _pad_index(g, index, size, padding, lo, hi, dt):
    """(index clamped inside [0, size-1], validity mask or None)."""
    zero, last = g.scalar(0.0, dt), g.scalar(size - 1.0, dt)
    valid = None
    if padding == "zeros":
        valid = g.op("And", [g.op("GreaterOrEqual", [index, zero]),
                             g.op("LessOrEqual", [index, last])])
    elif padding == "reflection":
        index = _reflect(g, index, lo, hi, dt)
    return g.op("Clip", [index, zero, last]), valid


def _gather(g, flat, taps, sizes, padding, bounds, dt, lead, out_shape):
    """Sum over tap combinations of weight * flat[..., linear index]; `flat`
    is lead + [prod(sizes)] (channels on the last lead axis), `taps[d]` the
    taps along spatial axis d, with coordinates of the output's shape."""
    strides = [int(np.prod(sizes[d + 1:])) for d in range(len(sizes))]
    padded = [[(_pad_index(g, i, sizes[d], padding, *bounds[d], dt), wgt) for i, wgt in taps[d]]
              for d in range(len(sizes))]
    terms = []
    for combo in itertools.product(*padded):
        lin, weight = None, None
        for d, ((clamped, valid), wgt) in enumerate(combo):
            part = clamped if strides[d] == 1 else \
                g.op("Mul", [clamped, g.scalar(float(strides[d]), dt)])
            lin = part if lin is None else g.op("Add", [lin, part])
            factors = [wgt] if wgt is not None else []
            if valid is not None:
                factors.append(g.op("Cast", [valid],
                                    to=helper.np_dtype_to_tensor_dtype(np.dtype(dt))))
            for f in factors:
                weight = f if weight is None else g.op("Mul", [weight, f])
        idx = g.op("Cast", [lin], to=TP.INT64)
        idx = g.op("Expand", [g.reshape(idx, lead["index"]),
                              g.batch_shape(lead["like"], lead["full"][1:])])
        vals = g.op("GatherElements", [flat, idx], axis=len(lead["full"]) - 1)
        if weight is not None:
            vals = g.op("Mul", [vals, g.reshape(weight, lead["index"])])
        terms.append(vals)
    total = terms[0] if len(terms) == 1 else g.op("Sum", terms)
    return g.reshape(total, out_shape)


@lowering("GridSample")
def _grid_sample(node, ctx):
    g = _G(node, ctx)
    x, grid = node.input[0], node.input[1]
    mode = _str(_attr(node, "mode", b"linear" if ctx.opset >= 20 else b"bilinear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = _str(_attr(node, "padding_mode", b"zeros"))
    align = int(_attr(node, "align_corners", 0))
    xs = g.static_but_batch(x, "X")
    gs = g.static_but_batch(grid, "grid")
    if mode not in ("linear", "nearest", "cubic"):
        g.refuse(f"mode '{mode}'")
    if mode == "cubic" and len(xs) != 4:
        g.refuse("cubic mode is defined for 2-D sampling (4-D X) only")
    n, c, sizes = 0, xs[1], xs[2:]  # 0: Reshape copies the (maybe dynamic) batch
    nd = len(sizes)
    out = gs[1:-1]
    p = int(np.prod(out))
    dt = g.dtype(x)
    taps, bounds = [], []
    for d, size in enumerate(sizes):  # grid[..., 0] addresses the last axis (x)
        comp = nd - 1 - d
        gv = g.squeeze(g.slice(grid, [comp], [comp + 1], [nd + 1]), [nd + 1])
        one = g.scalar(1.0, dt)
        if align:
            v = g.op("Mul", [g.op("Add", [gv, one]), g.scalar((size - 1) / 2.0, dt)])
            lo, hi = 0.0, size - 1.0
        else:
            v = g.op("Div", [g.op("Sub", [g.op("Mul", [g.op("Add", [gv, one]),
                                                         g.scalar(float(size), dt)]), one]),
                             g.scalar(2.0, dt)])
            lo, hi = -0.5, size - 0.5
        if mode != "cubic":  # cubic pads its taps, not its coordinate
            if padding == "border":
                v = g.op("Clip", [v, g.scalar(0.0, dt), g.scalar(size - 1.0, dt)])
            elif padding == "reflection":
                v = _reflect(g, v, lo, hi, dt)
        taps.append(_taps(g, v, mode, dt))
        bounds.append((lo, hi))
    flat = g.reshape(x, [n, c, int(np.prod(sizes))])
    lead = {"index": [n, 1, p], "full": [n, c, p], "like": x}
    total = _gather(g, flat, taps, sizes, padding, bounds, dt, lead, [n, c, p])
    g.op("Reshape", [total, g.ints([n, c] + out)], out=node.output[0])
    return g.nodes


# --------------------------------------------------------------------------- DeformConv
@lowering("DeformConv")
def _deform_conv(node, ctx):
    g = _G(node, ctx)
    ins = list(node.input) + [""] * (5 - len(node.input))
    x, wt, off, bias, mask = ins[:5]
    xs, ws = g.static_but_batch(x, "X"), g.static(wt, "W")
    os_ = g.static_but_batch(off, "offset")
    if len(xs) != 4:
        g.refuse(f"only 2-D DeformConv is lowered, X has rank {len(xs)}")
    _, c, h, w = xs
    n = 0  # Reshape copies the (maybe dynamic) batch
    oc, cg, kh, kw = ws
    kh, kw = _attr(node, "kernel_shape", [kh, kw])
    groups = int(_attr(node, "group", 1))
    og = int(_attr(node, "offset_group", 1))
    sh, sw = _attr(node, "strides", [1, 1])
    dh, dw = _attr(node, "dilations", [1, 1])
    pt, pl, pb, pr = _attr(node, "pads", [0, 0, 0, 0])
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if os_[1:] != [og * 2 * kh * kw, oh, ow]:
        g.refuse(f"offset shape {os_} does not match [N, {og * 2 * kh * kw}, {oh}, {ow}]")
    k, p = kh * kw, oh * ow
    dt = g.dtype(x)
    ky, kx = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    yy, xx = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    base_y = (yy.reshape(1, -1) * sh - pt + ky.reshape(-1, 1) * dh).astype(dt)  # [K, P]
    base_x = (xx.reshape(1, -1) * sw - pl + kx.reshape(-1, 1) * dw).astype(dt)
    offs = g.reshape(off, [n, og, k, 2, p])
    py = g.op("Add", [g.squeeze(g.slice(offs, [0], [1], [3]), [3]), g.const(base_y)])
    px = g.op("Add", [g.squeeze(g.slice(offs, [1], [2], [3]), [3]), g.const(base_x)])
    taps_y, taps_x = _taps(g, py, "linear", dt), _taps(g, px, "linear", dt)
    flat = g.reshape(x, [n, og, c // og, h * w])
    lead = {"index": [n, og, 1, k * p], "full": [n, og, c // og, k * p], "like": x}
    cols = _gather(g, flat, [taps_y, taps_x], [h, w], "zeros", [(0, h - 1), (0, w - 1)], dt,
                   lead, [n, og, c // og, k, p])
    if mask:
        cols = g.op("Mul", [cols, g.reshape(mask, [n, og, 1, k, p])])
    cols = g.reshape(cols, [n, groups, (c // groups) * k, p])
    wr = g.reshape(wt, [groups, oc // groups, cg * k])
    y = g.op("MatMul", [wr, cols])  # [N, G, oC/G, P]
    if bias:
        y = g.reshape(y, [n, oc, oh, ow])
        g.op("Add", [y, g.reshape(bias, [1, oc, 1, 1])], out=node.output[0])
    else:
        g.op("Reshape", [y, g.ints([n, oc, oh, ow])], out=node.output[0])
    return g.nodes


# --------------------------------------------------------------------------- STFT
@lowering("STFT")
def _stft(node, ctx):
    g = _G(node, ctx)
    ins = list(node.input) + [""] * (4 - len(node.input))
    signal, step_name, window, length_name = ins[:4]
    ss = ctx.shape(signal)
    if ss is None or len(ss) not in (2, 3):
        g.refuse("needs a signal of rank 2 or 3")
    if len(ss) == 2:
        ss = ss + [1]
        signal = g.unsqueeze(signal, [2])
    comp = ss[2]
    if comp not in (1, 2):
        g.refuse("needs a signal whose last extent is 1 (real) or 2 (complex)")
    fl = None
    if length_name:
        fl = int(np.asarray(g.constant_value(length_name, "frame_length")).reshape(-1)[0])
    if window:
        wl = g.static(window, "the window")[0]
        fl = wl if fl is None else fl
    if fl is None:
        g.refuse("needs a window or a constant frame_length")
    onesided = int(_attr(node, "onesided", 1))
    dt = g.dtype(signal)
    bins = fl // 2 + 1 if onesided else fl
    offsets = np.arange(fl, dtype=np.int64)
    if step_name in ctx.consts and ss[1] is not None:  # frames known: constant indices
        step = int(np.asarray(ctx.consts[step_name]).reshape(-1)[0])
        frames = (ss[1] - fl) // step + 1
        idx = g.const(np.arange(frames, dtype=np.int64)[:, None] * step + offsets[None, :])
    else:  # frame starts computed at run time: frames = (length - fl) / step + 1
        step = g.op("Reshape", [step_name, g.ints([])])
        length = g.op("Reshape", [g.slice(g.op("Shape", [signal]), [1], [2], [0]), g.ints([])])
        frames = g.op("Add", [g.op("Div", [g.op("Sub", [length, g.ints(fl)]), step]),
                              g.ints(1)])
        starts = g.op("Mul", [g.op("Range", [g.ints(0), frames, g.ints(1)]), step])
        idx = g.op("Add", [g.unsqueeze(starts, [1]), g.const(offsets[None, :])])
    framed = g.op("Gather", [signal, idx], axis=1)                     # [B, F, fl, comp]
    nk = np.outer(np.arange(fl), np.arange(bins)) * (2 * np.pi / fl)
    cos, sin = np.cos(nk).astype(dt), np.sin(nk).astype(dt)           # [fl, bins]
    if window:
        wcol = g.unsqueeze(window, [1])
        wc, ws = g.op("Mul", [wcol, g.const(cos)]), g.op("Mul", [wcol, g.const(sin)])
    else:
        wc, ws = g.const(cos), g.const(sin)
    neg_ws = g.op("Neg", [ws])
    if comp == 1:
        m = g.op("Concat", [wc, neg_ws], axis=1)                      # [fl, 2 bins]
        rows = g.squeeze(framed, [3])
    else:  # complex: Re = xr wc + xi ws, Im = xi wc - xr ws
        top = g.op("Concat", [wc, neg_ws], axis=1)
        bottom = g.op("Concat", [ws, wc], axis=1)
        m = g.op("Concat", [top, bottom], axis=0)                     # [2 fl, 2 bins]
        rows = g.reshape(g.op("Transpose", [framed], perm=[0, 1, 3, 2]), [0, 0, 2 * fl])
    spec = g.op("MatMul", [rows, m])                                  # [B, F, 2 bins]
    spec = g.reshape(spec, [0, 0, 2, bins])
    g.op("Transpose", [spec], out=node.output[0], perm=[0, 1, 3, 2])
    return g.nodes


# --------------------------------------------------------------------------- TensorScatter
@lowering("TensorScatter")
def _tensor_scatter(node, ctx):
    g = _G(node, ctx)
    ins = list(node.input) + [""] * (3 - len(node.input))
    past, update, indices = ins[:3]
    ps, us = g.static_but_batch(past, "past_cache"), g.static_but_batch(update, "update")
    r = len(ps)
    axis = int(_attr(node, "axis", -2)) % r
    mode = _str(_attr(node, "mode", b"linear"))
    seq, cap = us[axis], ps[axis]
    shape = [1] * r
    shape[axis] = seq
    pos = g.const(np.arange(seq, dtype=np.int64).reshape(shape))
    if indices:
        bshape = [1] * r
        bshape[0] = -1
        pos = g.op("Add", [pos, g.op("Reshape", [indices, g.ints(bshape)])])
    if mode == "circular":
        pos = g.op("Mod", [pos, g.ints([cap])])
    idx = g.op("Expand", [pos, g.batch_shape(update, us[1:])])
    g.op("ScatterElements", [past, idx, update], out=node.output[0], axis=axis)
    return g.nodes
