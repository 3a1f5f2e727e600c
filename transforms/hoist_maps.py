"""Per-step maps of a Scan's scan inputs, computed once on the whole stacks,
and (sink_maps) maps of what a Scan only stacks, computed once behind it
(both AD modes run them last, after Scan merging).

A Scan body op whose operands are slices of the scan inputs (or values made
from them this way), constants and values from outside, and that acts on
each slice on its own (an elementwise op, a MatMul of a slice by an outside
matrix, an Unsqueeze or a Transpose), gives the stack of its per-step
results when run once on the stacked operands: the reverse sweeps'
tanh' = 1 - t^2 of the stacked tanh values, the input projection x_t U of
an RNN and its tangent dx_t U, the Unsqueeze that lines a stacked primal
value up with a tangent's direction axis, the transposed x_t of a weight's
adjoint. ONNX Runtime pays a kernel launch per op and step (about 1 us at
small sizes), so the op moves in front of the Scan and its result becomes a
new scan input. Exact: each element is computed by the same op from the
same values.

Where the step axis sits is counted from the right: a scan input of rank R
scanned on axis a has R - 1 - a axes after its step axis (tangents are
scanned on axis 1, behind their direction axis). Right-aligned broadcasting
lines the stacks' step axes up when the stacked operands all have the same
count of axes after it, d, and every other operand has rank <= d (it then
broadcasts against the same axes in a slice and in a stack). The result's
stack has its step axis d axes from its end too; where that is not axis 0,
the axes after it must have known non-zero extents (ONNX Runtime's Scan
bug, legalize.scan_axes_zero). The stacked operands come from scan inputs
of one direction; a MatMul's step axis is a batch axis; ops with attributes
that name axes are not maps (Softmax, CumSum, ...).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from mlir import ir

from . import symdims
from .builder import (attribute, dims, element_type, ints_attr, is_constant_op,
                      nested_ops, rank, tensor_type)
from .legalize import nonzero
from .rules.control_flow import _attrs, _clone_out, _create, _kind, _move_body, _varies, \
    _yield
from .rules.shape import _squeeze_axes

MAPS = {
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cast", "Ceil", "Celu", "Clip",
    "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "IsInf",
    "IsNaN", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu",
    "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
    "ThresholdedRelu", "Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Sum", "Mean",
    "Mod",
}


def hoist_maps(f: ir.Operation) -> int:
    """Hoists the per-step maps of every Scan in f; returns how many ops moved."""
    return sum(_hoist(scan) for scan in _scans(f))  # (inner Scans first: their hoists may move on)


def sink_maps(f: ir.Operation) -> int:
    """Moves behind every Scan in f the maps whose results it only stacks
    (the mirror of hoist_maps: see _sink); returns how many ops moved."""
    return sum(_sink(scan) for scan in _scans(f))


def _scans(f: ir.Operation) -> list[ir.Operation]:
    """The Scans in f, inner ones first."""
    return [o for o in nested_ops(f) if o.name == "onnx.Scan"]


class _Stack(NamedTuple):
    """What a body value is a slice of: the stack outside (None until built),
    its scan direction, and the count of axes after its step axis."""
    value: ir.Value | None
    direction: int
    after: int


def _hoist(scan: ir.Operation) -> int:
    body = scan.regions[0].blocks[0]
    m = attribute(scan, "num_scan_inputs")
    n = len(scan.operands) - m
    axes = attribute(scan, "scan_input_axes") or [0] * m
    dirs = attribute(scan, "scan_input_directions") or [0] * m
    args = list(body.arguments)
    stacked: dict[ir.Value, _Stack] = {}
    for j in range(m):
        r = rank(scan.operands[n + j])
        if r is not None and -r <= axes[j] < r:
            stacked[args[n + j]] = _Stack(scan.operands[n + j], dirs[j], r - 1 - axes[j] % r)
    moved = []
    for o in list(body.operations)[:-1]:
        o = o.operation
        after = _map_after(o, stacked, body)
        if after is not None:
            moved.append(o)
            d = next(stacked[v].direction for v in o.operands if v in stacked)
            stacked[o.results[0]] = _Stack(None, d, after)  # (its stack is built below)
    if not moved:
        return 0
    with ir.InsertionPoint(scan):
        for o in moved:
            fixed = {k: stacked[v].value for k, v in enumerate(o.operands) if v in stacked}
            if _kind(o) == "Unsqueeze" and len(o.operands) > 1:
                fixed.setdefault(1, o.operands[1])  # (its new axes: set below)
            copy = _clone_out(o, body, fixed)
            res, st = o.results[0], stacked[o.results[0]]
            copy.results[0].set_type(tensor_type(_stack_dims(o, stacked), element_type(res)))
            if _kind(o) == "Unsqueeze":  # (new axes: below)
                _unsqueeze_stack(copy, _squeeze_axes(o), rank(res) - st.after)
            elif _kind(o) == "Transpose":
                src = stacked[o.operands[0]]
                copy.attributes["perm"] = ints_attr(_stack_perm(o, rank(o.operands[0]) - src.after))
            stacked[res] = st._replace(value=copy.results[0])
    read = [o for o in moved if any(u.owner.operation not in moved for u in o.results[0].uses)]
    new_inputs = [stacked[o.results[0]] for o in read]
    new_axes = [rank(o.results[0]) - s.after for o, s in zip(read, new_inputs)]
    attrs = _attrs(scan)
    attrs["num_scan_inputs"] = ir.IntegerAttr.get(ir.IntegerType.get_signed(64), m + len(read))
    attrs["scan_input_axes"] = ints_attr(list(axes) + new_axes)
    attrs["scan_input_directions"] = ints_attr(list(dirs) + [s.direction for s in new_inputs])
    with ir.InsertionPoint(scan):
        new = _create(scan.name, list(scan.operands) + [s.value for s in new_inputs],
                      [r.type for r in scan.results], attrs, scan.location, 1)
    blk = new.regions[0].blocks.append(*([a.type for a in args] +
                                         [o.results[0].type for o in read]))
    slices = list(blk.arguments)[len(args):]
    for o, a in zip(read, slices):
        o.results[0].replace_all_uses_with(a)
    for o in reversed(moved):
        symdims.forget(o)
        o.erase()
    ys = _move_body(body, blk, dict(zip(args, list(blk.arguments)[:len(args)])))
    _yield(blk, ys, scan.location)
    for r, v in zip(scan.results, new.results):
        r.replace_all_uses_with(v)
    symdims.forget(scan)
    scan.erase()
    return len(moved)


def _sink(scan: ir.Operation) -> int:
    """A body op whose result the Scan only stacks (as one scan output) and
    that maps one step value on its own (an elementwise op whose other
    operands come from outside, a MatMul by an outside matrix: the reverse
    sweep's cotangent of x_t, d_t U^T) runs once behind the Scan, on the
    stack of that value, which the Scan outputs instead, lined up the same
    way (its step axis as many axes from its end). Repeated while ops move."""
    moved = 0
    while (found := _output_map(scan)) is not None:
        o, j, x, x_axis = found
        body = scan.regions[0].blocks[0]
        term = list(body.operations)[-1].operation
        n = len(scan.operands) - attribute(scan, "num_scan_inputs")
        res = scan.results[n + j]
        old_type = res.type
        term.operands[n + j] = x
        axes = list(attribute(scan, "scan_output_axes") or [0] * (len(scan.results) - n))
        steps = dims(res)[axes[j] % rank(res)] if dims(res) is not None else None
        axes[j] = x_axis
        scan.attributes["scan_output_axes"] = ints_attr(axes)
        xd = dims(x)
        res.set_type(tensor_type(xd[:x_axis] + [steps] + xd[x_axis:], element_type(x)))
        with ir.InsertionPoint.after(scan):
            copy = _clone_out(o, body, {k: res for k, v in enumerate(o.operands) if v == x})
        copy.results[0].set_type(old_type)
        res.replace_all_uses_except(copy.results[0], copy.operation)
        symdims.forget(o)
        o.erase()
        symdims.forget(scan)
        moved += 1
    return moved


def _output_map(scan: ir.Operation) -> tuple[ir.Operation, int, ir.Value, int] | None:
    """A map to sink (see _sink): (the op, its scan output's index, the step
    value it maps, that value's stack axis), or None."""
    body = scan.regions[0].blocks[0]
    term = list(body.operations)[-1].operation
    n = len(scan.operands) - attribute(scan, "num_scan_inputs")
    k = len(scan.results) - n
    axes = attribute(scan, "scan_output_axes") or [0] * k
    for j in range(k):
        y = term.operands[n + j]
        o = y.owner.operation if isinstance(y.owner, (ir.OpView, ir.Operation)) else None
        if o is None or o.block != body or len(o.results) != 1 or len(o.regions) or \
                [u.owner.operation for u in y.uses] != [term]:
            continue
        kind = _kind(o)
        step = [v for v in o.operands if _varies(v, body)]
        r = rank(y)
        if (kind not in MAPS and kind != "MatMul") or len(step) != 1 or r is None or \
                rank(step[0]) is None:
            continue
        x, after = step[0], r - axes[j] % (r + 1)
        if kind == "MatMul":
            if o.operands[0] != x or rank(o.operands[1]) != 2 or \
                    not (after >= 2 or rank(x) == 1 and after == 1):
                continue
        elif any(v != x and (rank(v) is None or rank(v) > after) for v in o.operands
                 if not isinstance(v.type, ir.NoneType)):
            continue
        x_axis = rank(x) - after
        if x_axis < 0 or x_axis and (dims(x) is None or not nonzero(dims(x)[x_axis:])):
            continue  # (ONNX Runtime's Scan bug off axis 0: legalize.scan_axes_zero)
        return o, j, x, x_axis
    return None


def _map_after(o: ir.Operation, stacked: dict, body: ir.Block) -> int | None:
    """If o maps each step's slices on their own (see the module docstring):
    the count of axes after its result's step axis; else None."""
    kind = _kind(o)
    if kind not in MAPS and kind not in ("MatMul", "Unsqueeze", "Transpose") or \
            len(o.regions) or len(o.results) != 1 or rank(o.results[0]) is None:
        return None
    ins = [v for v in o.operands if not isinstance(v.type, ir.NoneType)]
    sliced = [v for v in ins if v in stacked]
    if not sliced or any(v not in stacked and _varies(v, body) for v in ins):
        return None  # (an operand computed per step otherwise)
    if len({stacked[v].after for v in sliced}) != 1 or \
            len({stacked[v].direction for v in sliced}) != 1:
        return None  # (steps on different axes, or read in different orders)
    after, r = stacked[sliced[0]].after, rank(o.results[0])
    if kind == "MatMul":
        x = ins[0]
        if len(ins) != 2 or x not in stacked or ins[1] in stacked or rank(ins[1]) != 2 or \
                not (after >= 2 or rank(x) == 1 and after == 1):
            return None
    elif kind == "Unsqueeze":
        axes = _squeeze_axes(o)  # (normalized against the result's rank)
        if axes is None or ins[0] not in stacked:
            return None
        kept = [k for k in range(r) if k not in axes]
        before = len(kept) - after  # (the slice's axes in front of its step axis)
        step = kept[before - 1] + 1 if before else 0
        after = r - step
    elif kind == "Transpose":
        if ins[0] not in stacked:
            return None
        after = r  # (the stack's step axis goes first)
    elif any(v not in stacked and (rank(v) is None or rank(v) > after) for v in ins):
        return None
    out = dims(o.results[0])
    if after != r and (out is None or not nonzero(out[r - after:])):
        return None  # (a scan input off axis 0 that might be empty after it)
    return after


def _stack_dims(o: ir.Operation, stacked: dict) -> list | None:
    """The stacked result's dims: the slice's with the step extent inserted."""
    out = dims(o.results[0])
    src = next(stacked[v] for v in o.operands if v in stacked)
    src_dims = dims(src.value)
    if out is None or src_dims is None:
        return None
    at = len(out) - stacked[o.results[0]].after
    return out[:at] + [src_dims[len(src_dims) - 1 - src.after]] + out[at:]


def _stack_perm(o: ir.Operation, step: int) -> list[int]:
    """The perm of a Transpose of one step's slice, for its stack (step axis
    at `step`), putting the step axis first."""
    r = rank(o.operands[0])
    perm = attribute(o, "perm") or list(range(r - 1, -1, -1))
    return [step] + [p + (p >= step) for p in perm]


def _unsqueeze_stack(copy: ir.Operation, axes: list[int], step: int) -> None:
    """Makes an Unsqueeze of one step's slice (its normalized `axes`) act on
    the stack, whose step axis lands at `step`: inserted axes from there on
    move one on."""
    axes = [a + (a >= step) for a in axes]
    if len(copy.operands) == 1:
        copy.attributes["axes"] = ints_attr(axes)
        return
    const = copy.operands[1].owner.operation
    while not is_constant_op(const):  # (through the Identity ops constant_ints sees through)
        const = const.operands[0].owner.operation
    with ir.InsertionPoint(copy):
        copy.operands[1] = ir.Operation.create(
            const.name, results=[copy.operands[1].type], loc=copy.location,
            attributes={"value": ir.DenseElementsAttr.get(np.asarray(axes, np.int64))}).result
