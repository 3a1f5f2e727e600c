"""Rewrites applied by both modes, before differentiation or to the
derivative function at the end, so that the derivative models run where the
primal should (ONNX Runtime's gaps and bugs).

`bool_where`: ONNX Runtime has no kernel for Where on bool tensors (jax2onnx
emits it for `jnp.where` on flags, e.g. in diffrax's step-size logic), so
Where(c, a, b) with bool a, b becomes Or(And(c, a), And(Not(c), b)) (the
same broadcasting), everywhere including If/Loop/Scan bodies.

`dilated_same_pads`: ONNX Runtime refuses a dilated Conv with auto_pad SAME
("Dilation not supported for AutoPadType::SAME_UPPER"), which TorchScript
exports for torch's padding="same" with dilation; where the spatial extents
are static, the pads ONNX defines are made explicit.

`recurrent_hidden_sizes`: ONNX leaves RNN/GRU/LSTM's hidden_size optional
(R's shape tells it), ONNX Runtime refuses the op without it; it is set
from R's hidden extent where that is static.
"""
from __future__ import annotations

from mlir import ir

from . import symdims
from .builder import (Builder, attribute, broadcast_dims, dims, element_type, ints_attr,
                      nested_ops, tensor_type)
from .registry import mlir_names
from .rules.linalg import conv_geometry


def bool_where(f: ir.Operation, opset: int, ops: list[ir.Operation] | None = None) -> int:
    """`ops`: nested_ops(f), when the caller has it (no walk then)."""
    found = [op for op in (nested_ops(f) if ops is None else ops) if op.name == "onnx.Where"]
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


def scan_axes(op: ir.Operation, name: str, n: int) -> list[int]:
    if name not in op.attributes:
        return [0] * n
    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[name])]


def nonzero(extents) -> bool:
    """All extents known and non-zero (ONNX Runtime's bug cannot strike)."""
    return all(e is not None and e > 0 for e in extents)


def scan_axes_zero(f: ir.Operation, opset: int) -> int:
    """Every Scan scans and stacks along axis 0: a scan input of axis a != 0
    is transposed (a first) before the Scan, a scan output of axis a != 0 is
    made at axis 0 and transposed after it. ONNX Runtime 1.32 dies of SIGFPE
    on a Scan with a non-zero scan input/output axis when the extents after
    that axis multiply to 0 (reproduced on a bare Identity-body Scan); the
    rules emit axis a + 1 for tangents (seed count first), so without this a
    0-extent tensor killed the derivative's process. Inputs/outputs of
    unknown rank, or whose extents after the axis are known and non-zero,
    keep their axis. Returns the number of Scans changed."""
    scans = [op for op in nested_ops(f) if op.name == "onnx.Scan"]
    changed = 0
    for op in scans:
        m = ir.IntegerAttr(op.attributes["num_scan_inputs"]).value
        body = op.regions[0].blocks[0]
        yields = list(body.operations[len(body.operations) - 1].operands)
        n = len(op.operands) - m
        nout = len(op.results) - n
        ia, oa = scan_axes(op, "scan_input_axes", m), scan_axes(op, "scan_output_axes", nout)
        if len(ia) != m or len(oa) != nout:
            continue  # the verifier's business
        b = Builder(opset, op.location)
        new_ia, new_oa = list(ia), list(oa)
        for i, a in enumerate(ia):
            x = op.operands[n + i]
            d = dims(x)
            if a == 0 or d is None or not -len(d) <= a < len(d):
                continue
            a %= len(d)
            if a == 0:
                new_ia[i] = 0
                continue
            if nonzero(d[a + 1:]):
                continue
            with ir.InsertionPoint(op):
                op.operands[n + i] = b.transpose(x, [a] + [j for j in range(len(d)) if j != a])
            new_ia[i] = 0
        for mm, a in enumerate(oa):
            r = op.results[n + mm]
            d = dims(r)
            e = dims(yields[n + mm])
            rank = len(d) if d is not None else (None if e is None else len(e) + 1)
            if a == 0 or rank is None or not -rank <= a < rank:
                continue
            a %= rank
            if a == 0:
                new_oa[mm] = 0
                continue
            if d is not None and nonzero(d[a + 1:]):
                continue
            stacked = None if d is None else [d[a]] + [x for j, x in enumerate(d) if j != a]
            r.set_type(tensor_type(stacked, element_type(r)))
            with ir.InsertionPoint.after(op):
                t = b.op("Transpose", [r], tensor_type(d, element_type(r)),
                         perm=list(range(1, a + 1)) + [0] + list(range(a + 1, rank)))
            r.replace_all_uses_except(t, t.owner.operation)
            new_oa[mm] = 0
        if new_ia != ia or new_oa != oa:
            op.attributes["scan_input_axes"] = ints_attr(new_ia)
            op.attributes["scan_output_axes"] = ints_attr(new_oa)
            changed += 1
    return changed


def expand_zero_extents(f: ir.Operation, opset: int) -> int:
    """An Expand whose target (constant, or folded by ONNX Runtime from static
    shapes) has extent 0 where its input's extent may be 1 takes its input
    cut to 0 on that axis first. ONNX Runtime 1.32's ExpandElimination
    counts a target extent <= 1 as a no-op, so it dropped Expand(x[k, 1],
    [1, 0]) and a [k, 1] met a Loop expecting [k, 0] (fuzz seeds 16, 20);
    with the cut, what it drops is a real no-op. Returns the number of
    Expands changed."""
    found = [op for op in nested_ops(f) if op.name == "onnx.Expand"]
    changed = 0
    for op in found:
        x, shape = op.operands
        # what ONNX Runtime folds: constants, Concats of Shape slices of
        # values its inference gives static shapes, which may be more than
        # their types here say (a Reshape's -1 over no elements: fuzz seed
        # 182); symdims proves those 0s too
        target, xd = symdims.shape_value(shape, symdims.dims), dims(x)
        if not target or 0 not in target or xd is None:
            continue
        off = len(target) - len(xd)
        axes = [i for i, e in enumerate(xd) if i + off >= 0 and target[i + off] == 0 and e != 0]
        if not axes:
            continue
        cut = [0 if i in axes else e for i, e in enumerate(xd)]
        with ir.InsertionPoint(op):
            op.operands[0] = Builder(opset, op.location).slice(
                x, axes, [0] * len(axes), [0] * len(axes), tensor_type(cut, element_type(x)))
        changed += 1
    return changed


def dilated_same_pads(f: ir.Operation, ops: list[ir.Operation] | None = None) -> int:
    """`ops`: nested_ops(f), when the caller has it. Returns the number of
    Convs given explicit pads."""
    n = 0
    for op in nested_ops(f) if ops is None else ops:
        if op.name != "onnx.Conv" or attribute(op, "auto_pad") not in ("SAME_UPPER", "SAME_LOWER") \
                or all(d == 1 for d in attribute(op, "dilations") or []):
            continue
        geometry = conv_geometry(op, transposed=False)
        if geometry is None:
            continue
        op.attributes["pads"] = ints_attr(geometry["pads"])
        op.attributes["auto_pad"] = ir.StringAttr.get("NOTSET")
        n += 1
    return n


_RECURRENT = {n for t in ("RNN", "GRU", "LSTM") for n in mlir_names(t)}


def recurrent_hidden_sizes(f: ir.Operation, ops: list[ir.Operation] | None = None) -> int:
    """`ops`: nested_ops(f), when the caller has it. Returns the number of
    recurrent ops given their hidden_size."""
    n = 0
    for op in nested_ops(f) if ops is None else ops:
        if op.name not in _RECURRENT or "hidden_size" in op.attributes or len(op.operands) < 3:
            continue
        r = dims(op.operands[2])
        if r is None or len(r) != 3 or r[2] is None:
            continue
        op.attributes["hidden_size"] = ir.IntegerAttr.get(ir.IntegerType.get_signed(64), r[2])
        n += 1
    return n
