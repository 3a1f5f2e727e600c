"""Dead values of Loop and Scan ops (both AD modes run it before merging Scans).

The reverse rules give a primal Loop/Scan extra scan outputs (its states at
every iteration) and the reverse Loop/Scan extra scan inputs (the primal's
scan outputs, which its body reads instead of recomputing them,
control_flow.py). Whatever the reversed body ends up not reading costs a
copy per iteration (ONNX Runtime runs an Identity for every yielded block
argument) and memory for the whole sequence. Upstream canonicalization
erases dead ops inside the bodies but not dead operands, arguments or
results of these ops (ONNX's Scan attributes index them), so this pass drops:
  - scan outputs nothing reads (the yield and its per-iteration copy);
  - Scan scan inputs whose body argument nothing reads (one is kept: it
    sets the trip count);
  - carried values (Loop) and states (Scan) whose final result nothing
    reads and whose body argument nothing reads but its own next value (the
    value only fed itself, or was passed on unchanged).
One walk per block from its end, consumers before producers, so a reverse
loop that stops reading a history frees the primal loop that stores it;
dead ops are erased on the way (the ones the cleanup would erase later
would otherwise keep those values alive).
"""
from __future__ import annotations

from mlir import ir

from . import symdims
from .builder import attribute, ints_attr
from .rules.control_flow import _attrs, _create, _move_body, _terminator, _used, _yield


def prune_loops(f: ir.Operation) -> int:
    """Drops dead values of every Loop/Scan in f (nested ones included) and
    the dead ops in their way; returns how many loop values were dropped."""
    return _prune_block(f.regions[0].blocks[0])


def _read(arg: ir.Value, own_yield: ir.Value) -> bool:
    """A carried argument is read unless its only use is passing itself on
    as its own next value (a yield elsewhere is a read)."""
    uses = list(arg.uses)
    return not (own_yield == arg and len(uses) == 1)


def _prune_block(block: ir.Block) -> int:
    dropped = 0
    ops = [o.operation for o in block.operations]
    for op in reversed(ops[:-1]):  # (the terminator stays)
        if not op.name.startswith("onnx.") or op.name == "onnx.Yield":
            continue
        if not any(_used(r) for r in op.results):
            symdims.forget(op)
            op.erase()
            continue
        if op.name in ("onnx.Loop", "onnx.Scan"):
            dropped += _prune_loop(op)
        else:
            for region in op.regions:
                for blk in region.blocks:
                    dropped += _prune_block(blk)
    return dropped


def _prune_loop(op: ir.Operation) -> int:
    """Prunes op's body, then op; again while that frees more (a dropped
    yield can leave an argument unread)."""
    total = 0
    while True:
        total += _prune_block(op.regions[0].blocks[0])
        new, n = (_prune_scan if op.name == "onnx.Scan" else _prune_loop_op)(op)
        if not n:
            return total
        total += n
        op = new


def _prune_scan(op: ir.Operation) -> tuple[ir.Operation, int]:
    body = op.regions[0].blocks[0]
    args, ys = list(body.arguments), list(_terminator(body).operands)
    m = attribute(op, "num_scan_inputs")
    n = len(op.operands) - m
    nout = len(op.results) - n
    keep_state = [_read(args[j], ys[j]) or _used(op.results[j]) for j in range(n)]
    keep_in = [_used(args[n + i]) for i in range(m)]
    if not any(keep_in):
        keep_in[0] = True  # the trip count
    keep_out = [_used(op.results[n + j]) for j in range(nout)]
    if all(keep_state) and all(keep_in) and all(keep_out):
        return op, 0
    attrs = _attrs(op)
    _filter_attr(attrs, "scan_input_axes", keep_in)
    _filter_attr(attrs, "scan_input_directions", keep_in)
    _filter_attr(attrs, "scan_output_axes", keep_out)
    _filter_attr(attrs, "scan_output_directions", keep_out)
    attrs["num_scan_inputs"] = ir.IntegerAttr.get(ir.IntegerType.get_signed(64), sum(keep_in))
    keep_arg = keep_state + keep_in
    keep_res = keep_state + keep_out
    return _rebuild(op, keep_arg, keep_arg, keep_res, keep_res, attrs), \
        len(keep_arg) + len(keep_out) - sum(keep_arg) - sum(keep_out)


def _prune_loop_op(op: ir.Operation) -> tuple[ir.Operation, int]:
    body = op.regions[0].blocks[0]
    args = list(body.arguments)
    n = len(op.operands) - 2
    nout = len(op.results) - n
    ys = list(_terminator(body).operands)
    keep_v = [_read(args[2 + j], ys[1 + j]) or _used(op.results[j]) for j in range(n)]
    keep_out = [_used(op.results[n + j]) for j in range(nout)]
    if all(keep_v) and all(keep_out):
        return op, 0
    keep_res = keep_v + keep_out
    return _rebuild(op, [True, True] + keep_v, [True, True] + keep_v, [True] + keep_res, keep_res,
                    _attrs(op)), n + nout - sum(keep_v) - sum(keep_out)


def _filter_attr(attrs: dict, name: str, keep: list[bool]) -> None:
    if name in attrs:
        values = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attrs[name])]
        attrs[name] = ints_attr([v for v, k in zip(values, keep) if k])


def _rebuild(op: ir.Operation, keep_operand: list[bool], keep_arg: list[bool],
             keep_yield: list[bool], keep_result: list[bool], attrs: dict) -> ir.Operation:
    """op with the kept operands, body arguments, yields and results (the
    dropped arguments are unread, the dropped results unused)."""
    body = op.regions[0].blocks[0]
    operands = [v for v, k in zip(op.operands, keep_operand) if k]
    types = [r.type for r, k in zip(op.results, keep_result) if k]
    with ir.InsertionPoint(op):
        new = _create(op.name, operands, types, attrs, op.location, 1)
    args = [a for a, k in zip(body.arguments, keep_arg) if k]
    blk = new.regions[0].blocks.append(*[a.type for a in args])
    ys = _move_body(body, blk, dict(zip(args, blk.arguments)))
    _yield(blk, [y for y, k in zip(ys, keep_yield) if k], op.location)
    kept = iter(new.results)
    for r, k in zip(op.results, keep_result):
        if k:
            r.replace_all_uses_with(next(kept))
    symdims.forget(op)
    op.erase()
    return new
