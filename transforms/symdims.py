"""Symbolic extents: which unknown (`?`) dims of two values are provably equal.

MLIR types say `?` for a dynamic batch; the derivative rules need to know
whether two `?` are the same extent (a tangent that already has its primal's
shape needs no Expand; a cotangent that has its operand's shape needs no
run-time unbroadcasting). `dims(v)` gives, per dim, the static extent or a
symbol: function arguments name their `?` dims by their `onnx.dim_params`
(the same name is the same extent), and symbols flow through the ops whose
output extents follow from their inputs' (elementwise broadcasting, MatMul,
Gemm, Einsum, Transpose, (Un)Squeeze, Reshape, Expand, reductions, Concat,
Conv and pooling's batch axis, Gather, GatherElements, TopK, scatters,
same-shape ops). Anything else gets a fresh symbol,
equal only to itself: the answer is conservative (never "equal" wrongly).

Values are memoized by identity; an entry remembers the op, operands and
type it was computed from and is recomputed when a value at the same address
was rebuilt (ops are erased and created during the passes).
"""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
from mlir import ir

from onnx_ad_mlir import _op_table

DYN = ir.ShapedType.get_dynamic_size()
_counter = itertools.count()
_cache: dict = {}

# Ops whose result 0 has operand 0's shape.
SAME = {
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BatchNormalization", "Cast",
    "CastLike", "Ceil", "Celu", "Clip", "Cos", "Cosh", "CumSum", "CumProd", "Dropout", "Elu",
    "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Hardmax", "Identity",
    "InstanceNormalization", "IsInf", "IsNaN", "LayerNormalization", "LeakyRelu", "Log",
    "LogSoftmax", "LpNormalization", "MeanVarianceNormalization", "Mish", "Neg", "Not",
    "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
    "Softmax", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu", "Swish",
    "RMSNormalization", "GroupNormalization", "LRN", "Trilu", "ScatterElements", "ScatterND",
    "Scatter",
}
BROADCAST = {
    "Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Sum", "Mean", "PRelu", "Mod",
    "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
}
REDUCE = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
BATCH_FIRST = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
               "GlobalMaxPool", "GlobalLpPool", "Resize", "Upsample", "MaxRoiPool"}


# Scan ops whose bodies take the states and then one slice of each scan input
# (Scan-8 adds a batch axis: its arguments get fresh symbols)
_SCANS = {"onnx.Scan"} | {f"onnx.ScanV{v}" for v in range(9, 100)}

_context: list = [None]  # the context the caches belong to (kept alive: identity is safe)


def _same_context() -> None:
    ctx = ir.Context.current
    if ctx is not _context[0]:
        reset_all()
        _context[0] = ctx


def reset() -> None:
    _cache.clear()


def fresh() -> tuple:
    return ("?", next(_counter))


def order_key(x) -> tuple:
    """A total order of symbols and their parts that string hashing does not
    change: what is built from a set of them (a product extent's factors)
    comes out the same in every process."""
    if isinstance(x, frozenset):
        return (2, tuple(sorted(order_key(y) for y in x)))
    if isinstance(x, tuple):
        return (1, tuple(order_key(y) for y in x))
    return (0, type(x).__name__, x if isinstance(x, (int, str)) else repr(x))


# symbol -> (signature, value, axis): where the extent can be read at run time
_source: dict = {}
_sources_of: dict = {}  # value -> the symbols it is the source of (for forget)


# Extents that are no value's to read: a proved one ("=", n) is shared by
# values in any region, a joint one may first appear in a region its other
# users cannot see, a product of extents, a slice's ("min", n, extent) or
# ("slice", ...) or a floor division anywhere in a function, after its users
# too (reverse mode reaches a stacked GRU's second layer first; a product is
# read as its factors', builder.shape; the others off the value at hand).
_NO_SOURCE = ("=", "bc", "prod", "min", "slice", "floordiv")
_SHARED = ("slice", "floordiv")  # (nor is a symbol built of them: a stack's "cat")


def _built_of_shared(d: tuple) -> bool:
    return any(isinstance(p, tuple) and (bool(p) and p[0] in _SHARED or _built_of_shared(p))
               for p in d)


def _note_sources(v: ir.Value, out: list, sig=None) -> None:
    for i, d in enumerate(out):
        if isinstance(d, tuple) and d[0] not in _NO_SOURCE and d not in _source and \
                not (d[0] in ("cat", "win") and _built_of_shared(d)):
            _source[d] = (sig if sig is not None else _signature(v), v, i)
            _sources_of.setdefault(v, []).append(d)


def read_at(v: ir.Value, axis: int) -> None:
    """Makes v the source of its extent on `axis`: a seed's direction count,
    which the rules also read off the seed itself (one Shape for both),
    rather than off the argument it was transposed from."""
    d = dims(v)
    if d is not None and isinstance(d[axis], tuple) and d[axis][0] not in _NO_SOURCE:
        _source[d[axis]] = (_signature(v), v, axis)
        _sources_of.setdefault(v, []).append(d[axis])


def source(sym) -> tuple | None:
    """(value, axis) holding extent `sym` at run time (the first value that
    had it: a function argument or a primal value, usually), or None."""
    hit = _source.get(sym)
    if hit is None or hit[0] != _signature(hit[1]):
        return None
    return hit[1], hit[2]


def _static(t: ir.Type) -> list | None:
    if not isinstance(t, ir.RankedTensorType):
        return None
    return [None if d == DYN else d for d in t.shape]


def _signature(v: ir.Value):
    # Cheap (no operand walk): the passes reset the caches wherever they
    # erase ops (linearize: region rules; modes.reverse_block: the linear
    # program; rules/__init__: region transposes), so an address reused by a
    # new op within a phase is the remaining case this guards against.
    owner = v.owner
    if isinstance(owner, ir.Block):
        return ("arg", hash(owner), ir.BlockArgument(v).arg_number, v.type)
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    return (hash(op), op.name, len(op.operands), ir.OpResult(v).result_number, v.type)


def dims(v: ir.Value) -> list | None:
    """Per dim: an int (static) or a symbol; None for an unranked value."""
    _same_context()
    hit = _cache.get(v)  # only values with a `?` are cached
    if hit is not None and hit[0] == _signature(v):
        return list(hit[1])
    t = v.type
    if not isinstance(t, ir.RankedTensorType):
        return None
    shape = t.shape
    if DYN not in shape:
        return shape
    # Iterative post-order over the unresolved operands (chains are long).
    # Each value's owner and signature are read once per call (binding
    # calls dominate the cost).
    seen: dict = {}  # value -> (signature, op or None, operands)
    stack = [v]
    while stack:
        top = stack[-1]
        info = seen.get(top)
        if info is None:
            owner = top.owner
            if isinstance(owner, ir.Block):
                op, ins = None, ()
                sig = ("arg", hash(owner), ir.BlockArgument(top).arg_number, top.type)
            else:
                op = owner.operation if isinstance(owner, ir.OpView) else owner
                sig = (hash(op), op.name, len(op.operands), ir.OpResult(top).result_number,
                       top.type)
                ins = () if op.name.startswith("onnx.") and len(op.regions) > 0 \
                    else list(op.operands)
            hit = _cache.get(top)
            if hit is not None and hit[0] == sig:
                seen[top] = (sig, None, None)
                stack.pop()
                continue
            seen[top] = info = (sig, op, ins)
            pending = [o for o in ins if o not in seen and _needs(o)]
            if pending:
                stack.extend(pending)
                continue
        stack.pop()
        sig, op, ins = info
        if ins is None:
            continue  # resolved (cached, or computed through another path)
        out = _compute(top, op, ins, sig)
        _cache[top] = (sig, out)
        seen[top] = (sig, None, None)
        _note_sources(top, out, sig)
    return list(_cache[v][1])


def _needs(v: ir.Value) -> bool:
    hit = _cache.get(v)  # only values with a `?` are cached
    if hit is not None and hit[0] == _signature(v):
        return False
    t = v.type
    return isinstance(t, ir.RankedTensorType) and DYN in t.shape


def _of(v: ir.Value) -> list | None:
    """dims() of an operand already resolved (no recursion)."""
    t = v.type
    if not isinstance(t, ir.RankedTensorType):
        return None
    shape = t.shape
    if DYN not in shape:
        return shape
    hit = _cache.get(v)
    return hit[1] if hit is not None else None  # read-only: rules build new lists


def _fill(out: list | None, v: ir.Value) -> list:
    """`out` checked against v's type: static extents win, None -> fresh."""
    st = _static(v.type)
    if out is None or len(out) != len(st):
        return [fresh() if d is None else d for d in st]
    res = []
    for o, s in zip(out, st):
        if s is not None:
            res.append(s)
        elif o is None:
            res.append(fresh())
        elif isinstance(o, (int, np.integer)):
            # a static claim the type does not confirm (shape arithmetic the
            # type inference did not fold): not an int to its users, but equal
            # to the same claim elsewhere (the sequence length of two heads)
            res.append(("=", int(o)))
        else:
            res.append(o)
    return res


def _scan_arg_dims(scan: ir.Operation, i: int, rank: int) -> list | None:
    """A Scan body's argument i: a state has its start's extents (ONNX
    requires a state to keep one shape through the iterations, and ONNX
    Runtime holds it to its start's), a scan input its operand's without the
    scan axis. None when the operand's rank does not fit."""
    ops = list(scan.operands)
    m = ir.IntegerAttr(scan.attributes["num_scan_inputs"]).value
    n = len(ops) - m
    if i >= len(ops):
        return None
    d = dims(ops[i])
    if i < n:
        return d if d is not None and len(d) == rank else None
    if d is None or len(d) != rank + 1:
        return None
    axes = _axes(scan, "scan_input_axes", m)
    axis = axes[i - n] % (rank + 1) if i - n < len(axes) else 0
    return d[:axis] + d[axis + 1:]


def _scan_result_dims(scan: ir.Operation, i: int, rank: int) -> list | None:
    """A Scan's result i: a final state has its start's extents; a scan
    output, the iteration count (the first scan input's extent on its axis)
    inserted at its axis into the extents of the body's yield, where those
    are known outside the body (static, named, or the extents of the Scan's
    operands): a symbol of a body value is not visible to the Scan's users."""
    ops = list(scan.operands)
    m = ir.IntegerAttr(scan.attributes["num_scan_inputs"]).value
    n = len(ops) - m
    if i < n:
        d = dims(ops[i])
        return d if d is not None and len(d) == rank else None
    body = scan.regions[0].blocks[0]
    yields = list(body.operations)[-1].operands
    first = dims(ops[n]) if n < len(ops) else None
    elem = dims(yields[i]) if i < len(yields) else None
    if first is None or elem is None or len(elem) + 1 != rank:
        return None
    in_axes = _axes(scan, "scan_input_axes", m)
    out_axes = _axes(scan, "scan_output_axes", len(scan.results) - n)
    steps = first[in_axes[0] % len(first)]
    elem = _known_outside(scan, elem)
    axis = out_axes[i - n] % rank
    return elem[:axis] + [steps] + elem[axis:]


def _loop_result_dims(loop: ir.Operation, i: int, rank: int) -> list | None:
    """A Loop's stacked output i (after its carried values): the iteration
    count (fresh) before the extents of the body's yield that are known
    outside the body. A carried value may change shape between iterations:
    its final value gets nothing here (the reverse rule registers it alike
    its start where it proved it keeps its shape)."""
    n = len(loop.operands) - 2
    if i < n:
        return None
    body = loop.regions[0].blocks[0]
    yields = list(body.operations)[-1].operands
    elem = dims(yields[1 + i]) if 1 + i < len(yields) else None
    if elem is None or len(elem) + 1 != rank:
        return None
    return [None] + _known_outside(loop, elem)


def _known_outside(op: ir.Operation, elem: list) -> list:
    """The extents of a value of op's body, those unknown outside it
    (neither static, named, proved nor an extent of op's operands) None: a
    symbol of a body value is not visible to op's users."""
    outside = {e for o in op.operands for e in (dims(o) or []) if isinstance(e, tuple)}

    def visible(e) -> bool:
        return not isinstance(e, tuple) or e[0] in ("param", "=") or e in outside or \
            (e[0] == "bc" and all(visible(p) for p in e[1]))
    return [e if visible(e) else None for e in elem]


def _axes(scan: ir.Operation, name: str, count: int) -> list[int]:
    if name not in scan.attributes:
        return [0] * count
    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(scan.attributes[name])]


def _arg_dims(v: ir.Value) -> list:
    st = _static(v.type)
    block = v.owner
    arg = ir.BlockArgument(v)
    names: list[str] = []
    try:
        parent = block.owner
        parent = parent.operation if isinstance(parent, ir.OpView) else parent
        if parent is not None and parent.name in _SCANS:
            inherited = _scan_arg_dims(parent, arg.arg_number, len(st))
            if inherited is not None:
                return _fill(inherited, v)
        if parent is not None and parent.name == "func.func" and "arg_attrs" in parent.attributes:
            attrs = ir.ArrayAttr(parent.attributes["arg_attrs"])
            if arg.arg_number < len(attrs):
                d = ir.DictAttr(attrs[arg.arg_number])
                if "onnx.dim_params" in d:
                    names = [ir.StringAttr(p).value for p in ir.ArrayAttr(d["onnx.dim_params"])]
    except Exception:  # noqa: BLE001 - no names: fresh symbols
        names = []
    out = []
    for i, s in enumerate(st):
        if s is not None:
            out.append(s)
        elif i < len(names) and names[i]:
            out.append(("param", names[i]))
        else:
            out.append(fresh())
    return out


# builder imports this module: its helpers are imported when first called.
def _ints(v: ir.Value) -> list[int] | None:
    from .builder import constant_ints
    return constant_ints(v)


def _number(v: ir.Value) -> float | None:
    """A constant scalar's value, integer or floating-point."""
    from .builder import constant_uniform
    ints = _ints(v)
    return ints[0] if ints is not None and len(ints) == 1 else constant_uniform(v)


def _resize_scales(op) -> list[float] | None:
    from .builder import resize_scales
    return resize_scales(op)


def _attr(op, name, default=None):
    if name in op.attributes:
        a = op.attributes[name]
        if isinstance(a, ir.IntegerAttr):
            return a.value
        if isinstance(a, ir.ArrayAttr):
            return [x.value for x in a]
    return default


def broadcast(*shapes: list) -> list | None:
    """Multidirectional broadcasting of symbolic extents, folded pairwise:
    per dim, the one non-1 extent; between two different ones, the static one
    when exactly one is static (a valid model needs the other to be it or
    1), else their joint symbol (`_joint`)."""
    if not shapes:
        return []
    out = shapes[0]
    if out is None:
        return None
    out = list(out)
    for s in shapes[1:]:
        if s is None:
            return None
        if s == out:
            continue
        n, m = len(out), len(s)
        if m > n:
            out = list(s[:m - n]) + out
            n = m
        off = n - m
        for i, e in enumerate(s):
            j = off + i
            c = out[j]
            # (an extent shape arithmetic proves, ("=", n), counts as n)
            if c is _CONFLICT or e == c or claimed(e) == 1 or \
                    isinstance(claimed(e), _INTS) and claimed(e) == claimed(c):
                continue
            if claimed(c) == 1:
                out[j] = e
                continue
            ce, ee = isinstance(claimed(c), _INTS), isinstance(claimed(e), _INTS)
            if ce and ee:
                out[j] = _CONFLICT  # two different static extents: unknown for good
            elif ee:
                out[j] = e
            elif not ce:
                out[j] = _joint(c, e)
    return [None if e is _CONFLICT else e for e in out] if _CONFLICT in out else out


def _joint(c, e):
    """The broadcast of two different symbolic extents: a symbol naming the
    set of extents broadcast together (their one non-1 extent is a function
    of the set), so that a tangent term da * b and the primal a * b get the
    same extents whatever the symbols. None when either is unknown."""
    if c is None or e is None:
        return None
    if min_of(c, e) or min_of(e, c):
        return c if min_of(c, e) else e

    def parts(x) -> frozenset:
        return x[1] if x[0] == "bc" else frozenset([x])
    return ("bc", parts(c) | parts(e))


_INTS = (int, np.integer)
_CONFLICT = object()


def shape_value(v: ir.Value, dims_of: Callable[[ir.Value], list | None] | None = None
                ) -> list | None:
    """The extents a 1-D i64 shape operand holds: constants, or Concat of
    constants and Shape(x)[start:end] slices, x's extents by `dims_of`
    (default: symbolic `dims`)."""
    dims_of = dims_of or dims
    c = _ints(v)
    if c is not None:
        return c
    owner = v.owner
    if isinstance(owner, ir.Block):
        return None
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    ot = _op_table.OPS.get(op.name.removeprefix("onnx."), {}).get("op_type")
    if ot == "Concat":
        parts = [shape_value(o, dims_of) for o in op.operands]
        return None if any(p is None for p in parts) else [x for p in parts for x in p]
    if ot == "Shape":
        d = dims_of(op.operands[0])
        if d is None:
            return None
        start, end = _attr(op, "start", 0), _attr(op, "end", None)
        return d[start:end]
    if ot in ("Unsqueeze", "Squeeze", "Cast", "Identity", "CastLike") or \
            ot == "Reshape" and _rank(op.operands[0]) in (0, 1) and _rank(v) == 1:
        return shape_value(op.operands[0], dims_of)  # 0-D and 1-D pieces alike
    if ot == "Where":
        return _where_value(op, dims_of)
    if ot == "Gather":
        src, idx = shape_value(op.operands[0], dims_of), _ints(op.operands[1])
        if src is None or idx is None or _attr(op, "axis", 0) != 0:
            return None
        return [src[i] for i in idx]
    if ot == "Slice" and len(op.operands) >= 3:
        src = shape_value(op.operands[0], dims_of)
        starts, ends = _ints(op.operands[1]), _ints(op.operands[2])
        extra = [_ints(o) for o in op.operands[3:] if not isinstance(o.type, ir.NoneType)]
        if src is None or starts is None or ends is None or any(e is None for e in extra):
            return None
        if extra and extra[0] != [0] or len(extra) > 1 and extra[1] != [1]:
            return None
        return src[starts[0]:ends[0]]
    if ot == "Slice" and "starts" in op.attributes:  # Slice-1 (before opset 10)
        src = shape_value(op.operands[0], dims_of)
        starts, ends = _attr(op, "starts", None), _attr(op, "ends", None)
        axes = _attr(op, "axes", None)
        if src is None or starts is None or ends is None or len(starts) != 1 or \
                axes not in (None, [0]):
            return None
        return src[starts[0]:ends[0]]
    if ot in ("Mul", "Div", "Add", "Sub"):
        a, b = shape_value(op.operands[0], dims_of), shape_value(op.operands[1], dims_of)
        a = None if a is None else [claimed(e) for e in a]
        b = None if b is None else [claimed(e) for e in b]
        if a is None or b is None or len(a) != len(b):
            return None
        if ot in ("Mul", "Div") and not all(isinstance(e, (int, np.integer)) for e in a + b):
            # symbolic products (dynamo's batch * heads): exact quotients, else
            # a floor division by a positive constant (torch's n // 2)
            fa, fb = [_factors(e) for e in a], [_factors(e) for e in b]
            if ot == "Mul":
                return [_quotient([fx, fy], []) for fx, fy in zip(fa, fb)]
            exact = [_quotient([fx], [fy]) for fx, fy in zip(fa, fb)]
            return [_floordiv(x, y) if q is None else q for q, x, y in zip(exact, a, b)]
        if ot in ("Add", "Sub") and not all(isinstance(e, (int, np.integer)) for e in a + b):
            sign = 1 if ot == "Add" else -1
            return [_offset(x, sign * y) if isinstance(y, _INTS) else
                    _offset(y, x) if sign == 1 and isinstance(x, _INTS) else None
                    for x, y in zip(a, b)]
        if not all(isinstance(e, (int, np.integer)) for e in a + b):
            return None
        if ot == "Div" and any(y == 0 or x % y and (x < 0 or y < 0) for x, y in zip(a, b)):
            return None  # C truncates, Python floors: only where they agree
        f = {"Mul": lambda x, y: x * y, "Div": lambda x, y: x // y,
             "Add": lambda x, y: x + y, "Sub": lambda x, y: x - y}[ot]
        return [f(x, y) for x, y in zip(a, b)]
    return None


def _floordiv(e, c):
    """floor(e / c) of an extent e by a positive constant c (C's truncation
    agrees: e >= 0): a number, or a symbol; None where unknown."""
    if e is None or not isinstance(c, _INTS) or c <= 0:
        return None
    if isinstance(e, _INTS):
        return int(e) // int(c) if e >= 0 else None
    return ("floordiv", e, int(c))


def _offset(e, k: int):
    """e + k: a number for a number e; where e is floor(n / c), floor((n +
    c (k - 1)) / c) + 1, the window extents' symbol (an onesided DFT's
    n // 2 + 1 bins, as torch's shape arithmetic computes them); else None."""
    if isinstance(e, _INTS):
        return int(e) + int(k)
    if isinstance(e, tuple) and e[0] == "floordiv":
        return ("win", e[1], e[2] * (int(k) - 1), e[2])
    return None


def _rank(v: ir.Value) -> int | None:
    t = v.type
    return t.rank if isinstance(t, ir.RankedTensorType) else None


def _where_value(op, dims_of) -> list | None:
    """Where(Equal(s, c), a, b) over shape vectors, decided entry by entry:
    torch's expand targets, Where(Equal(s, -1), 1, s). An extent is never
    negative, so a symbolic one never equals a negative constant."""
    cond = op.operands[0].owner
    cond = cond.operation if isinstance(cond, ir.OpView) else cond
    if isinstance(cond, ir.Block) or \
            _op_table.OPS.get(cond.name.removeprefix("onnx."), {}).get("op_type") != "Equal":
        return None
    s, c = shape_value(cond.operands[0], dims_of), _ints(cond.operands[1])
    a, b = shape_value(op.operands[1], dims_of), shape_value(op.operands[2], dims_of)
    if s is None or c is None or a is None or b is None:
        return None
    n = max(len(s), len(c), len(a), len(b))
    if any(len(p) not in (1, n) for p in (s, c, a, b)):
        return None
    at = lambda p, i: p[0] if len(p) == 1 else p[i]  # noqa: E731 - broadcast of length 1
    out = []
    for i in range(n):
        e, k = claimed(at(s, i)), at(c, i)
        if isinstance(e, (int, np.integer)):
            equal = e == k
        elif k < 0:
            equal = False
        else:
            return None
        out.append(at(a, i) if equal else at(b, i))
    return out


def _shape_parts(v: ir.Value) -> list | None:
    """shape_value, or for a Concat of pieces some of which it cannot read,
    None for those pieces' entries (their count from their types):
    torchvision's detection transform resizes to Concat(Shape(x)[:2],
    Cast(Floor(h * scale), ...)), whose batch and channel extents are known."""
    whole = shape_value(v)
    owner = v.owner
    if whole is not None or isinstance(owner, ir.Block):
        return whole
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    if _op_table.OPS.get(op.name.removeprefix("onnx."), {}).get("op_type") != "Concat":
        return None
    parts: list = []
    for o in op.operands:
        part = shape_value(o)
        if part is None:
            n = _static(o.type)
            if n is None or len(n) != 1 or n[0] is None:
                return None
            part = [None] * n[0]
        parts += part
    return parts


def _compute(v: ir.Value, op, ins, sig) -> list:
    """v's extents; `sig` is its _signature."""
    hit = _primal.get(v)  # a registered derivative: [k] + its primal's extents
    if hit is not None and hit[0] == sig and v not in _following:
        pd = _followed(v, hit[1])
        if pd is not None and len(pd) + 1 == len(v.type.shape):
            k = v.type.shape[0]
            if k == DYN:  # the direction axis as the op gives it (reverse mode's 1)
                own = _own(v, op, ins)
                k = own[0] if own is not None and len(own) == len(pd) + 1 and \
                    own[0] is not None else fresh()
            return _fill([k] + pd, v)
    hit = _alike.get(v)
    if hit is not None and hit[0] == sig and v not in _following:
        ld = _followed(v, hit[1])
        first = hit[2]
        if ld is not None and len(ld) == len(v.type.shape):
            # the axes before `first` as the op gives them (a merged batch
            # keeps its operand's)
            shape = v.type.shape[:first]
            own = _own(v, op, ins) if DYN in shape else None
            head = [d if d != DYN else own[i] if own is not None and own[i] is not None
                    else fresh() for i, d in enumerate(shape)]
            return _fill(head + ld[first:], v)
    if op is None:
        return _arg_dims(v)
    name = op.name
    if name in _SCANS:
        return _fill(_scan_result_dims(op, ir.OpResult(v).result_number, len(v.type.shape)), v)
    if name == "onnx.Loop":
        return _fill(_loop_result_dims(op, ir.OpResult(v).result_number, len(v.type.shape)), v)
    return _fill(_own(v, op, ins), v)


_following: set = set()  # values whose registered alias is being resolved


def _followed(v: ir.Value, alias: ir.Value) -> list | None:
    """dims(alias) for v's registered primal or alike value; an alias that
    leads back to v (a cycle of registrations: RecursionError, fuzz seed 196
    case 973) is not followed again, v then takes its own op's extents."""
    _following.add(v)
    try:
        return dims(alias)
    finally:
        _following.discard(v)


def _own(v: ir.Value, op, ins) -> list | None:
    """v's extents by its onnx op's rule, None where unknown."""
    if op is None or not op.name.startswith("onnx."):
        return None
    ot = _op_table.OPS.get(op.name[5:], {}).get("op_type")
    try:
        return _rule(ot, op, ir.OpResult(v).result_number, ins)
    except Exception:  # noqa: BLE001 - unknown: fresh symbols
        return None


def _einsum(op, ins) -> list | None:
    """An explicit equation's output letters take their operands' extents
    (equal for a letter wherever it appears); its '...' the broadcast of
    the operands' ellipsis extents."""
    eq = ir.StringAttr(op.attributes["equation"]).value.replace(" ", "")
    if "->" not in eq:
        return None
    terms, out = eq.split("->")
    parts = [_of(i) for i in ins]
    terms = terms.split(",")
    if len(terms) != len(parts) or any(p is None for p in parts):
        return None
    extents: dict = {}
    ellipses = []
    for t, p in zip(terms, parts):
        head, dots, tail = t.partition("...")
        if "." in head + tail or len(head) + len(tail) > len(p) or \
                (not dots and len(t) != len(p)):
            return None
        if dots:
            ellipses.append(p[len(head):len(p) - len(tail)])
        for letter, e in list(zip(head, p)) + list(zip(tail, p[len(p) - len(tail):])):
            extents.setdefault(letter, []).append(e)
    head, dots, tail = out.partition("...")
    if any(letter not in extents for letter in head + tail) or "." in head + tail:
        return None
    middle = broadcast(*ellipses) if dots else []
    if middle is None:
        return None
    return [_earliest(extents[c]) for c in head] + middle + [_earliest(extents[c]) for c in tail]


def _rule(ot, op, idx, ins) -> list | None:
    if ot in SAME and idx == 0:
        return _of(ins[0])
    if ot in ("LayerNormalization", "RMSNormalization") and idx > 0:
        a = _of(ins[0])
        if a is None:
            return None
        ax = _attr(op, "axis", -1) % len(a)
        return a[:ax] + [1] * (len(a) - ax)
    if ot in BROADCAST:
        return broadcast(*[_of(i) for i in ins if not isinstance(i.type, ir.NoneType)])
    if ot == "Einsum":
        return _einsum(op, ins)
    if ot == "MatMul":
        a, b = _of(ins[0]), _of(ins[1])
        if a is None or b is None or len(a) < 2 or len(b) < 2:
            return None
        batch = broadcast(a[:-2], b[:-2])
        return None if batch is None else batch + [a[-2], b[-1]]
    if ot == "Gemm":
        a, b = _of(ins[0]), _of(ins[1])
        if a is None or b is None:
            return None
        m = a[1] if _attr(op, "transA", 0) else a[0]
        n = b[0] if _attr(op, "transB", 0) else b[1]
        return [m, n]
    if ot == "Transpose":
        a = _of(ins[0])
        if a is None:
            return None
        perm = _attr(op, "perm", None) or list(range(len(a)))[::-1]
        return [a[p] for p in perm]
    if ot in ("Unsqueeze", "Squeeze"):
        a = _of(ins[0])
        axes = _ints(ins[1]) if len(ins) > 1 and not isinstance(ins[1].type, ir.NoneType) \
            else _attr(op, "axes", None)
        if a is None or axes is None:
            return None
        if ot == "Unsqueeze":
            n = len(a) + len(axes)
            norm = sorted(x % n for x in axes)
            it = iter(a)
            return [1 if i in norm else next(it) for i in range(n)]
        norm = {x % len(a) for x in axes}
        return [e for i, e in enumerate(a) if i not in norm]
    if ot == "Expand":
        a, s = _of(ins[0]), shape_value(ins[1])
        return None if a is None or s is None else broadcast(a, s)
    if ot == "Reshape":
        a, s = _of(ins[0]), shape_value(ins[1])
        if a is None or s is None:
            return None
        copies = not _attr(op, "allowzero", 0)  # else a 0 is an extent
        out = [a[i] if copies and e == 0 and i < len(a) else e for i, e in enumerate(s)]
        if -1 in out:
            at = out.index(-1)
            out[at] = _quotient([_factors(e) for e in a],
                                [_factors(e) for i, e in enumerate(out) if i != at])
        return out
    if ot in REDUCE:
        a = _of(ins[0])
        if a is None:
            return None
        if len(ins) > 1 and not isinstance(ins[1].type, ir.NoneType):
            axes = _ints(ins[1])
        else:
            axes = _attr(op, "axes", None)
            if axes is None and len(ins) == 1:
                axes = list(range(len(a)))
        if axes is None:
            return None
        if not axes:
            axes = [] if _attr(op, "noop_with_empty_axes", 0) else list(range(len(a)))
        norm = {x % len(a) for x in axes}
        keep = _attr(op, "keepdims", 1)
        return [1 if i in norm else e for i, e in enumerate(a) if keep or i not in norm]
    if ot == "Concat":
        parts = [_of(i) for i in ins]
        if any(p is None for p in parts):
            return None
        ax = _attr(op, "axis", 0) % len(parts[0])
        # the other extents agree at run time: any part's symbol names them;
        # the earliest one (an argument's, usually) keeps chains comparable
        out = [_earliest([p[i] for p in parts]) for i in range(len(parts[0]))]
        ext = [claimed(p[ax]) for p in parts]  # (a class token's proved 1 beside 4 patches)
        if all(isinstance(e, (int, np.integer)) for e in ext):
            out[ax] = sum(ext)
        else:  # the same parts' extents make the same sum (a stack and its tangent's)
            rest = tuple(e for e in ext if e != 0)  # (TorchScript GPT-2's empty past keys)
            out[ax] = None if any(e is None for e in ext) else \
                rest[0] if len(rest) == 1 else ("cat", rest)
        return out
    if ot in ("RNN", "GRU", "LSTM"):
        x = _of(ins[0])
        if x is None or len(x) != 3:
            return None
        layout = _attr(op, "layout", 0)
        t, b = (x[1], x[0]) if layout else (x[0], x[1])
        if idx == 0:
            return [b, t, None, None] if layout else [t, None, b, None]
        return [b, None, None] if layout else [None, b, None]
    if ot == "ConstantOfShape":
        return shape_value(ins[0])
    if ot == "Range":  # (torch.arange(n), in any number type)
        start, delta, limit = _number(ins[0]), _number(ins[2]), shape_value(ins[1])
        if start != 0 or delta != 1 or limit is None or len(limit) != 1:
            return None
        n = claimed(limit[0])  # (a symbol is an extent read off a shape: never negative)
        return [max(0, n)] if isinstance(n, _INTS) else limit
    if ot == "Slice" and len(ins) >= 3:
        got = _slice_bounds(op, _of)
        if got is None:
            return None
        a, bounds = got
        return [e if i not in bounds else _sliced(e, *bounds[i]) for i, e in enumerate(a)]
    if ot == "Gather":
        a, q = _of(ins[0]), _of(ins[1])
        if a is None or q is None:
            return None
        ax = _attr(op, "axis", 0) % len(a)
        return a[:ax] + q + a[ax + 1:]
    if ot == "Pad" and idx == 0:
        a = _of(ins[0])
        pads = _ints(ins[1]) if len(ins) > 1 and not isinstance(ins[1].type, ir.NoneType) \
            else _attr(op, "pads", None)
        if a is None or pads is None:
            return None
        axes = _ints(ins[3]) if len(ins) > 3 and not isinstance(ins[3].type, ir.NoneType) \
            else list(range(len(a)))
        if axes is None or len(pads) != 2 * len(axes):
            return None
        out = list(a)
        for j, ax in enumerate(axes):
            if pads[j] or pads[j + len(axes)]:
                out[ax % len(a)] = None  # the type's static extent, else fresh
        return out
    if ot in ("Resize", "Upsample") and idx == 0:
        if _attr(op, "axes", None):
            return None
        if ot == "Resize" and len(ins) > 3 and not isinstance(ins[3].type, ir.NoneType):
            sizes = _shape_parts(ins[3])  # the output's extents (FPNs: another value's shape)
            if sizes is not None and len(sizes) == len(_static(op.results[0].type)):
                return sizes
        scales = _resize_scales(op)
        if scales is None or scales[0] != 1.0:
            return None  # the batch axis may be resized
    if ot in BATCH_FIRST and idx == 0:
        a = _of(ins[0])
        if a is None:
            return None
        out = [a[0]] + _tail(op, idx)
        if ot in ("Conv", "MaxPool", "AveragePool", "LpPool"):
            for i in range(2, len(out)):
                if out[i] is None:
                    out[i] = _window_extent(op, ins, i - 2, len(a) - 2, a[i])
        return out
    if ot == "Flatten":
        a = _of(ins[0])
        ax = _attr(op, "axis", 1)
        if a is None or ax != 1:
            return None
        return [a[0], _quotient([_factors(e) for e in a[1:]], [])]
    if ot == "Split":
        a = _of(ins[0])
        if a is None:
            return None
        ax = _attr(op, "axis", 0) % len(a)
        given = len(ins) > 1 and not isinstance(ins[1].type, ir.NoneType)
        sizes = _ints(ins[1]) if given else _attr(op, "split", None)
        n, whole = len(op.results), claimed(a[ax])
        if sizes is None and not given and isinstance(whole, _INTS) and whole % n == 0:
            sizes = [whole // n] * n  # (no sizes, given or read at run time: equal parts)
        out = list(a)
        # (Falcon's fused QKV split by constant sizes over a run-time batch)
        out[ax] = sizes[idx] if sizes is not None and len(sizes) == n else None
        return out
    if ot == "GatherElements":
        return _of(ins[1])
    if ot == "GatherND":
        a, q = _of(ins[0]), _of(ins[1])
        if a is None or q is None or not q or not isinstance(q[-1], _INTS):
            return None
        nb = _attr(op, "batch_dims", 0)
        return a[:nb] + q[nb:-1] + a[nb + int(q[-1]):]
    if ot == "GridSample":  # [N, C] of the input, the output grid's extents
        a, g = _of(ins[0]), _of(ins[1])
        if a is None or g is None or len(a) != len(g):
            return None
        return a[:2] + g[1:-1]
    if ot == "DFT":  # the batch and other axes kept; the transformed one and re/im typed
        a = _of(ins[0])
        if len(ins) < 3:  # DFT-17: an attribute
            axis = _attr(op, "axis", 1)
        else:  # DFT-20: an operand, -2 when absent
            axis = -2 if isinstance(ins[2].type, ir.NoneType) else (_ints(ins[2]) or [None])[0]
        if a is None or axis is None or not -len(a) <= axis < len(a) - 1:
            return None
        return _dft_dims(op, ins, a, axis % len(a))
    if ot == "Tile":  # (Bloom's ALiBi: heads tiled over a run-time batch)
        a, reps = _of(ins[0]), shape_value(ins[1])
        if a is None or reps is None or len(reps) != len(a):
            return None
        return [_quotient([_factors(e), _factors(n)], []) for e, n in zip(a, reps)]
    if ot == "TopK":  # (torch.sort: k read off x's shape)
        a = _of(ins[0])
        if a is None:
            return None
        k = shape_value(ins[1]) if len(ins) > 1 else None
        out = list(a)
        out[_attr(op, "axis", -1) % len(a)] = k[0] if k is not None and len(k) == 1 else None
        return out
    return None


def _factors(e) -> tuple[dict, int] | None:
    """An extent as (its symbolic factors with their powers, a static
    coefficient); None where unknown."""
    e = claimed(e)
    if e is None:
        return None
    if isinstance(e, _INTS):
        return {}, int(e)
    if e[0] == "prod":
        return dict(e[1]), e[2]
    return {e: 1}, 1


def _quotient(total: list, known: list):
    """The extent a Reshape's -1 (or Flatten) takes: the product of `total`'s
    factors over `known`'s, a product symbol ("prod", factors, coefficient)
    where more than one symbol or a coefficient remains (a batch flattened
    into rows, B*8, and reshaped back by -1: B again). None where a factor
    is unknown or does not divide."""
    if any(f is None for f in total + known):
        return None
    coef_in = int(np.prod([c for _, c in total]))
    coef_out = int(np.prod([c for _, c in known]))
    if coef_in == 0 and coef_out:  # no elements: 0 whatever the symbols
        return 0
    if coef_out == 0 or coef_in % coef_out:
        return None
    rest: dict = {}
    for fs, _ in total:
        for f, n in fs.items():
            rest[f] = rest.get(f, 0) + n
    for fs, _ in known:
        for f, n in fs.items():
            rest[f] = rest.get(f, 0) - n
    if any(n < 0 for n in rest.values()):
        return None
    rest = {f: n for f, n in rest.items() if n}
    coef = coef_in // coef_out
    if not rest:
        return coef
    if coef == 1 and len(rest) == 1 and next(iter(rest.values())) == 1:
        return next(iter(rest))
    return ("prod", frozenset(rest.items()), coef)


def slice_keeps_all(op: ir.Operation) -> bool:
    """Whether a Slice (10 and later) keeps its operand whole (TorchScript
    slices scatter_add's source to its index's shape, read at run time)."""
    got = _slice_bounds(op, dims)
    if got is None:
        return False
    a, bounds = got
    return all(_sliced(a[i], *b) == a[i] for i, b in bounds.items())


def _slice_bounds(op: ir.Operation, dims_of) -> tuple[list, dict] | None:
    """A Slice's operand extents and, per axis it slices, its (start, end,
    step), each None where known only at run time (the other axes are kept
    whole). None where the sliced axes are not known."""
    ins = [None if isinstance(o.type, ir.NoneType) else o for o in op.operands]
    if len(ins) < 3 or ins[1] is None or ins[2] is None:
        return None
    a, n = dims_of(ins[0]), _length(ins[1])
    axes = _ints(ins[3]) if len(ins) > 3 and ins[3] is not None else \
        None if n is None else list(range(n))
    if a is None or axes is None or any(not -len(a) <= ax < len(a) for ax in axes):
        return None
    unknown = [None] * len(axes)
    starts, ends = _ints(ins[1]) or unknown, shape_value(ins[2]) or unknown
    steps = (_ints(ins[4]) or unknown) if len(ins) > 4 and ins[4] is not None else \
        [1] * len(axes)
    if not len(starts) == len(ends) == len(steps) == len(axes):
        return None
    return a, {ax % len(a): (start, claimed(end), step)
               for ax, start, end, step in zip(axes, starts, ends, steps)}


def _sliced(e, start, end, step):
    """The extent of [start:end:step] of an axis of extent e: e itself from 0
    by steps of 1 to past it or to an end proved equal to it; the first
    `end` of a static e > 1, `end` a symbol (position embeddings sliced to
    the sequence length), ("min", end, e); constant bounds on a symbolic e,
    a symbol made of e and the bounds, the same for every Slice with them
    (a Fourier layer's lowest modes, and their tangent's); else None (the
    type's, or fresh)."""
    ext = claimed(e)
    if start == 0 and step == 1 and end is not None:
        if end == ext or isinstance(end, _INTS) and \
                (end >= 2 ** 62 or isinstance(ext, _INTS) and end >= ext):
            return e
        if isinstance(ext, _INTS) and ext > 1 and isinstance(end, tuple) and end[0] != "=":
            return ("min", end, int(ext))
    if not isinstance(ext, _INTS) and all(isinstance(v, _INTS) for v in (start, end, step)):
        return ("slice", ext, int(start), int(end), int(step))
    return None


def min_of(c, t) -> bool:
    """Whether extent t is ("min", c, n): broadcast against c, it is c (were
    it 1 with n > 1, c would be 1 too)."""
    return isinstance(t, tuple) and t[0] == "min" and t[1] == c


def _length(v: ir.Value) -> int | None:
    """The static length of a 1-D value."""
    t = v.type
    return t.shape[0] if isinstance(t, ir.RankedTensorType) and t.rank == 1 and \
        not t.is_dynamic_dim(0) else None


def _window_extent(op, ins, i: int, n: int, e):
    """The output extent on spatial axis i of a Conv/pool whose input there
    is `e` (a symbol): `e` itself where the window keeps it (stride 1 and
    pads, explicit or SAME, that add back what the window takes: a 1x1
    lateral Conv, a 3x3 padded by 1), else a symbol made of `e` and the
    numbers the extent is a function of, the same for every window op with
    them (a pool and the window sums of its derivative; SAME padding and
    the explicit pads that give the same extents), None when they are
    unknown."""
    stride = (_attr(op, "strides") or [1] * n)[i]
    kernel = _attr(op, "kernel_shape")
    if kernel is None and len(ins) > 1:  # a Conv's from its weight
        w = _static(ins[1].type)
        kernel = None if w is None or None in w[2:] else w[2:]
    auto = ir.StringAttr(op.attributes["auto_pad"]).value if "auto_pad" in op.attributes \
        else "NOTSET"
    if auto in ("SAME_UPPER", "SAME_LOWER"):  # ceil(e / stride)
        return e if stride == 1 else ("win", claimed(e), -1, stride)
    if kernel is None or len(kernel) != n:
        return None
    dil = (_attr(op, "dilations") or [1] * n)[i]
    pads = [0] * (2 * n) if auto == "VALID" else (_attr(op, "pads") or [0] * (2 * n))
    total = pads[i] + pads[n + i]
    if stride == 1 and total == dil * (kernel[i] - 1):
        return e
    if _attr(op, "ceil_mode", 0):  # (its last window must start before the end padding)
        return ("win", claimed(e), kernel[i], stride, dil, total, pads[i])
    # floor((e + offset) / stride) + 1: one symbol for the windows that
    # agree on it (a residual block's strided 3x3 padded by 1 and 1x1 skip)
    return ("win", claimed(e), total - dil * (kernel[i] - 1) - 1, stride)


def _dft_dims(op, ins, a: list, axis: int) -> list:
    """A DFT's result extents: its input's but on the transformed axis, the
    signal length n (dft_length, else the input's extent) or n // 2 + 1 bins
    of a onesided one (an inverse onesided one without dft_length: unknown),
    and the last: 1 for an inverse onesided one (real), else 2."""
    inverse, onesided = _attr(op, "inverse", 0), _attr(op, "onesided", 0)
    length = ins[1] if len(ins) > 1 and not isinstance(ins[1].type, ir.NoneType) else None
    n = a[axis]
    if length is not None:
        value = shape_value(length)
        n = value[0] if value is not None and len(value) == 1 else None
    out = list(a)
    if inverse and onesided:
        out[axis], out[-1] = (n if length is not None else None), 1
        return out
    if onesided and n is not None:
        n = claimed(n)
        n = n // 2 + 1 if isinstance(n, (int, np.integer)) else ("win", n, 0, 2)
    out[axis], out[-1] = n, 2
    return out


def claimed(e):
    """An extent with a proved value ("=", n, see _fill) as that value n."""
    return e[1] if isinstance(e, tuple) and e[0] == "=" else e


def one_direction(t: ir.Value) -> bool:
    """Whether derivative t's direction axis is proved to be 1: a value of
    the linear program reverse mode transposes (its stand-ins carry one
    direction), whose run-time shapes must be read off primal values for
    it to be erased."""
    d = dims(t)
    return d is not None and claimed(d[0]) == 1


def _earliest(syms: list):
    """One of several extents known to be equal: a static one, else the
    oldest symbol (parameters first)."""
    for e in syms:
        if isinstance(e, (int, np.integer)):
            return e
    claimed = [e for e in syms if isinstance(e, tuple) and e[0] == "="]
    if claimed:
        return claimed[0]
    named = [e for e in syms if isinstance(e, tuple) and e[0] == "param"]
    if named:
        return named[0]
    fresh_ = [e for e in syms if isinstance(e, tuple) and e[0] == "?"]
    return min(fresh_, key=lambda e: e[1]) if fresh_ else syms[0]


def _tail(op, idx) -> list:
    st = _static(op.results[idx].type)
    return [None if d is None else d for d in st[1:]]


# ---- derivative -> primal (shape reads) ------------------------------------
_primal: dict = {}
_tangents_of: dict = {}  # primal -> derivatives registered with it (for forget)


def register(t: ir.Value, primal: ir.Value) -> None:
    """`t` is a derivative of exactly [k] + shape(primal). Not recorded for
    a static primal: t's extents past the direction axis are then in its
    type, and there is no run-time shape to read from the primal."""
    _same_context()
    pt = primal.type
    static = isinstance(pt, ir.RankedTensorType) and DYN not in pt.shape
    if static and isinstance(t.type, ir.RankedTensorType) and t.type.rank == pt.rank + 1:
        return
    sig = _signature(t)
    _primal[t] = (sig, primal)
    _tangents_of.setdefault(primal, []).append(t)
    if static or not isinstance(pt, ir.RankedTensorType):
        return
    td, pd = dims(t), dims(primal)
    if td is not None and pd is not None and len(td) == len(pd) + 1:
        _cache[t] = (sig, [td[0]] + pd)


_alike: dict = {}  # value -> (signature, value with the same extents, from which axis)
_alikes_of: dict = {}  # value -> the values declared alike it (for forget)


def alike(t: ir.Value, like: ir.Value, first: int = 1) -> None:
    """`t` has exactly `like`'s extents from axis `first` on: past axis 0 by
    default (a cotangent a rule built for the linear value `like`, e.g. out
    of a Scan, whose extents the ops alone do not tell), every axis (0), or
    the spatial ones (2: a window sum over [M, 1, *S] and the pool it sums
    for); kept across cache resets, like `register`."""
    _same_context()
    _alike[t] = (_signature(t), like, first)
    _alikes_of.setdefault(like, []).append(t)
    _cache.pop(t, None)


def primal_of(t: ir.Value) -> ir.Value | None:
    _same_context()
    hit = _primal.get(t)
    if hit is None or hit[0] != _signature(t):
        return None
    return hit[1]


def reset_all() -> None:
    _cache.clear()
    _holds_data_op.clear()
    _primal.clear()
    _alike.clear()
    _alikes_of.clear()
    _source.clear()
    _sources_of.clear()
    _tangents_of.clear()


def forget(op: ir.Operation) -> None:
    """Drops what the caches know about `op`'s results; call it right before
    erasing `op` (cheaper than reset_all, which makes every later query walk
    the function again)."""
    for r in op.results:
        _cache.pop(r, None)
        _primal.pop(r, None)
        _alike.pop(r, None)
        for t in _alikes_of.pop(r, ()):
            hit = _alike.get(t)
            if hit is not None and hit[1] == r:
                del _alike[t]
        for sym in _sources_of.pop(r, ()):
            hit = _source.get(sym)
            if hit is not None and hit[1] == r:
                del _source[sym]
        for t in _tangents_of.pop(r, ()):
            hit = _primal.get(t)
            if hit is not None and hit[1] == r:
                del _primal[t]


# ops whose result extents follow data, not shapes: 0 in ordinary use
_DATA_EXTENTS = {"Loop", "Scan", "If", "NonZero", "Compress", "Unique"}
_holds_data_op: dict = {}  # func op -> whether an op under it is one of those


def may_be_empty(v: ir.Value, start: int = 0) -> bool:
    """Whether an extent of v (from axis `start`) that is neither static nor
    a named input extent can be 0 in ordinary use: its function holds an op
    making extents from data (a Loop that did not run), through which any
    unnamed extent may have passed (a Reshape's -1, a Slice's end)."""
    if not any(isinstance(e, tuple) and e[0] != "param" for e in dims(v)[start:]):
        return False
    owner = v.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner
    op = op.operation if isinstance(op, ir.OpView) else op
    while op is not None and op.name != "func.func":
        op = op.parent
        op = None if op is None else op.operation
    if op is None:
        return True
    hit = _holds_data_op.get(op)
    if hit is None:
        hit = _holds_data_op[op] = _under(op)
    return hit


def _under(root: ir.Operation) -> bool:
    for region in root.regions:
        for block in region.blocks:
            for op in block.operations:
                op = op.operation
                kind = _op_table.OPS.get(op.name.removeprefix("onnx."), {}).get("op_type")
                if kind in _DATA_EXTENTS or _under(op):
                    return True
    return False
