"""Scan merging (both AD modes run it last): Scans of one block with the
same trip count become one Scan when they are independent, or when one
reads the other's scan output step by step (producer-consumer fusion).

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

Producer-consumer fusion: s2 may also depend on s1 when each operand of s2
that does is one of its scan inputs made from a scan output of s1 by ops that
act on each step alone (a "feed"): Transpose, (Un)Squeeze of other axes than
time, MatMul by a 2-D matrix computed without s1 (stacked recurrences: layer
l+1's adjoint of its input, dY_l = dZ W, is layer l's scan input). When
step i of s2 reads what step i of s1 wrote (same axis after the feed's moves,
same direction: a reverse scan output puts step i at T-1-i, where a reverse
scan input reads step i) and the feed leaves each step's unit-free axes in
order, the merged body computes that step's value right after s1's part:
s1's yield times the feed's matrices, in order (a per-step MatMul, the same
products and sums as the MatMul over all steps). The feed's ops and s1's scan
output are dropped when nothing else reads them. One Scan instead of two:
the 2-layer LSTM's two reverse recurrences run as one loop.

Pipelining: when s1 and s2 are two stacked LSTM layers' reverse Scans
(rules/recurrent.py marks them) and the feed is one MatMul, they become one
Scan running layer l one step behind layer l+1, both side by side
(recurrent.pipelined_pair): 7 body ops a step instead of 15.

Stacking: independent s1 and s2 running the same elementwise body (same ops,
attributes and types; every body value with one static extent along axis 0,
so nothing broadcasts along it) on operands of provably equal extents become
one Scan running that body once on both, stacked along the steps' axis 0: a
Concat per operand pair before it, a Slice per result read after it. Done
when the steps saved (trip x body ops) are at least 4 x the ops added (the
2-layer LSTM's two cell-state Scans: one 2-op body instead of 4 ops, T = 20).
Exact: each element is computed by the same op from the same values.
"""
from __future__ import annotations

from mlir import ir

from . import symdims
from .builder import Builder, attribute, constant_ints, defining_op, dims, element_type, \
    ints_attr, is_constant_op, op_type, tensor_type
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


def _axes(op: ir.Operation) -> list[int] | None:
    """(Un)Squeeze's constant axes (operand since opset 13, else attribute)."""
    if len(op.operands) > 1 and not isinstance(op.operands[1].type, ir.NoneType):
        return constant_ints(op.operands[1])
    return attribute(op, "axes")


def _step(op: ir.Operation, axes: list, r: int, tainted: set) -> list | None:
    """The axes after a feed op (`axes`: per axis of its operand 0, "T" for
    time, ("src", i) for axis i of s1's step value of rank r, "unit" for an
    added 1), or None when op does not act on each step alone."""
    kind = op_type(op)
    d = dims(op.operands[0])
    if d is None or len(d) != len(axes):
        return None
    if kind == "Transpose":
        perm = attribute(op, "perm") or list(range(len(axes)))[::-1]
        return [axes[p] for p in perm]
    if kind == "Squeeze":
        sq = _axes(op)
        if not sq:
            return None
        sq = {a % len(axes) for a in sq}
        if any(axes[a] == "T" or d[a] != 1 for a in sq):
            return None
        return [e for a, e in enumerate(axes) if a not in sq]
    if kind == "Unsqueeze":
        us = _axes(op)
        if not us:
            return None
        out = list(axes)
        for a in sorted(a % (len(axes) + len(us)) for a in us):
            out.insert(a, "unit")
        return out
    # MatMul by a 2-D matrix: each step's last two axes are its matrix
    w = op.operands[1]
    if kind != "MatMul" or defining_op(w) in tainted or dims(w) is None or \
            len(dims(w)) != 2 or r < 2 or axes[-2:] != [("src", r - 2), ("src", r - 1)]:
        return None
    return axes


def _feed(s1: ir.Operation, s2: ir.Operation, i: int, tainted: set) -> tuple | None:
    """(index of s1's scan output, the feed's ops in order) when s2's operand
    i, a scan input, is that output carried through ops acting on each step
    alone, step i of s2 reading step i of s1 (see the module doc)."""
    n1, _, o1 = _counts(s1)
    n2, m2, _ = _counts(s2)
    chain, v = [], s2.operands[i]
    while defining_op(v) != s1:
        op = defining_op(v)
        if op is None or op not in tainted or not op.name.startswith("onnx.") or \
                op_type(op) not in ("Transpose", "Squeeze", "Unsqueeze", "MatMul"):
            return None
        chain.insert(0, op)
        v = op.operands[0]
    j = ir.OpResult(v).result_number - n1
    step = dims(_yielded(s1)[n1 + j]) if j >= 0 else None
    if step is None:
        return None
    r = len(step)
    axes = [("src", a) for a in range(r)]
    axes.insert(scan_axes(s1, "scan_output_axes", o1)[j] % (r + 1), "T")
    for op in chain:
        axes = _step(op, axes, r, tainted)
        if axes is None:
            return None
    k = i - n2
    in_axis = scan_axes(s2, "scan_input_axes", m2)[k] % len(axes)
    if axes.index("T") != in_axis or scan_axes(s2, "scan_input_directions", m2)[k] != \
            scan_axes(s1, "scan_output_directions", o1)[j]:
        return None
    axes.remove("T")
    if len(axes) != r or any(e != ("src", a) and not (e == "unit" and step[a] == 1)
                             for a, e in enumerate(axes)):
        return None
    return j, chain


def _yielded(op: ir.Operation) -> list[ir.Value]:
    body = op.regions[0].blocks[0]
    return list(body.operations[len(body.operations) - 1].operands)


def _body_reads(op: ir.Operation):
    """The values the ops nested in op's regions read."""
    for r in op.regions:
        for blk in r.blocks:
            for child in blk.operations:
                yield from _reads(child.operation)


def _user(use) -> ir.Operation:
    owner = use.owner
    return owner.operation if isinstance(owner, ir.OpView) else owner


def _dead(window: list, feed_ops: set, s2: ir.Operation) -> set:
    """The feed ops that nothing but s2 and other such ops read (window: the
    ops between s1 and s2, in order)."""
    dead: set = set()
    for op in reversed(window):
        if op in feed_ops and all(_user(u) in dead or _user(u) == s2
                                  for r in op.results for u in r.uses):
            dead.add(op)
    return dead


def _constant_expr(v: ir.Value, out: list) -> bool:
    """Whether v is computed from onnx.Constant values only, by onnx ops
    without regions; appends those ops (Constants excluded) to `out` in
    order."""
    op = defining_op(v)
    if op is None or not op.name.startswith("onnx.") or len(op.regions):
        return False
    if is_constant_op(op) or op.name == "onnx.NoValue":
        return True
    if not all(_constant_expr(x, out) for x in op.operands):
        return False
    if op not in out:
        out.append(op)
    return True


def _in_body(block: ir.Block, w: ir.Value) -> ir.Value:
    """w, recomputed at the end of block when it is made from constants
    only: ONNX Runtime folds it to a constant of the body and prepacks a
    MatMul's 2-D constant right operand there, which it does not for a value
    from outside the body."""
    ops: list = []
    if not _constant_expr(w, ops) or not ops:
        return w
    copies: dict = {}
    for op in ops:
        c = op.clone(ip=ir.InsertionPoint(block))
        for i, x in enumerate(op.operands):
            if x in copies:
                c.operands[i] = copies[x]
        copies.update(zip(op.results, c.results))
    return copies[w]


def _per_step(block: ir.Block, value: ir.Value, chain: list) -> ir.Value:
    """A feed on one step (block: the merged body, at its end): the step
    value times each of the feed's matrices."""
    for op in chain:
        if op_type(op) == "MatMul":
            w = _in_body(block, op.operands[1])
            t = tensor_type(dims(value)[:-1] + [dims(w)[-1]], element_type(value))
            value = ir.Operation.create(op.name, results=[t], operands=[value, w],
                                        loc=op.location, ip=ir.InsertionPoint(block)).result
    return value


def _move_after(ops: list, anchor: ir.Operation) -> None:
    for op in ops:
        op.move_after(anchor)
        anchor = op


# Elementwise ops: on operands whose axis 0 has one extent (no broadcasting
# along it), the op on operands stacked along axis 0 is the stack of the ops.
_STACKABLE = {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Tanh", "Sigmoid", "Relu", "Exp",
              "Log", "Sqrt", "Reciprocal", "Identity", "Max", "Min", "Sum"}


def _attrs(op: ir.Operation) -> dict:
    return {k: str(op.attributes[k]) for k in op.attributes}


def _same_bodies(s1: ir.Operation, s2: ir.Operation) -> bool:
    """The two bodies are the same ops, attributes and result types, each
    reading the corresponding values (nothing from outside)."""
    b1, b2 = s1.regions[0].blocks[0], s2.regions[0].blocks[0]
    ops1, ops2 = list(b1.operations), list(b2.operations)
    if len(ops1) != len(ops2) or [a.type for a in b1.arguments] != \
            [a.type for a in b2.arguments]:
        return False
    pairs = dict(zip(b1.arguments, b2.arguments))
    for o1, o2 in zip(ops1, ops2):
        o1, o2 = o1.operation, o2.operation
        if o1.name != o2.name or len(o1.operands) != len(o2.operands) or \
                len(o1.results) != len(o2.results) or len(o1.regions) or len(o2.regions) or \
                _attrs(o1) != _attrs(o2):
            return False
        for x1, x2 in zip(o1.operands, o2.operands):
            y = pairs.get(x1)
            if y is None or y != x2:
                return False
        if any(r1.type != r2.type for r1, r2 in zip(o1.results, o2.results)):
            return False
        pairs.update(zip(o1.results, o2.results))
    return True


def _lead(s1: ir.Operation) -> int | None:
    """The static axis-0 extent every value of s1's body has when its ops are
    all _STACKABLE on operands of their result's rank, else None."""
    body = s1.regions[0].blocks[0]
    ops = [o.operation for o in body.operations][:-1]
    values = list(body.arguments) + [r for op in ops for r in op.results]
    lead = {(dims(v) or [None])[0] for v in values}
    if len(lead) != 1 or None in lead:
        return None
    for op in ops:
        if not op.name.startswith("onnx.") or op_type(op) not in _STACKABLE or \
                any(len(dims(x) or []) != len(dims(op.results[0])) for x in op.operands):
            return None
    return lead.pop()


def _stackable(s1: ir.Operation, s2: ir.Operation) -> bool:
    """s1 and s2 run the same elementwise body on operands of the same
    extents (symdims.py), axes 0 and directions alike: one Scan can run it on
    both stacked along the steps' axis 0 (a Concat per operand pair, a Slice
    per result read after), worth it when that saves more ops than it adds."""
    n, m, o = _counts(s1)
    if _counts(s2) != (n, m, o) or not _same_bodies(s1, s2) or _lead(s1) is None or \
            any(dims(r) is None for r in s1.results):
        return False
    for name, k in (("scan_input_axes", m), ("scan_output_axes", o)):
        if any(scan_axes(s1, name, k)) or any(scan_axes(s2, name, k)):
            return False
    for name, k in (("scan_input_directions", m), ("scan_output_directions", o)):
        if scan_axes(s1, name, k) != scan_axes(s2, name, k):
            return False
    for x1, x2 in zip(s1.operands, s2.operands):
        d1, d2 = symdims.dims(x1), symdims.dims(x2)
        if d1 is None or d1 != d2:
            return False
    used = sum(1 for s in (s1, s2) for r in s.results if any(True for _ in r.uses))
    saved = (_trip(s1) or 0) * (len(s1.regions[0].blocks[0].operations) - 1)
    return saved >= 4 * (len(s1.operands) + used)


def _stack(s1: ir.Operation, s2: ir.Operation) -> tuple[ir.Operation, list]:
    """One Scan running s1's body on s1's and s2's operands stacked along the
    steps' axis 0 (axis 1 of scan inputs and outputs, which scan axis 0);
    returns it and the Slices after it that give the old results."""
    from .passes import module_opset
    from .rules.control_flow import _move_body, _yield
    n, _, _ = _counts(s1)
    d = _lead(s1)
    module = s2.parent
    while module.name != "builtin.module":
        module = module.parent
    b = Builder(module_opset(module), s2.location)
    twice = lambda v, ax: tensor_type([2 * e if i == ax and e is not None else e
                                       for i, e in enumerate(dims(v))], element_type(v))
    axis = lambda i: 0 if i < n else 1
    with ir.InsertionPoint(s2):
        operands = [b.concat([x1, x2], axis(i))
                    for i, (x1, x2) in enumerate(zip(s1.operands, s2.operands))]
        new = ir.Operation.create(
            s2.name, results=[twice(r, axis(i)) for i, r in enumerate(s1.results)],
            operands=operands, attributes={k: s1.attributes[k] for k in s1.attributes},
            regions=1, loc=s2.location)
        body = s1.regions[0].blocks[0]
        nb = new.regions[0].blocks.append(*[twice(a, 0) for a in body.arguments])
        for op in list(body.operations)[:-1]:
            for r in op.operation.results:
                r.set_type(twice(r, 0))
        _yield(nb, _move_body(body, nb, dict(zip(body.arguments, nb.arguments))), s2.location)
        slices = []
        for i, r in enumerate(new.results):
            ax = axis(i)
            for half, old in enumerate((s1.results[i], s2.results[i])):
                if any(True for _ in old.uses):
                    part = b.slice(r, [ax], [half * d], [half * d + d], old.type)
                    old.replace_all_uses_with(part)
                    slices.append(defining_op(part))
    s2.erase()
    s1.erase()
    return new, slices


def _merged_attrs(s1: ir.Operation, s2: ir.Operation, keep1: list, ins2: list) -> dict:
    """The merged Scan's attributes: s1's scan inputs and the kept ones of s2
    (ins2), s1's kept scan outputs (keep1) and all of s2's, axes and
    directions per input/output."""
    _, m1, o1 = _counts(s1)
    _, m2, o2 = _counts(s2)
    axes = lambda op, name, k, idx=None: [scan_axes(op, name, k)[x]
                                          for x in (range(k) if idx is None else idx)]
    return {"num_scan_inputs": ir.IntegerAttr.get(
        ir.IntegerAttr(s1.attributes["num_scan_inputs"]).type, m1 + len(ins2)),
        **{name: ints_attr(axes(s1, name, m1) + axes(s2, name, m2, ins2))
           for name in ("scan_input_axes", "scan_input_directions")},
        **{name: ints_attr(axes(s1, name, o1, keep1) + axes(s2, name, o2))
           for name in ("scan_output_axes", "scan_output_directions")}}


def _try_merge(s1: ir.Operation, s2: ir.Operation, window: list) -> tuple | None:
    """Merges s1 into s2 (`window`: the ops between them, in order); returns
    (the merged Scan, the ops of the window moved after it, in order), or
    None when s2 depends on s1 other than through feeds of its scan inputs."""
    tainted = {s1}
    between = []
    for op in window:
        if any(defining_op(v) in tainted for v in _reads(op)):
            tainted.add(op)
            between.append(op)
    if any(defining_op(v) in tainted for v in _body_reads(s2)):
        return None
    n1, m1, o1 = _counts(s1)
    n2, m2, o2 = _counts(s2)
    feeds = {}  # s2 operand index -> (s1 scan output index, feed ops)
    for i, v in enumerate(s2.operands):
        if defining_op(v) in tainted:
            feeds[i] = _feed(s1, s2, i, tainted) if i >= n2 else None
            if feeds[i] is None:
                return None
    if not feeds and _stackable(s1, s2):
        _move_after(between, s2)
        new, slices = _stack(s1, s2)
        return new, slices + between
    dead = _dead(window, {op for _, chain in feeds.values() for op in chain}, s2)
    if len(feeds) == 1:
        done = _pipeline(s1, s2, feeds, window, between, dead)
        if done is not None:
            return done
    fed = {j for j, _ in feeds.values()}
    keep1 = [j for j in range(o1) if j not in fed or
             not all(_user(u) in dead for u in s1.results[n1 + j].uses)]
    ins2 = [k for k in range(m2) if n2 + k not in feeds]
    erased = [op for op in window if op in dead]
    between = [op for op in between if op not in dead]
    _move_after(between, s2)
    ops1, ops2 = list(s1.operands), list(s2.operands)
    operands = ops1[:n1] + ops2[:n2] + ops1[n1:] + [ops2[n2 + k] for k in ins2]
    r1, r2 = [r.type for r in s1.results], [r.type for r in s2.results]
    results = r1[:n1] + r2[:n2] + [r1[n1 + j] for j in keep1] + r2[n2:]
    pick = lambda vals, idx: [vals[x] for x in idx]
    b1, b2 = s1.regions[0].blocks[0], s2.regions[0].blocks[0]
    a1, a2 = list(b1.arguments), list(b2.arguments)
    with ir.InsertionPoint(s2):
        new = ir.Operation.create(s2.name, results=results, operands=operands,
                                  attributes=_merged_attrs(s1, s2, keep1, ins2), regions=1,
                                  loc=s2.location)
    arg_types = [a.type for a in a1[:n1] + a2[:n2] + a1[n1:] + pick(a2[n2:], ins2)]
    nb = new.regions[0].blocks.append(*arg_types)
    na = list(nb.arguments)
    map1 = dict(zip(a1[:n1] + a1[n1:], na[:n1] + na[n1 + n2:n1 + n2 + m1]))
    map2 = dict(zip(a2[:n2] + pick(a2[n2:], ins2), na[n1:n1 + n2] + na[n1 + n2 + m1:]))
    from .rules.control_flow import _move_body, _yield
    y1 = _move_body(b1, nb, map1)
    for i, (j, chain) in feeds.items():
        map2[a2[i]] = _per_step(nb, y1[n1 + j], chain)
    y2 = _move_body(b2, nb, map2)
    _yield(nb, y1[:n1] + y2[:n2] + [y1[n1 + j] for j in keep1] + y2[n2:], s2.location)
    res = list(new.results)
    old1, old2 = list(s1.results), list(s2.results)
    for old, nv in zip(old1[:n1] + old2[:n2] + [old1[n1 + j] for j in keep1] + old2[n2:], res):
        old.replace_all_uses_with(nv)
    s2.erase()
    for op in reversed(erased):
        op.erase()
    s1.erase()
    return new, between


def _pipeline(s1: ir.Operation, s2: ir.Operation, feeds: dict, window: list,
              between: list, dead: set) -> tuple | None:
    """Stacked LSTM layers' reverse Scans fed by one MatMul: one Scan running
    both layers side by side, layer l one step behind layer l+1
    (rules/recurrent.py pipelined_pair); None when that does not apply."""
    from .passes import module_opset
    from .rules.recurrent import pipelined_pair
    (i, (j, chain)), = feeds.items()
    mats = [op for op in chain if op_type(op) == "MatMul"]
    n2, _, _ = _counts(s2)
    if i != n2 or j != 0 or len(mats) != 1:
        return None
    module = s2.parent
    while module.name != "builtin.module":
        module = module.parent
    b = Builder(module_opset(module), s2.location)
    block_ops = lambda: [o.operation for o in s2.block.operations]
    before = set(block_ops())
    with ir.InsertionPoint(s2):
        out = pipelined_pair(s1, s2, mats[0].operands[1], b)
    if out is None:
        return None
    made = [op for op in block_ops() if op not in before]
    for old, v in out.items():
        old.replace_all_uses_with(v)
    between = [op for op in between if op not in dead]
    _move_after(between, s2)
    s2.erase()
    for op in reversed([op for op in window if op in dead]):
        op.erase()
    s1.erase()
    scan = next(op for op in made if op.name == "onnx.Scan")
    return scan, [op for op in made[made.index(scan) + 1:]] + between


def _merge_block(block: ir.Block) -> int:
    """One pass in block order (linear: each op is read a bounded number of
    times): the current Scan absorbs the next Scan of the same trip count
    when that one does not depend on it, or only through feeds; another
    dependent one becomes current."""
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
    """Merges same-length Scans (independent ones, or fed step by step) in
    every block under f; returns how many merges were made."""
    n = 0
    for r in f.regions:
        for blk in r.blocks:
            n += _merge_block(blk)
    return n
