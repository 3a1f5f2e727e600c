"""Shape ops and data movement (indexing ops are in indexing.py). Every one is linear in its data operand, so the
JVP applies the op itself to the tangent with its axes shifted past the
direction axis, and the transpose is the adjoint data movement."""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import ImportFailure, UnsupportedOp

from .. import symdims
from ..builder import (Builder, attribute, axis_attribute, constant_ints, dims, element_type,
                       has_attribute, i64, known_rank, op_type, operand_or_none, rank, tensor_type)
from ..registry import jvp, transpose
from .scatter import onehot_scatter, place_at, scatter_add_at


def _reshape_like(b: Builder, t: ir.Value, primal: ir.Value) -> ir.Value:
    """t reinterpreted as [k] + shape(primal)."""
    d = dims(primal)
    out = None if d is None else [None] + d
    if d is not None and None not in d and 0 not in d:
        return b.reshape(t, [0] + d, out)
    return b.reshape_k(t, t, primal, out)


def _unit_axes(x: ir.Value, y: ir.Value) -> tuple[list[int], list[int]] | None:
    """When y is x with extent-1 axes dropped and inserted (their other
    extents the same, in order), those axes of x and of y: the reshape is
    then a Squeeze and an Unsqueeze, which read no run-time shape (a Flatten
    of [B, C, 1, 1], of [n] to [n, 1]) and hold no -1 that a 0 extent would
    leave without a value. None otherwise, and for static extents (a
    constant Reshape target is one op already)."""
    xd, yd = symdims.dims(x), symdims.dims(y)
    if xd is None or yd is None or all(isinstance(e, int) for e in xd + yd):
        return None
    if [e for e in xd if e != 1] != [e for e in yd if e != 1]:
        return None
    return [i for i, e in enumerate(xd) if e == 1], [i for i, e in enumerate(yd) if e == 1]


def _move_unit_axes(b: Builder, t: ir.Value, drop: list[int], insert: list[int]) -> ir.Value:
    """t ([k] + x's extents) with x's unit axes `drop` squeezed and y's
    `insert` unsqueezed."""
    if drop:
        t = b.squeeze(t, [a + 1 for a in drop])
    return b.unsqueeze(t, [a + 1 for a in insert]) if insert else t


def _squeeze_axes(op) -> list[int] | None:
    """(Un)Squeeze's axes normalized (Unsqueeze: against the result's rank),
    None when they or the rank are known only at run time."""
    axes = attribute(op, "axes") if len(op.operands) == 1 or \
        isinstance(op.operands[1].type, ir.NoneType) else constant_ints(op.operands[1])
    unsq = op_type(op) == "Unsqueeze"
    r = rank(op.results[0] if unsq else op.operands[0])
    if axes is None or r is None:
        if not unsq and axes is None and dims(op.operands[0]) is not None and \
                None not in dims(op.operands[0]):
            return [i for i, e in enumerate(dims(op.operands[0])) if e == 1]
        return None
    return sorted(a % r for a in axes)


@jvp("Reshape", "Squeeze", "Unsqueeze", "Flatten")
def _reshape(b: Builder, op, tangents):
    t = tangents[0]
    if t is None:
        return [None] * len(op.results)
    kind = op_type(op)
    xd, yd = dims(op.operands[0]), dims(op.results[0])
    if xd is not None and yd is not None and None not in xd + yd and \
            math.prod(xd) != math.prod(yd):
        # ONNX inference keeps a declared or constant target it cannot check
        # against a rank-mutated input; ONNX Runtime fails when running
        raise UnsupportedOp(f"its input {xd} has {math.prod(xd)} elements, its result "
                            f"{yd} {math.prod(yd)}")
    axes = _squeeze_axes(op) if kind in ("Squeeze", "Unsqueeze") else None
    if axes is not None and rank(t) is not None and rank(t) == rank(op.operands[0]) + 1:
        # the op itself past the direction axis: no run-time shape to read,
        # and its transpose is the inverse op
        shifted = [a + 1 for a in axes]
        out = b.squeeze(t, shifted) if kind == "Squeeze" else b.unsqueeze(t, shifted)
        return [out] + [None] * (len(op.results) - 1)
    units = _unit_axes(op.operands[0], op.results[0])
    if units is not None and rank(t) == rank(op.operands[0]) + 1:
        return [_move_unit_axes(b, t, *units)] + [None] * (len(op.results) - 1)
    return [_reshape_like(b, t, op.results[0])] + [None] * (len(op.results) - 1)


@transpose("Reshape")
def _t_reshape(b: Builder, op, cts, linear):
    x = op.operands[0]
    units = _unit_axes(x, op.results[0])
    if units is not None and rank(cts[0]) == rank(op.results[0]) + 1:
        return [_move_unit_axes(b, cts[0], units[1], units[0]), None]
    d = dims(x)
    # The direction axis is -1, not 0 (copy): a rule may merge k into axis 0
    # (k*N for a batch) as long as the trailing extents do not depend on k.
    computed = False
    tail = d is not None and 0 not in d[1:]  # x's extents past axis 0, none a literal 0
    dynamic = b.seed is not None and b.opset >= 14  # k readable, allowzero available
    if tail and None not in d[1:]:
        target = b.ints([-1] + d[1:])
    elif tail and dynamic and (symdims.primal_of(x) is not None or
                               symdims.dims(x)[0] in (1, b.linear_k)):
        # x's axis 0 is the one direction of the linear program (a stand-in,
        # or a derivative): k from the seed, and allowzero (a batch of 0)
        target, computed = b.concat([b.shape(b.seed, 0, 1), b.shape(x, 1)], 0), True
    elif tail and not (dynamic and symdims.may_be_empty(x, 1)):
        target = b.concat([b.ints([-1]), b.shape(x, 1)], 0)
    elif tail:
        # ONNX Runtime refuses -1 beside a 0 extent (a Loop that did not
        # run): x's own leading extent (one direction, or a batch merged
        # with it) times the seed count. Reading axis 0 of x keeps the
        # linear program computing x alive, so only where an op makes
        # extents from data
        k = b.concat([b.shape(b.seed, 0, 1), b.ints([1] * (len(d) - 1))], 0)
        target, computed = b.mul(b.shape(x), k), True
    else:
        target = b.like_shape(cts[0], x, reshaped=cts[0])
    # a run-time (or folded) shape holding a real 0 extent needs allowzero,
    # else the 0 copies the cotangent's extent there (a wrong shape)
    allow = {"allowzero": 1} if b.opset >= 14 and (d is None or 0 in d[1:] or computed) else {}
    return [b.op("Reshape", [cts[0], target], tensor_type(
        None if d is None else [None] + d[1:], element_type(cts[0])), **allow), None]


@transpose("Unsqueeze")
def _t_unsqueeze(b: Builder, op, cts, linear):
    axes = attribute(op, "axes") if len(op.operands) == 1 else constant_ints(op.operands[1])
    if axes is None:
        return [_t_reshape(b, op, cts, linear)[0]] + [None] * (len(op.operands) - 1)
    return [b.squeeze(cts[0], axes)] + [None] * (len(op.operands) - 1)


@transpose("Squeeze")
def _t_squeeze(b: Builder, op, cts, linear):
    axes = _squeeze_axes(op)
    if axes is not None:
        return [b.unsqueeze(cts[0], axes)] + [None] * (len(op.operands) - 1)
    return [_t_reshape(b, op, cts, linear)[0]] + [None] * (len(op.operands) - 1)


def _perm(op: ir.Operation) -> list[int]:
    perm = attribute(op, "perm")
    r = rank(op.operands[0])
    if perm is None:
        if r is None:
            raise UnsupportedOp("Transpose without perm needs its operand's rank")
        perm = list(range(r - 1, -1, -1))
    if r is not None and sorted(perm) != list(range(r)):
        # an invalid model: the import checks perm where the rank was known then
        raise ImportFailure(f"perm {perm} is not a permutation of the {r} axes of its input")
    return perm


@jvp("Transpose")
def _transpose(b: Builder, op, tangents):
    return [b.transpose(tangents[0], [0] + [p + 1 for p in _perm(op)])]


@transpose("Transpose")
def _t_transpose(b: Builder, op, cts, linear):
    perm = _perm(op)
    inverse = [perm.index(i) for i in range(len(perm))]
    return [b.transpose(cts[0], inverse)]


@jvp("Expand")
def _expand(b: Builder, op, tangents):
    return [b.fit(tangents[0], op.results[0]), None]


@transpose("Expand")
def _t_expand(b: Builder, op, cts, linear):
    return [b.unbroadcast(cts[0], op.operands[0]), None]


@jvp("Concat")
def _concat(b: Builder, op, tangents):
    axis = axis_attribute(op, known_rank([op.results[0], *op.operands]))
    parts = list(tangents)
    if any(t is None for t in tangents):  # (k is read only for zeros)
        k = next(b.shape(t, 0, 1) for t in tangents if t is not None)
        parts = [t if t is not None else b.zeros_over(x, k) for x, t in zip(op.operands, tangents)]
    return [b.concat(parts, axis + 1)]


@transpose("Concat")
def _t_concat(b: Builder, op, cts, linear):
    axis = axis_attribute(op, known_rank([op.results[0], *op.operands]))
    ct = cts[0]
    sizes = [dims(x)[axis] if dims(x) is not None else None for x in op.operands]
    out = []
    if None not in sizes and dims(ct) is not None:
        start = 0
        for x, size, lin in zip(op.operands, sizes, linear):
            if lin:
                d = dims(ct)
                out.append(b.slice(ct, [axis], [start], [start + size],
                                   tensor_type(d[:axis] + [size] + d[axis + 1:], element_type(ct))))
            else:
                out.append(None)
            start += size
        return out
    # Run-time offsets: cumulative extents along the axis.
    start = b.ints([0])
    for x, lin in zip(op.operands, linear):
        end = b.add(start, b.shape(x, axis, axis + 1))
        if lin:
            d = dims(x)
            t = tensor_type(None if d is None else [None] + d[1:], element_type(ct))
            if b.opset >= 10:
                out.append(b.op("Slice", [ct, start, end, b.ints([axis])], t))
            else:  # Slice-1 takes constant bounds only: Gather the positions
                at = b.op("Range", [b.reshape(start, [], []), b.reshape(end, [], []),
                                    b.int_scalar(1)], tensor_type([None], i64()))
                out.append(b.op("Gather", [ct, at], t, axis=axis))
        else:
            out.append(None)
        start = end
    return out


@jvp("Split")
def _split(b: Builder, op, tangents):
    r = known_rank([op.operands[0], *op.results])  # the results share the rank
    a = attribute(op, "axis")
    # A negative axis counts from the end: the same axis of the tangent,
    # whose direction axis is in front (no rank needed).
    axis = a if a < 0 and r is None else axis_attribute(op, r) + 1
    t = tangents[0]
    operands = [t] + list(op.operands[1:])
    types = [b.derivative_type(r) for r in op.results]
    attrs = {k: attribute(op, k) for k in ("split", "num_outputs") if k in op.attributes}
    return b.create("Split", operands, types, axis=axis, **attrs)


@transpose("Split")
def _t_split(b: Builder, op, cts, linear):
    axis = attribute(op, "axis")
    parts = list(cts)
    if any(c is None for c in cts):  # (k is read only for zeros)
        k = next(b.shape(c, 0, 1) for c in cts if c is not None)
        parts = [_zeros_like_derivative(b, r, k) if c is None else c
                 for r, c in zip(op.results, cts)]
    return [b.concat(parts, axis)] + [None] * (len(op.operands) - 1)


def _zeros_like_derivative(b: Builder, linear_value: ir.Value, k: ir.Value) -> ir.Value:
    """Zeros shaped like a linear value, with k directions."""
    target = b.concat([k, b.shape(linear_value, 1)], 0)
    d = dims(linear_value)
    return b.expand(b.scalar(0.0, linear_value), target, None if d is None else [None] + d[1:])


def slice_args(op: ir.Operation, r: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """Constant starts, ends, axes (normalized), steps of a Slice, or refuse."""
    if len(op.operands) == 1:  # Slice-1: attributes
        starts, ends = attribute(op, "starts"), attribute(op, "ends")
        axes = attribute(op, "axes") or list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = constant_ints(op.operands[1]), constant_ints(op.operands[2])
        ax, st = operand_or_none(op, 3), operand_or_none(op, 4)
        axes = list(range(len(starts or []))) if ax is None else constant_ints(ax)
        steps = [1] * len(starts or []) if st is None else constant_ints(st)
        if None in (starts, ends, axes, steps):
            raise UnsupportedOp("Slice with starts/ends/axes/steps computed at run time")
    return starts, ends, [a + r if a < 0 else a for a in axes], steps


def _slice_axes(op: ir.Operation, r: int) -> list[int] | None:
    """Constant normalized axes of a Slice >= 10 (default: leading axes)."""
    ax = operand_or_none(op, 3)
    if ax is None:
        n = dims(op.operands[1])
        return None if n is None or n[0] is None else list(range(n[0]))
    axes = constant_ints(ax)
    return None if axes is None else [a + r if a < 0 else a for a in axes]


@jvp("Slice")
def _slice(b: Builder, op, tangents):
    x = op.operands[0]
    r = rank(x)
    if r is None:
        raise UnsupportedOp("Slice needs its operand's rank")
    t, yd = tangents[0], dims(op.results[0])
    if t is not None and yd is not None and symdims.slice_keeps_all(op) and \
            all(e is None or e == s for e, s in zip(yd, dims(t)[1:])):
        # (torch slices to a shape read at run time; t's type as static as the result's)
        return [t] + [None] * (len(op.operands) - 1)
    out = b.derivative_type(op.results[0])
    try:
        starts, ends, axes, steps = slice_args(op, r)
        return [b.slice(tangents[0], [a + 1 for a in axes], starts, ends, out, steps)] + \
            [None] * (len(op.operands) - 1)
    except UnsupportedOp:
        pass
    # starts/ends/steps computed at run time: the same Slice on the shifted axes.
    axes = _slice_axes(op, r)
    if axes is not None:
        axes_v = b.ints([a + 1 for a in axes])
    else:
        ax = op.operands[3]
        neg = b.compare("Less", ax, b.ints([0]))
        axes_v = b.add(b.where(neg, b.add(ax, b.ints([r])), ax), b.ints([1]))
    operands = [tangents[0], op.operands[1], op.operands[2], axes_v, operand_or_none(op, 4)]
    t = b.op("Slice", operands, out)
    # (the sliced extents are the primal's, known only at run time: read there)
    symdims.register(t, op.results[0])
    return [t] + [None] * (len(op.operands) - 1)


def _slice_indices(b: Builder, op, x: ir.Value, i: int, a: int) -> ir.Value:
    """The indices along axis a kept by a Slice's i-th (start, end, step): the
    Slice itself applied to Range(0, extent) keeps the exact clamping rules."""
    n = b.squeeze(b.shape(x, a, a + 1), [0])
    iota = b.op("Range", [b.int_scalar(0), n, b.int_scalar(1)], tensor_type([None], i64()))
    pick = lambda v: b.slice(v, [0], [i], [i + 1], tensor_type([1], i64()))
    st = operand_or_none(op, 4)
    return b.op("Slice", [iota, pick(op.operands[1]), pick(op.operands[2]), b.ints([0]),
                          None if st is None else pick(st)], tensor_type([None], i64()))


def _zero_padded_back(b: Builder, ct: ir.Value, x: ir.Value, starts: list, ends: list,
                      axes: list) -> ir.Value:
    """The transpose of a Slice by steps of 1 and constant bounds: the
    cotangent zero-padded back to x's extents. A sliced axis of extent n
    known only at run time has its bounds clamped to [0, n] at run time
    (a Fourier layer's lowest modes of a signal of any length)."""
    d = dims(x)
    r = len(d)
    pads: list = [0] * (2 * r)
    for s, e, a in zip(starts, ends, axes):
        n = d[a]
        if n is not None:
            s = max(0, min(n, s + n if s < 0 else s))
            e = max(0, min(n, e + n if e < 0 else e))
            pads[a], pads[r + a] = s, n - max(e, s)
            continue
        nv = b.shape(x, a, a + 1)
        end = _bound_in(b, e, nv)
        if s != 0:
            pads[a] = _bound_in(b, s, nv)
            end = b.ew("Max", end, pads[a])
        pads[r + a] = b.sub(nv, end)
    return b.pad(ct, pads, tensor_type([None] + d[1:], element_type(ct)))


def _bound_in(b: Builder, v: int, n: ir.Value) -> ir.Value:
    """A Slice bound v (from the end where negative) clamped to [0, n], n a
    1-D extent read at run time."""
    at = b.add(n, b.ints([v])) if v < 0 else b.ints([min(v, 2**62)])
    return b.ew("Min", b.ew("Max", at, b.ints([0])), n)


@transpose("Slice")
def _t_slice(b: Builder, op, cts, linear):
    x = op.operands[0]
    d = dims(x)
    if d is None:
        raise UnsupportedOp("reverse mode through Slice needs the operand's rank")
    tail = [None] * (len(op.operands) - 1)
    cd = dims(cts[0])
    if cd is None or len(cd) != len(d):
        # a cotangent of unknown (or broadcast-lower) rank: a Slice keeps its
        # operand's rank, so it is expanded to the result's shape (a Loop
        # result untyped at import made a TypeError here; fuzzer)
        rd = dims(op.results[0])
        cts = [b.expand(cts[0], b.shape(op.results[0]),
                        rd if rd is not None and len(rd) == len(d) else [None] * len(d))]
    try:
        starts, ends, axes, steps = slice_args(op, len(d))
    except UnsupportedOp:
        starts = None
        axes = _slice_axes(op, len(d))
        if axes is None:
            return [_t_slice_by_positions(b, op, cts[0])] + tail
    # the positions each sliced axis keeps, where its extent and bounds are known
    kept = [None] * len(axes) if starts is None else \
        [None if d[a] is None or st == 0 else range(d[a])[slice(s, e, st)]
         for s, e, st, a in zip(starts, ends, steps, axes)]
    if any(k is not None and not k for k in kept):
        # an empty piece: nothing reaches x (a scatter of no indices reshaped
        # them by -1, which ONNX Runtime refuses for an empty tensor)
        return [None] + tail
    if starts is not None and all(st == -1 and s == -1 and e <= -2**62
                                  for s, e, st in zip(starts, ends, steps)):
        # full reversals (start -1, end -inf, step -1): their own transpose
        return [b.slice(cts[0], axes, starts, ends, cts[0].type, steps)] + tail
    if starts is not None and all(st == 1 for st in steps) and \
            (all(d[a] is not None for a in axes) or b.opset >= 12):
        return [_zero_padded_back(b, cts[0], x, starts, ends, axes)] + tail
    # Steps != 1 or run-time bounds: the axes with static bounds and positive
    # steps on one grid (one axis at a time if the grid's Reshape cannot be
    # built), then one scatter-add per other sliced axis, last axis first.
    ct = cts[0]
    done: set[int] = set()
    grid = [(a, k[0], len(k), k.step, d[a]) for a, k in zip(axes, kept)
            if k is not None and k.step > 0]
    placed = on_grid(b, ct, grid) if grid else None
    if placed is not None:
        ct = placed
        done.update(a for a, *_ in grid)
    else:
        for piece in reversed(grid):
            placed = on_grid(b, ct, [piece])
            if placed is not None:
                ct = placed
                done.add(piece[0])
    for i in reversed(range(len(axes))):
        a = axes[i]
        if a in done:
            continue
        if kept[i] is not None:
            idx = b.ints(list(kept[i]))
        else:
            idx = _slice_indices(b, op, x, i, a)
        done.add(a)
        cd = dims(ct)
        target = b.concat([b.shape(ct, 0, 1)] + [b.shape(x if j in done else ct, j, j + 1)
                                                 for j in range(1, len(d))], 0)
        tdims = [None] + [d[j] if j in done else cd[j] for j in range(1, len(d))]
        ct = place_at(b, ct, target, tdims, idx, a)
    return [ct] + tail


def _t_slice_by_positions(b: Builder, op, ct: ir.Value) -> ir.Value:
    """Transpose of any Slice (axes, bounds and steps known at run time only):
    the Slice applied to the flat positions of its operand says where each
    kept element came from (distinct positions); the cotangent is placed there
    in zeros, one row per direction."""
    x = op.operands[0]
    d = dims(x)
    int64 = i64()
    size = b.op("Size", [x], tensor_type([], int64))
    flat = b.op("Range", [b.int_scalar(0), size, b.int_scalar(1)], tensor_type([None], int64))
    positions = b.reshape(flat, b.shape(x), None if d is None else [None] * len(d))
    kept = b.op("Slice", [positions] + list(op.operands[1:]),
                tensor_type(None if d is None else [None] * len(d), int64))
    k = b.shape(ct, 0, 1)
    rows = b.reshape(ct, b.concat([k, b.ints([-1])], 0), [None, None])
    idx = b.expand(b.reshape(kept, [1, -1], [1, None]), b.shape(rows), [None, None])
    zeros = b.zeros(b.concat([k, b.reshape(size, [1], [1])], 0), [None, None], ct)
    placed = b.op("ScatterElements", [zeros, idx, rows], zeros.type, axis=1)
    return b.reshape_to(placed, b.like_shape(ct, x), None if d is None else [None] + d[1:])


def on_grid(b: Builder, ct: ir.Value, pieces: list) -> ir.Value | None:
    """Transpose of a strided Slice along the axes of `pieces` ((axis, first,
    count, step, n) each: positions first + i*step, i < count, of n): ct
    placed, with one Pad, on a grid of ceil(n / step) rows of `step` per
    strided axis (an axis inserted after each), merged back by one Reshape
    -- no scatter; along an axis of step 1, just zero-padded. The pieces x[j::step] of one value thus differ
    only in the inserted axes' pads: a sum of their cotangents is a sum of
    placements there (simplify.py concatenates them). None when the Reshape
    would need a run-time extent after the first strided axis."""
    cd = list(dims(ct))
    elem = element_type(ct)
    for a, _, count, _, _ in pieces:
        if not isinstance(cd[a], int):  # the Slice's type may say ? where its bounds are known
            cd[a] = count
    # one position: no gaps (a step of 2^50 padded each element by it)
    pieces = sorted((a, first, count, step if count > 1 else 1, n)
                    for a, first, count, step, n in pieces)
    strided = [a for a, _, _, step, _ in pieces if step > 1]
    if strided and None in cd[strided[0]:]:
        return None
    inserted = [a + i + 1 for i, a in enumerate(strided)]
    ud = list(cd)
    for p in inserted:  # (positions in the result, ascending)
        ud.insert(p, 1)
    pads = [0] * (2 * len(ud))
    merged = list(cd)  # the extents once the grid's axes are merged back
    for a, first, count, step, n in pieces:
        at = a + sum(1 for s in strided if s < a)
        if step > 1:
            row, column = divmod(first, step)
            rows = -(-n // step)
            pads[at], pads[len(ud) + at] = row, rows - row - count
            pads[at + 1], pads[len(ud) + at + 1] = column, step - 1 - column
            ud[at], ud[at + 1], merged[a] = rows, step, rows * step
        else:
            pads[at], pads[len(ud) + at] = first, n - first - count
            ud[at] = merged[a] = n
    u = b.unsqueeze(ct, inserted) if inserted else ct
    if any(pads):
        u = b.pad(u, pads, tensor_type(ud, elem))
    if not strided:
        return u
    lead = strided[0]
    if b.opset >= 14 and 0 in merged[lead:]:  # literal zeros: extents only with allowzero
        target = b.concat([b.shape(u, 0, lead), b.ints(merged[lead:])], 0)
        out = b.op("Reshape", [u, target], tensor_type(merged, elem), allowzero=1)
    else:
        out = b.reshape(u, [0] * lead + merged[lead:], merged)
    ragged = [(a, n) for a, _, _, _, n in pieces if merged[a] > n]
    if ragged:
        for a, n in ragged:
            merged[a] = n
        out = b.slice(out, [a for a, _ in ragged], [0] * len(ragged), [n for _, n in ragged],
                      tensor_type(list(merged), elem))
    return out


@transpose("Pad")
def _t_pad(b: Builder, op, cts, linear):
    x = op.operands[0]
    d = dims(x)
    pads = list(attribute(op, "pads")) if "pads" in op.attributes else constant_ints(op.operands[1])
    mode = attribute(op, "mode") or "constant"
    if mode != "constant":  # only the Pad JVP on run-time extents emits one
        return [_t_pad_indexed(b, mode, x, pads, cts[0])] + [None] * (len(op.operands) - 1)
    if pads is None or d is None or operand_or_none(op, 3) is not None:
        # Run-time pads (or axes): the zero pad's adjoint crops what it added
        # and zero-pads what it cropped, i.e. Pad by the negated pads.
        if "pads" in op.attributes:
            raise UnsupportedOp("transposing Pad-2 needs a known rank")
        neg = b.neg(op.operands[1])
        return [b.op("Pad", [cts[0], neg, None] + list(op.operands[3:]),
                     tensor_type(None if d is None else [None] + d[1:], element_type(cts[0])))] \
            + [None] * (len(op.operands) - 1)
    r = len(d)
    # Positive pads are sliced off; negative ones (crops) are zero-padded back.
    starts = [max(p, 0) for p in pads[:r]]
    ends = [-p if p > 0 else 2**62 for p in pads[r:]]
    ct = cts[0]
    crops = [max(-p, 0) for p in pads]
    if any(crops):
        cd = dims(ct)
        mid = [None if e is None else e - starts[i] - max(pads[r + i], 0) for i, e in enumerate(cd)]
        ct = b.slice(ct, list(range(r)), starts, ends, tensor_type([None] + mid[1:], element_type(ct)))
        return [b.pad(ct, crops, tensor_type([None] + d[1:], element_type(ct)))] \
            + [None] * (len(op.operands) - 1)
    return [b.slice(ct, list(range(r)), starts, ends, tensor_type([None] + d[1:], element_type(ct)))] \
        + [None] * (len(op.operands) - 1)


def _t_pad_indexed(b: Builder, mode: str, t: ir.Value, pads: list[int] | None,
                   ct: ir.Value) -> ir.Value:
    """Transpose of an edge/reflect/wrap Pad of a tangent t [k, ..] whose
    padded extents are known only at run time. Each axis reads its own
    source index (the pad is their tensor product), so the cotangent is
    scatter-added axis by axis at the source indices, computed at run time
    from the extent as _source_index computes them from a static one."""
    d = dims(t)
    if pads is None or d is None:
        raise UnsupportedOp(f"reverse mode through Pad mode '{mode}' needs constant pads")
    r = len(d)
    for a in range(1, r):
        pb, pe = pads[a], pads[r + a]
        if pb == 0 and pe == 0:
            continue
        n = b.shape(t, a, a + 1)
        src = b.ints(_source_index(mode, d[a], pb, pe)) if d[a] is not None else \
            _run_time_source_index(b, mode, n, pb, pe)
        if b.opset >= 16:
            cd = dims(ct)
            ct = scatter_add_at(b, b.concat([b.shape(ct, 0, a), n, b.shape(ct, a + 1)], 0),
                                   cd[:a] + [d[a]] + cd[a + 1:], ct, src, a)
        else:
            ct = onehot_scatter(b, ct, src, a, d[a] if d[a] is not None else n)
    return ct


def _run_time_source_index(b: Builder, mode: str, n: ir.Value, pb: int, pe: int) -> ir.Value:
    """_source_index on an extent n ([1] i64) read at run time."""
    int64 = i64()
    vec = tensor_type([None], int64)
    lo, hi = max(-pb, 0), max(-pe, 0)
    if lo or hi:
        n = b.sub(n, b.ints([lo + hi]))
    pb, pe = max(pb, 0), max(pe, 0)
    limit = b.squeeze(b.add(n, b.ints([pe])), [0])
    i = b.op("Range", [b.int_scalar(-pb), limit, b.int_scalar(1)], vec)
    last = b.sub(n, b.ints([1]))
    if mode == "edge":
        low = b.where(b.compare("Less", i, b.ints([0])), b.ints([0]), i)
        src = b.where(b.compare("Greater", low, last), last, low)
    elif mode == "wrap":
        src = b.op("Mod", [i, n], vec)
    else:  # reflect: period 2(n - 1), taken as 1 when n == 1 (every index reads 0)
        period = b.add(last, last)
        period = b.where(b.compare("Less", period, b.ints([1])), b.ints([1]), period)
        m = b.op("Mod", [i, period], vec)
        src = b.where(b.compare("Less", m, n), m, b.sub(period, m))
    return b.add(src, b.ints([lo])) if lo else src


@jvp("Tile")
def _tile(b: Builder, op, tangents):
    x, reps = op.operands
    c = constant_ints(reps)
    if c is not None and rank(x) is not None and (len(c) != rank(x) or min(c, default=0) < 0):
        raise UnsupportedOp(f"repeats {c} do not fit an input of rank {rank(x)} (one count "
                            ">= 0 per axis)")
    rv = b.ints([1] + c) if c is not None else b.concat([b.ints([1]), reps], 0)
    tiled = b.op("Tile", [tangents[0], rv], b.derivative_type(op.results[0]))
    # exactly [k] + shape(y), which symdims cannot tell for run-time repeats:
    # said here, no Expand fits it and no transpose reads its shape at run time
    symdims.register(tiled, op.results[0])
    return [tiled, None]


@transpose("Tile")
def _t_tile(b: Builder, op, cts, linear):
    x, reps = op.operands
    d = dims(x)
    if d is None:
        raise UnsupportedOp("transposing Tile needs a known rank")
    # repeats read at run time: every axis may be tiled, its count a Slice of them
    c = constant_ints(reps) or [None] * len(d)
    ct = cts[0]
    pieces, out, axes = [b.shape(ct, 0, 1)], [None], []
    for i, (rp, e) in enumerate(zip(c[1:], d[1:]), start=1):
        if rp == 1:
            pieces.append(b.shape(ct, i, i + 1) if e is None else b.ints([e]))
            out.append(e)
            continue
        axes.append(len(out))
        count = b.ints([rp]) if rp is not None else \
            b.slice(reps, [0], [i], [i + 1], tensor_type([1], element_type(reps)))
        pieces.append(b.ints([rp, e]) if rp is not None and e is not None else
                      b.concat([count, b.shape(x, i, i + 1)], 0))
        out += [rp, e]
    if not axes:
        return [ct, None]
    if 0 in d[1:] and None not in d[1:]:  # x is empty: so is its cotangent
        return [b.expand(b.scalar(0.0, ct), b.concat([b.shape(ct, 0, 1), b.ints(d[1:])], 0),
                         [None] + d[1:]), None]
    split = b.reshape_to(ct, b.concat(pieces, 0), out)  # (a 0 extent needs allowzero)
    return [b.reduce("ReduceSum", split, axes, False), None]


def _pad_args(op: ir.Operation, r: int) -> list[int] | None:
    """Constant pads for every axis [begins..., ends...], or None."""
    if "pads" in op.attributes:  # Pad-2
        return list(attribute(op, "pads"))
    pads = constant_ints(op.operands[1])
    if pads is None:
        return None
    ax = operand_or_none(op, 3)
    if ax is None:
        return pads
    axes = constant_ints(ax)
    if axes is None:
        return None
    full = [0] * (2 * r)
    n = len(axes)
    for i, a in enumerate(axes):
        a = a + r if a < 0 else a
        full[a], full[r + a] = pads[i], pads[n + i]
    return full


def _source_index(mode: str, n: int, pb: int, pe: int) -> np.ndarray:
    """For Pad's edge/reflect/wrap: the input index read by each output
    index. Negative pads crop first, as ONNX Runtime does (for wrap that
    decides the period; ONNX's reference refuses them)."""
    lo, hi = max(-pb, 0), max(-pe, 0)
    n, pb, pe = n - lo - hi, max(pb, 0), max(pe, 0)
    i = np.arange(-pb, n + pe)
    if mode == "edge":
        src = np.clip(i, 0, n - 1)
    elif mode == "wrap":
        src = np.mod(i, n)
    elif n == 1:
        src = np.zeros_like(i)
    else:
        period = 2 * (n - 1)
        m = np.mod(i, period)
        src = np.where(m < n, m, period - m)
    return src + lo


@jvp("Pad")
def _pad(b: Builder, op, tangents):
    x = op.operands[0]
    y = op.results[0]
    r = rank(x)
    mode = attribute(op, "mode") or "constant"
    pads = None if r is None else _pad_args(op, r)
    t = tangents[0]
    out_t = None
    if t is not None:
        if mode == "constant":
            if pads is not None:
                pv = b.ints([0] + pads[:r] + [0] + pads[r:])
            else:
                pads_in = op.operands[1]
                axes_in = operand_or_none(op, 3)
                if axes_in is not None and r is not None:
                    # Pads for every axis of the tangent, placed at run time:
                    # (ONNX Runtime's transpose optimizer mis-remaps a Pad's
                    # run-time axes, so the tangent's Pad has none).
                    int64 = i64()
                    ax = axes_in if element_type(axes_in) == int64 else \
                        b.op("Cast", [axes_in], tensor_type(dims(axes_in), int64), to=7)
                    ax = b.where(b.compare("Less", ax, b.ints([0])), b.add(ax, b.ints([r + 1])),
                                 b.add(ax, b.ints([1])))
                    at = b.concat([ax, b.add(ax, b.ints([r + 1]))], 0)
                    pv = b.op("ScatterElements", [b.ints([0] * (2 * r + 2)), at, pads_in],
                              tensor_type([2 * r + 2], int64), axis=0)
                elif r is None:
                    raise UnsupportedOp("Pad with run-time pads needs its operand's rank")
                else:
                    half = b.ints([0])
                    pv = b.concat([half, b.slice(pads_in, [0], [0], [r], tensor_type([r], i64())),
                                   half, b.slice(pads_in, [0], [r], [2 * r],
                                                 tensor_type([r], i64()))], 0)
            if out_t is None:
                out_t = b.pad(t, [0] + pads[:r] + [0] + pads[r:], b.derivative_type(y)) \
                    if b.opset < 11 else b.op("Pad", [t, pv], b.derivative_type(y))
                d = dims(x)
                if pads is None or d is None or \
                        any(d[a] is None and (pads[a] or pads[r + a]) for a in range(r)):
                    # exactly [k] + shape(y), as Tile's, where symdims' Pad rule
                    # cannot tell (run-time pads, a run-time extent padded); not
                    # elsewhere: a registered value's direction axis is a fresh
                    # symbol, read off it at run time (swin: 37 more Shape/Concat)
                    symdims.register(out_t, y)
        else:
            d = dims(x)
            if pads is None or d is None:
                raise UnsupportedOp(f"Pad mode '{mode}' needs constant pads")
            out_t = t
            if b.opset >= 11 and any(d[a] is None and (pads[a] or pads[r + a]) for a in range(r)):
                # no source indices without the extents: the op itself (linear),
                # which reverse mode refuses (_t_pad)
                padded = b.op("Pad", [t, b.ints([0] + pads[:r] + [0] + pads[r:])],
                              b.derivative_type(y), mode=mode)
                symdims.register(padded, y)
                return [padded] + [None] * (len(op.operands) - 1)
            for a in range(r):
                if pads[a] == 0 and pads[r + a] == 0:
                    continue
                if d[a] is None:
                    raise UnsupportedOp(f"Pad mode '{mode}' needs static extents on padded axes")
                src = _source_index(mode, d[a], pads[a], pads[r + a])
                od = dims(out_t)
                od = od[:a + 1] + [len(src)] + od[a + 2:]
                out_t = b.op("Gather", [out_t, b.ints(src)], tensor_type(od, element_type(t)),
                             axis=a + 1)
    tc = tangents[2] if len(tangents) > 2 else None
    if tc is not None and mode == "constant":
        ones = b.expand(b.scalar(1.0, y), b.shape(x), dims(x))
        inner = b.op("Pad", [ones] + list(op.operands[1:2]) + [b.scalar(0.0, y)]
                     + list(op.operands[3:]), y.type, mode="constant")
        mask = b.sub(b.scalar(1.0, y), inner)
        term = b.mul(b.align(tc, r), mask)
        out_t = term if out_t is None else b.add(out_t, term)
    return [out_t] + [None] * (len(op.operands) - 1)


@jvp("Trilu")
def _trilu(b: Builder, op, tangents):
    return [b.op("Trilu", [tangents[0]] + list(op.operands[1:]), b.derivative_type(op.results[0]),
                 upper=attribute(op, "upper"))] + [None] * (len(op.operands) - 1)


@transpose("Trilu")
def _t_trilu(b: Builder, op, cts, linear):
    return [b.op("Trilu", [cts[0]] + list(op.operands[1:]), cts[0].type,
                 upper=attribute(op, "upper"))] + [None] * (len(op.operands) - 1)


@jvp("Range")
def _range(b: Builder, op, tangents):
    start, limit, delta = op.operands
    y = op.results[0]
    ts, td = tangents[0], tangents[2]
    terms = []
    if ts is not None:
        terms.append(b.unsqueeze(ts, [1]))  # [k] -> [k, 1]
    if td is not None:
        n = b.squeeze(b.shape(y), [0])
        iota = b.op("Range", [b.int_scalar(0), n, b.int_scalar(1)], tensor_type([None], i64()))
        terms.append(b.mul(b.unsqueeze(td, [1]), b.cast_like(iota, y)))
    return [None if not terms else b.sum(terms) if len(terms) > 1 else terms[0]]


@jvp("ReverseSequence")
def _reverse_sequence(b: Builder, op, tangents):
    r = rank(op.operands[0])
    if r is None:
        raise UnsupportedOp("ReverseSequence needs its input's rank")
    d, lens = dims(op.operands[0]), constant_ints(op.operands[1])
    # (ONNX accepts these; ONNX Runtime fails when running: fuzz seed 228 case
    # 876, seed 229 case 627)
    batch_axis = attribute(op, "batch_axis")
    t = None if d is None else d[attribute(op, "time_axis") or 0]
    if t is not None and lens and not all(0 <= n <= t for n in lens):
        raise UnsupportedOp(f"sequence_lens {lens} outside [0, {t}], the time axis's extent")
    batch = None if d is None else d[1 if batch_axis is None else batch_axis]
    if batch is not None and lens is not None and len(lens) != batch:
        raise UnsupportedOp(f"sequence_lens {lens} for a batch of {batch}")
    perm = [1, 2, 0] + list(range(3, r + 1))  # direction axis after batch and time
    moved = b.transpose(tangents[0], perm)
    rev = b.op("ReverseSequence", [moved, op.operands[1]], moved.type,
               batch_axis=batch_axis, time_axis=attribute(op, "time_axis"))
    return [b.transpose(rev, [2, 0, 1] + list(range(3, r + 1)))]


@transpose("ReverseSequence")
def _t_reverse_sequence(b: Builder, op, cts, linear):
    return [b.op("ReverseSequence", [cts[0], op.operands[1]], cts[0].type,
                 batch_axis=attribute(op, "batch_axis"), time_axis=attribute(op, "time_axis")), None]


def _space_depth(b: Builder, t: ir.Value, y: ir.Value, to_space: bool, bs: int, mode: str):
    """DepthToSpace / SpaceToDepth on [k, N, C, H, W] by Reshape + Transpose."""
    td = dims(t)
    channels, height, width = td[2:] if td is not None and len(td) == 5 else (None,) * 3
    # invalid models ONNX's inference types by floor division (ONNX Runtime refuses them)
    if to_space and channels is not None and channels % (bs * bs):
        raise ImportFailure(f"its {channels} channels are not a multiple of blocksize^2 = "
                            f"{bs * bs}")
    if not to_space and any(e is not None and e % bs for e in (height, width)):
        raise ImportFailure(f"its spatial extents {height} x {width} are not multiples of "
                            f"blocksize {bs}")
    k = b.shape(t, 0, 1)
    n = b.shape(t, 1, 2)
    if to_space:
        if mode == "CRD":
            split = b.reshape(t, b.concat([k, n, b.ints([-1, bs, bs]), b.shape(t, 3)], 0),
                              [None] * 7)
            perm = [0, 1, 2, 5, 3, 6, 4]
        else:
            split = b.reshape(t, b.concat([k, n, b.ints([bs, bs, -1]), b.shape(t, 3)], 0),
                              [None] * 7)
            perm = [0, 1, 4, 5, 2, 6, 3]
    else:
        c, h, w = (b.shape(t, i, i + 1) for i in (2, 3, 4))
        hh = b.div(h, b.ints([bs]))
        ww = b.div(w, b.ints([bs]))
        split = b.reshape(t, b.concat([k, n, c, hh, b.ints([bs]), ww, b.ints([bs])], 0), [None] * 7)
        # DCR: channel (bh, bw, c); CRD: channel (c, bh, bw)
        perm = [0, 1, 2, 4, 6, 3, 5] if mode == "CRD" else [0, 1, 4, 6, 2, 3, 5]
    moved = b.transpose(split, perm)
    return b.reshape(moved, b.concat([k, b.shape(y)], 0), dims(b.derivative_type(y)))


@jvp("DepthToSpace")
def _depth_to_space(b: Builder, op, tangents):
    return [_space_depth(b, tangents[0], op.results[0], True, attribute(op, "blocksize"),
                         attribute(op, "mode") or "DCR")]


@jvp("SpaceToDepth")
def _space_to_depth(b: Builder, op, tangents):
    return [_space_depth(b, tangents[0], op.results[0], False, attribute(op, "blocksize"),
                         attribute(op, "mode") or "DCR")]


@jvp("Unique")
def _unique(b: Builder, op, tangents):
    x = op.operands[0]
    t = tangents[0]
    first = op.results[1]
    if isinstance(first.type, ir.NoneType):
        full = b.create("Unique", [x], [op.results[0].type] + [tensor_type([None], i64())] * 3,
                        **{k: attribute(op, k) for k in ("sorted", "axis") if k in op.attributes})
        first = full[1]
    y = op.results[0]
    if "axis" not in op.attributes:
        flat = b.reshape(t, [0, -1], [None, None])
        val = b.op("Gather", [flat, first], b.derivative_type(y), axis=1)
    else:
        val = b.op("Gather", [t, first], b.derivative_type(y), axis=axis_attribute(op, rank(x)) + 1)
    return [val, None, None, None]


@jvp("CenterCropPad")
def _center_crop_pad(b: Builder, op, tangents):
    x = op.operands[0]
    r = rank(x)
    axes = attribute(op, "axes") or list(range(r))
    axes = [a + r if a < 0 else a for a in axes]
    d, sizes = dims(x), constant_ints(op.operands[1])
    t = tangents[0]
    if d is not None and sizes is not None and all(d[a] is not None for a in axes):
        # Static: a Slice for the cropped axes, a Pad for the padded ones.
        crop = [(a + 1, (d[a] - n) // 2, (d[a] - n) // 2 + n) for a, n in zip(axes, sizes) if n < d[a]]
        cd = [None] + list(d)
        if crop:
            for a, s0, e0 in crop:
                cd[a] = e0 - s0
            t = b.slice(t, [c[0] for c in crop], [c[1] for c in crop], [c[2] for c in crop],
                        tensor_type(cd, element_type(t)))
        pads = [0] * (2 * (r + 1))
        for a, n in zip(axes, sizes):
            if n > d[a]:
                pads[a + 1], pads[r + 2 + a] = (n - d[a]) // 2, n - d[a] - (n - d[a]) // 2
                cd[a + 1] = n
        if any(pads):
            t = b.op("Pad", [t, b.ints(pads)], tensor_type(cd, element_type(t)))
        return [t, None]
    # Sizes known at run time: CenterCropPad of the tangent over every axis
    # (no `axes`: ONNX Runtime's function body mis-indexes the shape with
    # them), the direction axis and the other axes keeping their extents.
    if r is None:
        raise UnsupportedOp("CenterCropPad with run-time sizes needs its input's rank")
    int64 = i64()
    pieces = [b.shape(t, 0, 1)]
    for i in range(r):
        if i in axes:
            j = axes.index(i)
            pieces.append(b.slice(op.operands[1], [0], [j], [j + 1], tensor_type([1], int64)))
        else:
            pieces.append(b.shape(x, i, i + 1))
    return [b.op("CenterCropPad", [t, b.concat(pieces, 0)], b.derivative_type(op.results[0])),
            None]


@transpose("CenterCropPad")
def _t_center_crop_pad(b: Builder, op, cts, linear):
    # The adjoint of a centred crop is the centred zero pad back (and of a
    # pad, the crop): CenterCropPad to the operand's extents, every axis.
    x = op.operands[0]
    d = dims(x)
    return [b.op("CenterCropPad", [cts[0], b.like_shape(cts[0], x)],
                 tensor_type(None if d is None else [None] + d[1:], element_type(cts[0]))),
            None]


@jvp("DequantizeLinear")
def _dequantize(b: Builder, op, tangents):
    x, scale = op.operands[0], op.operands[1]
    zp = operand_or_none(op, 2)
    ts = tangents[1]
    if ts is None:
        return [None]
    if (attribute(op, "block_size") or 0) > 0 and has_attribute(op, "block_size"):
        raise UnsupportedOp("DequantizeLinear with block_size: derivative in the scale")
    y = op.results[0]
    r = rank(x)
    xf = b.op("Cast", [x], tensor_type(dims(x), element_type(y)), to=_dtype(y))
    if zp is not None:
        xf = b.sub(xf, b.op("Cast", [zp], tensor_type(dims(zp), element_type(y)), to=_dtype(y)))
    if rank(scale) == 1 and r > 1:
        ax = axis_attribute(op, r) if has_attribute(op, "axis") else 1
        ts = b.unsqueeze(ts, list(range(1, ax + 1)) + list(range(ax + 2, r + 1)))
    else:
        ts = b.align(ts, r)
    return [b.mul(ts, xf)]


def _dtype(v: ir.Value) -> int:
    from .elementwise import onnx_dtype
    return onnx_dtype(element_type(v))
