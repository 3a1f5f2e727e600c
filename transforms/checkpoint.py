"""Checkpointing for reverse mode through Loop/Scan: period k instead of 1.

The reverse rules of control_flow.py store every carried state of a loop
(T states) and recompute one step at a time. With `checkpoint=k`, before
reverse mode runs, each Loop/Scan is rewritten into an equivalent nest:

    outer loop over T // k segments       (its states: the checkpoints)
      inner loop of k steps               (the original body)
    remainder loop of T % k steps

The existing reverse rules then do the rest: the outer loop stores one
state per segment (T/k); its reverse body recomputes one segment (k steps,
whose reverse stores those k states) and sweeps back over it. Memory
O((T/k + k)·|state|), one extra forward sweep of compute. Nothing else
changes: forward mode is never rewritten, and the primal results are the
same values computed in the same order.

Scan: scanned inputs and outputs must use axis 0 and forward directions
and have a static length (other Scans keep period 1); the segments scan a
[T//k, k] + S reshape of the inputs.
Loop with scan outputs: the condition must be constantly true (fori-like;
the trip count may be computed at run time): q = M // k outer iterations,
r = M % k remainder. Loop without scan outputs: any condition and trip
count (while-like); the outer loop runs ceil(M/k) segments (or until the
condition fails), each inner loop min(k, M - s·k) steps, and the inner
loop hands its last condition to the outer one.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from .builder import Builder, attribute, constant_ints, dims, tensor_type
from .rules.control_flow import _all_ops, _attrs, _const_bool, _create, _loop_layout, \
    _move_body, _shape_may_vary, _terminator, _yield


def _true(b: Builder) -> ir.Value:
    return b.constant(ir.DenseElementsAttr.get(np.asarray(True)))


def _lead(v: ir.Value | ir.Type, extents: list) -> ir.Type:
    """The type of v with `extents` replacing (or, for a body value, added
    in front of) its dims: used for stacked scan outputs."""
    d = dims(v)
    elem = (v.type if isinstance(v, ir.Value) else v).element_type
    return tensor_type(None if d is None else extents + d, elem)


def _embed(op: ir.Operation, new: ir.Operation, arg_types, prelude, extra_yields=None) -> None:
    """Gives `new` (a fresh Loop/Scan) a copy of op's body: a block with
    `arg_types`; prelude(block args) -> the values replacing op's body
    arguments (emitted at the block start); extra_yields(yields) -> values
    appended to the body's yields."""
    copy = op.clone(ip=ir.InsertionPoint(new))
    old = copy.regions[0].blocks[0]
    blk = new.regions[0].blocks.append(*arg_types)
    with ir.InsertionPoint(blk):
        replacing = prelude(list(blk.arguments))
    ys = _move_body(old, blk, dict(zip(list(old.arguments), replacing)))
    copy.erase()
    _yield(blk, ys + (extra_yields(ys) if extra_yields else []), op.location)


def segment_loops(f: ir.Operation, opset: int, k: int) -> int:
    """Rewrites every Loop/Scan of f into segments of k steps (see the module
    doc); returns how many were rewritten."""
    if k <= 1:
        return 0
    done = 0
    for op in _all_ops(f, "Scan", "Loop"):
        name = op.name.removeprefix("onnx.")
        if name == "ScanV8":
            continue
        if name.startswith("Scan"):
            done += _segment_scan(op, opset, k)
        else:
            done += _segment_loop(op, opset, k)
    return done


# ---- Scan -----------------------------------------------------------------------------

def _segment_scan(op: ir.Operation, opset: int, k: int) -> bool:
    inits, cargs, cys, scans, sargs, outs = _loop_layout(op, "Scan")
    n, m = len(cargs), len(sargs)
    for key in ("scan_input_axes", "scan_input_directions", "scan_output_axes",
                "scan_output_directions"):
        if any(attribute(op, key) or []):
            return False
    ts = {None if dims(x) is None else dims(x)[0] for x in scans}
    if m == 0 or None in ts or len(ts) != 1:
        return False
    T = ts.pop()
    q, r = divmod(T, k)
    if q < 1 or T <= k or _empty_steps(scans, outs):
        return False
    b = Builder(opset, op.location)
    loc = op.location
    res = list(op.results)
    with ir.InsertionPoint(op):
        segs = []
        for x in scans:
            d = dims(x)
            head = x if r == 0 else b.slice(x, [0], [0], [q * k],
                                             tensor_type([q * k] + d[1:], x.type.element_type))
            segs.append(b.reshape(head, [q, k] + d[1:], [q, k] + d[1:]))
        attrs = {"num_scan_inputs": ir.IntegerAttr.get(ir.IntegerType.get_signed(64), m)}
        out_types = [r_.type for r_ in res[:n]] + \
            [_lead(y, [q, k]) for y in outs]
        outer = _create(op.name, inits + segs, out_types, attrs, loc, 1)
        seg_arg_types = [tensor_type([k] + dims(x)[1:], x.type.element_type) for x in scans]

        def outer_body(args):
            inner_types = [r_.type for r_ in res[:n]] + [_lead(y, [k]) for y in outs]
            inner = _create(op.name, args, inner_types, _attrs(op), loc, 1)
            _embed(op, inner, [a.type for a in cargs] + [a.type for a in sargs], lambda a: a)
            return list(inner.results)
        blk = outer.regions[0].blocks.append(*([a.type for a in cargs] + seg_arg_types))
        with ir.InsertionPoint(blk):
            ys = outer_body(list(blk.arguments))
        _yield(blk, ys, loc)
        state = list(outer.results[:n])
        stacked = []
        for y, o in zip(outs, outer.results[n:]):
            d = dims(y)
            target = b.concat([b.ints([q * k]), b.shape(o, 2)], 0) if d is None else [q * k] + d
            stacked.append(b.reshape(o, target, None if d is None else [q * k] + d))
        if r:
            tails = [b.slice(x, [0], [q * k], [T], tensor_type([r] + dims(x)[1:],
                                                              x.type.element_type))
                     for x in scans]
            rem = _create(op.name, state + tails,
                          [r_.type for r_ in res[:n]] + [_lead(y, [r]) for y in outs],
                          _attrs(op), loc, 1)
            _embed(op, rem, [a.type for a in cargs] + [a.type for a in sargs], lambda a: a)
            state = list(rem.results[:n])
            stacked = [b.concat([s, t], 0) for s, t in zip(stacked, rem.results[n:])]
        stacked = [s if s.type == r_.type else b.op("Identity", [s], r_.type)
                   for s, r_ in zip(stacked, res[n:])]
    for old, new in zip(res, state + stacked):
        old.replace_all_uses_with(new)
    op.erase()
    return True


# ---- Loop -----------------------------------------------------------------------------

def _always_true(op: ir.Operation) -> bool:
    body = op.regions[0].blocks[0]
    cond_in = op.operands[1]
    if not isinstance(cond_in.type, ir.NoneType) and _const_bool(cond_in) is not True:
        return False
    yc = _terminator(body).operands[0]
    while isinstance(yc.owner, (ir.Operation, ir.OpView)) and \
            yc.owner.operation.name == "onnx.Identity":
        yc = yc.owner.operation.operands[0]
    return yc == body.arguments[1] or _const_bool(yc) is True


def _empty_steps(scanned: list[ir.Value], step_outputs: list[ir.Value]) -> bool:
    """Whether a step reads or writes a statically empty slice: nothing to
    store, and the [q, k] + S reshapes would need literal 0 extents (no
    allowzero before opset 14)."""
    return any(0 in (dims(x) or [])[1:] for x in scanned) or \
        any(0 in (dims(y) or []) for y in step_outputs)


def _segment_loop(op: ir.Operation, opset: int, k: int) -> bool:
    inits, cargs, cys, _, _, outs = _loop_layout(op, "Loop")
    body = op.regions[0].blocks[0]
    trip = op.operands[0]
    has_trip = not isinstance(trip.type, ir.NoneType)
    if has_trip:
        count = constant_ints(trip)
        if count is not None and count[0] <= k:
            return False
    if outs and not (has_trip and _always_true(op)):
        return False
    if _shape_may_vary(op):
        return False  # its reverse stores no states at all (control_flow.py)
    if _empty_steps([], outs):
        return False
    b = Builder(opset, op.location)
    loc = op.location
    n = len(cargs)
    res = list(op.results)
    it_t, c_t = body.arguments[0].type, body.arguments[1].type
    state_t = [a.type for a in cargs]
    with ir.InsertionPoint(op):
        kc = b.int_scalar(k)
        if outs:
            return _segment_fori(op, b, k, kc, res, n, it_t, c_t, state_t, outs)
        # ceil(M / k) as (M - 1) / k + 1: jax2onnx's while loops pass M =
        # INT64_MAX, where M + k - 1 overflows (M = 0: one empty segment)
        one = b.int_scalar(1)
        nseg = b.none() if not has_trip else \
            b.ew("Add", b.ew("Div", b.ew("Sub", trip, one), kc), one)
        outer = _create(op.name, [nseg, op.operands[1]] + inits, [r_.type for r_ in res],
                        {}, loc, 1)
    blk = outer.regions[0].blocks.append(it_t, c_t, *state_t)
    s, c, states = blk.arguments[0], blk.arguments[1], list(blk.arguments[2:])
    with ir.InsertionPoint(blk):
        base = b.ew("Mul", s, kc)
        steps = b.ew("Min", kc, b.ew("Sub", trip, base)) if has_trip else kc
        inner = _create(op.name, [steps, c] + states + [c], [r_.type for r_ in res] + [c_t],
                        {}, loc, 1)
        _embed(op, inner, [it_t, c_t] + state_t + [c_t],
               lambda a: [b.ew("Add", base, a[0])] + a[1:-1],
               lambda ys: [ys[0]])
    _yield(blk, [inner.results[n]] + list(inner.results[:n]), loc)
    for old, new in zip(res, outer.results):
        old.replace_all_uses_with(new)
    op.erase()
    return True


def _segment_fori(op, b, k, kc, res, n, it_t, c_t, state_t, outs) -> bool:
    """Loop with scan outputs and a constantly true condition (built at op)."""
    loc = op.location
    inits = list(op.operands[2:])
    trip = op.operands[0]
    q = b.ew("Div", trip, kc)
    qk = b.ew("Mul", q, kc)
    r = b.ew("Sub", trip, qk)
    outer = _create(op.name, [q, op.operands[1]] + inits,
                    [r_.type for r_ in res[:n]] + [_lead(y, [None, k]) for y in outs], {}, loc, 1)
    blk = outer.regions[0].blocks.append(it_t, c_t, *state_t)
    s, c, states = blk.arguments[0], blk.arguments[1], list(blk.arguments[2:])
    with ir.InsertionPoint(blk):
        base = b.ew("Mul", s, kc)
        inner = _create(op.name, [kc, c] + states,
                        [r_.type for r_ in res[:n]] + [_lead(y, [k]) for y in outs], {}, loc, 1)
        _embed(op, inner, [it_t, c_t] + state_t, lambda a: [b.ew("Add", base, a[0])] + a[1:])
        keep = _true(b)
    _yield(blk, [keep] + list(inner.results), loc)
    with ir.InsertionPoint(op):
        stacked = []
        for y, o in zip(outs, outer.results[n:]):
            d = dims(y)
            total = b.unsqueeze(qk, [0]) if dims(qk) == [] else qk
            shape = b.concat([total, b.shape(o, 2)], 0)
            stacked.append(b.reshape(o, shape, None if d is None else [None] + d))
        rem = _create(op.name, [r, op.operands[1]] + list(outer.results[:n]),
                      [r_.type for r_ in res[:n]] + [_lead(y, [None]) for y in outs], {}, loc, 1)
        _embed(op, rem, [it_t, c_t] + state_t, lambda a: [b.ew("Add", qk, a[0])] + a[1:])
        stacked = [b.concat([s_, t], 0) for s_, t in zip(stacked, rem.results[n:])]
        stacked = [s_ if s_.type == r_.type else b.op("Identity", [s_], r_.type)
                   for s_, r_ in zip(stacked, res[n:])]
    final = list(rem.results[:n]) + stacked
    for old, new in zip(res, final):
        old.replace_all_uses_with(new)
    op.erase()
    return True
