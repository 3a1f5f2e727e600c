"""Rewrites applied by both modes before differentiation so that the
derivative models run where the primal should.

`bool_where`: ONNX Runtime has no kernel for Where on bool tensors (jax2onnx
emits it for `jnp.where` on flags, e.g. in diffrax's step-size logic), so
Where(c, a, b) with bool a, b becomes Or(And(c, a), And(Not(c), b)) (the
same broadcasting), everywhere including If/Loop/Scan bodies.
"""
from __future__ import annotations

from mlir import ir

from .builder import Builder, broadcast_dims, dims, tensor_type


def _walk(op: ir.Operation, out: list) -> None:
    for r in op.regions:
        for blk in r.blocks:
            for child in blk.operations:
                _walk(child.operation, out)
    if op.name == "onnx.Where":
        out.append(op)


def bool_where(f: ir.Operation, opset: int) -> int:
    found: list[ir.Operation] = []
    _walk(f, found)
    i1 = ir.IntegerType.get_signless(1)
    n = 0
    for op in found:
        res = op.results[0]
        if res.type.element_type != i1:
            continue
        c, a, x = op.operands
        b = Builder(opset, op.location)
        with ir.InsertionPoint(op):
            def logic(kind, *vs):
                shape = broadcast_dims(*(dims(v) for v in vs))
                return b.op(kind, list(vs), tensor_type(shape, i1))
            new = logic("Or", logic("And", c, a), logic("And", logic("Not", c), x))
            if new.type != res.type:
                new = b.op("Identity", [new], res.type)
        res.replace_all_uses_with(new)
        op.erase()
        n += 1
    return n
