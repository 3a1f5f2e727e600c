"""Shape and indexing ops. Every one is linear in its data operand, so the
JVP applies the op itself to the tangent with its axes shifted past the
direction axis, and the transpose is the adjoint data movement."""
from __future__ import annotations

from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from ..builder import (Builder, attribute, constant_ints, dims, element_type, operand_or_none,
                       rank, tensor_type)
from ..registry import jvp, transpose


def _reshape_like(b: Builder, t: ir.Value, primal: ir.Value) -> ir.Value:
    """t reinterpreted as [k] + shape(primal)."""
    d = dims(primal)
    if d is not None and None not in d:
        target = b.ints([0] + d) if 0 not in d else b.concat([b.shape(t, 0, 1), b.ints(d)], 0)
    else:
        target = b.concat([b.shape(t, 0, 1), b.shape(primal)], 0)
    out = None if d is None else [None] + d
    allow = {"allowzero": 1} if b.opset >= 14 and d is not None and 0 in d else {}
    return b.op("Reshape", [t, target], tensor_type(out, element_type(t)), **allow)


@jvp("Reshape", "Squeeze", "Unsqueeze", "Flatten")
def _reshape(b: Builder, op, tangents):
    return [None if tangents[0] is None else _reshape_like(b, tangents[0], op.results[0])] + \
        [None] * (len(op.results) - 1)


@transpose("Reshape")
def _t_reshape(b: Builder, op, cts, linear):
    x = op.operands[0]
    d = dims(x)
    if d is not None and None not in d[1:] and 0 not in d[1:]:
        target = b.ints([0] + d[1:])
    else:
        target = b.like_shape(cts[0], x)
    return [b.op("Reshape", [cts[0], target], tensor_type(
        None if d is None else [None] + d[1:], element_type(cts[0]))), None]


@transpose("Unsqueeze")
def _t_unsqueeze(b: Builder, op, cts, linear):
    axes = attribute(op, "axes") if len(op.operands) == 1 else constant_ints(op.operands[1])
    if axes is None:
        return [_t_reshape(b, op, cts, linear)[0]] + [None] * (len(op.operands) - 1)
    return [b.squeeze(cts[0], axes)] + [None] * (len(op.operands) - 1)


@transpose("Squeeze")
def _t_squeeze(b: Builder, op, cts, linear):
    return [_t_reshape(b, op, cts, linear)[0]] + [None] * (len(op.operands) - 1)


def _perm(op: ir.Operation) -> list[int]:
    perm = attribute(op, "perm")
    if perm is None:
        r = rank(op.operands[0])
        if r is None:
            raise UnsupportedOp("Transpose without perm needs its operand's rank")
        perm = list(range(r - 1, -1, -1))
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


def _axis(op: ir.Operation, r: int | None, name: str = "axis") -> int:
    a = attribute(op, name)
    if a < 0:
        if r is None:
            raise UnsupportedOp(f"negative {name} needs the operand's rank")
        a += r
    return a


@jvp("Concat")
def _concat(b: Builder, op, tangents):
    from .. import signature as sig
    axis = _axis(op, rank(op.results[0]))
    k = next(b.shape(t, 0, 1) for t in tangents if t is not None)
    parts = [t if t is not None else sig.zeros(b, x, k) for x, t in zip(op.operands, tangents)]
    return [b.concat(parts, axis + 1)]


@transpose("Concat")
def _t_concat(b: Builder, op, cts, linear):
    axis = _axis(op, rank(op.results[0]))
    ct = cts[0]
    sizes = [dims(x)[axis] if dims(x) is not None else None for x in op.operands]
    out = []
    if None not in sizes:
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
            out.append(b.op("Slice", [ct, start, end, b.ints([axis])],
                            tensor_type(None if d is None else [None] + d[1:], element_type(ct))))
        else:
            out.append(None)
        start = end
    return out


@jvp("Split")
def _split(b: Builder, op, tangents):
    axis = _axis(op, rank(op.operands[0]))
    t = tangents[0]
    operands = [t] + list(op.operands[1:])
    types = [b.derivative_type(r) for r in op.results]
    attrs = {k: attribute(op, k) for k in ("split", "num_outputs") if k in op.attributes}
    return b.create("Split", operands, types, axis=axis + 1, **attrs)


@transpose("Split")
def _t_split(b: Builder, op, cts, linear):
    axis = attribute(op, "axis")
    k = next(b.shape(c, 0, 1) for c in cts if c is not None)
    parts = [_zeros_like_derivative(b, r, k) if c is None else c for r, c in zip(op.results, cts)]
    return [b.concat(parts, axis)] + [None] * (len(op.operands) - 1)


def _zeros_like_derivative(b: Builder, linear_value: ir.Value, k: ir.Value) -> ir.Value:
    """Zeros shaped like a linear value, with k directions."""
    target = b.concat([k, b.shape(linear_value, 1)], 0)
    d = dims(linear_value)
    return b.expand(b.scalar(0.0, linear_value), target, None if d is None else [None] + d[1:])


def _slice_args(op: ir.Operation, r: int) -> tuple[list[int], list[int], list[int], list[int]]:
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


@jvp("Slice")
def _slice(b: Builder, op, tangents):
    x = op.operands[0]
    r = rank(x)
    if r is None:
        raise UnsupportedOp("Slice needs its operand's rank")
    starts, ends, axes, steps = _slice_args(op, r)
    return [b.slice(tangents[0], [a + 1 for a in axes], starts, ends,
                    b.derivative_type(op.results[0]), steps)] + [None] * (len(op.operands) - 1)


@transpose("Slice")
def _t_slice(b: Builder, op, cts, linear):
    x = op.operands[0]
    d = dims(x)
    if d is None or None in d[1:]:
        raise UnsupportedOp("reverse mode through Slice needs static extents")
    starts, ends, axes, steps = _slice_args(op, len(d))
    pads = [0] * (2 * len(d))
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st != 1:
            raise UnsupportedOp("reverse mode through Slice with steps != 1")
        n = d[a]
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        pads[a], pads[len(d) + a] = s, n - max(e, s)
    return [b.op("Pad", [cts[0], b.ints(pads)], tensor_type([None] + d[1:], element_type(cts[0])))] \
        + [None] * (len(op.operands) - 1)


@transpose("Pad")
def _t_pad(b: Builder, op, cts, linear):
    x = op.operands[0]
    d = dims(x)
    pads = constant_ints(op.operands[1])
    if pads is None or d is None:
        raise UnsupportedOp("transposing Pad needs constant pads and a known rank")
    r = len(d)
    starts = pads[:r]
    ends = [-p if p > 0 else 2**62 for p in pads[r:]]
    return [b.slice(cts[0], list(range(r)), starts, ends, tensor_type([None] + d[1:], element_type(cts[0])))] \
        + [None] * (len(op.operands) - 1)
