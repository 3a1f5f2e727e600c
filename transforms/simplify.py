"""Derivative-graph folds that need symbolic extents (run by the AD modes
once the derivative is built, before their Loop/Scan passes and the
cleanup's canonicalize/cse).

* An Expand whose every user is a broadcasting elementwise op (Add, Mul,
  Sum, Where, ...) that yields the same extents without it is dropped: the
  op broadcasts anyway. Transpose rules emit such Expands to keep each
  cotangent exactly its value's shape (ReduceSum's transpose, for one), and
  the next Mul by a full-shaped coefficient makes them redundant copies.

`simplify` (the `onnx-ad-simplify` pass; both modes run it) folds the
derivative program, region bodies included: only ops whose results depend
on the seeds (`varying`, result by result for If/Loop/Scan) are rewritten,
so the primal computation keeps its exact ops and results (ONNX Runtime's
fusions still recognise it). Each fold is exact algebra
(floating-point results may differ in rounding only):

* ReduceSum(t) * (1/N) -> ReduceMean(t), N the static element count over
  the reduced axes (LayerNormalization's and MVN's mean tangents).
* (t * p) * q -> t * (p * q), (t / p) * q -> t * (q / p), (t * p) / q ->
  t * (p / q), t varying, p, q not: the coefficient is built once in primal
  space (no direction axis), the varying chain gets one op shorter.
* t * p + t * q -> t * (p + q) (and -): one varying op instead of three.
* (x - Mean) * InvStdDev with both from LayerNormalization(x, s, ...) (the
  normalized input its rule reads) -> LayerNormalization(x, ones): one op.
* Shape(t, 0, 1) of derivatives whose leading extent is the same symbol
  (the direction count k, read by every rule that merges k into a batch:
  Conv) -> the first such Shape in the block; the Reshape targets built
  from it then become identical and CSE merges them (resnet forward: one
  Shape and three Concats instead of eight and ten).
* A sum (Add/Sum tree) of zero Pads whose pads agree on every axis but
  one, along which their pieces meet end to end (a value read piece by
  piece: x[:, t] at each step of an unrolled recurrence) -> one Concat of
  the pieces, padded once; also under a common Reshape (strided pieces
  x[j::step], placed on a grid by shape.py's on_grid).
Together, the GELU/erf chain of tangent ops collapses to one Mul by a
coefficient. Intermediate results must have no other user.
"""
from __future__ import annotations

from mlir import ir

from onnx_ad_mlir import _op_table
from onnx_ad_mlir.tensors import dense_floats

from . import symdims
from .builder import (Builder, attribute, constant_ints, constant_uniform, constant_value,
                      defining_op, dims, element_type, operand_or_none, tensor_type)
from .rules import control_flow
from .rules.reduction import reduce_axes

_BROADCAST = {"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Where", "Pow", "Mean"}


_OP_TYPES: dict = {}


def _op_type(op: ir.Operation) -> str | None:
    name = op.name
    ot = _OP_TYPES.get(name, False)
    if ot is False:
        ot = _OP_TYPES[name] = _op_table.OPS.get(name.removeprefix("onnx."), {}).get(
            "op_type") if name.startswith("onnx.") else None
    return ot


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


def _local_dims(v: ir.Value) -> list | None:
    """v's extents from its type alone: static ones, and a symbol naming
    (v, axis) for each `?` (equal only to itself: conservative)."""
    t = v.type
    if not isinstance(t, ir.RankedTensorType):
        return None
    return [("local", v, i) if d == symdims.DYN else d for i, d in enumerate(t.shape)]


def _locally_same_without(user: ir.Operation, e: ir.Value, a: ir.Value) -> bool:
    """_same_without decided from types and the Expand's target alone (no
    walk through the function): true only when provably the same."""
    if _op_type(user) == "Pow" and user.operands[0] == e:
        return False
    da, target = _local_dims(a), symdims.shape_value(e.owner.operands[1], _local_dims)
    if da is None or target is None:
        return False
    de = symdims.broadcast(da, target)
    with_e, without = [], []
    for o in user.operands:
        if o == e:
            with_e.append(de)
            without.append(da)
        else:
            d = _local_dims(o)
            with_e.append(d)
            without.append(d)
    got, want = symdims.broadcast(*without), symdims.broadcast(*with_e)
    return got is not None and want is not None and None not in got and got == want


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
                    not (_locally_same_without(u, e, a) or _same_without(u, e, a)):
                ok = False
                break
        if ok:
            e.replace_all_uses_with(a)
            symdims.forget(op)
            op.erase()
            dropped += 1
    return dropped


# ---- onnx-ad-simplify ---------------------------------------------------------

def _single_use(v: ir.Value) -> bool:
    uses = iter(v.uses)
    return next(uses, None) is not None and next(uses, None) is None


def _scalar(v: ir.Value) -> float | None:
    """The value of a one-element float constant."""
    attr = constant_value(v)
    if not isinstance(attr, ir.DenseFPElementsAttr):
        return None
    a = dense_floats(attr)
    return float(a.reshape(-1)[0]) if a.size == 1 else None


def _erase(op: ir.Operation, varying: set) -> None:
    # a new op may get the erased one's address: its results must not stay "varying"
    for r in op.results:
        varying.discard(r)
    symdims.forget(op)
    op.erase()


def _replace(op: ir.Operation, new: ir.Value, varying: set) -> None:
    op.results[0].replace_all_uses_with(new)
    _erase(op, varying)
    varying.add(new)


def _erase_if_dead(v: ir.Value, varying: set) -> None:
    op = defining_op(v)
    if op is not None and not any(True for r in op.results for _ in r.uses):
        _erase(op, varying)


# 1/N as the rules write it in a narrow type is off by up to half its unit in
# the last place (float16: N * fl(1/N) = 0.99976 for N = 3); a ReduceMean then
# divides exactly, where multiplying by it lost 2.4e-4 (fuzzer's float16 check)
_ROUNDOFF = {"f16": 2.0 ** -11, "bf16": 2.0 ** -9}


def _reduce_mean(b, op: ir.Operation, varying: set, operands: list) -> bool:
    """Mul(ReduceSum(t), 1/N) -> ReduceMean(t)."""
    for i in (0, 1):
        r, c = operands[i], operands[1 - i]
        if r not in varying or c in varying:
            continue
        rop = defining_op(r)
        if rop is None or _op_type(rop) != "ReduceSum" or \
                not _single_use(r) or r.type != op.results[0].type:
            continue
        value = _scalar(c)
        x = rop.operands[0]
        try:
            axes = reduce_axes(rop)
        except Exception:  # noqa: BLE001 - axes computed at run time: not folded
            axes = None
        d = dims(x)
        if value is None or axes is None or d is None or not axes:
            continue
        n = 1
        for a in axes:
            if d[a % len(d)] is None:
                n = None
                break
            n *= d[a % len(d)]
        if n is None or abs(value * n - 1.0) > _ROUNDOFF.get(str(element_type(r)), 1e-6):
            continue
        keep = bool(b.attribute(rop, "keepdims"))
        with ir.InsertionPoint(op):
            if b.opset >= 18 and "axes" not in rop.attributes:  # same axes operand
                new = b.op("ReduceMean", list(rop.operands), r.type, keepdims=int(keep),
                           noop_with_empty_axes=b.attribute(rop, "noop_with_empty_axes"))
            else:
                new = b.reduce("ReduceMean", x, axes, keepdims=keep, out=dims(r))
        _replace(op, new, varying)
        _erase(rop, varying)
        return True
    return False


def _split(v: ir.Value, varying: set):
    """(t, p, kind) for v = t * p, p * t ("mul") or t / p ("div"), t varying,
    p not; None otherwise."""
    op = defining_op(v)
    return None if op is None else _split_op(op, varying)


def _split_op(op: ir.Operation, varying: set, ot: str | None = None, operands=None):
    ot = ot or _op_type(op)
    if ot == "Mul":
        a, c = operands or op.operands
        if a in varying and c not in varying:
            return a, c, "mul"
        if c in varying and a not in varying:
            return c, a, "mul"
    elif ot == "Div":
        a, c = operands or op.operands
        if a in varying and c not in varying:
            return a, c, "div"
    return None


def _reassociate(b, op: ir.Operation, varying: set, ot: str, operands: list) -> bool:
    """(t op1 p) op2 q -> t * coefficient, op1, op2 in {*, /}."""
    outer = _split_op(op, varying, ot, operands)
    if outer is None:
        return False
    u, q, kind2 = outer
    if not _single_use(u):
        return False
    inner = _split(u, varying)
    if inner is None:
        return False
    t, p, kind1 = inner
    with ir.InsertionPoint(op):
        if kind1 == "mul" and kind2 == "mul":
            (coef, old), form = _coefficient(b, "Mul", p, q), "Mul"
        elif kind1 == "div" and kind2 == "mul":
            (coef, old), form = _coefficient(b, "Div", q, p), "Mul"
        elif kind1 == "mul" and kind2 == "div":
            (coef, old), form = _coefficient(b, "Div", p, q), "Mul"
        else:  # (t / p) / q
            (coef, old), form = _coefficient(b, "Mul", p, q), "Div"
        if _op_type(op) == form:  # rewired in place (cheaper than a new op)
            op.operands[0] = t
            op.operands[1] = coef
        else:
            new = b.op(form, [t, coef], op.results[0].type)
    if _op_type(op) != form:
        _replace(op, new, varying)
    _erase_if_dead(u, varying)
    if old is not None:
        _erase_if_dead(old, varying)
    return True


def _rank0_scalar(v: ir.Value) -> float | None:
    t = v.type
    return _scalar(v) if isinstance(t, ir.RankedTensorType) and t.rank == 0 else None


def _coefficient(b, form: str, p: ir.Value, q: ir.Value):
    """p * q or p / q, with (y * K1) * K2 -> y * (K1 K2) and (y * K1) / K2 ->
    y * (K1 / K2) for rank-0 constants when y * K1 has no other user (a
    coefficient a rule built, e.g. 2/sqrt(pi) * exp(-z^2) / sqrt(2) in Erf's
    JVP). Returns the coefficient and the product that may now be dead."""
    k2 = _rank0_scalar(q)
    pop = defining_op(p)
    if k2 is not None and pop is not None and _op_type(pop) == "Mul" and _single_use(p) \
            and (form == "Mul" or k2 != 0.0):
        for i in (0, 1):
            k1 = _rank0_scalar(pop.operands[i])
            if k1 is not None:
                y = pop.operands[1 - i]
                k = b.scalar(k1 * k2 if form == "Mul" else k1 / k2, y)
                return b.op("Mul", [y, k], p.type), p
    return (b.mul(p, q) if form == "Mul" else b.div(p, q)), None


def _factor(b, op: ir.Operation, varying: set) -> bool:
    """t * p + t * q -> t * (p + q) (Sub likewise), both products single-use."""
    u, v = op.operands[0], op.operands[1]
    if u == v or not (_single_use(u) and _single_use(v)):
        return False
    su, sv = _split(u, varying), _split(v, varying)
    if su is None or sv is None or su[0] != sv[0] or su[2] != "mul" or sv[2] != "mul":
        return False
    t = su[0]
    with ir.InsertionPoint(op):
        coef = b.ew(_op_type(op), su[1], sv[1])
        new = b.op("Mul", [t, coef], op.results[0].type)
    _replace(op, new, varying)
    _erase_if_dead(u, varying)
    _erase_if_dead(v, varying)
    return True


def _standardized(b, op: ir.Operation) -> int:
    """(x - Mean) * InvStdDev, both reported by LayerNormalization(x, ...)
    (the rule's normalized input), -> LayerNormalization(x, ones): one kernel
    instead of two elementwise ops."""
    sub, s = defining_op(op.operands[0]), op.operands[1]
    if sub is None or sub.name != "onnx.Sub" or not _single_use(op.operands[0]):
        return 0
    x, m = sub.operands[0], sub.operands[1]
    ln = defining_op(m)
    if ln is None or ln.name != "onnx.LayerNormalization" or len(ln.results) != 3 or \
            ln.operands[0] != x or ln.results[1] != m or ln.results[2] != s or \
            op.results[0].type != x.type:
        return 0
    scale = ln.operands[1]
    st = scale.type
    if not isinstance(st, ir.RankedTensorType) or not st.has_static_shape or \
            not isinstance(st.element_type, ir.FloatType):
        return 0
    attrs = {k: ln.attributes[k] for k in ("axis", "epsilon", "stash_type") if k in ln.attributes}
    new = _unit_layer_norm(x, attrs, op)
    if new is None:
        with ir.InsertionPoint(op):
            ones = b.constant(ir.DenseElementsAttr.get_splat(st, ir.FloatAttr.get(st.element_type,
                                                                                  1.0)))
            none = ir.NoneType.get()
            new = b.create("LayerNormalization", [x, ones, None], [x.type, none, none], **attrs)[0]
    op.results[0].replace_all_uses_with(new)
    symdims.forget(op)
    op.erase()
    symdims.forget(sub)
    sub.erase()
    return 1


def _unit_layer_norm(x: ir.Value, attrs: dict, before: ir.Operation) -> ir.Value | None:
    """The result of a LayerNormalization(x, ones) with these attributes and
    no bias that already exists ahead of `before` in its block (in a Hessian,
    the reverse model's own, now reporting statistics for its rule), else
    None. A second one would repeat the kernel, and ONNX Runtime's CSE pairs
    up the outputs of same-operand twins by position even where one of them
    leaves an output out."""
    before = before.operation
    for use in x.uses:
        ln = use.owner.operation
        if ln.name != "onnx.LayerNormalization" or ln.operands[0] != x or \
                ln.block != before.block or \
                (len(ln.operands) > 2 and not isinstance(ln.operands[2].type, ir.NoneType)) or \
                ln.results[0].type != x.type or \
                any(ln.attributes[k] != v for k, v in attrs.items()) or \
                len(ln.attributes) != len(attrs) or constant_uniform(ln.operands[1]) != 1.0:
            continue
        if not ln.is_before_in_block(before):  # moved up: x is defined above `before`
            # with its other operands (the ones constant, the absent bias's
            # NoValue): operand-free ops of this block
            defs = [defining_op(v) for v in list(ln.operands)[1:]]
            if any(d is None or d.operation.block != before.block or len(d.operands)
                   for d in defs):
                continue
            for d in defs:
                if not d.operation.is_before_in_block(before):
                    d.operation.move_before(before)
            ln.move_before(before)
        return ln.results[0]
    return None


def simplify(f: ir.Operation, opset: int, seeds: list[ir.Value]) -> int:
    """Folds the ops of f's body that depend on `seeds` (see the module
    docstring), region bodies included; returns how many were rewritten."""
    b = _SimplifyBuilder(Builder(opset, f.location))
    return _simplify_block(b, f.regions[0].blocks[0], set(seeds), nested=False)


def _simplify_block(b, block: ir.Block, varying: set, nested: bool) -> int:
    ops, standardized, concats, regions = [], [], [], []
    position = {}  # id(Concat) -> its index in the block (one walk for all lists)
    for i, op in enumerate(block.operations):
        name = op.name
        if len(op.regions):
            # result by result: a Loop's primal results do not vary with
            # its tangent operands, an If's tangent results do (captured);
            # their bodies' varying values join the set on the way
            control_flow.mark_active(op.operation, varying)
            regions.append(op.operation)
            if any(r in varying for r in op.results):
                ops.append(op.operation)
        elif any(o in varying for o in op.operands):
            varying.update(op.results)
            ops.append(op.operation)
            if name == "onnx.Concat":
                position[id(ops[-1])] = i
        elif name == "onnx.Mul":
            standardized.append(op.operation)
        elif name == "onnx.Concat":
            concats.append(op.operation)
            position[id(concats[-1])] = i
    ops = _without_dead(ops, varying)
    folded = 0
    if not nested:  # (symbolic extents of a body's values may change per iteration)
        ops, folded = _share_leading_shapes(ops, varying)
    # Shape Concats: program order, so a fold erases only the op at hand or
    # an earlier one; none of them is in `ops` below. (The ones depending on
    # the seeds that the two steps above erased are not in `ops` either.)
    concats += [op for op in ops if op.name == "onnx.Concat"]
    ops = [op for op in ops if op.name != "onnx.Concat"]
    for op in sorted(concats, key=lambda c: position[id(c)]):
        folded += _flatten_concat(b.builder, op, varying) is not None
    for op in standardized:
        b.builder.location = op.location
        folded += _standardized(b, op)
    ops, merged = _merge_placements(b, ops, varying)
    folded += merged
    for op in ops:
        ot = _op_type(op)
        if ot not in ("Mul", "Div", "Add", "Sub") or len(op.results) != 1:
            continue
        rt = op.results[0].type
        if not isinstance(rt, ir.RankedTensorType) or not isinstance(rt.element_type, ir.FloatType):
            continue  # integer arithmetic (shapes) does not reassociate
        b.builder.location = op.location
        operands = list(op.operands)
        if len(operands) != 2:
            continue
        if ot == "Mul" and _reduce_mean(b, op, varying, operands):
            folded += 1
        elif ot in ("Mul", "Div") and _reassociate(b, op, varying, ot, operands):
            folded += 1
        elif ot in ("Add", "Sub") and _factor(b, op, varying):
            folded += 1
    for op in regions:
        for region in op.regions:
            folded += _simplify_block(b, region.blocks[0], varying, nested=True)
    return folded


def _without_dead(ops: list, varying: set) -> list:
    """Erases the ops (in program order) left without a user, last first so
    their operands' producers follow: mostly dropped Expands' run-time shape
    targets (Concat, Shape), whose Shape(t, 0, 1) would each cost
    _share_leading_shapes a symbolic-extent walk."""
    live = []
    for op in reversed(ops):
        if op.name.startswith("onnx.") and not len(op.regions) and len(op.results) and \
                not any(True for r in op.results for _ in r.uses):
            _erase(op, varying)
        else:
            live.append(op)
    return live[::-1]


def _share_leading_shapes(ops: list, varying: set) -> tuple[list, int]:
    """Shape(v, start=0, end=1) with the same symbolic extent as an earlier
    one in the same block -> that one (it dominates: same block, earlier).
    Returns the ops left and how many were shared."""
    first, kept = {}, []
    for op in ops:
        if op.name == "onnx.Shape" and len(op.operands) == 1 and \
                (attribute(op, "start") or 0) == 0 and attribute(op, "end") == 1:
            d = symdims.dims(op.operands[0])
            if d and isinstance(d[0], tuple):
                hit = first.get(d[0])
                if hit is None:
                    first[d[0]] = op.results[0]
                else:
                    op.results[0].replace_all_uses_with(hit)
                    _erase(op, varying)
                    continue
        kept.append(op)
    return kept, len(ops) - len(kept)


def _flatten_concat(b, op: ir.Operation, varying: set) -> ir.Operation | None:
    """Concat(a, Concat(b, c)) of 1-D shapes -> Concat(a, b, c) when the inner
    Concat has no other user (the Reshape targets built above: one op each)."""
    t = op.results[0].type
    if attribute(op, "axis") != 0 or not isinstance(t, ir.RankedTensorType) or t.rank != 1 or \
            t.element_type != ir.IntegerType.get_signless(64):
        return None
    for i, v in enumerate(op.operands):
        inner = defining_op(v)
        if inner is None or inner.name != "onnx.Concat" or attribute(inner, "axis") != 0 or \
                not _single_use(v) or inner.parent != op.parent:
            continue
        operands = list(op.operands)
        operands[i:i + 1] = list(inner.operands)
        b.location = op.location
        with ir.InsertionPoint(op):
            new = b.op("Concat", operands, op.results[0].type, axis=0)
        if op.results[0] in varying or v in varying:
            varying.add(new)
        op.results[0].replace_all_uses_with(new)
        _erase(op, varying)
        _erase(inner, varying)
        new_op = defining_op(new)
        return _flatten_concat(b, new_op, varying) or new_op
    return None


# ---- sums of placements --------------------------------------------------------
#
# Reverse mode sums the cotangents of a value's uses. Uses that read disjoint
# pieces of it (an unrolled recurrence reading x[:, t] at each step, rotary
# embeddings' two halves or interleaved pairs, a patch merge's four strided
# quarters) give cotangents that are each a piece zero-padded to the full
# extent: summing T of them writes T full-size tensors, quadratic in T.
# Pieces that meet end to end are concatenated instead and padded once.

def _placement(v: ir.Value, varying: set, parent) -> tuple[list, ir.Value] | None:
    """(pads, piece) for v = Pad(piece) by zeros (constant pads, static
    extents along the padded axes), v used once, made in the block of
    `parent`'s ops."""
    op = defining_op(v)
    if op is None or _op_type(op) != "Pad" or v not in varying or not _single_use(v) or \
            op.parent != parent or (attribute(op, "mode") or "constant") != "constant":
        return None
    if len(op.operands) == 1:  # before opset 11: attributes
        pads, value = attribute(op, "pads"), attribute(op, "value") or 0.0
    else:
        pads = constant_ints(op.operands[1])
        fill = operand_or_none(op, 2)
        value = 0.0 if fill is None else _scalar(fill)
        if operand_or_none(op, 3) is not None:  # axes (opset 18)
            return None
    d = dims(v)
    if pads is None or value != 0.0 or d is None or len(pads) != 2 * len(d) or min(pads) < 0:
        return None
    r = len(d)
    if any((pads[a] or pads[r + a]) and d[a] is None for a in range(r)):
        return None
    return list(pads), op.operands[0]


def _summands(root: ir.Operation, varying: set) -> tuple[list, list]:
    """The terms of the Add/Sum tree rooted at `root` (inner Adds/Sums used
    once, of root's type, in its block, looked through) and the inner ops.
    (An outer block's ops stay there: a loop body would run them per step.)"""
    terms, inner = [], []
    t = root.results[0].type

    def visit(v: ir.Value) -> None:
        op = defining_op(v)
        if op is not None and _op_type(op) in ("Add", "Sum") and v in varying and \
                _single_use(v) and v.type == t and op.parent == root.parent:
            inner.append(op)
            for o in op.operands:
                visit(o)
        else:
            terms.append(v)
    for o in root.operands:
        visit(o)
    return terms, inner


def _merge_placements(b, ops: list, varying: set) -> tuple[list, int]:
    """Add/Sum trees of placements (above) whose pieces meet end to end
    -> the pieces concatenated, padded once. Returns the ops left and how
    many trees were rewritten."""
    erased, dead, count = set(), [], 0
    for root in ops:
        if _op_type(root) not in ("Add", "Sum") or \
                not isinstance(root.results[0].type, ir.RankedTensorType):
            continue
        out = root.results[0]
        if not any(d is not None and _op_type(d) in ("Pad", "Reshape", "Add", "Sum")
                   for d in map(defining_op, root.operands)):
            continue  # (most sums: no tree, no placement)
        # a root: not itself an inner term of a larger tree
        user = next((u.owner for u in out.uses), None)
        if _single_use(out) and user is not None and _op_type(user) in ("Add", "Sum") and \
                user.results[0].type == out.type:
            continue
        terms, inner = _summands(root, varying)
        b.builder.location = root.location
        with ir.InsertionPoint(root):
            parts, terms, gone = _merge_reshaped(b, terms, varying, root.parent, out.type)
            joined, terms, placed = _join_terms(b, terms, varying, root.parent, out)
        if not parts and not joined:
            continue
        with ir.InsertionPoint(root):
            new = _sum(b, terms + parts + joined, out.type)
        out.replace_all_uses_with(new)
        varying.add(new)
        # erased after the walk (users first), which still reads these ops
        tree = [root] + inner + gone + placed
        erased.update(op.results[0] for op in tree)
        dead += tree
        count += 1
    ops = [op for op in ops if not op.results or op.results[0] not in erased]
    for op in dead:
        _erase(op, varying)
    return ops, count


def _sum(b, parts: list, t: ir.Type) -> ir.Value:
    return parts[0] if len(parts) == 1 else b.op("Add" if len(parts) == 2 else "Sum", parts, t)


def _join_terms(b, terms: list, varying: set, parent, out: ir.Value) -> tuple[list, list, list]:
    """The placements among `terms` that have the sum's extents (no
    broadcasting inside the tree), joined (_joined). Returns the joined
    placements, the terms left and the Pads replaced."""
    found = [(v, p) for v in terms if (p := _placement(v, varying, parent)) is not None]
    if len(found) < 2:  # (most sums: no symbolic extents asked for)
        return [], terms, []
    want = symdims.dims(out)
    items = [(pads, piece, [v]) for v, (pads, piece) in found
             if want is not None and symdims.dims(v) == want]
    joined = [it for it in _joined(b, items, dims(out)) if len(it[2]) > 1] \
        if len(items) >= 2 else []
    used = {v for it in joined for v in it[2]}
    values = [b.pad(piece, pads, out.type) if any(pads) else piece for pads, piece, _ in joined]
    return values, [v for v in terms if v not in used], [defining_op(v) for v in used]


def _joined(b, items: list, extents: list) -> list:
    """Placements (pads, piece, the terms they sum) of one value whose pads
    agree on every axis but one, along which their pieces meet end to end
    -> one placement of the pieces concatenated along it; to a fixed point
    (a grid's quarters: pairs along one axis, then the pairs along the
    other)."""
    r = len(extents)
    changed = True
    while changed:
        changed = False
        for a in range(r):
            n = extents[a]
            if not isinstance(n, int):
                continue
            groups: dict = {}
            for it in items:
                groups.setdefault(tuple(it[0][:a] + it[0][a + 1:r + a] + it[0][r + a + 1:]),
                                  []).append(it)
            items = []
            for group in groups.values():
                group.sort(key=lambda it: it[0][a])
                run = [group[0]]
                for it in group[1:] + [None]:
                    if it is not None and it[0][a] == n - run[-1][0][r + a]:
                        run.append(it)
                        continue
                    if len(run) > 1:
                        pads = list(run[0][0])
                        pads[r + a] = run[-1][0][r + a]
                        # (typed from the pads: a piece's own type may say ? there)
                        cut = [e if e is None else e - pads[j] - pads[r + j]
                               for j, e in enumerate(extents)]
                        piece = b.op("Concat", [piece for _, piece, _ in run],
                                     tensor_type(cut, element_type(run[0][1])), axis=a)
                        items.append((pads, piece, [v for _, _, vs in run for v in vs]))
                        changed = True
                    else:
                        items.append(run[0])
                    if it is not None:
                        run = [it]
    return items


def _merge_reshaped(b, terms: list, varying: set, parent, full: ir.Type) -> tuple[list, list, list]:
    """Terms Reshape(placement) of one extents, reshaped alike: a strided
    read's cotangent, the piece placed on a grid by a Pad and merged back by
    a Reshape (shape.py's on_grid). Reshape being linear, the pieces
    x[j::step] of one value, whose Pads differ on the grid's inserted axes
    only, are joined there and reshaped once. Returns the merged sums, the
    terms left and the ops replaced (Reshapes and Pads)."""
    groups: dict = {}
    for v in terms:
        op = defining_op(v)
        if op is None or _op_type(op) != "Reshape" or v.type != full or v not in varying or \
                not _single_use(v) or op.parent != parent or op.operands[1] in varying:
            continue  # (a run-time target built from the placement would be erased)
        inner = defining_op(op.operands[0])
        if inner is None or _op_type(inner) != "Pad":
            continue
        d = symdims.dims(op.operands[0])
        if d is not None:
            groups.setdefault(tuple(map(str, d)), []).append(v)
    merged, gone, used = [], [], set()
    for group in groups.values():
        if len(group) < 2:
            continue
        ws = [defining_op(v).operands[0] for v in group]
        joined, kept, placed = _join_terms(b, ws, varying, parent, ws[0])
        if not joined:
            continue
        first = defining_op(group[0])
        inside = _sum(b, kept + joined, ws[0].type)
        varying.add(inside)
        merged.append(b.op("Reshape", [inside, first.operands[1]], full,
                           **({"allowzero": 1} if attribute(first, "allowzero") else {})))
        varying.add(merged[-1])
        used.update(group)
        gone += [defining_op(v) for v in group] + placed
    return merged, [v for v in terms if v not in used], gone


class _SimplifyBuilder:
    """Builder plus attribute access, for the folds above."""

    def __init__(self, builder):
        self.builder = builder

    def __getattr__(self, name):
        return getattr(self.builder, name)

    attribute = staticmethod(attribute)
