"""Indexing ops: gathers, scatters and Compress. Each is linear in its data
(a scatter also in its updates): the JVP applies the op to the tangent over
the direction axis, and the transpose scatter-adds the cotangent back
(scatter.py), duplicates accumulating. Ops that take an index tensor shaped
like their data (GatherElements, ScatterElements) get the indices broadcast
over the direction axis."""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import ImportFailure, UnsupportedOp

from ..builder import (Builder, attribute, axis_attribute, constant_ints, dims, element_type,
                       has_attribute, i64, known_rank, onehot, op_type, producer, rank,
                       tensor_type)
from ..registry import jvp, transpose
from .reduction import zero_aware
from .scatter import onehot_scatter, scatter_add_at
from .shape import on_grid


def _tail(op: ir.Operation, n: int) -> list:
    return [None] * (len(op.operands) - n)


def _over_directions(b: Builder, idx: ir.Value, k: ir.Value) -> ir.Value:
    """idx [S] -> [k] + S (same values for every direction)."""
    d = dims(idx)
    u = b.unsqueeze(idx, [0])
    return b.expand(u, b.concat([k, b.shape(idx)], 0), None if d is None else [None] + d)


def _match_directions(b: Builder, idx: ir.Value, like: ir.Value) -> ir.Value:
    """An index tensor of a linear op ([1] + S in a linear program) broadcast
    to the direction count of a cotangent."""
    d = dims(idx)
    return b.expand(idx, b.concat([b.shape(like, 0, 1), b.shape(idx, 1)], 0),
                    None if d is None else [None] + d[1:])


def scatter_add_along(b: Builder, ct: ir.Value, data_lin: ir.Value, idx: ir.Value,
                      axis: int) -> ir.Value:
    """Transpose of Gather(data_lin, idx, axis): ct [..pre, *Q, ..post] is
    scatter-added into zeros shaped like data_lin (with ct's direction count)."""
    q = rank(idx)
    cd = dims(ct)
    if q is None or cd is None or axis < 1:
        raise UnsupportedOp("transposing Gather needs static ranks and a data axis >= 1")
    flat_dims = cd[:axis] + [None] + cd[axis + q:]
    # The gathered count, never -1: an extent of ct may be 0 at run time
    # (ONNX refuses a 0-product target with -1)
    idd = dims(idx)
    mid = int(np.prod(idd)) if idd is not None and None not in idd else \
        int(np.prod(cd[axis:axis + q])) if None not in cd[axis:axis + q] else None
    dd = dims(data_lin)  # None: data of unknown rank (e.g. a Loop result)
    if mid == 0 or 0 in cd[axis + q:]:  # nothing gathered: nothing to scatter back
        return b.zeros(b.like_shape(ct, data_lin), None if dd is None else [None] + dd[1:], ct)
    if None not in cd[axis + q:] and mid is not None:  # a constant target keeps the rank visible
        flat = b.reshape(ct, [0] * axis + [mid] + cd[axis + q:], flat_dims)
    elif q <= 1:
        # no Reshape at run-time extents: before opset 14 (no allowzero) an
        # extent 0 in its target would be read as "copy the operand's"
        flat = b.unsqueeze(ct, [axis]) if q == 0 else ct
    else:
        count = b.ints([mid]) if mid is not None else b.reshape(
            b.op("Size", [idx], tensor_type([], ir.IntegerType.get_signless(64))), [1], [1])
        target = b.concat([b.shape(ct, 0, axis), count, b.shape(ct, axis + q)], 0)
        allow = {"allowzero": 1} if b.opset >= 14 else {}
        flat = b.op("Reshape", [ct, target], tensor_type(flat_dims, element_type(ct)), **allow)
    if b.opset < 16:
        depth = dd[axis] if dd is not None and dd[axis] is not None else \
            b.shape(data_lin, axis, axis + 1)
        return onehot_scatter(b, flat, b.reshape(idx, [-1], [None]), axis, depth)
    return scatter_add_at(b, b.like_shape(ct, data_lin),
                             None if dd is None else [None] + dd[1:], flat, idx, axis)


def _onehot_scatter_elements(b: Builder, ct: ir.Value, ix: ir.Value, axis: int,
                             depth: int | None, target_dims: list | None = None,
                             target: ir.Value | None = None) -> ir.Value:
    """ScatterElements(zeros, ix, ct, add) before opset 16, via OneHot; an
    unknown depth is read from `target` at run time."""
    if depth is None:
        if target is None:
            raise UnsupportedOp("scatter-add before opset 16 needs a static extent")
        depth = b.shape(target, axis, axis + 1)
    r = rank(ct)
    prod = b.mul(b.unsqueeze(ct, [r]), onehot(b, ix, depth, ct))
    summed = b.reduce("ReduceSum", prod, [axis], False)
    out = b.transpose(summed, list(range(axis)) + [r - 1] + list(range(axis, r - 1)))
    # The indices may be shorter than the data on the other axes: zero-pad the ends.
    od, td = dims(out), target_dims
    if td is None or od is None:
        raise UnsupportedOp("scatter-add before opset 16 needs static ranks")
    if all(o is not None and t is not None for o, t in zip(od[1:], td[1:])):
        if any(o < t for o, t in zip(od[1:], td[1:])):
            pads = [0] * r + [0] + [t - o for o, t in zip(od[1:], td[1:])]
            out = b.pad(out, pads, tensor_type([None] + td[1:], element_type(out)))
        return out
    if target is None:
        raise UnsupportedOp("scatter-add before opset 16 needs static extents")
    ends = b.sub(b.shape(target, 1), b.shape(out, 1))
    pads = b.concat([b.ints([0] * (r + 1)), ends], 0)
    return b.op("Pad", [out, pads], tensor_type([None] + td[1:], element_type(out)))


def _check_constant_indices(x: ir.Value, idx: ir.Value, axis: int) -> None:
    """Constant indices outside [-n, n) for a static extent n: ONNX accepts
    them and ONNX Runtime fails when running; the derivative models would
    gather (and scatter-add) at them too."""
    d = dims(x)
    n = d[axis] if d is not None and 0 <= axis < len(d) else None
    values = None if n is None else constant_ints(idx)
    if values and (min(values) < -n or max(values) >= n):
        bad = next(v for v in values if not -n <= v < n)
        raise UnsupportedOp(f"constant index {bad} is out of range for axis {axis} of extent {n}")


def _check_distinct_positions(op: ir.Operation, idx: ir.Value, axis: int | None) -> None:
    """A scatter without reduction whose constant indices (or a broadcast of
    constant ones: torch's index_add, exported with a dynamic batch) write
    one position twice. ONNX asks for distinct positions; the result depends
    on the order of the updates (ONNX Runtime's last one wins), and its
    transpose would give every duplicate the cotangent. `axis`: ScatterElements'
    (positions differ along it within a line), None for ScatterND's tuples
    (constant ones only)."""
    if _reduction(op) != "none":
        return
    expand = producer(idx, "Expand")
    src = idx if expand is None else expand.operands[0]
    values, d, full = constant_ints(src), dims(src), dims(idx)
    if values is None or d is None or full is None or len(values) != math.prod(d):
        return
    a = np.asarray(values).reshape(d)
    n = dims(op.operands[0])
    if axis is None:  # ScatterND: constant index tuples along the last axis
        rows = a.reshape(-1, d[-1]) if expand is None and d and d[-1] else None
        twice = rows is not None and len(np.unique(rows, axis=0)) < len(rows)
    else:
        if n is not None and n[axis] is not None:
            a = np.where(a < 0, a + n[axis], a)
        own = axis - (len(full) - len(d))  # src's axis (Expand may prepend axes)
        line = full[axis]
        if own < 0 or d[own] == 1:  # one index repeated along every line
            twice = line is not None and line > 1
        else:
            ordered = np.sort(a, axis=own)
            twice = bool((np.diff(ordered, axis=own) == 0).any())
    if twice:
        raise ImportFailure("indices that write one position twice, with reduction 'none': "
                            "ONNX asks for distinct positions (the result would depend on "
                            "the order of the updates)")


@jvp("Gather")
def _gather(b: Builder, op, tangents):
    x, idx = op.operands
    axis = axis_attribute(op, rank(x))
    _check_constant_indices(x, idx, axis)
    return [b.op("Gather", [tangents[0], idx], b.derivative_type(op.results[0]), axis=axis + 1)]


# Specialised Gather transposes, tried in order: hook(b, op, ct) -> value or None
# (pooling.py: a Gather at MaxPool's Indices transposes through MaxUnpool).
GATHER_TRANSPOSE_HOOKS: list = []


@transpose("Gather")
def _t_gather(b: Builder, op, cts, linear):
    x, idx = op.operands
    for hook in GATHER_TRANSPOSE_HOOKS:
        special = hook(b, op, cts[0])
        if special is not None:
            return [special, None]
    axis = axis_attribute(op, rank(x))
    placed = _padded_gather(b, cts[0], x, idx, axis)
    if placed is not None:
        return [placed, None]
    return [scatter_add_along(b, cts[0], x, idx, axis), None]


def _padded_gather(b: Builder, ct: ir.Value, data_lin: ir.Value, idx: ir.Value,
                   axis: int) -> ir.Value | None:
    """Transpose of a Gather of the constant indices a, a+1, ..., a+m-1 (or
    the scalar a) along a static extent: the cotangent zero-padded, as a
    Slice's is, which simplify's sums of placements can concatenate (an
    unrolled recurrence reading x[:, t] at every step). None otherwise."""
    values, q, dd, cd = constant_ints(idx), rank(idx), dims(data_lin), dims(ct)
    if not values or q is None or q > 1 or dd is None or cd is None or axis < 1:
        return None
    n = dd[axis]
    if n is None:
        return None
    at = [v + n if v < 0 else v for v in values]
    if at != list(range(at[0], at[0] + len(at))) or at[0] < 0 or at[-1] >= n:
        return None
    piece = b.unsqueeze(ct, [axis]) if q == 0 else ct
    return on_grid(b, piece, [(axis, at[0], len(at), 1, n)])


@jvp("GatherElements")
def _gather_elements(b: Builder, op, tangents):
    x, idx = op.operands
    axis = axis_attribute(op, known_rank([x, idx]))  # the same rank (GatherElements requires it)
    _check_constant_indices(x, idx, axis)
    t = tangents[0]
    return [b.op("GatherElements", [t, _over_directions(b, idx, b.shape(t, 0, 1))],
                 b.derivative_type(op.results[0]), axis=axis + 1)]


@transpose("GatherElements")
def _t_gather_elements(b: Builder, op, cts, linear):
    x, idx = op.operands
    ct = cts[0]
    ix = _match_directions(b, idx, ct)
    axis = axis_attribute(op, known_rank([x, idx]))  # x and idx have the same rank
    xd = dims(x)
    if xd is None and rank(idx) is not None:
        xd = [None] * rank(idx)  # extents read at run time (like_shape)
    if b.opset < 16:
        return [_onehot_scatter_elements(b, ct, ix, axis, None if xd is None else xd[axis],
                                         xd, x), None]
    zeros = b.zeros(b.like_shape(ct, x), None if xd is None else [None] + xd[1:], ct)
    return [b.op("ScatterElements", [zeros, ix, ct], zeros.type, axis=axis, reduction="add"), None]


def _reduction(op: ir.Operation) -> str:
    r = attribute(op, "reduction") if has_attribute(op, "reduction") else None
    r = r or "none"
    if r not in ("none", "add"):
        raise UnsupportedOp(f"derivative of {op_type(op)} with reduction='{r}'")
    return r


def _op_attrs(op: ir.Operation) -> dict:
    from onnx_ad_mlir import _op_table
    return _op_table.OPS[op.name.removeprefix("onnx.")]["attributes"]


@jvp("ScatterElements", "Scatter")
def _scatter_elements(b: Builder, op, tangents):
    data, idx, upd = op.operands
    axis = axis_attribute(op, known_rank([data, idx, upd]))
    _check_constant_indices(data, idx, axis)
    if _nonlinear_reduction(op):
        return _scatter_elements_nonlinear(b, op, tangents)
    _check_distinct_positions(op, idx, axis)
    r = _reduction(op)
    td, tu = tangents[0], tangents[2]
    if td is None and tu is None:
        return [None]
    k = b.shape(td if td is not None else tu, 0, 1)
    if td is None:
        td = b.zeros(b.concat([k, b.shape(data)], 0), None if dims(data) is None
                    else [None] + dims(data), upd)
    if tu is None:
        tu = b.zeros(b.concat([k, b.shape(upd)], 0), None if dims(upd) is None
                    else [None] + dims(upd), data)
    attrs = {"reduction": r} if r != "none" else {}
    return [b.op(op_type(op), [td, _over_directions(b, idx, k), tu],
                 b.derivative_type(op.results[0]), axis=axis_attribute(op, rank(data)) + 1, **attrs)]


def _nonlinear_reduction(op: ir.Operation) -> str | None:
    """'max', 'min' or 'mul' for a scatter reducing so, else None."""
    r = attribute(op, "reduction") if has_attribute(op, "reduction") else None
    return r if r in ("max", "min", "mul") else None


def _scatter_weights(b: Builder, op, gather: str, **attrs) -> tuple[ir.Value, ir.Value]:
    """(wx, wu) of a max/min/mul scatter: its derivative is
    scatter_add(td wx, tu wu), linear in (td, tu) through ops with transpose
    rules (reverse mode, higher orders). max/min (torch's scatter_reduce
    amax/amin, GNN max pooling): the values attaining each position's
    extremum, ties sharing as Max/Min and ReduceMax share. mul: the product
    of each factor's co-factors, exact with zeros as ReduceProd's rule."""
    data, idx, upd = op.operands
    y = op.results[0]
    scatter = "ScatterElements" if gather == "GatherElements" else "ScatterND"
    at = lambda v: b.op(gather, [v, idx], tensor_type(dims(upd), element_type(v)), **attrs)  # noqa: E731
    total = lambda vx, vu, how: b.op(scatter, [vx, idx, vu], y.type,  # noqa: E731
                                     reduction=how, **attrs)
    if attribute(op, "reduction") != "mul":
        cx = b.cast_like(b.compare("Equal", data, y), data)
        cu = b.cast_like(b.compare("Equal", upd, at(y)), upd)
        count = total(cx, cu, "add")  # >= 1: the extremum is attained
        return b.div(cx, count), b.div(cu, at(count))
    zx, nx = zero_aware(b, data)
    zu, nu = zero_aware(b, upd)
    prod, zeros = total(nx, nu, "mul"), total(zx, zu, "add")  # of non-zero factors; zeros

    def weight(p, z, nonzero, isz):
        zero = b.scalar(0.0, p)
        return b.where(b.compare("Equal", z, zero), b.div(p, nonzero),
                       b.where(b.compare("Equal", z, b.scalar(1.0, p)), b.mul(p, isz), zero))
    return weight(prod, zeros, nx, zx), weight(at(prod), at(zeros), nu, zu)


def _scatter_elements_nonlinear(b: Builder, op, tangents) -> list:
    data, idx, upd = op.operands
    td, tu = tangents[0], tangents[2]
    if td is None and tu is None:
        return [None]
    axis = axis_attribute(op, known_rank([data, idx, upd]))
    wx, wu = _scatter_weights(b, op, "GatherElements", axis=axis)
    k = b.shape(td if td is not None else tu, 0, 1)
    dd = b.zeros_over(data, k) if td is None else b.mul(td, wx)
    du = b.zeros_over(upd, k) if tu is None else b.mul(tu, wu)
    return [b.op("ScatterElements", [dd, _over_directions(b, idx, k), du],
                 b.derivative_type(op.results[0]), axis=axis + 1, reduction="add")]


@transpose("ScatterElements", "Scatter")
def _t_scatter_elements(b: Builder, op, cts, linear):
    data, idx, upd = op.operands
    ct = cts[0]
    axis = axis_attribute(op, rank(data))
    r = _reduction(op)
    ix = _match_directions(b, idx, ct)
    out = [None, None, None]
    if linear[0]:
        if r == "add":
            out[0] = ct
        else:
            zeros = b.zeros(b.shape(ix), dims(ix), ct)
            out[0] = b.op(op_type(op), [ct, ix, zeros], ct.type, axis=axis)
    if linear[2]:
        out[2] = b.op("GatherElements", [ct, ix], tensor_type(dims(ix), element_type(ct)), axis=axis)
    return out


def _nd_perm(q: int, r: int, batch: int) -> list[int]:
    """[k, B.., D.., rest] -> [B.., D(q).., k, rest]: the direction axis
    right after the indexed axes, so GatherND/ScatterND index data axes."""
    lead = list(range(1, 1 + batch + q))
    return lead + [0] + list(range(1 + batch + q, r + 1))


def _last_static(idx: ir.Value) -> int:
    d = dims(idx)
    if d is None or d[-1] is None:
        raise UnsupportedOp("needs the static last extent of its indices")
    return d[-1]


def _nd_depth(op) -> int:
    """The number of data axes a GatherND/ScatterND index addresses: the
    static last extent of its indices, else from the static ranks (jax2onnx
    builds indices by Reshape with shapes computed at run time):
    GatherND: r(y) = r(idx) - 1 + r(x) - batch - q; ScatterND: r(upd) =
    r(idx) - 1 + r(data) - q."""
    idx = op.operands[1]
    d = dims(idx)
    if d is not None and d[-1] is not None:
        q, r = d[-1], rank(op.operands[0])
        batch = (attribute(op, "batch_dims") or 0) if op_type(op) == "GatherND" else 0
        if r is not None and not 1 <= q <= r - batch:
            # an invalid model: the import checks it where the rank was known then
            raise ImportFailure(f"indices of depth {q} for its rank-{r} input"
                                + (f" past {batch} batch axes" if batch else ""))
        if op_type(op) == "ScatterND" and r is not None and rank(op.operands[2]) is not None \
                and rank(op.operands[2]) != len(d) - 1 + r - q:
            # (ONNX's inference does not compare them; ONNX Runtime refuses them running)
            raise ImportFailure(f"updates of rank {rank(op.operands[2])}: indices {d} into "
                                f"a rank-{r} input take rank {len(d) - 1 + r - q}")
        return q
    if op_type(op) == "GatherND":
        ranks = [rank(idx), rank(op.operands[0]), rank(op.results[0])]
        if None not in ranks:
            return ranks[0] - 1 + ranks[1] - (attribute(op, "batch_dims") or 0) - ranks[2]
    else:
        ranks = [rank(idx), rank(op.operands[0]), rank(op.operands[2])]
        if None not in ranks:
            return ranks[0] - 1 + ranks[1] - ranks[2]
    raise UnsupportedOp("needs the static last extent of its indices (or static ranks)")


def _moved(b: Builder, t: ir.Value, perm: list[int]) -> ir.Value:
    return b.transpose(t, perm)


def _front(b: Builder, t: ir.Value, at: int) -> ir.Value:
    """Moves axis `at` to the front."""
    r = rank(t)
    if r is None:
        raise UnsupportedOp("needs static ranks")
    return b.transpose(t, [at] + [i for i in range(r) if i != at])


@jvp("GatherND")
def _gather_nd(b: Builder, op, tangents):
    x, idx = op.operands
    q, batch, r = _nd_depth(op), attribute(op, "batch_dims") or 0, rank(x)
    moved = _moved(b, tangents[0], _nd_perm(q, r, batch))
    y = op.results[0]
    yd = dims(y)
    lead = rank(idx) - 1  # result axes before the direction axis
    out_rank = lead + r - q - batch
    res = b.op("GatherND", [moved, idx], tensor_type(
        [None] * (out_rank + 1) if yd is None else yd[:lead] + [None] + yd[lead:], element_type(y)),
        **({"batch_dims": batch} if batch else {}))  # (GatherND-11 has no batch_dims)
    return [_front(b, res, lead)]


def _with_batch_coordinates(b: Builder, idx: ir.Value, batch: int) -> ir.Value:
    """GatherND indices with batch_dims > 0 as plain indices: the batch
    coordinates prepended on the last axis."""
    d = dims(idx)
    if d is None or None in d[:batch]:
        raise UnsupportedOp("GatherND with batch_dims needs static batch extents")
    r = len(d)
    grids = []
    for j in range(batch):
        shape = [1] * (r - 1) + [1]
        shape[j] = d[j]
        g = b.ints(list(range(d[j])))
        g = b.reshape(g, shape, shape)
        grids.append(b.expand(g, b.concat([b.shape(idx, 0, r - 1), b.ints([1])], 0),
                              d[:r - 1] + [1]))
    return b.concat(grids + [idx], r - 1)


@transpose("GatherND")
def _t_gather_nd(b: Builder, op, cts, linear):
    x, idx = op.operands
    batch = attribute(op, "batch_dims") or 0
    if batch:
        idx = _with_batch_coordinates(b, idx, batch)
    ct = cts[0]
    q = _nd_depth(op) + batch  # indices with the batch coordinates prepended
    if b.opset < 16:
        return [_onehot_scatter_nd(b, ct, x, idx, q), None]
    zeros = b.zeros(b.concat([b.shape(x, 0, q), b.shape(ct, rank(idx) - 1, rank(idx)),
                                b.shape(x, q + 1)], 0), [None] * rank(x), ct)
    # Linear GatherNDs come from the JVP above: the direction axis follows the indexed ones.
    return [b.op("ScatterND", [zeros, idx, ct], zeros.type, reduction="add"), None]


def _onehot_scatter_nd(b: Builder, ct: ir.Value, x: ir.Value, idx: ir.Value, q: int) -> ir.Value:
    """ScatterND(zeros, idx, ct, add) before opset 16: linear indices over the
    q indexed axes, then a OneHot product (duplicates accumulate)."""
    ext = dims(x)[:q]
    if None in ext:  # strides and depth read at run time
        ext_v = b.shape(x, 0, q)
        strides = b.concat([b.reduce("ReduceProd", b.shape(x, j + 1, q), [0], True)
                            for j in range(q - 1)] + [b.ints([1])], 0)
        depth = b.reduce("ReduceProd", ext_v, [0], True)
    else:
        ext_v = b.ints(ext)
        strides = b.ints([int(np.prod(ext[j + 1:])) for j in range(q)])
        depth = int(np.prod(ext))
    neg = b.compare("Less", idx, b.ints([0]))
    norm = b.where(neg, b.add(idx, ext_v), idx)
    lin = b.reduce("ReduceSum", b.mul(norm, strides), [-1], False)
    lead = rank(idx) - 1
    cd = dims(ct)
    rest = cd[lead + 1:]
    front = _front(b, ct, lead)                                    # [k, I..., rest]
    rest_v = b.ints(rest) if None not in rest else b.shape(ct, lead + 1)
    flat = b.reshape(front, b.concat([b.ints([0, -1]), rest_v], 0), [None, None] + rest)
    summed = onehot_scatter(b, flat, b.reshape(lin, [-1], [None]), 1, depth)
    back = b.reshape(summed, b.concat([b.ints([0] + ext), rest_v], 0), [None] + ext + rest) \
        if None not in ext else \
        b.reshape_to(summed, b.concat([b.shape(summed, 0, 1), ext_v, rest_v], 0),
                     [None] + ext + rest)
    r = len(ext) + 1 + len(rest)
    return b.transpose(back, list(range(1, q + 1)) + [0] + list(range(q + 1, r)))


@jvp("ScatterND")
def _scatter_nd(b: Builder, op, tangents):
    data, idx, upd = op.operands
    nonlinear = _nonlinear_reduction(op)
    r = "add" if nonlinear else _reduction(op)
    q = _nd_depth(op)
    if not nonlinear:
        _check_distinct_positions(op, idx, None)
    td, tu = tangents[0], tangents[2]
    if td is None and tu is None:
        return [None]
    k = b.shape(td if td is not None else tu, 0, 1)
    if nonlinear:  # (see _scatter_weights)
        wx, wu = _scatter_weights(b, op, "GatherND")
        td = None if td is None else b.mul(td, wx)
        tu = None if tu is None else b.mul(tu, wu)
    if td is None:
        td = b.zeros(b.concat([k, b.shape(data)], 0), [None] + dims(data), upd)
    if tu is None:
        tu = b.zeros(b.concat([k, b.shape(upd)], 0), [None] + dims(upd), data)
    rd = rank(data)
    dm = _moved(b, td, _nd_perm(q, rd, 0))
    lead = rank(idx) - 1
    um = _moved(b, tu, _nd_perm(lead, rank(upd), 0))
    attrs = {"reduction": r} if r != "none" else {}
    res = b.op("ScatterND", [dm, idx, um], dm.type, **attrs)
    return [_front(b, res, q)]


@transpose("ScatterND")
def _t_scatter_nd(b: Builder, op, cts, linear):
    data, idx, upd = op.operands
    ct = cts[0]
    r = _reduction(op)
    out = [None, None, None]
    if linear[0]:
        if r == "add":
            out[0] = ct
        else:
            zeros = b.zeros(b.concat([b.shape(idx, 0, rank(idx) - 1),
                                        b.shape(ct, _nd_depth(op))], 0),
                           [None] * (rank(idx) - 1 + rank(ct) - _nd_depth(op)), ct)
            out[0] = b.op("ScatterND", [ct, idx, zeros], ct.type)
    if linear[2]:
        out[2] = b.op("GatherND", [ct, idx], tensor_type(
            [None] * (rank(idx) - 1 + rank(ct) - _nd_depth(op)), element_type(ct)))
    return out


@jvp("Compress")
def _compress(b: Builder, op, tangents):
    x, cond = op.operands
    t = tangents[0]
    y = op.results[0]
    if "axis" not in op.attributes:
        flat = b.reshape(t, [0, -1], [None, None])
        return [b.op("Compress", [flat, cond], b.derivative_type(y), axis=1), None]
    return [b.op("Compress", [t, cond], b.derivative_type(y), axis=axis_attribute(op, rank(x)) + 1), None]


@transpose("Compress")
def _t_compress(b: Builder, op, cts, linear):
    x, cond = op.operands
    nz = b.op("NonZero", [cond], tensor_type([1, None], i64()))
    idx = b.reshape(nz, [-1], [None])
    return [scatter_add_along(b, cts[0], x, idx, axis_attribute(op, rank(x))), None]
