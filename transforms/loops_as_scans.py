"""Loops that run their whole constant trip count become Scans (both modes
end with it, `modes._loop_passes`).

A Loop whose cond stays true and whose trip count is a constant M >= 1
computes what a Scan over Range(0, M) does: the iteration number becomes the
scanned slice, the carried values the states, the scan outputs stay. IREE
3.13's ONNX import refuses Loops with scan outputs (the reverse rules store
a Loop's states as such) and ONNX Runtime runs the Scan 6-15% faster on the
benchmark's Loop models. A Scan's states must keep their shapes (ONNX
Runtime fails a growing one where a Loop grows it), so every carried value
must provably keep its extents (symdims: the yield alike the argument or the
start); and ONNX Runtime's Scan fails on zero steps, hence M >= 1.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from . import symdims
from .builder import Builder, constant_ints, constant_value, dims, nested_ops, tensor_type
from .rules.control_flow import _create, _move_body, _terminator, _through_identity, _yield


_CONSTANT_STEPS = 4096  # iteration numbers held as a constant up to this count, else a Range


def loops_as_scans(f: ir.Operation, opset: int) -> int:
    """Rewrites every such Loop in f (nested ones first); returns how many."""
    if opset < 11:  # (Range)
        return 0
    n = 0
    for op in reversed([o for o in nested_ops(f) if o.name == "onnx.Loop"]):
        trips = _trip_count(op)
        if trips is not None and _always_true(op) and _states_keep_extents(op):
            _as_scan(op, trips, opset)
            n += 1
    return n


def _trip_count(op: ir.Operation) -> int | None:
    """The constant trip count M >= 1 of a Loop whose iteration number is a
    scalar, else None."""
    if isinstance(op.operands[0].type, ir.NoneType):
        return None
    values = constant_ints(op.operands[0])
    it = op.regions[0].blocks[0].arguments[0]
    if values is None or len(values) != 1 or values[0] < 1 or dims(it) not in ([], None):
        return None
    return values[0]


def _is_true(v: ir.Value) -> bool:
    attr = constant_value(v)
    return isinstance(attr, ir.DenseIntElementsAttr) and attr.is_splat and \
        isinstance(attr.get_splat_value(), ir.BoolAttr) and attr.get_splat_value().value


def _always_true(op: ir.Operation) -> bool:
    """The cond operand absent or true, and the body yielding its cond
    argument (through Identity ops) or a true constant."""
    cond = op.operands[1]
    if not isinstance(cond.type, ir.NoneType) and not _is_true(cond):
        return False
    body = op.regions[0].blocks[0]
    out = _through_identity(_terminator(body).operands[0])
    return out == body.arguments[1] or _is_true(out)


def _states_keep_extents(op: ir.Operation) -> bool:
    """By induction: with every carried argument's extents taken as its
    start's, every yield has its start's extents (symdims' symbols of the
    arguments replaced by the starts': a tangent's direction count k is a
    fresh symbol in the body, its yield the broadcast of it with the k of
    the start's seed)."""
    body = op.regions[0].blocks[0]
    ys = list(_terminator(body).operands)
    n = len(op.operands) - 2
    carried = list(zip(op.operands[2:], list(body.arguments)[2:], ys[1:1 + n]))
    assumed = {}
    for x, a, _ in carried:
        dx, da = symdims.dims(x), symdims.dims(a)
        if dx is None or da is None or len(dx) != len(da):
            return False
        assumed.update({ea: ex for ea, ex in zip(da, dx)
                        if ea != ex and not isinstance(ea, (int, np.integer))})
    for x, _, y in carried:
        dy = symdims.dims(y)
        if dy is None or [_assume(e, assumed) for e in dy] != symdims.dims(x):
            return False
    return True


def _assume(e, assumed: dict):
    """Extent e with the symbols of `assumed` replaced (a broadcast of
    extents that become one is that extent)."""
    if e in assumed:
        return assumed[e]
    if isinstance(e, tuple) and e and e[0] == "bc":
        members = frozenset(_assume(m, assumed) for m in e[1])
        return next(iter(members)) if len(members) == 1 else ("bc", members)
    return e


def _as_scan(op: ir.Operation, trips: int, opset: int) -> None:
    b = Builder(opset, op.location)
    i64 = ir.IntegerType.get_signless(64)
    body = op.regions[0].blocks[0]
    args = list(body.arguments)
    n = len(op.operands) - 2
    with ir.InsertionPoint(op):
        def scalar(v: int) -> ir.Value:
            return b.constant(ir.DenseElementsAttr.get(np.asarray(v, np.int64)))
        steps = b.constant(ir.DenseElementsAttr.get(np.arange(trips, dtype=np.int64))) \
            if trips <= _CONSTANT_STEPS else \
            b.op("Range", [scalar(0), scalar(trips), scalar(1)], tensor_type([trips], i64))
        attrs = {"num_scan_inputs": ir.IntegerAttr.get(ir.IntegerType.get_signed(64), 1)}
        scan = _create("onnx.Scan", list(op.operands[2:]) + [steps],
                       [r.type for r in op.results], attrs, op.location, 1)
    blk = scan.regions[0].blocks.append(*([a.type for a in args[2:2 + n]] +
                                          [tensor_type([], i64)]))
    mapping = dict(zip(args[2:2 + n], blk.arguments[:n]))
    mapping[args[0]] = blk.arguments[n]
    if args[0].type != blk.arguments[n].type:  # (an iteration number typed tensor<*xi64>)
        with ir.InsertionPoint(blk):
            mapping[args[0]] = b.op("Identity", [blk.arguments[n]], args[0].type)
    if any(True for _ in args[1].uses):
        with ir.InsertionPoint(blk):
            mapping[args[1]] = b.constant(ir.DenseElementsAttr.get(np.asarray(True)))
    ys = _move_body(body, blk, mapping)
    _yield(blk, ys[1:], op.location)
    for old, new in zip(op.results, scan.results):
        old.replace_all_uses_with(new)
    symdims.forget(op)
    op.erase()
