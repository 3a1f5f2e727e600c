"""Forward and reverse mode over one function.

Forward: seeds `fwd_<x>` become tangents, the JVP walk (linearize.py)
propagates them, tangents of the outputs are returned as `fwd_<y>`.

Reverse = linearize + transpose (JAX's recipe): the JVP walk runs from
stand-in tangents of the inputs, leaving a program linear in them; the
transposition walks those linear ops backwards from the seeds `adj_<y>`,
each transpose rule handing cotangent contributions to the op's linear
operands, summed where a value has several consumers. What reaches the
stand-ins is `adj_<x>`. The linear forward ops are then dead and erased.

The stand-in tangent of an input x is Unsqueeze(x, 0): shape [1] + shape(x),
so a transpose rule that must read a linear operand's run-time shape (only
when shapes are symbolic) finds one without computing anything new.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

from mlir import ir
from mlir.dialects import func

from onnx_ad_mlir.errors import UnsupportedOp

from . import signature as sig
from . import symdims
from .builder import Builder, dims, is_float, nested_ops, rank
from .checkpoint import segment_loops
from .legalize import (bool_where, dilated_same_pads, expand_zero_extents,
                       recurrent_hidden_sizes, scan_axes_zero)
from .loops_as_scans import loops_as_scans
from .merge_scans import merge_scans
from .prune_loops import prune_loops
from .hoist_maps import hoist_maps, sink_maps
from .sink_sums import sink_sums
from .expand import expand_function
from .simplify import drop_redundant_expands, simplify
from .linearize import Tangents, linearize, located, node_label
from .registry import TRANSPOSE
from .rules.control_flow import PLACEHOLDER, REGION_ID, inline_constant_ifs, refine_region_types, \
    retire_standin


def _entry(f: func.FuncOp) -> tuple[ir.Block, ir.Operation]:
    block = f.regions[0].blocks[0]
    return block, block.operations[len(block.operations) - 1]


def _has_regions(f: func.FuncOp) -> bool:
    """Whether an op of f's body holds regions (If, Loop, Scan, the rules'
    recurrences): nested Ifs/Scans can only be inside one. The passes that
    rewrite region ops are skipped without (each walks every op)."""
    for op in f.regions[0].blocks[0].operations:
        if len(op.regions):
            return True
    return False


def _prepare(f: func.FuncOp, opset: int, inputs: list[str] | None,
             outputs: list[str] | None, prefix: str, kind: str, checkpoint: int):
    """What both modes do first: rewrite ops the rules do not see (function
    bodies, lowerings, constant Ifs, bool Where, checkpointed loops), then
    choose the differentiated inputs/outputs and the CasADi prefix."""
    ops = nested_ops(f.operation)  # one walk for the steps below while nothing is rewritten
    if expand_function(f, opset, ops=ops):  # function-body ops and lowerings (expand.py)
        ops = nested_ops(f.operation)
    regions = any(len(op.regions) for op in ops)
    if regions:  # (each of these walks the whole function)
        inline_constant_ifs(f)
        refine_region_types(f)  # results ONNX inference left untyped (rules emit less plumbing)
        ops = None
    # ONNX Runtime has no dilated Conv with auto_pad SAME, no recurrent op
    # without hidden_size, no bool Where (legalize.py; the first two only set
    # attributes: `ops` holds no erased op after them)
    dilated_same_pads(f.operation, ops)
    recurrent_hidden_sizes(f.operation, ops)
    bool_where(f, opset, ops)
    if checkpoint > 1:
        segment_loops(f, opset, checkpoint)
    block, ret = _entry(f)
    in_names, out_names = sig.arg_names(f), sig.result_names(f)
    xs = sig.select(in_names, list(block.arguments), inputs, "input")
    ys = sig.select(out_names, list(ret.operands), outputs, "output")
    prefix = prefix or sig.diff_prefix(in_names + out_names, kind)
    return block, ret, in_names, out_names, xs, ys, prefix, regions


def forward(f: func.FuncOp, opset: int, inputs: list[str] | None = None,
            outputs: list[str] | None = None, layout: str = "casadi",
            prefix: str | None = None, directions: int | None = None) -> None:
    """`directions` = k: seeds of k directions exactly, a static extent
    (compilers that want static shapes: IREE); None: any number."""
    block, ret, in_names, out_names, xs, ys, prefix, regions = _prepare(
        f, opset, inputs, outputs, prefix or "", "fwd", checkpoint=1)
    primal_x = [block.arguments[i] for i in xs]
    dim = "n" + prefix[:-1]
    seeds = sig.append_arguments(f, [sig.boundary_type(x, layout, directions)
                                     for x in primal_x], [
        (prefix + in_names[i], sig.boundary_dim_params(
            block.arguments[i], sig.dim_params(f, "arg_attrs", i), dim,
            prefix + in_names[i])[layout]) for i in xs])
    state = Tangents(opset)
    b = Builder(opset, f.location)
    with ir.InsertionPoint.at_block_begin(block):
        carrier = _k_carrier(primal_x, layout, "input")
        k = sig.direction_count(b, seeds, primal_x, layout)
        for i, x, seed in zip(xs, primal_x, seeds):
            t = _at_boundary(f"the seed of input '{in_names[i]}'",
                             lambda: sig.unpack(b, seed, x, layout, k))
            if t is not None:  # (else empty: a zero tangent)
                state.of[x] = t
        state.k = b.shape(state.of[primal_x[carrier]], 0, 1)
    linearize(f, state, loops=regions)
    _, ret = _entry(f)
    results = []
    with ir.InsertionPoint(ret):
        for i in ys:
            y = ret.operands[i]
            t = state.get(y)
            if t is None:
                t = b.zeros_over(y, k)  # (CasADi needs every result)
            results.append(_at_boundary(f"the derivative of output '{out_names[i]}'",
                                        lambda: sig.pack(b, t, y, layout)))
    sig.append_results(f, results, [
        (prefix + out_names[i], sig.boundary_dim_params(
            ret.operands[i], sig.dim_params(f, "res_attrs", i), dim,
            prefix + out_names[i])[layout]) for i in ys])
    simplify(f, opset, seeds)
    expand_zero_extents(f, opset)  # ONNX Runtime's Expand elimination bug (legalize.py)
    if _has_regions(f):
        _loop_passes(f, opset, stacks=True)


def _k_carrier(primal: list[ir.Value], layout: str, what: str) -> int:
    """The first seed that carries the direction count k."""
    carrier = next((i for i, v in enumerate(primal) if sig.carries_k(v, layout)), None)
    if carrier is None:
        raise UnsupportedOp(f"every differentiated {what} is empty [r, 0]: its casadi-layout "
                            "seeds [r, k*0] do not carry the direction count; use the onnx layout")
    return carrier


def _at_boundary(what: str, build: Callable[[], ir.Value | None]) -> ir.Value | None:
    """A seed's or result's layout change, refused naming the argument (it
    is no node's)."""
    try:
        return build()
    except UnsupportedOp as e:
        raise UnsupportedOp(f"{what}: {e}") from None


def _loop_passes(f: func.FuncOp, opset: int, stacks: bool) -> None:
    """The Loop/Scan passes both modes end with. `stacks`: also those that
    trade memory for speed, computing per-step values for all steps at once
    (not when checkpointing saves memory)."""
    scan_axes_zero(f, opset)  # ONNX Runtime's Scan axis != 0 bug (legalize.py)
    prune_loops(f)  # loop values the reverse bodies do not read (prune_loops.py)
    merge_scans(f)  # one Scan for independent same-length ones (merge_scans.py)
    if stacks and hoist_maps(f) + sink_maps(f):  # per-step maps on whole stacks (hoist_maps.py)
        prune_loops(f)  # (the slices the maps read may now go unread)
    if stacks and sink_sums(f, opset):  # sums over the steps taken after the Scan (sink_sums.py)
        prune_loops(f)
    loops_as_scans(f, opset)  # Loops running their whole trip count (loops_as_scans.py)


def reverse(f: func.FuncOp, opset: int, inputs: list[str] | None = None,
            outputs: list[str] | None = None, layout: str = "casadi",
            prefix: str | None = None, checkpoint: int = 1,
            directions: int | None = None) -> None:
    """`checkpoint` = k > 1: Loop/Scan store every k-th state and recompute
    the steps in between (checkpoint.py) instead of storing every state.
    `directions`: as forward's."""
    block, ret, in_names, out_names, xs, ys, prefix, _ = _prepare(
        f, opset, inputs, outputs, prefix or "", "adj", checkpoint)
    primal_x = [block.arguments[i] for i in xs]
    primal_y = [ret.operands[i] for i in ys]

    b = Builder(opset, f.location)
    dim = "n" + prefix[:-1]
    seeds = sig.append_arguments(f, [sig.boundary_type(y, layout, directions)
                                     for y in primal_y], [
        (prefix + out_names[i], sig.boundary_dim_params(
            y, sig.dim_params(f, "res_attrs", i), dim, prefix + out_names[i])[layout])
        for i, y in zip(ys, primal_y)])
    x_params = [sig.boundary_dim_params(block.arguments[i], sig.dim_params(f, "arg_attrs", i),
                                        dim, prefix + in_names[i])[layout] for i in xs]
    _, ret = _entry(f)
    _k_carrier(primal_y, layout, "output")  # (refuses when no seed carries k)
    with ir.InsertionPoint(ret):
        k = sig.direction_count(b, seeds, primal_y, layout)
        unpacked = [_at_boundary(f"the seed of output '{out_names[i]}'",
                                 lambda: sig.unpack(b, seed, y, layout, k))
                    for i, y, seed in zip(ys, primal_y, seeds)]
    cts = reverse_block(block, f, primal_x, [(y, ct) for y, ct in zip(primal_y, unpacked)
                                             if ct is not None], opset, before=ret)
    # reverse_block may replace the ops producing the outputs (a Scan/Loop
    # rebuilt with more results): the old Values would dangle (a crash).
    _, ret = _entry(f)
    primal_y = [ret.operands[i] for i in ys]
    with ir.InsertionPoint(ret):
        results = []
        for i, x, ct in zip(xs, primal_x, cts):
            ct = b.zeros_over(x, k) if ct is None else b.fit(ct, x)
            results.append(_at_boundary(f"the derivative of input '{in_names[i]}'",
                                        lambda: sig.pack(b, ct, x, layout)))
    sig.append_results(f, results, [(prefix + in_names[i], p) for i, p in zip(xs, x_params)])
    drop_redundant_expands(f)
    simplify(f, opset, seeds)
    expand_zero_extents(f, opset)  # ONNX Runtime's Expand elimination bug (legalize.py)
    if _has_regions(f):
        _loop_passes(f, opset, stacks=checkpoint == 1)


def reverse_block(block: ir.Block, root: ir.Operation, xs: list[ir.Value],
                  seeds: list[tuple[ir.Value, ir.Value]], opset: int,
                  before: ir.Operation | None = None) -> list[ir.Value | None]:
    """Linearize + transpose over the ops of one block: stand-in tangents of
    `xs` (values visible in the block: its arguments or captured values) at
    its start, the JVP walk restricted to the block (region ops get linear
    stand-ins, transposed by control_flow.py), then the transposition from
    `seeds` (value of the block, cotangent). Emits before `before` (default:
    at the end of the block) and returns the cotangent of each x (None when
    nothing reaches it). Used for functions and, recursively, for the
    bodies of reverse If/Loop/Scan ops."""
    b = Builder(opset, root.location)
    stand_ins = []
    for x in xs:
        # after x when x is computed in the block (the reverse Loop's Gathered
        # states), else at its start: a transpose rule may keep the stand-in
        # alive to read a run-time shape, so it must not precede x
        owner = x.owner
        inside = isinstance(owner, (ir.Operation, ir.OpView)) and owner.operation.block == block
        with ir.InsertionPoint.after(owner) if inside else ir.InsertionPoint.at_block_begin(block):
            stand_ins.append(b.unsqueeze(x, [0]))
    with ir.InsertionPoint.at_block_begin(block):
        k = b.ints([1])
    state = Tangents(opset, mode="linear", scope=block, k=k)
    for x, t in zip(xs, stand_ins):
        state.of[x] = t
    linearize(root, state)

    linear_ops, linear = _linear_ops(block, stand_ins)
    cotangents: dict[ir.Value, list[ir.Value]] = defaultdict(list)
    ip = ir.InsertionPoint(before) if before is not None else ir.InsertionPoint(block)
    with ip:
        seeded = []
        for y, seed in seeds:
            # a seed is [k] + shape(y) (an output's, whatever names its
            # declaration gives those extents: ONNX inference's unk__2)
            if rank(y) is not None and rank(seed) == rank(y) + 1:
                symdims.register(seed, y)
                if root.operation.name == "func.func":  # (a body's seed: not outside it)
                    symdims.read_at(seed, 0)
            t = state.get(y)
            if t is not None:
                cotangents[t].append(seed)
                seeded.append(t)
        linear_k = symdims.dims(seeded[0])[0] if seeded and symdims.dims(seeded[0]) else None
        _transpose(linear_ops, linear, cotangents, opset, seeds[0][1] if seeds else None,
                   linear_k)
        out = [_total(b, cotangents.pop(t, [])) for t in stand_ins]
    for op in list(reversed(linear_ops)) + [t.owner for t in stand_ins] + [k.owner]:
        if not any(True for r in op.results for _ in r.uses):
            symdims.forget(op)  # erased: cached extents must not outlive it
            op.erase()
        elif op.name == PLACEHOLDER and REGION_ID in op.attributes:
            symdims.forget(op)
            retire_standin(op, opset)
    return out


def _linear_ops(block: ir.Block, stand_ins: list[ir.Value]
                ) -> tuple[list[ir.Operation], set[ir.Value]]:
    """Ops of the block whose float results depend on the stand-ins, in order."""
    linear = set(stand_ins)
    ops = []
    for op in block.operations:
        if any(v in linear for v in op.operands):
            float_results = [r for r in op.results if is_float(r)]
            if float_results:
                ops.append(op.operation)
                linear.update(float_results)
    return ops, linear


def _total(b: Builder, contributions: list[ir.Value]) -> ir.Value | None:
    if not contributions:
        return None
    if len(contributions) > 1:
        contributions = _without_sum_expands(contributions)
    return b.sum(contributions)


def _static_tail(v: ir.Value) -> list | None:
    d = dims(v)
    return None if d is None or not d or None in d[1:] else d


def _without_sum_expands(contributions: list[ir.Value]) -> list[ir.Value]:
    """Contributions to one cotangent all have its shape [k] + S (transpose
    rules Expand theirs to it, e.g. ReduceSum's). An unused Expand among them
    is a copy the Sum does without when another summand already has that
    shape by its type (S static, the direction axis k in all of them): the
    Sum broadcasts the Expand's operand the same way. Dropped here, where the
    k-uniformity is known, rather than by a walk over the function later."""
    shapes = [_static_tail(c) for c in contributions]
    droppable = []  # each Expand once: Add(x, x) contributes the same one twice
    for c, d in zip(contributions, shapes):
        owner = c.owner
        if d is not None and isinstance(owner, (ir.Operation, ir.OpView)) and \
                owner.operation.name.startswith("onnx.Expand") and \
                _static_tail(owner.operation.operands[0]) is not None and \
                not list(c.uses) and c not in droppable:
            droppable.append(c)
    if not droppable:
        return contributions
    keep = [c for c in contributions if c not in droppable]
    full = [c for c, d in zip(contributions, shapes) if c in keep and d is not None]
    for c in droppable:
        if not any(dims(f) == dims(c) for f in full):
            # no summand has the whole shape yet: this Expand stays and provides it
            keep.append(c)
            full.append(c)
    # (the dropped Expands are left to the cleanup: one may also be a
    # contribution to another cotangent still to be summed, fuzz seed 141)
    return [c if c in keep else c.owner.operation.operands[0] for c in contributions]


def _transpose(ops: list[ir.Operation], linear: set[ir.Value],
               cotangents: dict[ir.Value, list[ir.Value]], opset: int,
               seed: ir.Value | None, linear_k) -> None:
    for op in reversed(ops):
        b = Builder(opset, op.location, seed, linear_k)
        cts = [_total(b, cotangents.pop(r, [])) for r in op.results]
        if all(ct is None for ct in cts):
            continue
        rule = TRANSPOSE.get(op.name)
        if rule is None:
            raise UnsupportedOp(f"{node_label(op)}: no transpose rule for this linear op "
                                "(a JVP rule emitted it; this is a bug in the rule table)")
        is_linear = [v in linear for v in op.operands]
        try:
            contributions = rule(b, op, cts, is_linear)
        except Exception as e:  # noqa: BLE001 - reported with the node, not a traceback
            raise located(e, op) from e
        for v, ct, lin in zip(op.operands, contributions, is_linear):
            if ct is not None and lin:
                cotangents[v].append(ct)
