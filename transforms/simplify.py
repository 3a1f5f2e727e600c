"""Derivative-graph folds that need symbolic extents (run at the end of the
AD modes, before canonicalize/cse).

* An Expand whose every user is a broadcasting elementwise op (Add, Mul,
  Sum, Where, ...) that yields the same extents without it is dropped: the
  op broadcasts anyway. Transpose rules emit such Expands to keep each
  cotangent exactly its value's shape (ReduceSum's transpose, for one), and
  the next Mul by a full-shaped coefficient makes them redundant copies.
"""
from __future__ import annotations

from mlir import ir

from onnx_ad_mlir import _op_table

from . import symdims

_BROADCAST = {"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Where", "Pow", "Mean"}


def _op_type(op: ir.Operation) -> str | None:
    return _op_table.OPS.get(op.name.removeprefix("onnx."), {}).get("op_type") \
        if op.name.startswith("onnx.") else None


def _same_without(user: ir.Operation, e: ir.Value, a: ir.Value) -> bool:
    shapes = []
    for o in user.operands:
        d = symdims.dims(a if o == e else o)
        if d is None:
            return False
        shapes.append(d)
    want = symdims.dims(user.results[0])
    got = symdims.broadcast(*shapes)
    if _op_type(user) == "Pow" and user.operands[0] == e:
        return False  # the base decides Pow's shape semantics; keep it simple
    return got is not None and want is not None and got == want


def drop_redundant_expands(f: ir.Operation) -> int:
    block = f.regions[0].blocks[0]
    dropped = 0
    for op in list(block.operations):
        if _op_type(op) != "Expand":
            continue
        e, a = op.results[0], op.operands[0]
        users = [u.owner for u in e.uses]
        if not users:
            continue
        ok = True
        for u in users:
            u = u.operation if isinstance(u, ir.OpView) else u
            if _op_type(u) not in _BROADCAST or len(u.results) != 1 or \
                    not _same_without(u, e, a):
                ok = False
                break
        if ok:
            e.replace_all_uses_with(a)
            op.erase()
            dropped += 1
    if dropped:
        symdims.reset_all()
    return dropped
