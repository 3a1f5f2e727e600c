"""Normalization: Softmax, LogSoftmax, LayerNormalization, BatchNormalization
(inference), InstanceNormalization, LpNormalization, MeanVarianceNormalization,
Dropout (inference).

Every JVP is written in the form whose transpose is the textbook VJP: a few
products with primal coefficients and one or two ReduceSums over the
normalized axes (Softmax: t_y = y t - y sum(y t), transposing to
y g - y sum(y g)). Coefficients come from the primal results where the op
reports them (LayerNormalization's Mean and InvStdDev), else are recomputed
once from the operand.
"""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import ImportFailure, UnsupportedOp
from onnx_ad_mlir.tensors import imported_array

from ..builder import (Builder, attribute, constant_ints, constant_uniform, defining_op, dims,
                       element_type, is_constant_op, is_float, op_type, operand_or_none, rank,
                       tensor_type)
from ..registry import jvp
from .elementwise import total


def _rank(v: ir.Value, what: str) -> int:
    r = rank(v)
    if r is None:
        raise UnsupportedOp(f"{what} needs its operand's rank")
    return r


def _sum(b: Builder, t: ir.Value, axes: list[int]) -> ir.Value:
    """ReduceSum of a derivative over primal axes (shifted), keepdims."""
    return b.reduce("ReduceSum", t, [a + 1 for a in axes], True)


def _softmax_axes(op: ir.Operation) -> list[int]:
    r = _rank(op.operands[0], op_type(op))
    a = attribute(op, "axis")
    if not -r <= a < r:  # an invalid model: ONNX could not check it (unknown rank)
        raise ImportFailure(f"axis {a} is out of range for a rank-{r} input")
    a = a + r if a < 0 else a
    # Before opset 13 the input is coerced to 2-D at `axis`: all trailing axes.
    return list(range(a, r)) if op.name.endswith("V11") else [a]


# Ops whose result has a -inf entry only if a float operand has an infinite
# one, or by accident (overflow, a zero divisor or base): such a row of logits
# is not a mask the model replaces later, and its primal probabilities are
# NaN. (Where selects among its float operands: Hugging Face's causal masks
# put the finite float32 minimum where a row is masked, and a row of those
# has finite probabilities.)
_INF_PROPAGATING = {"MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Transpose",
                    "Reshape", "Split", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Gather",
                    "Concat", "Identity", "Cast", "Expand", "Einsum", "BatchNormalization",
                    "Where", "Min", "Max", "Tile", "Pad", "ReduceSum", "ReduceMean",
                    "ReduceMax", "ReduceMin", "Reciprocal", "Clip", "GatherElements",
                    "GatherND"}
# Ops whose float result is never -inf for finite parameters (operand 0 may be
# anything: bounded, non-negative, or NaN rather than -inf).
_NO_NEG_INF = {"Tanh", "Sigmoid", "Erf", "Softmax", "Exp", "Relu", "Abs", "Sqrt", "Sin", "Cos",
               "LayerNormalization", "RMSNormalization", "Gelu"}
_MASK_SEARCH_BUDGET = 128
_LARGEST_CHECKED_CONSTANT = 1 << 20


def _finite_constant(attr: ir.Attribute) -> bool:
    if isinstance(attr, ir.DenseIntElementsAttr):
        return True
    if isinstance(attr, ir.DenseFPElementsAttr) and attr.is_splat:
        return bool(np.isfinite(attr.get_splat_value().value))
    if math.prod(ir.ShapedType(attr.type).shape) > _LARGEST_CHECKED_CONSTANT:
        return False
    data = imported_array(attr)
    return data is not None and bool(np.isfinite(data).all())


def _finite_weight(v: ir.Value) -> bool:
    """A finite constant, maybe transposed or reshaped (a layer's weight)."""
    op = defining_op(v)
    while op is not None and op_type(op) in ("Transpose", "Identity", "Reshape", "Cast"):
        op = defining_op(op.operands[0])
    return op is not None and is_constant_op(op) and "value" in op.attributes and \
        _finite_constant(op.attributes["value"])


def _may_mask(logits: ir.Value) -> bool:
    """Whether a softmax row of `logits` can be all -inf on purpose (a mask):
    some value it is computed from is a function argument, an infinite
    constant, or an op (Log, ...) outside the two tables above. A product
    by a finite weight matrix (q, k = x W) carries no mask: a -inf in x
    makes its row NaN or +-inf entries, not a row of -inf. A bounded
    search; its budget spent means yes."""
    stack, seen, budget = [logits], set(), _MASK_SEARCH_BUDGET
    while stack:
        v = stack.pop()
        op = defining_op(v)
        if op is None:
            return True
        if op in seen:
            continue
        seen.add(op)
        budget -= 1
        if budget < 0:
            return True
        if is_constant_op(op):
            if "value" not in op.attributes or not _finite_constant(op.attributes["value"]):
                return True
            continue
        ot = op_type(op)
        if ot in ("MatMul", "Gemm") and any(_finite_weight(w) for w in list(op.operands)[:2]):
            stack.extend(w for w in list(op.operands)[2:] if is_float(w))  # (Gemm's bias)
        elif ot in _NO_NEG_INF:
            stack.extend(w for w in list(op.operands)[1:] if is_float(w))
        elif ot in _INF_PROPAGATING:
            stack.extend(w for w in op.operands if is_float(w))
        else:
            return True
    return False


def _finite_probabilities(b: Builder, p: ir.Value) -> ir.Value:
    """Softmax probabilities with NaN rows (every logit -inf: masked attention
    rows, which the model then replaces by a Where) as zeros. Otherwise
    reverse mode multiplies the zero cotangent the Where sends back by NaN
    (0 * NaN), where forward mode's NaN tangent is discarded by the same
    Where; with zeros both modes agree, and rows with a finite primal are
    unchanged. Logits that cannot hold such a mask need no guard."""
    if b.opset < 9:  # no IsNaN
        return p
    src = defining_op(p)
    if src is not None and op_type(src) == "Exp":  # LogSoftmax's probabilities
        src = defining_op(src.operands[0])
    if src is not None and op_type(src) in ("Softmax", "LogSoftmax") and \
            not _may_mask(src.operands[0]):
        return p
    nan = b.op("IsNaN", [p], tensor_type(dims(p), ir.IntegerType.get_signless(1)))
    return b.where(nan, b.scalar(0.0, p), p)


@jvp("Softmax")
def _softmax(b: Builder, op, tangents):
    y = _finite_probabilities(b, op.results[0])
    u = b.mul(tangents[0], y)
    return [b.sub(u, b.mul(y, _sum(b, u, _softmax_axes(op))))]


@jvp("LogSoftmax")
def _log_softmax(b: Builder, op, tangents):
    p = _finite_probabilities(b, b.ew("Exp", op.results[0]))
    t = tangents[0]
    return [b.sub(t, _sum(b, b.mul(t, p), _softmax_axes(op)))]


# ---- standardization: (x - mean) * invstd over some axes ------------------------

def _inv_count(b: Builder, x: ir.Value, axes: list[int]) -> ir.Value:
    """1 / (number of elements over `axes`) as a scalar of x's type."""
    d = dims(x)
    if all(d[a] is not None for a in axes):
        n = 1
        for a in axes:
            n *= d[a]
        return b.scalar(1.0 / n, x)
    i64 = ir.IntegerType.get_signless(64)
    extents = b.concat([b.shape(x, a, a + 1) for a in axes], 0)
    n = b.reduce("ReduceProd", extents, [0], False, [])
    return b.ew("Reciprocal", b.cast_like(n, x)) if element_type(n) == i64 else n


def _moments(b: Builder, x: ir.Value, axes: list[int], eps: float):
    """(mean, invstd) over axes, keepdims, recomputed from x."""
    mean = b.reduce("ReduceMean", x, axes, True)
    d = b.sub(x, mean)
    var = b.reduce("ReduceMean", b.mul(d, d), axes, True)
    return mean, b.ew("Reciprocal", b.ew("Sqrt", b.add(var, b.scalar(eps, x))))


def _standardized_jvp(b: Builder, t: ir.Value, xhat: ir.Value, invstd: ir.Value,
                      axes: list[int], inv_n: ir.Value):
    """Tangents of xhat = (x - mean) invstd, of mean and of invstd:
    t_mean = mean(t), q = mean(xhat t), t_xhat = invstd (t - t_mean - xhat q),
    t_invstd = -invstd^2 q."""
    t_mean = b.mul(_sum(b, t, axes), inv_n)
    q = b.mul(_sum(b, b.mul(t, xhat), axes), inv_n)
    t_xhat = b.mul(b.sub(b.sub(t, t_mean), b.mul(xhat, q)), invstd)
    return t_xhat, t_mean, q


def _like(b: Builder, v: ir.Value, x: ir.Value) -> ir.Value:
    return v if element_type(v) == element_type(x) else b.cast_like(v, x)


@jvp("LayerNormalization")
def _layer_norm(b: Builder, op, tangents):
    x, y = op.operands[0], op.results[0]
    scale, bias = operand_or_none(op, 1), operand_or_none(op, 2)
    r = _rank(x, "LayerNormalization")
    a = attribute(op, "axis")
    if not -r <= a < r:  # an invalid model (ONNX shape inference was skipped)
        raise ImportFailure(f"axis {a} is out of range for a rank-{r} input")
    axes = list(range(a + r if a < 0 else a, r))
    for v, what in ((scale, "Scale"), (bias, "B")):
        _check_affine(v, x, axes[0], what)
    results = list(op.results) + [None] * (3 - len(op.results))
    have = [v is not None and not isinstance(v.type, ir.NoneType) for v in results]
    if have[1] and have[2]:  # reuse what the op reports
        mean, invstd = _like(b, results[1], x), _like(b, results[2], x)
    elif _reports_statistics(b, op, r, axes):
        mean, invstd = _like(b, b.stats[0], x), _like(b, b.stats[1], x)
        y = b.replaced[0][1]
    else:
        mean, invstd = _moments(b, x, axes, attribute(op, "epsilon"))
    # A unit scale (torch's LayerNorm without elementwise affine, or as
    # initialised) multiplies by nothing, and with no bias y is xhat itself:
    # two ops fewer per LayerNormalization, and no second normalization.
    unit_scale = scale is None or constant_uniform(scale) == 1.0
    xhat = y if unit_scale and (bias is None or constant_uniform(bias) == 0.0) and \
        y.type == x.type else b.mul(b.sub(x, mean), invstd)
    tx, ts, tb = (list(tangents) + [None, None])[:3]
    out = [None, None, None]
    terms = []
    if tx is not None:
        t_xhat, t_mean, q = _standardized_jvp(b, tx, xhat, invstd, axes, _inv_count(b, x, axes))
        terms.append(t_xhat if unit_scale else b.mul(t_xhat, scale))
        if have[1]:
            out[1] = _like(b, t_mean, results[1])
        if have[2]:
            out[2] = _like(b, b.mul(q, b.neg(b.mul(invstd, invstd))), results[2])
    if ts is not None:
        terms.append(b.mul(b.align(ts, r), xhat))
    if tb is not None:
        terms.append(b.align(tb, r))
    out[0] = total(b, terms)
    return out[:len(op.results)]


def _check_affine(v: ir.Value | None, x: ir.Value, axis: int, what: str) -> None:
    """Scale and B broadcast to X.shape[axis:] without growing it (ONNX
    Runtime refuses anything else when it runs the op; the rule would build
    derivatives of the wrong shape)."""
    vd, xd = dims(v) if v is not None else None, dims(x)
    if vd is None or xd is None:
        return
    norm = xd[axis:]
    if len(vd) > len(norm) or any(e is not None and n is not None and e not in (1, n)
                                  for e, n in zip(vd[::-1], norm[::-1])):
        raise UnsupportedOp(f"{what} of shape {_shape_text(vd)} does not broadcast to "
                            f"X.shape[axis:] = {_shape_text(norm)}")


def _shape_text(d: list) -> str:
    return "[" + ", ".join("?" if e is None else str(e) for e in d) + "]"


def _reports_statistics(b: Builder, op, r: int, axes: list[int]) -> bool:
    """Replaces a float32 LayerNormalization that does not report Mean and
    InvStdDev by one that does (the same kernel), so the rule reuses them
    instead of recomputing the moments. Only in a function body (region rules
    keep their own value lists) and with static extents before `axis`."""
    x, y = op.operands[0], op.results[0]
    d = dims(x)
    if not isinstance(element_type(x), ir.F32Type) or attribute(op, "stash_type") != 1 or \
            op.parent.name != "func.func" or d is None:
        return False
    stat_dims = [e if i not in axes else 1 for i, e in enumerate(d)]
    f32 = tensor_type(stat_dims, element_type(x))
    attrs = {k: op.attributes[k] for k in ("axis", "epsilon", "stash_type") if k in op.attributes}
    new = b.create("LayerNormalization", list(op.operands), [y.type, f32, f32], **attrs)
    y.replace_all_uses_with(new[0])
    b.replaced = [(y, new[0])]  # linearize gives the new result y's tangent
    for old, made in zip(list(op.results)[1:], new[1:]):
        # a statistic the op already reported (a reverse model's InvStdDev):
        # read from the new op, so that the old one dies; kept, it would be a
        # twin that ONNX Runtime's CSE merges by operands, pairing its missing
        # Mean with the other's (fuzz seed 303 case 192: "Argument type
        # mismatch when adding edge")
        if not isinstance(old.type, ir.NoneType):
            old.replace_all_uses_with(made)
            b.replaced.append((old, made))
    b.stats = new[1:]
    return True


def _channel(b: Builder, v: ir.Value, r: int, tangent: bool = False) -> ir.Value:
    """A per-channel operand ([C] or [C, D1..]) broadcastable along axis 1 of a
    rank-r value; for a tangent, also past the direction axis."""
    pr = _rank(v, "a per-channel operand") - (1 if tangent else 0)
    if pr < r - 1:
        v = b.unsqueeze(v, list(range(pr + (1 if tangent else 0), r - 1 + (1 if tangent else 0))))
    return b.align(v, r) if tangent else v


@jvp("BatchNormalization")
def _batch_norm(b: Builder, op, tangents):
    # Inference: y = scale s (x - mean) + B, s = 1/sqrt(var + eps), every
    # operand differentiable (the running statistics too).
    if attribute(op, "training_mode") == 1 or \
            any(not isinstance(v.type, ir.NoneType) for v in list(op.results)[1:]):
        raise UnsupportedOp("BatchNormalization in training mode (batch statistics and "
                            "running-statistics outputs) is not differentiated; export in "
                            "inference mode")
    x, scale, _, mean, var = op.operands[:5]
    r = _rank(x, "BatchNormalization")
    s = b.ew("Reciprocal", b.ew("Sqrt", b.add(var, b.scalar(attribute(op, "epsilon"), var))))
    gain = _channel(b, b.mul(scale, s), r)
    centered = b.sub(x, _channel(b, mean, r))
    tx, ts, tb, tm, tv = (list(tangents) + [None] * 5)[:5]
    terms = []
    if tx is not None or tm is not None:
        d = tx if tm is None else (b.neg(_channel(b, tm, r, True)) if tx is None else
                                   b.sub(tx, _channel(b, tm, r, True)))
        terms.append(b.mul(d, gain))
    if ts is not None:
        terms.append(b.mul(_channel(b, ts, r, True), b.mul(centered, _channel(b, s, r))))
    if tb is not None:
        terms.append(_channel(b, tb, r, True))
    if tv is not None:
        coef = b.mul(b.scalar(-0.5, var), b.mul(b.mul(scale, s), b.mul(s, s)))
        terms.append(b.mul(_channel(b, tv, r, True), b.mul(centered, _channel(b, coef, r))))
    return [total(b, terms)] + [None] * (len(op.results) - 1)


@jvp("InstanceNormalization")
def _instance_norm(b: Builder, op, tangents):
    x, scale, _ = op.operands
    r = _rank(x, "InstanceNormalization")
    axes = list(range(2, r))
    mean, invstd = _moments(b, x, axes, attribute(op, "epsilon"))
    xhat = b.mul(b.sub(x, mean), invstd)
    tx, ts, tb = tangents
    terms = []
    if tx is not None:
        t_xhat, _, _ = _standardized_jvp(b, tx, xhat, invstd, axes, _inv_count(b, x, axes))
        terms.append(b.mul(t_xhat, _channel(b, scale, r)))
    if ts is not None:
        terms.append(b.mul(_channel(b, ts, r, True), xhat))
    if tb is not None:
        terms.append(_channel(b, tb, r, True))
    return [total(b, terms)]


@jvp("MeanVarianceNormalization")
def _mvn(b: Builder, op, tangents):
    # ONNX's function: y = (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
    # With c = x - mean, sd, D = sd + 1e-9:
    # t_y = (t - mean(t)) / D - c / (D^2 sd) mean(c t).
    # sd from E[c^2]: the two terms cancel only if mean(c^2) = sd^2 as
    # computed, which E[x^2] - E[x]^2 loses to rounding when sd << |x|.
    x = op.operands[0]
    r = _rank(x, "MeanVarianceNormalization")
    axes = sorted(a + r if a < 0 else a for a in attribute(op, "axes"))
    mean = b.reduce("ReduceMean", x, axes, True)
    c = b.sub(x, mean)
    sd = b.ew("Sqrt", b.reduce("ReduceMean", b.mul(c, c), axes, True))
    inv_d = b.ew("Reciprocal", b.add(sd, b.scalar(1e-9, x)))
    inv_n = _inv_count(b, x, axes)
    t = tangents[0]
    t_mean = b.mul(_sum(b, t, axes), inv_n)
    q = b.mul(_sum(b, b.mul(t, c), axes), inv_n)
    coef = b.div(b.mul(c, b.mul(inv_d, inv_d)), sd)
    return [b.sub(b.mul(b.sub(t, t_mean), inv_d), b.mul(coef, q))]


@jvp("LpNormalization")
def _lp_norm(b: Builder, op, tangents):
    # y = x / n: p = 2, t_y = (t - y sum(y t)) / n; p = 1, t_y = (t - y sum(sign(x) t)) / n.
    x, y = op.operands[0], op.results[0]
    r = _rank(x, "LpNormalization")
    a = attribute(op, "axis")
    a = a + r if a < 0 else a
    p = attribute(op, "p")
    if p not in (1, 2):
        raise UnsupportedOp(f"LpNormalization is defined for p = 1 and p = 2, not p = {p}")
    n = b.reduce("ReduceL2" if p == 2 else "ReduceL1", x, [a], True)
    # A zero norm: the primal is 0 there (ONNX's reference and ONNX Runtime
    # take x / 0 as 0), a jump with no derivative; the same convention
    # (1 / 0 taken as 0) gives a zero derivative instead of inf * 0 = NaN.
    zero = b.scalar(0.0, n)
    inv_n = b.where(b.compare("Equal", n, zero), zero, b.ew("Reciprocal", n))
    t = tangents[0]
    w = y if p == 2 else b.ew("Sign", x)
    inner = b.sub(t, b.mul(y, _sum(b, b.mul(t, w), [a])))
    return [b.mul(inner, inv_n)]


@jvp("Dropout")
def _dropout(b: Builder, op, tangents):
    # The identity in inference mode; training mode is random, not differentiated.
    if not op.name.endswith("V10"):
        mode = operand_or_none(op, 2)
        if mode is not None:
            c = constant_ints(mode)
            if c is None or any(c):
                raise UnsupportedOp("Dropout in training mode (training_mode not a constant "
                                    "false) is not differentiated; export in inference mode")
    return [tangents[0]] + [None] * (len(op.results) - 1)
