"""Per-step maps of a Scan's scan inputs, computed once on the whole stacks
(both AD modes run it last, after Scan merging).

A Scan body op whose operands are slices of the scan inputs (or values made
from them this way) and values from outside, and that acts on each slice on
its own (an elementwise op, or a MatMul of a slice by an outside matrix),
gives the stack of its per-step results when run once on the stacked
operands: the reverse sweeps' tanh' = 1 - t^2 of the stacked tanh values,
the input projection x_t U of an RNN. ONNX Runtime pays a kernel launch per
op and step (about 1 us at small sizes), so the op moves in front of the
Scan and its result becomes a new scan input. Exact: each element is
computed by the same op from the same values.

Conditions: the slices read have one rank r and come from scan inputs of
one direction, all along axis 0 (scan_axes_zero ran before); an outside
operand has rank <= r (prepending the step axis keeps right-aligned
broadcasting), a MatMul's outside matrix rank 2. Ops with attributes that
name axes are not maps (Softmax, CumSum, ...).
"""
from __future__ import annotations

from mlir import ir

from . import symdims
from .builder import attribute, dims, element_type, ints_attr, rank, tensor_type
from .rules.control_flow import _attrs, _create, _kind, _move_body, _yield

MAPS = {
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cast", "Ceil", "Celu", "Clip",
    "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "IsInf",
    "IsNaN", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu",
    "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
    "ThresholdedRelu", "Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Sum", "Mean",
    "Mod",
}


def hoist_maps(f: ir.Operation) -> int:
    """Hoists the per-step maps of every Scan in f; returns how many ops moved."""
    scans = []

    def collect(block: ir.Block) -> None:
        for o in block.operations:
            o = o.operation
            for region in o.regions:
                for blk in region.blocks:
                    collect(blk)
            if o.name == "onnx.Scan":
                scans.append(o)
    collect(f.regions[0].blocks[0])
    return sum(_hoist(scan) for scan in scans)  # (inner Scans first: their hoists may move on)


def _hoist(scan: ir.Operation) -> int:
    body = scan.regions[0].blocks[0]
    m = attribute(scan, "num_scan_inputs")
    n = len(scan.operands) - m
    axes = attribute(scan, "scan_input_axes") or [0] * m
    dirs = attribute(scan, "scan_input_directions") or [0] * m
    args = list(body.arguments)
    # value in the body -> (its stack outside, direction)
    stacked = {args[n + j]: (scan.operands[n + j], dirs[j]) for j in range(m) if axes[j] == 0}
    inside = set(args)
    moved = []
    for o in list(body.operations)[:-1]:
        o = o.operation
        if _is_map(o, stacked, inside):
            moved.append(o)
            d = next(stacked[v][1] for v in o.operands if v in stacked)
            stacked[o.results[0]] = (None, d)  # (its stack is built below)
        inside.update(o.results)
    if not moved:
        return 0
    with ir.InsertionPoint(scan):
        for o in moved:
            copy = o.clone()
            for k, v in enumerate(o.operands):
                if v in stacked:
                    copy.operands[k] = stacked[v][0]
            res = o.results[0]
            steps = dims(copy.operands[next(k for k, v in enumerate(o.operands) if v in stacked)])
            shape = None if dims(res) is None or steps is None else [steps[0]] + dims(res)
            copy.results[0].set_type(tensor_type(shape, element_type(res)))
            stacked[res] = (copy.results[0], stacked[res][1])
    read = [o for o in moved if any(u.owner.operation not in moved for u in o.results[0].uses)]
    new_inputs = [stacked[o.results[0]] for o in read]
    attrs = _attrs(scan)
    attrs["num_scan_inputs"] = ir.IntegerAttr.get(ir.IntegerType.get_signed(64), m + len(read))
    attrs["scan_input_axes"] = ints_attr(list(axes) + [0] * len(read))
    attrs["scan_input_directions"] = ints_attr(list(dirs) + [d for _, d in new_inputs])
    with ir.InsertionPoint(scan):
        new = _create(scan.name, list(scan.operands) + [s for s, _ in new_inputs],
                      [r.type for r in scan.results], attrs, scan.location, 1)
    blk = new.regions[0].blocks.append(*([a.type for a in args] +
                                         [o.results[0].type for o in read]))
    slices = list(blk.arguments)[len(args):]
    for o, a in zip(read, slices):
        o.results[0].replace_all_uses_with(a)
    for o in reversed(moved):
        symdims.forget(o)
        o.erase()
    ys = _move_body(body, blk, dict(zip(args, list(blk.arguments)[:len(args)])))
    _yield(blk, ys, scan.location)
    for r, v in zip(scan.results, new.results):
        r.replace_all_uses_with(v)
    symdims.forget(scan)
    scan.erase()
    return len(moved)


def _is_map(o: ir.Operation, stacked: dict, inside: set) -> bool:
    """o maps each step's slices on their own (see the module docstring)."""
    kind = _kind(o)
    if (kind not in MAPS and kind != "MatMul") or len(o.regions) or len(o.results) != 1:
        return False
    ins = [v for v in o.operands if not isinstance(v.type, ir.NoneType)]
    sliced = [v for v in ins if v in stacked]
    if not sliced or any(v in inside and v not in stacked for v in ins):
        return False  # (an operand computed per step otherwise)
    ranks = {rank(v) for v in sliced}
    r = rank(o.results[0])
    if len(ranks) != 1 or None in ranks or r is None or ranks != {r} and kind != "MatMul":
        return False
    if len({stacked[v][1] for v in sliced}) != 1:
        return False  # (slices read in different orders)
    if kind == "MatMul":
        return len(ins) == 2 and ins[0] in stacked and ins[1] not in stacked and \
            rank(ins[1]) == 2 and rank(ins[0]) is not None and rank(ins[0]) >= 1
    return all(v in stacked or (rank(v) is not None and rank(v) <= r) for v in ins)
