"""Control flow: If, Loop and Scan differentiated in place, both modes.

Forward mode (the JVP walk, post-order): the region op is replaced by one
whose bodies also compute the tangents, carried right after the primals.
  If    the branches were already differentiated by the walk (they take no
        arguments); each float result gets a tangent when either branch
        yields one, the other branch then yields a zero tangent.
  Scan  tangents of states are extra states, tangents of scanned inputs
        extra scan inputs (scan axis + 1: the direction axis leads), and
        tangents of scan outputs extra scan outputs (axis + 1). One Scan,
        any number of seeds, nothing stored.
  Loop  tangents of loop-carried values are extra loop-carried values; a
        tangent scan output stacks [k] + S slices into [T, k] + S, which
        is transposed to [k, T] + S after the loop.
Body arguments of Loop/Scan get their tangent arguments before the walk
(`prepare_loops`, an activity fixpoint over the carried values): the walk
reaches the body before the op. Only floating-point values get tangents:
counters and flags carried by a loop get none.

Reverse mode (linearize + transpose, modes.py): in the linearization a
region op is not differentiated inside; it gets an opaque linear stand-in
(`builtin.unrealized_conversion_cast` tagged `onnx_ad.region`; operands: tangents of its active inputs, i.e. operands
and values captured by its bodies; results: tangents of its float results)
whose transpose rule is a direct reverse rule:
  If    an If on the same condition whose branches recompute the primal
        branch and run its reverse (recursively: the same linearize +
        transpose on the branch block); results are the cotangents of the
        captured values.
  Scan  the primal Scan also emits its states as scan outputs, and the
        values of its step computed from costly ops (residuals); a second
        Scan runs backwards over them (reversed directions): it recomputes
        one primal step from the stored state and transposes it, reading
        the primal's stacks (its own scan outputs, the residuals) instead
        of recomputing what the transposition needs of them.
        Cotangents of the states are its states, those of captured values
        (weights) accumulate in extra states: O(|w|).
  Loop  the primal Loop also emits its iteration number and states as
        scan outputs; the number of iterations it ran is the length of a
        stacked output; a second Loop sweeps over exactly that many
        iterations backwards (Gather at T-1-j), zero iterations included,
        reading stacks as Scan does; a Scan over the stacks instead when
        the primal runs at least once (_as_scan).
        What a reverse body does not read is dropped (prune_loops.py).
        A carried value that changes shape between iterations (its type
        lost a static extent of its start) cannot be stacked: the primal
        emits only its iteration numbers, and the reverse body recomputes
        the state of iteration i by a Loop of i primal steps (O(T^2)).
The derivative program only contains If/Loop/Scan/Gather and the ops the
other rules emit, so forward(reverse(m)) works through all three ops.

`inline_constant_ifs` runs first in both modes; `unroll` (pass
`onnx-ad-unroll`) flattens Scan/Loop with constant trip counts.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
from mlir import ir

from onnx_ad_mlir import _op_table
from onnx_ad_mlir.errors import UnsupportedOp

from .. import symdims
from ..builder import Builder, attribute, carries_float, constant_ints, constant_value, \
    defining_op, dims, element_type, ints_attr, is_constant_op, is_float, nested_ops, op_type, \
    rank, tensor_type
from ..linearize import REGION_RULES, STANDS_FOR, Tangents
from ..registry import JVP, TRANSPOSE, mlir_names

# The linear stand-in of a region op in reverse mode: a builtin op (always
# registered, any operands and results) tagged with the region's id; it never
# outlives the pass.
PLACEHOLDER = "builtin.unrealized_conversion_cast"
REGION_ID = "onnx_ad.region"
_REGIONS: dict[int, tuple[ir.Operation, list[ir.Value]]] = {}
_PRIMALS: dict[int, list[ir.Value]] = {}  # float results after the reverse rule ran
_ids = itertools.count()


# ---- helpers ------------------------------------------------------------------

def captures(op: ir.Operation) -> list[ir.Value]:
    """Values used inside op's regions and defined outside op, in order."""
    inside: set = set()
    seen: set = set()
    out: list[ir.Value] = []

    def region(r: ir.Region) -> None:
        for block in r.blocks:
            for a in block.arguments:
                inside.add(a)
            for o in block.operations:
                for v in o.operands:
                    if v not in inside and v not in seen:
                        seen.add(v)
                        out.append(v)
                for rr in o.regions:
                    region(rr)
                for res in o.results:
                    inside.add(res)
    for r in op.regions:
        region(r)
    return out


def _kind(op: ir.Operation) -> str | None:
    """The ONNX op type of an onnx op, None for anything else (NoValue...)."""
    name = op.operation.name
    entry = _op_table.OPS.get(name.removeprefix("onnx.")) if name.startswith("onnx.") else None
    return None if entry is None else entry["op_type"]


def _attrs(op: ir.Operation) -> dict[str, ir.Attribute]:
    return {name: op.attributes[name] for name in op.attributes}


def _terminator(block: ir.Block) -> ir.Operation:
    ops = block.operations
    return ops[len(ops) - 1].operation


def _yield(block: ir.Block, values: list[ir.Value], loc) -> None:
    ir.Operation.create("onnx.Yield", operands=values, loc=loc, ip=ir.InsertionPoint(block))


def _take_yields(block: ir.Block, mapping: dict) -> list[ir.Value]:
    """Rewires block's arguments through `mapping` (old arg -> new value),
    erases its terminator and returns what the terminator yielded."""
    for arg in block.arguments:
        if arg in mapping:
            arg.replace_all_uses_with(mapping[arg])
    term = _terminator(block)
    yielded = list(term.operands)
    term.erase()
    return yielded


def _move_body(old: ir.Block, new: ir.Block, mapping: dict) -> list[ir.Value]:
    """Moves old's ops (terminator excluded) to the end of new, rewires the
    old arguments through `mapping` (old arg -> new value); returns the old
    terminator's operands (the terminator is erased)."""
    yielded = _take_yields(old, mapping)
    for o in list(old.operations):
        o.operation.detach_from_parent()
        ir.InsertionPoint(new).insert(o.operation)
    return yielded


def _k_of(b: Builder, values) -> ir.Value:
    return next(b.shape(v, 0, 1) for v in values if v is not None)


def _ints(op: ir.Operation, name: str, n: int, ranks: list[int | None]) -> list[int]:
    """A Scan axes/directions attribute with defaults, axes normalized."""
    vals = attribute(op, name) or [0] * n
    if "axes" in name:
        out = []
        for a, r in zip(vals, ranks):
            if a < 0:
                if r is None:
                    raise UnsupportedOp(f"negative {name} needs the rank")
                a += r
            out.append(a)
        return out
    return list(vals)


def _create(name: str, operands, result_types, attrs, loc, nregions: int) -> ir.Operation:
    return ir.Operation.create(name, results=list(result_types), operands=list(operands),
                               attributes=attrs, regions=nregions, loc=loc)


def _replace(rewriter, old: ir.Operation, new_values: list[ir.Value]) -> None:
    for r, v in zip(old.results, new_values):
        r.replace_all_uses_with(v)
    symdims.forget(old)  # (what was registered with its results must not outlive them)
    rewriter.erase_op(old) if rewriter is not None else old.erase()


# ---- forward mode: activity pre-step --------------------------------------------

def _active_block(block: ir.Block, active: set) -> None:
    for op in block.operations:
        mark_active(op.operation, active)


def mark_active(op: ir.Operation, active: set) -> None:
    """Adds op's results that depend on a value in `active` and can carry
    a derivative (`carries_float`) to it: through operands, and for
    If/Loop/Scan through captures and carried states (to a fixed point),
    result by result."""
    name = _kind(op)
    if name in ("Loop", "Scan"):
        _active_loop(op, name, active)
    elif name == "If":
        for r in op.regions:
            _active_block(r.blocks[0], active)
        for r, a, c in zip(op.results, _terminator(op.regions[0].blocks[0]).operands,
                           _terminator(op.regions[1].blocks[0]).operands):
            if carries_float(r) and (a in active or c in active):
                active.add(r)
    elif any(v in active for v in op.operands):
        active.update(r for r in op.results if carries_float(r))


def _loop_layout(op: ir.Operation, name: str):
    """(carried inits, carried body args, carried yields, scanned inputs,
    scanned body args, scan-output yields) of a Loop or Scan."""
    body = op.regions[0].blocks[0]
    args = list(body.arguments)
    ys = list(_terminator(body).operands)
    if name == "Loop":
        n = len(op.operands) - 2
        return (list(op.operands[2:]), args[2:2 + n], ys[1:1 + n], [], [], ys[1 + n:])
    m = attribute(op, "num_scan_inputs")
    n = len(op.operands) - m
    return (list(op.operands[:n]), args[:n], ys[:n], list(op.operands[n:]), args[n:n + m], ys[n:])


def _active_loop(op: ir.Operation, name: str, active: set) -> None:
    inits, cargs, cys, scans, sargs, outs = _loop_layout(op, name)
    body = op.regions[0].blocks[0]
    for x, a in zip(scans, sargs):
        if x in active and carries_float(a):
            active.add(a)
    for x, a in zip(inits, cargs):
        if x in active and carries_float(a):
            active.add(a)
    while True:
        _active_block(body, active)
        grew = False
        for a, y in zip(cargs, cys):
            if y in active and a not in active and carries_float(a):
                active.add(a)
                grew = True
        if not grew:
            break
    n = len(cargs)
    for i, r in enumerate(op.results):
        src = cargs[i] if i < n else outs[i - n]
        if carries_float(r) and src in active:
            active.add(r)


def prepare_loops(f: ir.Operation, state: Tangents) -> None:
    """Appends tangent block arguments to Loop/Scan bodies for their active
    float carried and scanned arguments (at the end; the op's rule builds
    the body with ONNX's argument order)."""
    active = set(state.of)
    for r in f.regions:
        for block in r.blocks:
            _active_block(block, active)

    def visit(block: ir.Block) -> None:
        for op in block.operations:
            op = op.operation
            name = _kind(op)
            if name in ("Loop", "Scan"):
                _, cargs, _, _, sargs, _ = _loop_layout(op, name)
                body = op.regions[0].blocks[0]
                for a in cargs + sargs:
                    if a in active and is_float(a) and state.get(a) is None:
                        state.of[a] = body.add_argument(Builder(state.opset).derivative_type(a),
                                                        op.location)
            for r in op.regions:
                for blk in r.blocks:
                    visit(blk)
    for r in f.regions:
        for block in r.blocks:
            visit(block)


# ---- forward mode: the region rules ----------------------------------------------

def _fwd_if(op: ir.Operation, rewriter, state: Tangents) -> bool:
    b = Builder(state.opset, op.location)
    blocks = [r.blocks[0] for r in op.regions]
    terms = [_terminator(blk) for blk in blocks]
    ys = [list(t.operands) for t in terms]
    pairs = []
    for j, r in enumerate(op.results):
        ts = [state.get(ys[0][j]), state.get(ys[1][j])]
        if is_float(r) and any(t is not None for t in ts):
            pairs.append((j, ts))
    if not pairs:
        return False
    new_yields = [list(y) for y in ys]
    for side in (0, 1):
        with ir.InsertionPoint(terms[side]):
            for j, ts in pairs:
                t = ts[side]
                new_yields[side].append(b.zeros_over(ys[side][j], state.k) if t is None
                                        else b.fit(t, ys[side][j]))
    types = [r.type for r in op.results] + [b.derivative_type(op.results[j]) for j, _ in pairs]
    with ir.InsertionPoint(op):
        new = _create(op.name, op.operands, types, _attrs(op), op.location, 2)
    for side in (0, 1):
        terms[side].erase()
        blocks[side].append_to(new.regions[side])
        _yield(blocks[side], new_yields[side], op.location)
    n = len(op.results)
    old_results = list(op.results)
    _replace(rewriter, op, list(new.results[:n]))
    for i, (j, _) in enumerate(pairs):
        state.of[new.results[j]] = new.results[n + i]
    del old_results
    return True


def _fwd_loop(op: ir.Operation, rewriter, state: Tangents, name: str) -> bool:
    b = Builder(state.opset, op.location)
    inits, cargs, cys, scans, sargs, outs = _loop_layout(op, name)
    body = op.regions[0].blocks[0]
    term = _terminator(body)
    carried = [j for j, a in enumerate(cargs) if state.get(a) is not None]
    scanned = [i for i, a in enumerate(sargs) if state.get(a) is not None]
    touched = carried or scanned or any(state.get(v) is not None for v in captures(op))
    if not touched:
        return False
    with ir.InsertionPoint(term):
        t_cys = [b.fit(state.get(cys[j]), cys[j]) if state.get(cys[j]) is not None
                 else b.zeros_over(cys[j], state.k) for j in carried]
        t_outs = [(m, b.fit(state.get(y), y)) for m, y in enumerate(outs)
                  if is_float(y) and state.get(y) is not None]
    with ir.InsertionPoint(op):
        t_inits = [state.get(inits[j]) if state.get(inits[j]) is not None
                   else b.zeros_over(inits[j], state.k) for j in carried]
        t_scans = [state.get(scans[i]) if state.get(scans[i]) is not None
                   else b.zeros_over(scans[i], state.k) for i in scanned]
    n, m = len(cargs), len(sargs)
    attrs = _attrs(op)
    res = list(op.results)
    if name == "Scan":
        in_ranks = [None if dims(x) is None else len(dims(x)) for x in scans]
        out_ranks = [None if dims(r) is None else len(dims(r)) for r in res[n:]]
        ia = _ints(op, "scan_input_axes", m, in_ranks)
        idr = _ints(op, "scan_input_directions", m, in_ranks)
        oa = _ints(op, "scan_output_axes", len(outs), out_ranks)
        odr = _ints(op, "scan_output_directions", len(outs), out_ranks)
        attrs["num_scan_inputs"] = ir.IntegerAttr.get(ir.IntegerType.get_signed(64), m + len(scanned))
        attrs["scan_input_axes"] = ints_attr(ia + [ia[i] + 1 for i in scanned])
        attrs["scan_input_directions"] = ints_attr(idr + [idr[i] for i in scanned])
        attrs["scan_output_axes"] = ints_attr(oa + [oa[mm] + 1 for mm, _ in t_outs])
        attrs["scan_output_directions"] = ints_attr(odr + [odr[mm] for mm, _ in t_outs])
        operands = inits + t_inits + scans + t_scans
        out_types = [r.type for r in res[:n]] + [b.derivative_type(res[j]) for j in carried] + \
            [r.type for r in res[n:]] + [_scan_out_type(res[n + mm], oa[mm]) for mm, _ in t_outs]
        arg_types = [a.type for a in cargs] + [state.get(cargs[j]).type for j in carried] + \
            [a.type for a in sargs] + [state.get(sargs[i]).type for i in scanned]
    else:
        operands = list(op.operands[:2]) + inits + t_inits
        out_types = [r.type for r in res[:n]] + [b.derivative_type(res[j]) for j in carried] + \
            [r.type for r in res[n:]] + [_stacked_type(outs[mm], res[n + mm]) for mm, _ in t_outs]
        arg_types = [a.type for a in body.arguments[:2 + n]] + \
            [state.get(cargs[j]).type for j in carried]
    with ir.InsertionPoint(op):
        new = _create(op.name, operands, out_types, attrs, op.location, 1)
    new_body = new.regions[0].blocks.append(*arg_types)
    na = list(new_body.arguments)
    mapping = {}
    if name == "Scan":
        olds = cargs + [state.get(cargs[j]) for j in carried] + sargs + [state.get(sargs[i]) for i in scanned]
    else:
        olds = list(body.arguments[:2 + n]) + [state.get(cargs[j]) for j in carried]
    mapping = dict(zip(olds, na))
    yielded = _move_body(body, new_body, mapping)
    # tangents that are body arguments themselves (a state yielded unchanged)
    t_cys = [mapping.get(t, t) for t in t_cys]
    t_outs = [(mm, mapping.get(t, t)) for mm, t in t_outs]
    if name == "Scan":
        _yield(new_body, yielded[:n] + t_cys + yielded[n:] + [t for _, t in t_outs], op.location)
    else:
        _yield(new_body, yielded[:1 + n] + t_cys + yielded[1 + n:] + [t for _, t in t_outs],
               op.location)
    for old, new_arg in mapping.items():
        if old in state.of:
            state.of[new_arg] = state.of[old]
    nc = len(carried)
    _replace(rewriter, op, list(new.results[:n]) + list(new.results[n + nc:n + nc + len(outs)]))
    for i, j in enumerate(carried):
        if is_float(new.results[j]):
            state.of[new.results[j]] = new.results[n + i]
    base = n + nc + len(outs)
    for i, (mm, _) in enumerate(t_outs):
        t = new.results[base + i]
        if name == "Loop":
            with ir.InsertionPoint.after(new):
                d = dims(t)
                if d is None:
                    raise UnsupportedOp("a Loop scan output of unknown rank")
                # [T, k] + E; with zero iterations ONNX Runtime cannot know k
                # (it emits extent 0 there): restore it, then [k, T] + E
                if d[0] is None:  # else T > 0 is known: k is right
                    shape = b.concat([b.shape(t, 0, 1), state.k, b.shape(t, 2)], 0)
                    # a static 0 extent is a literal 0 there: with allowzero,
                    # which ONNX Runtime's Reshape fusion keeps (it turned
                    # the Shape read beside it into -1 and refused the model)
                    t = b.reshape_to(t, shape, d) if 0 in d else b.reshape(t, shape, d)
                t = b.transpose(t, [1, 0] + list(range(2, len(d))))
        state.of[new.results[n + nc + mm]] = t
    return True


def _scan_out_type(result: ir.Value, axis: int) -> ir.Type:
    d = dims(result)
    return tensor_type(None if d is None else [None] + d, element_type(result))


def _stacked_type(y: ir.Value, result: ir.Value) -> ir.Type:
    """[T, k] + S for the tangents of scan output `result` (T when its type knows it)."""
    d, rd = dims(y), dims(result)
    T = rd[0] if rd is not None and rd and rd[0] else None  # 0: k is lost (see _fwd_loop)
    return tensor_type(None if d is None else [T, None] + d, element_type(y))


# ---- reverse mode: opaque linear stand-ins ------------------------------------------

def _linear_standin(op: ir.Operation, rewriter, state: Tangents) -> bool:
    inputs = []
    for v in list(op.operands) + captures(op):
        if state.get(v) is not None and v not in inputs:
            inputs.append(v)
    if not inputs:
        return False
    _refuse_active_containers(op, inputs)
    floats = [r for r in op.results if is_float(r)]
    b = Builder(state.opset, op.location)
    ident = next(_ids)
    with ir.InsertionPoint.after(op):
        ph = ir.Operation.create(
            PLACEHOLDER, results=[b.derivative_type(r) for r in floats],
            operands=[state.get(v) for v in inputs],
            attributes={REGION_ID: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ident),
                        STANDS_FOR: ir.StringAttr.get(op.name)},
            loc=op.location)
    _REGIONS[ident] = (op, inputs)
    for r, t in zip(floats, ph.results):
        state.of[r] = t
        symdims.register(t, r)
    return False  # the region op itself is untouched


def _refuse_active_containers(op: ir.Operation, inputs: list[ir.Value]) -> None:
    """The stand-in differentiates only float results: a used sequence or
    optional result that depends on a differentiated input would read as
    a constant (a silent zero)."""
    active = set(inputs)
    mark_active(op, active)
    for i, r in enumerate(op.results):
        if r in active and not is_float(r) and _used(r):
            raise UnsupportedOp(
                f"its result {i} ({r.type}) depends on a differentiated value, and sequence "
                f"and optional values carry no derivatives")


def _region_rule(op: ir.Operation, rewriter, state: Tangents) -> bool:
    if state.mode == "linear":
        return _linear_standin(op, rewriter, state)
    name = op_type(op)
    if name == "If":
        return _fwd_if(op, rewriter, state)
    if op.name == "onnx.ScanV8":
        raise UnsupportedOp("Scan-8 (batched) is not differentiated; use opset >= 9")
    return _fwd_loop(op, rewriter, state, name)


for _t in ("If", "Loop", "Scan"):
    for _n in mlir_names(_t):
        REGION_RULES[_n] = _region_rule


# ---- reverse mode: direct reverse rules ----------------------------------------------

def _reverse_block(block: ir.Block, root: ir.Operation, xs: list[ir.Value],
                   seeds: list[tuple[ir.Value, ir.Value]], opset: int) -> list[ir.Value | None]:
    from ..modes import reverse_block
    return reverse_block(block, root, xs, seeds, opset)


def _t_region(b: Builder, ph: ir.Operation, cts, linear) -> list:
    ident = ir.IntegerAttr(ph.attributes[REGION_ID]).value
    op, inputs = _REGIONS.pop(ident)
    floats = [r for r in op.results if is_float(r)]
    ct_of = dict(zip(floats, cts))
    name = op_type(op)
    if name == "If":
        contrib = _rev_if(b, op, inputs, ct_of)
        _PRIMALS[ident] = floats
    else:
        contrib, _PRIMALS[ident] = _rev_loop(b, op, inputs, ct_of, name)
    return [contrib.get(v) for v in inputs]


def retire_standin(ph: ir.Operation, opset: int) -> None:
    """A linear stand-in kept alive only because a transpose rule reads the
    shape of a linear value: its results become Unsqueeze(primal, 0), the
    [1] + S values of the linearization, and it is erased."""
    ident = ir.IntegerAttr(ph.attributes[REGION_ID]).value
    primals = _PRIMALS.pop(ident, None)
    if primals is None:
        primals = [r for r in _REGIONS.pop(ident)[0].results if is_float(r)]
    b = Builder(opset, ph.location)
    with ir.InsertionPoint(ph):
        for r, p in zip(ph.results, primals):
            r.replace_all_uses_with(b.unsqueeze(p, [0]))
    ph.erase()


TRANSPOSE[PLACEHOLDER] = _t_region


def _clone_body(op: ir.Operation, region: int, ip: ir.InsertionPoint) -> tuple[ir.Operation, ir.Block]:
    copy = op.clone(ip=ip)
    return copy, copy.regions[region].blocks[0]


def _rev_if(b: Builder, op: ir.Operation, inputs: list[ir.Value], ct_of: dict) -> dict:
    k = _k_of(b, ct_of.values())
    types = [b.derivative_type(v) for v in inputs]
    new = _create(op.name, [op.operands[0]], types, {}, op.location, 2)
    copy = op.clone(ip=ir.InsertionPoint(new))
    for side in (0, 1):
        blk = new.regions[side].blocks.append()
        ys = _move_body(copy.regions[side].blocks[0], blk, {})
        seeds = [(y, ct_of[r]) for y, r in zip(ys, op.results) if ct_of.get(r) is not None]
        _mark_yields(blk, ys)
        cts = _reverse_block(blk, new, inputs, seeds, b.opset)
        # the primal If took this branch: what the recomputed branch yields is
        # its result (coefficients read it there; the recomputation may die)
        _reuse_marked(blk, list(op.results))
        with ir.InsertionPoint(blk):
            outs = [b.zeros_over(x, k) if ct is None else b.fit(ct, x) for x, ct in zip(inputs, cts)]
        _yield(blk, outs, op.location)
    copy.erase()
    _hoist_invariants(new)
    return dict(zip(inputs, new.results))


YIELD_OF = "onnx_ad.yield_of"

# Ops whose derivative rule compares their result with their operands bit
# for bit (the operand equal to the max carries the tangent): a reversal
# must not pair their result read from the primal with operands it
# recomputes. The recomputation may round differently (a Loop's, hoisted
# and run over all steps at once; an If branch's, fused otherwise by the
# runtime), no operand then equals the read max, and the derivative is 0
# (fuzz seed 108, case 854: log(1 + v^2) recomputed over the stacked
# states against the Loop's stacked Max of it). They are recomputed too.
_COMPARES_RESULT = {"Max", "Min", "Clip", "ReduceMax", "ReduceMin", "MaxPool", "GlobalMaxPool"}


def _compares_result(o: ir.Operation) -> bool:
    """o's rule reads its result in a mask (Max/Min of two compare operands)."""
    kind = _kind(o)
    return kind in _COMPARES_RESULT and not (kind in ("Max", "Min") and len(o.operands) == 2)


def _mark_yields(blk: ir.Block, ys: list[ir.Value]) -> None:
    """Tags the ops of blk (no regions: rules do not rebuild those) that
    compute yield j with [result number, j] pairs, read by _reuse_marked
    after the block's reversal (a Value could dangle by then, an op tagged
    and later replaced just loses the tag)."""
    i64 = ir.IntegerType.get_signless(64)
    for j, y in enumerate(ys):
        owner = y.owner
        if not isinstance(owner, (ir.Operation, ir.OpView)):
            continue
        o = owner.operation
        if o.block != blk or len(o.regions) or _compares_result(o):
            continue
        old = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(o.attributes[YIELD_OF])] \
            if YIELD_OF in o.attributes else []
        o.attributes[YIELD_OF] = ir.ArrayAttr.get(
            [ir.IntegerAttr.get(i64, v) for v in old + [ir.OpResult(y).result_number, j]])


def _reuse_marked(blk: ir.Block, results: list[ir.Value]) -> None:
    """Uses inside blk of a tagged op's result read the primal result
    instead (the same value: same branch, same inputs). A yield two ops
    claim (a rule copied the tag with an op's attributes) is not reused."""
    tagged = []
    for o in list(blk.operations):
        o = o.operation
        if YIELD_OF not in o.attributes:
            continue
        tags = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(o.attributes[YIELD_OF])]
        del o.attributes[YIELD_OF]
        tagged.append((o, tags))
    claims = [j for _, tags in tagged for j in tags[1::2]]
    for o, tags in tagged:
        for rn, j in zip(tags[::2], tags[1::2]):
            if claims.count(j) > 1:
                continue
            y, r = o.results[rn], results[j]
            if y.type != r.type:
                continue
            for use in list(y.uses):
                user = use.owner
                user = user.operation if isinstance(user, ir.OpView) else user
                inner = user
                while inner is not None and inner.block != blk:  # nested in blk?
                    inner = inner.parent
                    inner = inner.operation if inner is not None else None
                if inner is not None:
                    user.operands[use.operand_number] = r


def _with_history(op: ir.Operation, name: str, states: bool = True,
                  residuals: list[ir.Value] = ()) -> tuple[ir.Operation, list[ir.Value], bool]:
    """Replaces the primal Loop/Scan by one that also emits, per iteration,
    its carried values (unless not `states`), for Loop the iteration number,
    and the `residuals` (values of its body) as scan outputs, in that order."""
    inits, cargs, cys, scans, sargs, outs = _loop_layout(op, name)
    body = op.regions[0].blocks[0]
    # the iteration number only where the body reads it (or nothing else
    # would tell the number of iterations): one copy per iteration less
    with_i = name == "Loop" and (_used(body.arguments[0]) or not cargs or not states)
    if not states:
        cargs = []
    extra = ([body.arguments[0]] if with_i else []) + cargs + list(residuals)
    attrs = _attrs(op)
    if name == "Scan":
        n_out = len(outs)
        ranks = [None if dims(r) is None else len(dims(r)) for r in op.results[len(cargs):]]
        attrs["scan_output_axes"] = ints_attr(_ints(op, "scan_output_axes", n_out, ranks) + [0] * len(extra))
        attrs["scan_output_directions"] = ints_attr(
            _ints(op, "scan_output_directions", n_out, ranks) + [0] * len(extra))
        if "scan_input_axes" not in attrs:
            pass
    types = [r.type for r in op.results] + [
        tensor_type(None if dims(a) is None else [None] + dims(a), element_type(a)) for a in extra]
    with ir.InsertionPoint(op):
        new = _create(op.name, op.operands, types, attrs, op.location, 1)
    blk = new.regions[0].blocks.append(*[a.type for a in body.arguments])
    yielded = _move_body(body, blk, dict(zip(body.arguments, blk.arguments)))
    extra_new = ([blk.arguments[0]] if with_i else []) + \
        list(blk.arguments[2:2 + len(cargs)] if name == "Loop" else blk.arguments[:len(cargs)]) + \
        list(residuals)  # (moved with the body ops: the same values)
    _yield(blk, yielded + extra_new, op.location)
    n = len(op.results)
    _replace(None, op, list(new.results[:n]))
    return new, list(new.results[n:]), with_i


def _shape_may_vary(op: ir.Operation) -> bool:
    """Whether a carried value of a Loop may change shape between
    iterations: its type in the body lost an extent its start has (the
    join of start and yields, refine_region_types: a Concat-grown
    sequence, or a body typed without shapes) and symbolic extents do not
    show the yield having the start's or the argument's extents. ONNX
    Runtime requires a scan output's slices to agree in shape, so such
    states cannot be stacked."""
    inits, cargs, cys = _loop_layout(op, "Loop")[:3]
    for x, a, y in zip(inits, cargs, cys):
        dx, da = dims(x), dims(a)
        if dx is not None and (da is None or any(e is not None and f is None
                                                 for e, f in zip(dx, da))) and \
                symdims.dims(y) not in (symdims.dims(x), None if da is None else symdims.dims(a)):
            return True  # unless the yield provably has the start's or the argument's extents
    return False


def _through_identity(v: ir.Value) -> ir.Value:
    """The value v copies (through Identity ops), v itself otherwise."""
    while isinstance(v.owner, (ir.Operation, ir.OpView)) and _kind(v.owner.operation) == "Identity":
        v = v.owner.operation.operands[0]
    return v


class _Read(NamedTuple):
    """A stack the primal Loop/Scan emits that the reverse body reads a slice
    of: along `axis`, in the primal's `direction`, the value of the primal
    body's yield `yield_index` (without the Loop's cond), of type `type`."""
    stack: ir.Value
    axis: int
    direction: int
    yield_index: int
    type: ir.Type


def _stacked_reads(body: ir.Block, n_states: int, outs: list[ir.Value],
                   scan_results: list[ir.Value], axes: list[int], directions: list[int],
                   res_stacks: list[ir.Value], residuals: list[ir.Value],
                   first_residual: int) -> list[_Read]:
    """What the reverse body may read instead of recomputing: the primal's
    own scan outputs whose per-iteration value its body computes (through
    Identity: a tanh RNN's h_t, read for tanh' instead of redoing the step's
    MatMuls from h_t-1), then the residuals the primal stacks for it
    (_residuals, yields from `first_residual` on). The reverse body's copies
    of those values are tagged (_mark_yields) and their uses read the slices
    after the reversal (_reuse_marked); prune_loops drops the stacks
    nothing reads."""
    reads = []
    for mm, y in enumerate(outs):
        v = _through_identity(y)
        if _in_body(v, body) and isinstance(v.type, ir.RankedTensorType):
            reads.append(_Read(scan_results[mm], axes[mm], directions[mm], n_states + mm, v.type))
    for r, (stack, v) in enumerate(zip(res_stacks, residuals)):
        reads.append(_Read(stack, 0, 0, first_residual + r, v.type))
    return reads


def _read_values(ys: list[ir.Value], reads: list[_Read], nexts: list[int]) -> list[ir.Value]:
    """The reverse body's copies of the values it reads from stacks instead
    (the `reads`' yields, then the next values of the states in `nexts`), in
    the order _reuse_marked gets their slices."""
    return [_through_identity(ys[r.yield_index]) for r in reads] + \
        [_through_identity(ys[j]) for j in nexts]


def _in_body(v: ir.Value, body: ir.Block) -> bool:
    """v is the result of a region-free op of body (the reuse tags only those)."""
    owner = v.owner
    return isinstance(owner, (ir.Operation, ir.OpView)) and owner.operation.block == body and \
        not len(owner.operation.regions)


def _op_in(v: ir.Value, body: ir.Block) -> ir.Operation | None:
    """The op whose result v is when that op is in body itself, else None."""
    o = defining_op(v)
    return o if o is not None and o.parent is not None and o.block == body else None


def _clone_out(o: ir.Operation, body: ir.Block, operands: dict[int, ir.Value]) -> ir.Operation:
    """A copy of body's op o at the insertion point, outside body, with
    operands[k] as its k-th operand; its other operands made in body (body
    constants, NoValue) are cloned in front of the copy so it reads none of
    body's values."""
    copy = o.clone()
    for k, v in enumerate(o.operands):
        if k in operands:
            copy.operands[k] = operands[k]
        elif _op_in(v, body) is not None:
            with ir.InsertionPoint(copy):
                copy.operands[k] = v.owner.operation.clone().results[0]
    return copy


def _varies(v: ir.Value, body: ir.Block) -> bool:
    """v may differ between the steps of body's loop: an argument of body,
    or the result of an op of body other than a constant (or NoValue)."""
    if isinstance(v, ir.BlockArgument):
        return v.owner == body
    o = _op_in(v, body)
    return o is not None and not is_constant_op(o) and not isinstance(v.type, ir.NoneType)


# Ops whose recomputation costs more than reading a stored slice: the
# reverse body reads what a step computes from them instead of redoing it
# (a neural ODE's RK4 step recomputed its four MLP evaluations).
_COSTLY = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "MatMulInteger", "ConvInteger",
           "QLinearMatMul", "QLinearConv", "LSTM", "GRU", "RNN", "Attention"}


def _keep_start_extents(loop: ir.Operation) -> None:
    """Registers the Loop's carried arguments alike their starts (symdims),
    for a Loop whose carried values provably keep their shapes
    (_shape_may_vary): values of a step made from a run-time batch can then
    be stacked (_residuals), and their slices need no unbroadcasting."""
    inits, cargs = _loop_layout(loop, "Loop")[:2]
    for a, x in zip(cargs, inits):
        symdims.alike(a, x, first=0)
    symdims.reset()  # (the body's values were cached with the arguments' fresh extents)


def _residuals(op: ir.Operation, name: str) -> tuple[list[ir.Value], list[int]]:
    """Values of op's body computed from a costly op within the step (a
    nested loop counts as one), of one shape at every iteration, that no
    scan output already stacks: the primal stacks them all, the reverse body
    reads the ones its reversal needs (_stacked_reads) and prune_loops drops
    the rest, so only what the reversal reads is stored (the
    store-what-is-needed policy of JAX's scan; states alone would cost
    recomputing the step). Not for Loops whose states change shape.
    A state's next value is not stacked (the state history holds it, one
    step later): the indices of the states whose next value is costly come
    second, the reverse carries that value from one step to the next."""
    body = op.regions[0].blocks[0]
    _, _, cys, _, _, outs = _loop_layout(op, name)
    stacked = {_through_identity(y) for y in outs}
    nexts = [_through_identity(y) for y in cys]
    costly: set = set()
    out = []
    for o in list(body.operations)[:-1]:
        o = o.operation
        if not (_kind(o) in _COSTLY or len(o.regions) or any(v in costly for v in o.operands)):
            continue
        costly.update(o.results)
        if len(o.regions):
            continue  # (rules rebuild region ops: their results cannot be tagged)
        out += [r for r in o.results
                if r not in stacked and r not in nexts and isinstance(r.type, ir.RankedTensorType)
                and _same_shape_each_iteration(r, op)]
    return out, [j for j, v in enumerate(nexts)
                 if v in costly and v not in stacked and _in_body(v, body)]


def _same_shape_each_iteration(v: ir.Value, loop: ir.Operation) -> bool:
    """Every extent of v is static, a parameter, proved, or read from a
    value defined outside the loop (the slices of a stack must agree)."""
    d = symdims.dims(v)
    if d is None:
        return False

    def invariant(e) -> bool:
        if isinstance(e, (int, np.integer)):
            return True
        if e[0] in ("param", "="):
            return True
        if e[0] == "bc":
            return all(invariant(m) for m in e[1])
        src = symdims.source(e)
        return src is not None and not _inside(src[0], loop)
    return all(invariant(e) for e in d)


def _inside(v: ir.Value, loop: ir.Operation) -> bool:
    """v is defined in one of loop's regions (at any depth)."""
    owner = v.owner
    op = owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else owner.owner
    while op is not None:
        op = op.operation
        if op == loop:
            return True
        op = op.parent
    return False


def _recomputed_states(b: Builder, primal: ir.Operation, idx: ir.Value) -> list[ir.Value]:
    """The carried values at the start of iteration `idx`, by running the
    primal Loop's body `idx` times again from its inits (no stored states:
    O(T^2) body runs, for states whose shapes change, see _shape_may_vary).
    The recomputing Loop is plain ONNX, so the reverse model stays
    differentiable by its own rules."""
    inits, cargs, cys = _loop_layout(primal, "Loop")[:3]
    n = len(cargs)
    loop = _create(primal.name, [idx, b.none()] + inits, [a.type for a in cargs], {},
                   primal.location, 1)
    copy = primal.clone(ip=ir.InsertionPoint(loop))
    cbody = copy.regions[0].blocks[0]
    blk = loop.regions[0].blocks.append(*[a.type for a in cbody.arguments])
    ys = _move_body(cbody, blk, dict(zip(list(cbody.arguments), list(blk.arguments))))
    copy.erase()
    _yield(blk, ys[:1 + n], primal.location)  # cond and carried (no scan outputs)
    return list(loop.results)


def _used(v: ir.Value) -> bool:
    return any(True for _ in v.uses)


def _erase_dead(block: ir.Block) -> None:
    """Erases block's onnx ops nothing uses (consumers first): the step's
    recomputation a reverse body no longer reads."""
    for o in reversed(list(block.operations)):
        o = o.operation
        if o.name.startswith("onnx.") and o.name != "onnx.Yield" and \
                not any(_used(r) for r in o.results):
            symdims.forget(o)
            o.erase()


# Ops moved out of a reverse body when all their operands are defined
# outside it: they cannot fail where the body's own run would not (no
# indexing, no shape arithmetic), so running them once even for zero
# iterations is harmless.
_HOISTABLE = {"Transpose", "Unsqueeze", "Squeeze", "Identity", "Cast", "CastLike", "Neg",
              "Shape", "Size", "Constant", "Tanh", "Sigmoid", "Exp", "Abs"}


def _hoist_invariants(op: ir.Operation) -> None:
    """Moves the invariant ops of op's bodies (pure, region-free, every
    operand from outside the body, in _HOISTABLE) in front of op: a reverse
    Loop/Scan runs them once, not per iteration; a reverse If's branches
    share them (cse) and ONNX Runtime folds those of constants."""
    for region in op.regions:
        body = region.blocks[0]
        inside = set(body.arguments)
        for o in list(body.operations):
            o = o.operation
            if _kind(o) in _HOISTABLE and not len(o.regions) and \
                    all(v not in inside for v in o.operands):
                o.move_before(op)
            else:
                inside.update(o.results)


def _invariant_ct(b: Builder, ct: ir.Value, axis: int, like: ir.Value) -> ir.Value | None:
    """A scan-output cotangent that is an Expand of one slice along `axis`
    (ReduceMean's and Add's transposes broadcast over the iterations): that
    slice, without the axis, if it has exactly the shape of `like`'s
    cotangent; each iteration can read it as it is instead of a Gather."""
    owner = ct.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or _kind(owner.operation) != "Expand":
        return None
    src = owner.operation.operands[0]
    inner = src.owner
    if isinstance(inner, (ir.Operation, ir.OpView)) and _kind(inner.operation) == "Unsqueeze" \
            and rank(src) is not None:
        from .shape import _squeeze_axes
        if _squeeze_axes(inner.operation) == [axis]:
            v = inner.operation.operands[0]
            vd = dims(v)
            if vd is not None and dims(like) is not None and len(vd) == len(dims(like)) + 1 \
                    and all(a is not None and a == c for a, c in zip(vd[1:], dims(like))):
                return v
    sd, ld, cd = dims(src), dims(like), dims(ct)
    if sd is None or ld is None or cd is None or len(sd) != len(cd) or sd[axis] != 1:
        return None
    rest = sd[:axis] + sd[axis + 1:]
    if len(rest) != len(ld) + 1 or any(a is None or a != c for a, c in zip(rest[1:], ld)):
        return None
    return b.squeeze(src, [axis])


def _rev_loop(b: Builder, op: ir.Operation, inputs: list[ir.Value], ct_of: dict, name: str) -> dict:
    if op.name == "onnx.ScanV8":
        raise UnsupportedOp("Scan-8 (batched) is not differentiated; use opset >= 9")
    k = _k_of(b, ct_of.values())
    loc = op.location
    ct_at = [ct_of.get(r) for r in op.results]  # by index: the op is replaced next
    recompute = name == "Loop" and _shape_may_vary(op)
    trips = _fixed_trip_count(op) if name == "Loop" else None
    if name == "Loop" and not recompute:
        _keep_start_extents(op)
    residuals, nexts = ([], []) if recompute else _residuals(op, name)
    primal, extra, with_i = _with_history(op, name, states=not recompute, residuals=residuals)
    if name == "Loop" and not recompute:
        _keep_start_extents(primal)
    hist, res_stacks = extra[:len(extra) - len(residuals)], extra[len(extra) - len(residuals):]
    inits, cargs, cys, scans, sargs, outs = _loop_layout(primal, name)
    body = primal.regions[0].blocks[0]
    n, nout = len(cargs), len(outs)
    outs = outs[:nout - len(extra)]  # the primal scan outputs, without history and residuals
    nout = len(outs)
    results = list(primal.results)
    finals, scan_results = results[:n], results[n:n + nout]
    primal_floats = [r for r in results[:n + nout] if is_float(r)]
    fl = [j for j, a in enumerate(cargs) if is_float(a)]
    caps_all = [v for v in inputs if v in captures(primal)]
    if name == "Loop" and not recompute:
        # stacked states are one shape (ONNX Runtime refuses a scan output
        # whose slices differ): the carried values keep their starts' extents
        for f, i in zip(finals, inits):
            symdims.alike(f, i, first=0)
    # the results' cotangents have [k] + their extents, whatever names the
    # output declarations give them (a torch export's Loop output)
    for c, r in zip(ct_at, finals + scan_results):
        if c is not None:
            symdims.register(c, r)
    # Cotangent inits for the carried values: those of the final results.
    ct_final = [ct_at[j] for j in fl]
    ct_final = [b.zeros_over(finals[j], k) if c is None else b.fit(c, finals[j])
                for j, c in zip(fl, ct_final)]
    acc0 = [b.zeros_over(c, k) for c in caps_all]
    ct_scan = [(m, ct_at[n + m]) for m, y in enumerate(scan_results)
               if is_float(y) and ct_at[n + m] is not None]
    # the next value of states in `nexts` (what the reverse of step t reads
    # of step t's result) is carried down from step t+1, which read it as
    # its state; the last step's is the final state
    next0 = [finals[j] for j in nexts]
    carried_types = [c.type for c in ct_final] + [a.type for a in acc0] + \
        [_through_identity(cys[j]).type for j in nexts]
    n_ct = len(fl) + len(acc0)  # (carried cotangents and accumulators, then next0)
    if name == "Scan":
        m = len(sargs)
        in_ranks = [None if dims(x) is None else len(dims(x)) for x in scans]
        out_ranks = [None if dims(r) is None else len(dims(r)) for r in scan_results]
        ia = _ints(primal, "scan_input_axes", m, in_ranks)
        idr = _ints(primal, "scan_input_directions", m, in_ranks)
        oa = _ints(primal, "scan_output_axes", nout + len(hist), out_ranks + [None] * len(hist))[:nout]
        odr = _ints(primal, "scan_output_directions", nout + len(hist),
                    out_ranks + [None] * len(hist))[:nout]
        flip = lambda d: 1 - d
        act_x = [i for i, x in enumerate(scans) if x in inputs and is_float(sargs[i])]
        reads = _stacked_reads(body, n, outs, scan_results, oa, odr, res_stacks, residuals,
                               n + nout + len(hist))
        scan_in = hist + scans + [c for _, c in ct_scan] + [r.stack for r in reads]
        attrs = {
            "num_scan_inputs": ir.IntegerAttr.get(ir.IntegerType.get_signed(64), len(scan_in)),
            "scan_input_axes": ints_attr([0] * len(hist) + ia + [oa[mm] + 1 for mm, _ in ct_scan] +
                                         [r.axis for r in reads]),
            "scan_input_directions": ints_attr([1] * len(hist) + [flip(d) for d in idr] +
                                           [flip(odr[mm]) for mm, _ in ct_scan] +
                                           [flip(r.direction) for r in reads]),
            "scan_output_axes": ints_attr([ia[i] + 1 for i in act_x]),
            "scan_output_directions": ints_attr([flip(idr[i]) for i in act_x]),
        }
        out_types = carried_types + [b.derivative_type(scans[i]) for i in act_x]
        rev = _create(primal.name, ct_final + acc0 + next0 + scan_in, out_types, attrs, loc, 1)
        ct_elem_types = [b.derivative_type(outs[mm]) for mm, _ in ct_scan]
        blk = rev.regions[0].blocks.append(*(carried_types + [a.type for a in cargs] +
                                             [a.type for a in sargs] + ct_elem_types +
                                             [r.type for r in reads]))
        a = list(blk.arguments)
        ct_v = a[:len(fl)]
        acc = a[len(fl):n_ct]
        nxt = a[n_ct:len(carried_types)]
        off = len(carried_types)
        s_in, x_in = a[off:off + n], a[off + n:off + n + m]
        cty = a[off + n + m:off + n + m + len(ct_scan)]
        copy = primal.clone(ip=ir.InsertionPoint(rev))
        cbody = copy.regions[0].blocks[0]
        ys = _move_body(cbody, blk, dict(zip(list(cbody.arguments), s_in + x_in)))
        copy.erase()
        _mark_yields(blk, _read_values(ys, reads, nexts))
        wrt = [s_in[j] for j in fl] + [x_in[i] for i in act_x] + caps_all
        seeds = [(ys[j], c) for j, c in zip(fl, ct_v)] + \
            [(ys[n + mm], c) for (mm, _), c in zip(ct_scan, cty)]
        cts = _reverse_block(blk, rev, wrt, seeds, b.opset)
        _reuse_marked(blk, a[off + n + m + len(ct_scan):] + nxt)
        kk = ct_v[0] if ct_v else (acc[0] if acc else cty[0])
        with ir.InsertionPoint(blk):
            kin = b.shape(kk, 0, 1)
            new_ct_v = [b.zeros_over(s_in[j], kin) if c is None else b.fit(c, s_in[j])
                        for j, c in zip(fl, cts[:len(fl)])]
            ct_x = [b.zeros_over(x_in[i], kin) if c is None else b.fit(c, x_in[i])
                    for i, c in zip(act_x, cts[len(fl):len(fl) + len(act_x)])]
            new_acc = [ac if c is None else b.add(ac, b.fit(c, cap))
                       for ac, c, cap in zip(acc, cts[len(fl) + len(act_x):], caps_all)]
        _yield(blk, new_ct_v + new_acc + _passed_down(nxt, [s_in[j] for j in nexts]) + ct_x, loc)
        _hoist_invariants(rev)
        res = list(rev.results)
        contrib = {}
        _add(b, contrib, [inits[j] for j in fl], res[:len(fl)])
        _add(b, contrib, caps_all, res[len(fl):n_ct])
        _add(b, contrib, [scans[i] for i in act_x], res[len(carried_types):])
        return contrib, primal_floats
    # Loop
    i64 = ir.IntegerType.get_signless(64)
    iters = hist[0]
    state_hist = hist[1:] if with_i else hist
    # any scan output has one slice per iteration: the primal's own first, so
    # a history the reverse body ends up not reading can go (prune_loops.py)
    count, last = _iterations(b, scan_results[0] if scan_results else iters)
    fixed = {mm: _invariant_ct(b, c, 1, outs[mm]) for mm, c in ct_scan}
    rev = _create(primal.name, [count, b.none()] + ct_final + acc0 + next0, carried_types, {},
                  loc, 1)
    blk = rev.regions[0].blocks.append(tensor_type([], i64),
                                       tensor_type([], ir.IntegerType.get_signless(1)),
                                       *carried_types)
    a = list(blk.arguments)
    ct_v, acc, nxt = a[2:2 + len(fl)], a[2 + len(fl):2 + n_ct], a[2 + n_ct:]
    with ir.InsertionPoint(blk):
        idx = b.sub(last, a[0])
        if recompute:  # after the body's reversal, which must not see them computed
            pending = ir.Operation.create("builtin.unrealized_conversion_cast",
                                          results=[a.type for a in cargs], operands=[], loc=loc)
            states = list(pending.results)
        else:
            states = [b.op("Gather", [h, idx], cargs[j].type, axis=0)
                      for j, h in enumerate(state_hist)]
            for v, i in zip(states, inits):
                symdims.alike(v, i, first=0)
            for c, start in zip(ct_v, ct_final):  # its yields are fit to the states
                symdims.alike(c, start)
        it = b.op("Gather", [iters, idx], body.arguments[0].type, axis=0) if with_i else a[0]
        cty = [fixed[mm] if fixed[mm] is not None else
               b.op("Gather", [c, idx], b.derivative_type(outs[mm]), axis=1)
               for mm, c in ct_scan]
        reads = _stacked_reads(body, n, outs, scan_results, [0] * nout, [0] * nout, res_stacks,
                               residuals, n + nout + len(hist))
        stored_at = [b.op("Gather", [r.stack, idx], r.type, axis=0) for r in reads]
        true_ = b.constant(ir.DenseElementsAttr.get(np.asarray(True)))
    copy = primal.clone(ip=ir.InsertionPoint(rev))
    cbody = copy.regions[0].blocks[0]
    ys = _move_body(cbody, blk, dict(zip(list(cbody.arguments), [it, true_] + states)))
    copy.erase()
    ys = ys[1:]  # drop the cond
    _mark_yields(blk, _read_values(ys, reads, nexts))
    wrt = [states[j] for j in fl] + caps_all
    seeds = [(ys[j], c) for j, c in zip(fl, ct_v)] + \
        [(ys[n + mm], c) for (mm, _), c in zip(ct_scan, cty)]
    cts = _reverse_block(blk, rev, wrt, seeds, b.opset)
    _reuse_marked(blk, stored_at + nxt)
    if recompute:
        with ir.InsertionPoint(pending):
            recomputed = _recomputed_states(b, primal, idx)
        for v, r in zip(states, recomputed):
            v.replace_all_uses_with(r)
        pending.erase()
        states = recomputed
    kk = ct_v[0] if ct_v else acc[0]
    with ir.InsertionPoint(blk):
        kin = b.shape(kk, 0, 1)
        new_ct_v = [b.zeros_over(states[j], kin) if c is None else b.fit(c, states[j])
                    for j, c in zip(fl, cts[:len(fl)])]
        new_acc = [ac if c is None else b.add(ac, b.fit(c, cap))
                   for ac, c, cap in zip(acc, cts[len(fl):], caps_all)]
        cond_out = b.constant(ir.DenseElementsAttr.get(np.asarray(True)))
    _yield(blk, [cond_out] + new_ct_v + new_acc + _passed_down(nxt, [states[j] for j in nexts]),
           loc)
    _erase_dead(blk)  # (stored_at's dead Gathers with it: read what is left)
    stacks = [r.stack for r in reads] + state_hist
    read = [o.operation.operands[0] for o in blk.operations
            if o.operation.name == "onnx.Gather" and o.operation.operands[0] in stacks]
    if not scan_results and read:
        # count the iterations on a stack the body reads anyway: the states'
        # history may then go
        with ir.InsertionPoint(rev):
            n_read, last_read = _iterations(b, read[0])
        count.replace_all_uses_with(n_read)
        last.replace_all_uses_with(last_read)
    if not recompute and trips != 0:  # (a loop that never runs keeps its trivial reverse)
        rev = _as_scan(b, rev, guarded=trips is None)
    _hoist_invariants(rev)
    res = list(rev.results)
    # cotangents of the starts and captures: [k] + their extents, which
    # the reverse loop's own results do not tell
    for c, v in zip(res[:n_ct], [inits[j] for j in fl] + list(caps_all)):
        symdims.register(c, v)
    contrib = {}
    _add(b, contrib, [inits[j] for j in fl], res[:len(fl)])
    _add(b, contrib, caps_all, res[len(fl):n_ct])
    return contrib, primal_floats


def _iterations(b: Builder, stack: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The iteration count of a Loop (the extent of a stack it emitted, one
    slice per iteration) and the index of its last iteration. Gather, not
    Squeeze: ONNX shape inference knows its rank without reading the
    constant, also inside subgraphs whose constants live outside."""
    count = b.op("Gather", [b.shape(stack, 0, 1), b.int_scalar(0)],
                 tensor_type([], ir.IntegerType.get_signless(64)), axis=0)
    return count, b.sub(count, b.int_scalar(1))


def _passed_down(nxt: list[ir.Value], states: list[ir.Value]) -> list[ir.Value]:
    """What each carried next-state argument yields: the step's state (the
    next value of the step below), or itself where the reversal read none of
    it (prune_loops then drops it, and the state's Gather is not kept)."""
    return [s if _used(a) else a for a, s in zip(nxt, states)]


def _as_scan(b: Builder, rev: ir.Operation, guarded: bool) -> ir.Operation:
    """The reverse Loop as a Scan running backwards over the stacks its body
    reads at idx = last - i (states, residuals, iteration numbers, output
    cotangents: each has one slice per primal iteration along its Gather's
    axis), when those Gathers are all the body does with idx: ONNX Runtime
    hands a Scan its slices, where the Loop ran a Gather per stack and step
    and a Sub (neural_ode's reverse 3.0 -> 2.5 x primal). ONNX Runtime
    1.32's Scan fails on zero-length scan inputs (an error on axis 0, SIGFPE
    on axis 1): unless the primal provably ran (not `guarded`), the Scan
    runs in an If on a positive trip count whose other branch passes the
    carried values through. rev itself when the body reads the iteration
    number otherwise, nothing is stacked, or before opset 9 (Scan-8 is
    batched)."""
    if b.opset < 9:  # (Scan-8 is batched; Greater compares no int64 before 9)
        return rev
    blk = rev.regions[0].blocks[0]
    i, cond = blk.arguments[0], blk.arguments[1]
    users = [u.owner.operation for u in i.uses]  # (idx = last - i, unless it died)
    if _used(cond) or len(users) != 1 or _kind(users[0]) != "Sub" or users[0].operands[1] != i:
        return rev
    if not all(isinstance(v.type, ir.RankedTensorType) for v in
               list(_terminator(blk).operands)[1:]):
        return rev  # (ONNX Runtime's Scan needs every body output's rank)
    idx_op = users[0]
    idx = idx_op.results[0]
    gathers = [u.owner.operation for u in idx.uses]
    if not gathers or any(_kind(g) != "Gather" or g.block != blk or g.operands[1] != idx or
                          _inside(g.operands[0], rev) or
                          (attribute(g, "axis") or 0) not in (0, 1) for g in gathers):
        return rev
    stacks: dict = {}  # (stack, axis) -> its slice argument's type
    for g in gathers:
        stacks.setdefault((g.operands[0], attribute(g, "axis") or 0), g.results[0].type)
    keys = list(stacks)
    carried = list(rev.operands[2:])
    attrs = {"num_scan_inputs": ir.IntegerAttr.get(ir.IntegerType.get_signed(64), len(keys)),
             "scan_input_axes": ints_attr([ax for _, ax in keys]),
             "scan_input_directions": ints_attr([1] * len(keys))}
    types = [r.type for r in rev.results]
    if guarded:
        with ir.InsertionPoint(rev):
            ran = b.op("Greater", [rev.operands[0], b.int_scalar(0)],
                       tensor_type([], ir.IntegerType.get_signless(1)))
            outer = _create("onnx.If", [ran], types, {}, rev.location, 2)
        then, skipped = outer.regions[0].blocks.append(), outer.regions[1].blocks.append()
        _yield(skipped, carried, rev.location)
    with ir.InsertionPoint(then if guarded else rev):
        scan = _create("onnx.Scan", carried + [v for v, _ in keys], types, attrs, rev.location, 1)
    new = scan.regions[0].blocks.append(*([a.type for a in blk.arguments[2:]] +
                                          [stacks[key] for key in keys]))
    slices = dict(zip(keys, list(new.arguments)[len(carried):]))
    for g in gathers:
        g.results[0].replace_all_uses_with(slices[(g.operands[0], attribute(g, "axis") or 0)])
        symdims.forget(g)
        g.erase()
    symdims.forget(idx_op)
    idx_op.erase()
    ys = _move_body(blk, new, dict(zip(list(blk.arguments)[2:],
                                       list(new.arguments)[:len(carried)])))
    _yield(new, ys[1:], rev.location)  # (without the cond)
    if guarded:
        _hoist_invariants(scan)  # (in the branch, before the Scan)
        _yield(then, list(scan.results), rev.location)
    else:
        outer = scan
    _replace(None, rev, list(outer.results))
    return outer


def _add(b: Builder, contrib: dict, keys, values) -> None:
    # the same value may be a carried init and a capture (or two inits)
    for k_, v in zip(keys, values):
        if k_ in contrib:
            contrib[k_] = b.ew("Add", contrib[k_], v)
        else:
            contrib[k_] = v


# ---- Gather (the reverse Loop reads its stored states with it) -------------------------

def _gather_jvp(b: Builder, op, tangents):
    axis = attribute(op, "axis")
    r = None if dims(op.operands[0]) is None else len(dims(op.operands[0]))
    if axis < 0:
        if r is None:
            raise UnsupportedOp("Gather with a negative axis needs the rank")
        axis += r
    return [b.op("Gather", [tangents[0], op.operands[1]], b.derivative_type(op.results[0]),
                 axis=axis + 1)]


for _n in mlir_names("Gather"):
    JVP.setdefault(_n, _gather_jvp)


# ---- result types of region ops ------------------------------------------------------
# ONNX shape inference often leaves Loop/Scan (and If) results untyped (it
# gives up on bodies that read outer-scope values); the rules would then emit
# run-time shape plumbing. A result is the initial value or a yield (If: one
# of the branches' yields), so its type is their join; it only ever refines
# (a static extent is never changed).

def _join(a: ir.Type, c: ir.Type) -> list | None:
    da, dc = dims(a), dims(c)
    if da is None or dc is None or len(da) != len(dc):
        return None
    return [x if x == y else None for x, y in zip(da, dc)]


def _refine(value: ir.Value, shape: list | None) -> bool:
    """Sets value's type to shape where that only adds information."""
    if shape is None or not isinstance(value.type, (ir.RankedTensorType, ir.UnrankedTensorType)):
        return False
    old = dims(value)
    if old is not None:
        if len(old) != len(shape) or any(o is not None and n is not None and o != n
                                         for o, n in zip(old, shape)):
            return False
        shape = [o if o is not None else n for o, n in zip(old, shape)]
        if shape == old:
            return False
    value.set_type(tensor_type(shape, element_type(value)))
    return True


def _scan_extent(op: ir.Operation, scans: list[ir.Value], sargs) -> int | None:
    ranks = [None if dims(x) is None else len(dims(x)) for x in scans]
    try:
        axes = _ints(op, "scan_input_axes", len(scans), ranks)
    except UnsupportedOp:
        return None
    ts = {None if dims(x) is None else dims(x)[a] for x, a in zip(scans, axes)}
    return ts.pop() if len(ts) == 1 else None


def _fixed_trip_count(op: ir.Operation) -> int | None:
    """M when a Loop provably runs exactly M times: M constant, the initial
    condition absent or true, the body's condition its own argument
    (through Identity) or constantly true."""
    trip = op.operands[0]
    count = None if isinstance(trip.type, ir.NoneType) else constant_ints(trip)
    if not count or len(count) != 1:
        return None
    cond_in = op.operands[1]
    if not isinstance(cond_in.type, ir.NoneType) and _const_bool(cond_in) is not True:
        return None
    body = op.regions[0].blocks[0]
    yc = _terminator(body).operands[0]
    while isinstance(yc.owner, (ir.Operation, ir.OpView)) and \
            yc.owner.operation.name == "onnx.Identity":
        yc = yc.owner.operation.operands[0]
    if not (yc == body.arguments[1] or _const_bool(yc) is True):
        return None
    return max(0, count[0])


def refine_region_types(f: ir.Operation) -> None:
    """Types If/Loop/Scan results from their inits and bodies' yields, inner
    ops first; refined types flow into elementwise users and the function's
    result types."""
    from ..expand import _retype_users
    changed = False
    order = [o for o in nested_ops(f)
             if _kind(o) in ("If", "Loop", "Scan") and o.name != "onnx.ScanV8"]
    for op in order:
        name = _kind(op)
        new = []
        if name == "If":
            ys = [list(_terminator(r.blocks[0]).operands) for r in op.regions]
            new = [_join(a.type, c.type) for a, c in zip(*ys)]
        else:
            inits, cargs, cys, scans, sargs, outs = _loop_layout(op, name)
            new = [_join(i.type, y.type) for i, y in zip(inits, cys)]
            # a carried argument is its start, then the previous yield: the
            # extents both have are its own in every iteration (a Scan state
            # keeps its start's shape throughout)
            for a, i, shape in zip(cargs, inits, new):
                if _refine(a, dims(i) if name == "Scan" else shape):
                    changed = True
                    _retype_users(a)
            if name == "Loop":
                T = _fixed_trip_count(op)
                new += [None if dims(y) is None else [T] + dims(y) for y in outs]
            else:
                T = _scan_extent(op, scans, sargs)
                ranks = [None if dims(y) is None else len(dims(y)) + 1 for y in outs]
                try:
                    axes = _ints(op, "scan_output_axes", len(outs), ranks)
                except UnsupportedOp:
                    axes = None
                for y, a in zip(outs, axes or [None] * len(outs)):
                    d = dims(y)
                    new.append(None if d is None or a is None else d[:a] + [T] + d[a:])
        for r, shape in zip(op.results, new):
            if _refine(r, shape):
                changed = True
                _retype_users(r)
    if changed:
        symdims.reset_all()


# ---- If on a constant condition; unrolling -----------------------------------------------

def _const_bool(v: ir.Value) -> bool | None:
    attr = constant_value(v)
    if attr is None:
        return None
    try:
        arr = np.asarray(attr)
    except Exception:
        return None
    return bool(arr.reshape(-1)[0]) if arr.size == 1 else None


def _inline(op: ir.Operation, region: int, mapping: dict) -> list[ir.Value]:
    """Moves a region's block before op (args through mapping); returns yields."""
    blk = op.regions[region].blocks[0]
    ys = _take_yields(blk, mapping)
    for o in list(blk.operations):
        o.operation.move_before(op)
    return ys


def inline_constant_ifs(f: ir.Operation) -> None:
    """Replaces every If on a constant condition by its taken branch."""
    for op in _all_ops(f, "If"):
        c = _const_bool(op.operands[0])
        if c is None:
            continue
        ys = _inline(op, 0 if c else 1, {})
        _replace(None, op, ys)


def _all_ops(f: ir.Operation, *wanted: str) -> list[ir.Operation]:
    """f's ops of the `wanted` kinds, each after the ops nested in it: a
    rewrite of an op clones its body, so the ops inside must be done first
    (their handles would dangle after)."""
    return [o for o in nested_ops(f) if _kind(o) in wanted]


def unroll(f: ir.Operation, opset: int) -> None:
    """Flattens every Scan with static scanned extents and every Loop with a
    constant trip count whose body yields a condition that is constantly
    true (or its own cond argument); the others are left in place."""
    inline_constant_ifs(f)
    for op in _all_ops(f, "Scan", "Loop"):
        kind = op_type(op)
        try:
            if kind == "Scan":
                _unroll_scan(op, opset)
            else:
                _unroll_loop(op, opset)
        except _Skip:
            continue


class _Skip(Exception):
    pass


def _unroll_scan(op: ir.Operation, opset: int) -> None:
    if op.name == "onnx.ScanV8":
        raise _Skip()
    b = Builder(opset, op.location)
    inits, cargs, cys, scans, sargs, outs = _loop_layout(op, "Scan")
    m, n, nout = len(sargs), len(cargs), len(outs)
    in_ranks = [None if dims(x) is None else len(dims(x)) for x in scans]
    out_ranks = [None if dims(r) is None else len(dims(r)) for r in op.results[n:]]
    ia = _ints(op, "scan_input_axes", m, in_ranks)
    idr = _ints(op, "scan_input_directions", m, in_ranks)
    oa = _ints(op, "scan_output_axes", nout, out_ranks)
    odr = _ints(op, "scan_output_directions", nout, out_ranks)
    ts = {None if dims(x) is None else dims(x)[a] for x, a in zip(scans, ia)}
    if None in ts or len(ts) != 1:
        raise _Skip()
    T = ts.pop()
    state = list(inits)
    pieces = [[] for _ in range(nout)]
    for t in range(T):
        with ir.InsertionPoint(op):
            xs = [b.op("Gather", [x, b.int_scalar(T - 1 - t if d else t)], a.type, axis=ax)
                  for x, a, ax, d in zip(scans, sargs, ia, idr)]
            copy = op.clone(ip=ir.InsertionPoint(op))
        ys = _inline(copy, 0, dict(zip(copy.regions[0].blocks[0].arguments, state + xs)))
        copy.erase()
        state = ys[:n]
        with ir.InsertionPoint(op):
            for mm in range(nout):
                pieces[mm].append(b.unsqueeze(ys[n + mm], [oa[mm]]))
    with ir.InsertionPoint(op):
        stacked = []
        for mm in range(nout):
            ps = pieces[mm][::-1] if odr[mm] else pieces[mm]
            if not ps:
                raise _Skip()
            stacked.append(b.concat(ps, oa[mm]) if len(ps) > 1 else ps[0])
    _replace(None, op, state + stacked)


def _unroll_loop(op: ir.Operation, opset: int) -> None:
    b = Builder(opset, op.location)
    trip = op.operands[0]
    count = None if isinstance(trip.type, ir.NoneType) else constant_ints(trip)
    if not count:
        raise _Skip()
    T = count[0]
    inits, cargs, cys, _, _, outs = _loop_layout(op, "Loop")
    body = op.regions[0].blocks[0]
    cond_in = op.operands[1]
    if not isinstance(cond_in.type, ir.NoneType) and _const_bool(cond_in) is not True:
        raise _Skip()
    yc = _terminator(body).operands[0]
    while isinstance(yc.owner, (ir.Operation, ir.OpView)) and yc.owner.operation.name == "onnx.Identity":
        yc = yc.owner.operation.operands[0]
    if not (yc == body.arguments[1] or _const_bool(yc) is True):
        raise _Skip()
    if T == 0 and outs:
        raise _Skip()
    n = len(cargs)
    state = list(inits)
    pieces = [[] for _ in outs]
    for t in range(T):
        with ir.InsertionPoint(op):
            i_v = b.int_scalar(t)
            c_v = b.constant(ir.DenseElementsAttr.get(np.asarray(True)))
        copy = op.clone(ip=ir.InsertionPoint(op))
        ys = _inline(copy, 0, dict(zip(copy.regions[0].blocks[0].arguments, [i_v, c_v] + state)))
        copy.erase()
        state = ys[1:1 + n]
        with ir.InsertionPoint(op):
            for mm in range(len(outs)):
                pieces[mm].append(b.unsqueeze(ys[1 + n + mm], [0]))
    with ir.InsertionPoint(op):
        stacked = [b.concat(ps, 0) if len(ps) > 1 else ps[0] for ps in pieces]
        # loop results may be typed more loosely than the unrolled values
        state = [s if s.type == r.type else b.op("Identity", [s], r.type)
                 for s, r in zip(state, op.results[:n])]
        stacked = [s if s.type == r.type else b.op("Identity", [s], r.type)
                   for s, r in zip(stacked, op.results[n:])]
    _replace(None, op, state + stacked)
