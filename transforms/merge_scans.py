"""Scan merging (both AD modes run it last): independent Scans of one block
with the same trip count become one Scan.

ONNX Runtime pays a cost per Scan iteration besides the body's ops (about
1 us a step measured with ORT 1.32, 1 thread, on a one-op body). Derivatives
make such siblings: the reverse rule of a stacked LSTM recomputes each
layer's cell states with an elementwise Scan, and the layers' recomputations
do not depend on each other (2-layer LSTM, T = 20: reverse 2-4% faster).

One pass in block order (linear): the current Scan s1 and the next Scan s2
with the same trip count (a scan input's known extent along its scan axis)
merge when s2 does not depend on s1, else s2 becomes current. s2 depends on
s1 when an operand of s2, or a value its body reads, comes from s1 or from an
op between them that (transitively, regions included) uses s1. The ops
between that use s1 move after s2; the merged Scan stands at s2's place with
s1's states, then s2's, then the scan inputs of s1, of s2 (axes and
directions kept per input), and likewise for scan outputs; the bodies move
into one block, each op reading what it read before.
Exact: every value is computed by the same ops from the same values.
"""
from __future__ import annotations

from mlir import ir

from .builder import defining_op, dims, ints_attr
from .legalize import scan_axes


def _counts(op: ir.Operation) -> tuple[int, int, int]:
    """(states, scan inputs, scan outputs)."""
    m = ir.IntegerAttr(op.attributes["num_scan_inputs"]).value
    n = len(op.operands) - m
    return n, m, len(op.results) - n


def _trip(op: ir.Operation) -> int | None:
    """The trip count: the known extent of a scan input along its axis (ONNX
    requires every scan input to have the same one)."""
    n, m, _ = _counts(op)
    ia = scan_axes(op, "scan_input_axes", m)
    if m < 1 or len(ia) != m:
        return None
    for x, a in zip(list(op.operands)[n:], ia):
        d = dims(x)
        if d is not None and -len(d) <= a < len(d) and d[a % len(d)] is not None:
            return d[a % len(d)]
    return None


def _reads(op: ir.Operation):
    """The values op and the ops nested in its regions read."""
    yield from op.operands
    for r in op.regions:
        for blk in r.blocks:
            for child in blk.operations:
                yield from _reads(child.operation)


def _try_merge(s1: ir.Operation, s2: ir.Operation, window: list) -> tuple | None:
    """Merges s1 into s2 (`window`: the ops between them, in order); returns
    (the merged Scan, the ops of the window moved after it, in order), or
    None when s2 depends on s1."""
    tainted = {s1}
    between = []
    for op in window:
        if any(defining_op(v) in tainted for v in _reads(op)):
            tainted.add(op)
            between.append(op)
    if any(defining_op(v) in tainted for v in _reads(s2)):
        return None
    last = s2
    for op in between:
        op.move_after(last)
        last = op
    n1, m1, o1 = _counts(s1)
    n2, m2, o2 = _counts(s2)
    ops1, ops2 = list(s1.operands), list(s2.operands)
    operands = ops1[:n1] + ops2[:n2] + ops1[n1:] + ops2[n2:]
    r1, r2 = [r.type for r in s1.results], [r.type for r in s2.results]
    results = r1[:n1] + r2[:n2] + r1[n1:] + r2[n2:]
    cat = lambda name, k1, k2: ints_attr(scan_axes(s1, name, k1) + scan_axes(s2, name, k2))
    attrs = {"num_scan_inputs": ir.IntegerAttr.get(
        ir.IntegerAttr(s1.attributes["num_scan_inputs"]).type, m1 + m2),
        "scan_input_axes": cat("scan_input_axes", m1, m2),
        "scan_input_directions": cat("scan_input_directions", m1, m2),
        "scan_output_axes": cat("scan_output_axes", o1, o2),
        "scan_output_directions": cat("scan_output_directions", o1, o2)}
    b1, b2 = s1.regions[0].blocks[0], s2.regions[0].blocks[0]
    a1, a2 = list(b1.arguments), list(b2.arguments)
    with ir.InsertionPoint(s2):
        new = ir.Operation.create(s2.name, results=results, operands=operands,
                                  attributes=attrs, regions=1, loc=s2.location)
    arg_types = [a.type for a in a1[:n1] + a2[:n2] + a1[n1:] + a2[n2:]]
    nb = new.regions[0].blocks.append(*arg_types)
    na = list(nb.arguments)
    map1 = dict(zip(a1[:n1] + a1[n1:], na[:n1] + na[n1 + n2:n1 + n2 + m1]))
    map2 = dict(zip(a2[:n2] + a2[n2:], na[n1:n1 + n2] + na[n1 + n2 + m1:]))
    from .rules.control_flow import _move_body, _yield
    y1 = _move_body(b1, nb, map1)
    y2 = _move_body(b2, nb, map2)
    _yield(nb, y1[:n1] + y2[:n2] + y1[n1:] + y2[n2:], s2.location)
    res = list(new.results)
    old1 = list(s1.results)
    old2 = list(s2.results)
    for old, nv in zip(old1[:n1] + old2[:n2] + old1[n1:] + old2[n2:], res):
        old.replace_all_uses_with(nv)
    s1.erase()
    s2.erase()
    return new, between


def _merge_block(block: ir.Block) -> int:
    """One pass in block order (linear: each op is read a bounded number of
    times): the current Scan absorbs the next Scan of the same trip count
    when that one does not depend on it; a dependent one becomes current."""
    merged = 0
    for o in list(block.operations):
        for r in o.operation.regions:
            for blk in r.blocks:
                merged += _merge_block(blk)
    cur, trip, window = None, None, []
    for o in list(block.operations):
        op = o.operation
        t = _trip(op) if op.name == "onnx.Scan" else None
        if t is None or (cur is not None and t != trip):
            if cur is not None:
                window.append(op)
            continue
        done = _try_merge(cur, op, window) if cur is not None else None
        if done is None:
            cur, trip, window = op, t, []
        else:
            cur, window = done
            merged += 1
    return merged


def merge_scans(f: ir.Operation) -> int:
    """Merges independent same-length Scans in every block under f; returns
    how many merges were made."""
    n = 0
    for r in f.regions:
        for blk in r.blocks:
            n += _merge_block(blk)
    return n
