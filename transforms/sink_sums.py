"""Sums over the steps of a Scan, taken after it (both AD modes, last).

A reverse sweep accumulates the cotangent of each value its body captures
(a weight, a bias) as carried state, acc' = acc + Y_t, where Y_t sums terms
like x_t^T d_t (a stacked primal value times a step's cotangent) and the
ReduceSum of d_t over the batch. ONNX Runtime runs those ops, small ones,
at every step. The sum over the steps moves behind the Scan instead:

- the accumulator leaves the carried state; each term of Y_t becomes a
  stacked output of the Scan and acc_T = acc_0 + ReduceSum over the steps;
- a term L(d_t) made by ops L linear in d_t whose other operands come from
  outside the body (ReduceSum, Squeeze, Transpose, Mul by a weight, MatMul
  by a matrix from outside, ...) stacks d_t alone, and L runs once, on the
  sum: sum_t L(d_t) = L(sum_t d_t);
- a term P_t Q_t (MatMul, or Mul of two step values) stacks P and Q (a scan
  input's slice reads its own stack); a MatMul's sum is one MatMul with the
  steps joined to the contracted axis ([m, T k] times [T k, n]), a Mul's the
  ReduceSum of the stacks' product. A cotangent d_t several terms read is
  stacked once, and not at all when the Scan outputs it already (d_t for
  the cotangent of x_t): the sums read that output.

Exact up to the order of the additions. The stacks cost memory (a value per
step), so only small step values are stacked (_SMALL), and reverse mode
with checkpointing (k > 1, asked for to save memory) does not run it.
Reverse bodies built by control_flow.py hold these accumulators; a Scan of
the model that only accumulates (a running sum) is one too, and its output
in the derivative model then differs from the model's in the last bits at
most. scan_axes_zero and hoist_maps ran before (slices on axis 0 where
possible).
"""
from __future__ import annotations

import math

from mlir import ir

from . import symdims
from .builder import Builder, attribute, dims, element_type, ints_attr, nested_ops, rank, \
    tensor_type
from .rules.control_flow import _attrs, _clone_out, _create, _erase_dead, _kind, _move_body, \
    _op_in, _through_identity, _varies, _yield

# A step's op on up to about this many elements costs about its kernel launch
# in ONNX Runtime (~1 us); above, the accumulation in the body runs at memory
# speed and the stacks (one value per step) would cost memory for little
# time. Measured: a neural ODE's parameter cotangents (512 elements a step,
# bench/param_sensitivity.py) 4.74 -> 3.07 x primal; a diagonal RNN of 16384
# units (bench/checkpointing.py, products stacked per step, a first version)
# 1.51 -> 1.82 s and 506 -> 1753 MiB.
_SMALL = 4096

# ops linear in their first operand when the others are fixed
_LINEAR_FIRST = {"ReduceSum", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "Neg", "Identity",
                 "Flatten"}
# ops linear in either operand when the other is fixed
_LINEAR_EITHER = {"Mul", "MatMul"}


def sink_sums(f: ir.Operation, opset: int) -> int:
    """Takes the accumulations of every Scan in f out of its body; returns
    how many accumulators moved."""
    return sum(_sink(scan, opset) for scan in nested_ops(f) if scan.name == "onnx.Scan")


class _Term:
    """One term of an accumulation: the per-step value(s) to stack, and the
    ops (innermost first) that map their step sum to the term's sum."""

    def __init__(self, core: ir.Value, chain: list[ir.Operation]):
        self.core, self.chain = core, chain
        self.bilinear: ir.Operation | None = None  # a MatMul P_t Q_t at the core
        self.factors: tuple[ir.Value, ...] = ()  # its P and Q, as the old body had them
        self.direction = 0  # of the stacks read


def _sink(scan: ir.Operation, opset: int) -> int:
    body = scan.regions[0].blocks[0]
    m = attribute(scan, "num_scan_inputs")
    n = len(scan.operands) - m
    term_op = list(body.operations)[-1].operation
    yields = list(term_op.operands)
    args = list(body.arguments)
    found = {}  # carried slot -> (its Add, its terms)
    for i in range(n):
        add = _accumulation(args[i], yields[i], i, term_op)
        if add is not None:
            y = add.operands[1] if add.operands[0] == args[i] else add.operands[0]
            terms = [_term(t, body) for t in _terms(y, body)]
            if None not in terms:
                found[i] = (add, terms)
    if not found:
        return 0
    axes = attribute(scan, "scan_input_axes") or [0] * m
    dirs = attribute(scan, "scan_input_directions") or [0] * m
    slices = {args[n + j]: j for j in range(m) if axes[j] == 0}
    steps = _steps(scan, n, m, axes)
    old_outs = len(scan.results) - n
    out_axes = attribute(scan, "scan_output_axes") or [0] * old_outs
    out_dirs = attribute(scan, "scan_output_directions") or [0] * old_outs
    # a value the Scan stacks already (d_t for the input's cotangent, whose
    # weight cotangent is x_t^T d_t): that output, not a second stack of it
    outputs = {}
    for k in range(old_outs):
        if rank(scan.results[n + k]) is not None:
            outputs.setdefault((_through_identity(yields[n + k]), out_dirs[k]), k)
    # (body value, direction) -> its stack: a scan input's, an output's, or a new output
    stacked: dict[tuple[ir.Value, int], ir.Value | None] = {}
    outs: list[tuple[ir.Value, int]] = []

    def stack(v: ir.Value, direction: int) -> None:
        if v in slices and dirs[slices[v]] == direction:
            stacked[(v, direction)] = scan.operands[n + slices[v]]
        elif (v, direction) not in stacked:
            stacked[(v, direction)] = None
            if (v, direction) not in outputs:
                outs.append((v, direction))

    terms = [t for _, ts in found.values() for t in ts]
    for t in terms:  # P_t and Q_t stacked in one order: a slice's, if one is
        if t.bilinear is not None:
            t.direction = next((dirs[slices[v]] for v in t.factors if v in slices), 0)
            for v in t.factors:
                stack(v, t.direction)
    for t in terms:  # a sum reads its stack in either order
        if t.bilinear is None:
            t.direction = 1 if (t.core, 1) in stacked or \
                t.core in slices and dirs[slices[t.core]] == 1 else 0
            stack(t.core, t.direction)
    keep = [i for i in range(n) if i not in found]
    attrs = _attrs(scan)
    attrs["scan_output_axes"] = ints_attr(list(out_axes) + [0] * len(outs))
    attrs["scan_output_directions"] = ints_attr(list(out_dirs) + [d for _, d in outs])
    types = [scan.results[i].type for i in keep] + [r.type for r in scan.results[n:]] + \
        [tensor_type(None if dims(v) is None else [steps] + dims(v), element_type(v))
         for v, _ in outs]
    with ir.InsertionPoint(scan):
        new = _create(scan.name, [scan.operands[i] for i in keep] + list(scan.operands[n:]),
                      types, attrs, scan.location, 1)
    blk = new.regions[0].blocks.append(*[args[i].type for i in keep + list(range(n, n + m))])
    mapping = dict(zip([args[i] for i in keep] + args[n:], blk.arguments))
    ys = _move_body(body, blk, mapping)
    for add, _ in found.values():  # (their one use, the old terminator, is gone)
        symdims.forget(add)
        add.erase()
    _yield(blk, [ys[i] for i in keep] + ys[n:] + [mapping.get(v, v) for v, _ in outs],
           scan.location)
    for k, key in enumerate(outs):
        stacked[key] = new.results[len(keep) + old_outs + k]
    b = Builder(opset, scan.location)
    with ir.InsertionPoint(scan):
        for key, value in stacked.items():
            if value is None:  # (an old output's stack: its step axis first)
                r = new.results[len(keep) + outputs[key]]
                a = out_axes[outputs[key]] % rank(r)
                stacked[key] = r if a == 0 else \
                    b.transpose(r, [a] + [d for d in range(rank(r)) if d != a])
        for i, (_, terms) in found.items():
            total = scan.operands[i]
            for t in terms:
                total = b.add(total, _summed(b, t, stacked, mapping))
            _keep_state_type(total, scan.results[i])
            scan.results[i].replace_all_uses_with(total)
    for k, i in enumerate(keep):
        scan.results[i].replace_all_uses_with(new.results[k])
    for k in range(old_outs):
        scan.results[n + k].replace_all_uses_with(new.results[len(keep) + k])
    symdims.forget(scan)
    scan.erase()
    _erase_dead(blk)
    return len(found)


def _keep_state_type(total: ir.Value, state: ir.Value) -> None:
    """Gives the sum that replaces a final state (a new Add) the state's type:
    the state keeps one shape through the steps, which the body's types may
    know better than broadcasting the start with the step sums tells (fuzz
    seed 175 case 1883: a start of ?x?x? and a body state of 2x3x1 summed to
    2x3x?, which a function's 2x3x1 result then did not accept)."""
    td, sd = dims(total), dims(state)
    if td is None or sd is None or td == sd or len(td) != len(sd) or \
            any(a is not None and c is not None and a != c for a, c in zip(td, sd)):
        return
    total.set_type(state.type)


def _accumulation(arg: ir.Value, yielded: ir.Value, slot: int,
                  term_op: ir.Operation) -> ir.Operation | None:
    """The Add of acc' = acc + Y for a carried argument used by nothing else
    and whose next value only feeds its own slot; Y of the carried type."""
    uses = list(arg.uses)
    if len(uses) != 1:
        return None
    add = uses[0].owner.operation
    if _kind(add) != "Add" or add.results[0] != yielded or add.operands[0] == add.operands[1]:
        return None
    uses = list(yielded.uses)
    if len(uses) != 1 or uses[0].owner.operation != term_op or uses[0].operand_number != slot:
        return None
    y = add.operands[1] if add.operands[0] == arg else add.operands[0]
    return add if y.type == arg.type == yielded.type else None


def _terms(y: ir.Value, body: ir.Block) -> list[ir.Value]:
    """y as a sum: the operands of single-use Sum/Add ops of y's type."""
    o = _op_in(y, body)
    if o is None or _kind(o) not in ("Sum", "Add") or _uses(y) != 1 or \
            any(v.type != y.type for v in o.operands):
        return [y]
    return [t for v in o.operands for t in _terms(v, body)]


def _term(t: ir.Value, body: ir.Block) -> _Term | None:
    """Peels the ops linear in the step's value off a term (see the module
    docstring); a MatMul of two step values at the core is bilinear. None
    if what is left to stack has no known rank."""
    chain = []
    while _uses(t) == 1:
        o = _op_in(t, body)
        if o is None or len(o.results) != 1 or len(o.regions):
            break
        kind = _kind(o)
        varying = [k for k, v in enumerate(o.operands) if _varies(v, body)]
        if kind in _LINEAR_FIRST and varying == [0] or kind in _LINEAR_EITHER and len(varying) == 1:
            chain.append(o)
            t = o.operands[varying[0]]
        else:
            break
    term = _Term(t, chain)
    o = _op_in(t, body)
    if o is not None and _uses(t) == 1 and _kind(o) in ("MatMul", "Mul") and \
            all(rank(v) is not None and _varies(v, body) for v in o.operands) and (
                _kind(o) == "Mul" or all(rank(v) >= 2 for v in o.operands)
                and isinstance(dims(o.operands[1])[-1], int)):
        term.bilinear, term.factors = o, tuple(o.operands)
    if rank(t) is None or not _varies(t, body) or \
            any(_size(v) > _SMALL for v in term.factors or (t,)):
        return None  # (a value from outside is no stack to yield)
    return term


def _size(v: ir.Value) -> int:
    """v's element count, run-time extents counted as 1."""
    return math.prod(e if isinstance(e, int) else 1 for e in dims(v))


def _summed(b: Builder, t: _Term, stacked: dict, moved: dict) -> ir.Value:
    """The sum over the steps of a term, from the stacks (at b's insertion
    point); `moved` maps the old body's arguments to the new body's."""
    prod = t.bilinear.results[0] if t.bilinear is not None else None
    if prod is not None and _kind(t.bilinear) == "MatMul":
        p, q = (stacked[(v, t.direction)] for v in t.factors)
        if _contractible(p, q):
            s = _contract(b, p, q, prod)
        else:  # the products of all steps, summed
            p, q = _step_axes_lined_up(b, p, q)
            s = b.reduce("ReduceSum", b.op("MatMul", [p, q], tensor_type(
                None, element_type(prod))), [0], False, dims(prod))
    elif prod is not None:
        p, q = _step_axes_lined_up(b, *(stacked[(v, t.direction)] for v in t.factors))
        s = b.reduce("ReduceSum", b.mul(p, q), [0], False, dims(prod))
    else:
        s = b.reduce("ReduceSum", stacked[(t.core, t.direction)], [0], False, dims(t.core))
    value = t.bilinear.results[0] if t.bilinear is not None else moved.get(t.core, t.core)
    for o in reversed(t.chain):
        copy = _clone_out(o, o.block, {k: s for k, v in enumerate(o.operands) if v == value})
        s, value = copy.results[0], o.results[0]
    return s


def _step_axes_lined_up(b: Builder, p: ir.Value, q: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Stacks [T, ...] of two factors of different ranks, the lower one's
    extents after the step axis padded with 1s, so that broadcasting lines
    the step axes up."""
    rp, rq = rank(p), rank(q)
    if rp < rq:
        p = b.unsqueeze(p, list(range(1, 1 + rq - rp)))
    elif rq < rp:
        q = b.unsqueeze(q, list(range(1, 1 + rp - rq)))
    return p, q


def _contractible(p: ir.Value, q: ir.Value) -> bool:
    """Whether _contract's Reshapes have a value for their -1: none of the
    extents they keep is a static 0 (a -1 beside a 0 has none; ONNX's
    checker rejects it). Run-time extents count as non-zero, as elsewhere
    (named input extents)."""
    dp, dq = dims(p), dims(q)
    return dp is not None and dq is not None and 0 not in dp[1:-1] + dq[1:-2] + dq[-1:]


def _contract(b: Builder, p: ir.Value, q: ir.Value, prod: ir.Value) -> ir.Value:
    """sum_t P_t Q_t from the stacks [T, ..., m, k] and [T, ..., k, n] as one
    MatMul, the steps joining the contracted axis: [..., m, T k] times
    [..., T k, n] (no [T, ..., m, n] of products in memory)."""
    rp, rq = rank(p) - 1, rank(q) - 1
    n = dims(q)[-1]
    p = b.transpose(p, list(range(1, rp)) + [0, rp])
    p = b.reshape(p, [0] * (rp - 1) + [-1], None if dims(p) is None else dims(p)[:-2] + [None])
    if rq > 2:
        q = b.transpose(q, list(range(1, rq - 1)) + [0, rq - 1, rq])
    q = b.reshape(q, [0] * (rq - 2) + [-1, n], None if dims(q) is None else
                  dims(q)[:-3] + [None, n])
    return b.op("MatMul", [p, q], prod.type)


def _steps(scan: ir.Operation, n: int, m: int, axes: list[int]) -> int | None:
    for j in range(m):
        d = dims(scan.operands[n + j])
        if d is not None and d[axes[j] % len(d)] is not None:
            return d[axes[j] % len(d)]
    return None


def _uses(v: ir.Value) -> int:
    return sum(1 for _ in v.uses)
