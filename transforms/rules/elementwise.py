"""Elementwise ops: JVP rules, and transposes of the linear ones they emit.

A unary op's JVP is `t * f'(x)`, with f' built from the primal operand x and
result y (Tanh' = 1 - y*y reuses the primal result). Tangents are aligned to
the result's rank before they meet primal coefficients, so the direction axis
stays first under ONNX's right-aligned broadcasting.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np
import onnx
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from .. import symdims
from ..builder import (Builder, attribute, constant_floats, constant_ints, constant_value,
                       defining_op, dims, element_type, is_float, op_type, rank, takes_bfloat16,
                       tensor_type)
from ..registry import jvp, transpose, zero_derivative

Coefficient = Callable[[Builder, ir.Operation, ir.Value, ir.Value], ir.Value]


def _c(b: Builder, value: float, like: ir.Value) -> ir.Value:
    return b.scalar(value, like)


def _mask(b: Builder, cond: ir.Value, like: ir.Value) -> ir.Value:
    """A bool tensor as 0/1 of `like`'s type."""
    return b.cast_like(cond, like)


def _select(b: Builder, cond: ir.Value, a: ir.Value, c: ir.Value) -> ir.Value:
    """An activation's piecewise coefficient. Before opset 9 (no Where) the
    mask arithmetic a * cond + c * (not cond): the same for finite branches
    (an infinite input makes the branch it does not take NaN)."""
    if b.opset < 9:
        return b.add(b.mul(a, _mask(b, cond, a)),
                     b.mul(c, _mask(b, b.op("Not", [cond], cond.type), c)))
    return b.where(cond, a, c)


def _sigmoid(b: Builder, x: ir.Value) -> ir.Value:
    return b.ew("Sigmoid", x)


def _out_rank(op: ir.Operation) -> int:
    r = rank(op.results[0])
    if r is None:  # broadcasting: the largest operand rank, when all are known
        ranks = [rank(v) for v in op.operands if not isinstance(v.type, ir.NoneType)]
        if ranks and None not in ranks:
            return max(ranks)
        raise UnsupportedOp("needs the rank of its result (or of every operand)")
    return r


def scale(b: Builder, t: Optional[ir.Value], coef: ir.Value, out_rank: int) -> Optional[ir.Value]:
    """The linear term t * coef (None stays None)."""
    if t is None:
        return None
    return b.mul(b.align(t, out_rank), coef)


def total(b: Builder, terms: Sequence[Optional[ir.Value]]) -> Optional[ir.Value]:
    terms = [t for t in terms if t is not None]
    return b.sum(terms) if terms else None


# ---- unary ops: t * f'(x, y) ------------------------------------------------

UNARY: dict[str, Coefficient] = {
    "Exp": lambda b, op, x, y: y,
    "Log": lambda b, op, x, y: zero_where_zero(b, b.ew("Reciprocal", x), x),
    "Sqrt": lambda b, op, x, y: _zero_where_nan(b, b.div(_c(b, 0.5, y), y), y, x),
    "Reciprocal": lambda b, op, x, y: zero_where_zero(b, b.neg(b.mul(y, y)), x),
    "Abs": lambda b, op, x, y: b.ew("Sign", x),
    "Sin": lambda b, op, x, y: b.ew("Cos", x),
    "Cos": lambda b, op, x, y: b.neg(b.ew("Sin", x)),
    "Tan": lambda b, op, x, y: b.add(_c(b, 1.0, y), b.mul(y, y)),
    "Sinh": lambda b, op, x, y: b.ew("Cosh", x),
    "Cosh": lambda b, op, x, y: b.ew("Sinh", x),
    "Asin": lambda b, op, x, y: b.ew("Reciprocal", b.ew("Sqrt", b.sub(_c(b, 1.0, x), b.mul(x, x)))),
    "Acos": lambda b, op, x, y: b.neg(b.ew("Reciprocal", b.ew("Sqrt", b.sub(_c(b, 1.0, x), b.mul(x, x))))),
    "Atan": lambda b, op, x, y: b.ew("Reciprocal", b.add(_c(b, 1.0, x), b.mul(x, x))),
    "Asinh": lambda b, op, x, y: b.ew("Reciprocal", b.ew("Sqrt", b.add(b.mul(x, x), _c(b, 1.0, x)))),
    "Acosh": lambda b, op, x, y: b.ew("Reciprocal", b.ew("Sqrt", b.sub(b.mul(x, x), _c(b, 1.0, x)))),
    "Atanh": lambda b, op, x, y: b.ew("Reciprocal", b.sub(_c(b, 1.0, x), b.mul(x, x))),
    "Erf": lambda b, op, x, y: b.mul(_c(b, 2.0 / math.sqrt(math.pi), x),
                                     b.ew("Exp", b.neg(b.mul(x, x)))),
    "Tanh": lambda b, op, x, y: b.sub(_c(b, 1.0, y), b.mul(y, y)),
    "Sigmoid": lambda b, op, x, y: b.mul(y, b.sub(_c(b, 1.0, y), y)),
    # y > 0 iff x > 0 (NaN: both false); reading y lets ONNX Runtime fuse Conv + Relu
    "Relu": lambda b, op, x, y: _mask(b, b.compare("Greater", y, _c(b, 0.0, y)), x),
    "LeakyRelu": lambda b, op, x, y: _select(
        b, b.compare("Greater", x, _c(b, 0.0, x)), _c(b, 1.0, x),
        _c(b, attribute(op, "alpha"), x)),
    "Elu": lambda b, op, x, y: _select(
        b, b.compare("Greater", x, _c(b, 0.0, x)), _c(b, 1.0, x),
        b.add(y, _c(b, attribute(op, "alpha"), x))),
    "Selu": lambda b, op, x, y: _select(
        b, b.compare("Greater", x, _c(b, 0.0, x)), _c(b, attribute(op, "gamma"), x),
        b.add(y, _c(b, attribute(op, "alpha") * attribute(op, "gamma"), x))),
    "Celu": lambda b, op, x, y: _select(
        b, b.compare("Greater", x, _c(b, 0.0, x)), _c(b, 1.0, x),
        b.ew("Exp", b.div(x, _c(b, attribute(op, "alpha"), x)))),
    "ThresholdedRelu": lambda b, op, x, y: _mask(
        b, b.compare("Greater", x, _c(b, attribute(op, "alpha"), x)), x),
    "Softplus": lambda b, op, x, y: _sigmoid(b, x),
    "Softsign": lambda b, op, x, y: b.ew("Reciprocal", _square(b, b.add(_c(b, 1.0, x), b.ew("Abs", x)))),
    "HardSigmoid": lambda b, op, x, y: b.mul(
        _c(b, attribute(op, "alpha"), x),
        _mask(b, b.op("And", [b.compare("Greater", y, _c(b, 0.0, y)),
                              b.compare("Less", y, _c(b, 1.0, y))],
                      _bool_like(b, y)), x)),
    "Shrink": lambda b, op, x, y: _mask(b, b.op("Or", [
        b.compare("Greater", x, _c(b, attribute(op, "lambd"), x)),
        b.compare("Less", x, _c(b, -attribute(op, "lambd"), x))], _bool_like(b, x)), x),
    "HardSwish": lambda b, op, x, y: _hard_swish(b, x),
    "Mish": lambda b, op, x, y: _mish(b, x),
    "Gelu": lambda b, op, x, y: _gelu(b, op, x),
}


def _square(b: Builder, v: ir.Value) -> ir.Value:
    return b.mul(v, v)


def _bool_like(b: Builder, v: ir.Value) -> ir.Type:
    return tensor_type(dims(v), ir.IntegerType.get_signless(1))


def _hard_swish(b: Builder, x: ir.Value) -> ir.Value:
    # y = x * clip(x/6 + 1/2, 0, 1): slope 0 below -3, 1 above 3, x/3 + 1/2
    # between. x/3 + 1/2 clipped to its values at -3 and 3, then moved by
    # 1/2 outside: exact, NaN for NaN (Clip keeps it), finite at +-inf. No
    # Where: ONNX Runtime's costs ~6x a Cast and a Mul with an irregular
    # mask (MobileNetV3's reverse model: two per HardSwish, 4.5% of its time).
    mid = b.add(b.div(x, _c(b, 3.0, x)), _c(b, 0.5, x))
    mid = b.op("Clip", [mid, _c(b, -0.5, x), _c(b, 1.5, x)], x.type)
    low = _mask(b, b.compare("Less", x, _c(b, -3.0, x)), x)
    high = _mask(b, b.compare("Greater", x, _c(b, 3.0, x)), x)
    return b.add(mid, b.mul(b.sub(low, high), _c(b, 0.5, x)))


def _mish(b: Builder, x: ir.Value) -> ir.Value:
    # y = x tanh(sp(x)): y' = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)
    th = _tanh_softplus(b, x)
    return b.add(th, b.mul(b.mul(x, _sigmoid(b, x)), b.sub(_c(b, 1.0, x), _square(b, th))))


def _tanh_softplus(b: Builder, x: ir.Value) -> ir.Value:
    """tanh(log(1 + e^x)) = n / (n + 2), n = e^x (e^x + 2): ONNX Runtime's
    Softplus costs ~35 Mul (as much as the Mish it serves). Past x = 20 it
    is 1 to within 1e-17, so e^x is taken at min(x, 20) (no inf / inf);
    for x << 0 it is n / 2 ~ e^x, accurate."""
    e = b.ew("Exp", b.op("Min", [x, _c(b, 20.0, x)], x.type))
    n = b.mul(e, b.add(e, _c(b, 2.0, x)))
    return b.div(n, b.add(n, _c(b, 2.0, x)))


def _gelu(b: Builder, op: ir.Operation, x: ir.Value) -> ir.Value:
    if attribute(op, "approximate") == "tanh":
        # u = sqrt(2/pi) (x + 0.044715 x^3); y = x/2 (1 + tanh u)
        s = math.sqrt(2.0 / math.pi)
        x2 = _square(b, x)
        u = b.mul(_c(b, s, x), b.add(x, b.mul(_c(b, 0.044715, x), b.mul(x2, x))))
        th = b.ew("Tanh", u)
        du = b.mul(_c(b, s, x), b.add(_c(b, 1.0, x), b.mul(_c(b, 3 * 0.044715, x), x2)))
        return b.add(b.mul(_c(b, 0.5, x), b.add(_c(b, 1.0, x), th)),
                     b.mul(b.mul(_c(b, 0.5, x), x), b.mul(b.sub(_c(b, 1.0, x), _square(b, th)), du)))
    # y = x Phi(x): y' = Phi(x) + x phi(x)
    phi_big = b.mul(_c(b, 0.5, x), b.add(_c(b, 1.0, x),
                                          b.ew("Erf", b.mul(x, _c(b, 1 / math.sqrt(2), x)))))
    density = b.mul(_c(b, 1 / math.sqrt(2 * math.pi), x),
                    b.ew("Exp", b.mul(_c(b, -0.5, x), _square(b, x))))
    return b.add(phi_big, b.mul(x, density))


def _unary_rule(coefficient: Coefficient):
    def rule(b: Builder, op: ir.Operation, tangents):
        x, y = op.operands[0], op.results[0]
        return [b.mul(tangents[0], coefficient(b, op, x, y))]
    return rule


for _name, _coef in UNARY.items():
    jvp(_name)(_unary_rule(_coef))


@jvp("Neg")
def _neg(b: Builder, op, tangents):
    return [b.neg(tangents[0])]


@jvp("Identity")
def _identity(b: Builder, op, tangents):
    return [tangents[0]]


# ---- binary and variadic ----------------------------------------------------

@jvp("Add", "Sub")
def _add_sub(b: Builder, op, tangents):
    r = _out_rank(op)
    ta, tb = (None if t is None else b.align(t, r) for t in tangents)
    if op.name == "onnx.Sub" and tb is not None:
        tb = b.neg(tb)
    return [total(b, [ta, tb])]


@jvp("Mul")
def _mul(b: Builder, op, tangents):
    a, c = op.operands
    r = _out_rank(op)
    return [total(b, [scale(b, tangents[0], c, r), scale(b, tangents[1], a, r)])]


@jvp("Div")
def _div(b: Builder, op, tangents):
    a, c = op.operands
    y = op.results[0]
    r = _out_rank(op)
    zero = _zero_test(b, c)
    if zero is None:
        ta = None if tangents[0] is None else b.div(b.align(tangents[0], r), c)
        tc = scale(b, tangents[1], b.neg(b.div(y, c)), r)
        return [total(b, [ta, tc])]
    # 1 / 0 taken as 0 in both coefficients (zero_where_zero)
    inv = b.where(zero, b.scalar(0.0, c), b.ew("Reciprocal", c))
    ta = scale(b, tangents[0], inv, r)
    tc = scale(b, tangents[1], b.where(zero, b.scalar(0.0, c), b.neg(b.mul(y, inv))), r)
    return [total(b, [ta, tc])]


def zero_where_zero(b: Builder, coef: ir.Value, x: ir.Value) -> ir.Value:
    """`coef` with 0 where `x` is 0, unless `x` is provably nonzero. A
    divisor, a Log's or a Reciprocal's operand that is 0 where a later Where
    discards the result (`where(n > 0, x / n, 0)`) makes the coefficient
    inf, and reverse mode would turn the zero cotangent into 0 * inf. 1 / 0
    taken as 0 there (as LpNormalization's rule does), where the primal is
    inf or NaN."""
    zero = _zero_test(b, x)
    return coef if zero is None else b.where(zero, b.scalar(0.0, coef), coef)


def _zero_test(b: Builder, x: ir.Value) -> ir.Value | None:
    """x == 0, or None where x is provably nonzero or the opset has no
    Where to apply it (before 9)."""
    if b.opset < 9 or _nonzero(x):
        return None
    return b.compare("Equal", x, b.scalar(0.0, x))


# Ops whose result is >= 0 whatever their operands, and ops that keep their
# float operands' signs (>= 0 in, >= 0 out: a Pad's zeros included).
_NONNEGATIVE = {"Abs", "Exp", "Sqrt", "Relu", "Sigmoid", "Softplus", "Softmax",
                "ReduceSumSquare", "ReduceL1", "ReduceL2"}
_SIGN_KEEPING = {"Add", "Mul", "Sum", "Max", "ReduceSum", "ReduceMean", "ReduceMax",
                 "ReduceMin", "AveragePool", "MaxPool", "Slice", "Pad", "Reshape", "Flatten",
                 "Squeeze", "Unsqueeze", "Transpose", "Concat", "Expand", "Identity", "Gather"}
# Ops whose result is > 0 whatever their operands (barring underflow, where
# the primal divides by 0 anyway), and ops > 0 when their operands all are.
_POSITIVE = {"Exp", "Softplus", "Sigmoid", "Softmax"}
_POSITIVE_KEEPING = {"Mul", "Div", "Pow", "Sqrt", "Max", "Min", "ReduceSum", "ReduceMean",
                     "ReduceMax", "ReduceMin", "ReduceProd", "Slice", "Reshape", "Flatten",
                     "Squeeze", "Unsqueeze", "Transpose", "Concat", "Expand", "Identity",
                     "Gather"}


def _proved(v: ir.Value, step: Callable[[ir.Operation], bool | list],
            constant_ok: Callable[[float], bool], budget: int = 24) -> bool:
    """A bounded walk up v's producers: small constants must satisfy
    `constant_ok`; `step(op)` proves the op's result (True), refutes it
    (False) or names the operands it holds if they do."""
    stack = [v]
    while stack:
        budget -= 1
        if budget < 0:
            return False
        v = stack.pop()
        if constant_value(v) is not None:
            values = _small_floats(v)
            if values is None or not all(constant_ok(x) for x in values):
                return False
            continue
        op = defining_op(v)
        verdict = False if op is None else step(op)
        if verdict is False:
            return False
        if verdict is not True:
            stack.extend(verdict)
    return True


def _nonnegative_step(op: ir.Operation) -> bool | list:
    ot = op_type(op)
    if ot in _NONNEGATIVE or ot == "Mul" and op.operands[0] == op.operands[1] or \
            ot == "Pow" and _even_exponent(op.operands[1]):
        return True
    return [w for w in op.operands if is_float(w)] if ot in _SIGN_KEEPING else False


def _positive_step(op: ir.Operation) -> bool | list:
    ot = op_type(op)
    floats = [w for w in op.operands if is_float(w)]
    if ot in _POSITIVE:
        return True
    if ot in ("Add", "Sum"):  # one positive constant term, the others >= 0
        positive = next((w for w in floats if constant_value(w) is not None), None)
        if positive is None or not all(_nonnegative(w) for w in floats if w != positive):
            return False
        return [positive]
    if ot not in _POSITIVE_KEEPING:
        return False
    return floats[:1] if ot == "Pow" else floats


def _nonnegative(v: ir.Value) -> bool:
    """Whether every entry of `v` is provably >= 0 (or NaN): x * x, even
    powers, non-negative constants and ops, sign-keeping ops of those."""
    return _proved(v, _nonnegative_step, lambda x: x >= 0)


def _nonzero(v: ir.Value) -> bool:
    """Whether no entry of `v` can be 0: a constant without zeros, or > 0
    (x + eps over non-negative x, exponentials, probabilities, roots and
    products of those)."""
    values = _small_floats(v) if constant_value(v) is not None else None
    if values is not None:
        return all(x != 0 for x in values)
    return _proved(v, _positive_step, lambda x: x > 0)


def _zero_where_nan(b: Builder, coef: ir.Value, y: ir.Value, base: ir.Value) -> ir.Value:
    """`coef` with 0 where `y` is NaN, unless `base` is provably >= 0. A
    negative base under a root or a fractional power is NaN in the primal
    and in its coefficient; where a later Where or Imputer discards the NaN
    (scikit-learn's Yeo-Johnson, `where(x > 0, sqrt(x), 0)`), reverse mode
    would turn its zero cotangent into 0 * NaN. Zero there, as forward
    mode's discarded tangent is."""
    if b.opset < 9 or _nonnegative(base):  # (no IsNaN before opset 9)
        return coef
    nan = b.op("IsNaN", [y], tensor_type(dims(y), ir.IntegerType.get_signless(1)))
    return b.where(nan, b.scalar(0.0, coef), coef)


def _small_floats(v: ir.Value) -> list[float] | None:
    """The entries of a float constant of at most 4096 (weights are not read)."""
    attr = constant_value(v)
    if not isinstance(attr, ir.DenseFPElementsAttr) or \
            math.prod(ir.ShapedType(attr.type).shape) > 4096:
        return None
    return constant_floats(v)


def _single_exponent(e: ir.Value, a: ir.Value) -> float | None:
    """A Pow exponent's value when it is one constant entry that does not
    widen the base's shape, else None."""
    de, da = dims(e), dims(a)
    if de is None or da is None or len(de) > len(da) or any(d != 1 for d in de):
        return None
    values = constant_ints(e)
    if values is None:
        values = _small_floats(e)
    return float(values[0]) if values is not None and len(values) == 1 else None


def _power_coefficient(b: Builder, a: ir.Value, y: ir.Value, c: float) -> ir.Value | None:
    """c * a^(c - 1) for y = a^c without a Pow ONNX Runtime runs slowly: it
    has fast kernels for the exponents 2 and 3 only, others take ~15x a
    Mul (RMSNorm's a^2 had a^1, GPT-2's GELU a^3 had a^2; Llama's reverse
    model spent 15% of its time in such Pows). The same values at a = 0
    (0 or +-inf) and NaN where y is. None for other exponents."""
    if c == 1.0:
        return _c(b, 1.0, a)
    if c == 2.0:
        return b.mul(a, _c(b, 2.0, a))
    if c == 3.0:
        return b.mul(_square(b, a), _c(b, 3.0, a))
    if c == 4.0:
        return b.mul(b.ew("Pow", a, _c(b, 3.0, a)), _c(b, 4.0, a))
    if c == 0.5:
        return b.div(_c(b, 0.5, a), y)
    if c == 1.5:
        return b.mul(b.ew("Sqrt", a), _c(b, 1.5, a))
    if c == -1.0:
        return b.neg(b.mul(y, y))
    if c == -0.5:
        return b.mul(b.div(y, a), _c(b, -0.5, a))
    return None


def _integer_exponents(e: ir.Value) -> list[int] | None:
    """A Pow exponent's entries when it is a constant of integers
    (integer-typed, or floats such as 2.0), else None."""
    values = constant_ints(e)
    if values is not None:
        return values
    values = _small_floats(e)
    if values is None or not all(math.isfinite(v) and v == int(v) for v in values):
        return None
    return [int(v) for v in values]


def _even_exponent(e: ir.Value) -> bool:
    values = _integer_exponents(e)
    return bool(values) and all(v % 2 == 0 for v in values)


@jvp("Pow")
def _pow(b: Builder, op, tangents):
    a, e = op.operands
    y = op.results[0]
    r = _out_rank(op)
    terms = []
    if tangents[0] is not None:
        c = _single_exponent(e, a)
        coef = None if c is None else _power_coefficient(b, a, y, c)
        if coef is None:
            ef = e if is_float(e) and element_type(e) == element_type(a) else b.cast_like(e, a)
            coef = b.mul(ef, b.ew("Pow", a, b.sub(ef, _c(b, 1.0, a))))
        if _integer_exponents(e) is None:
            coef = _zero_where_nan(b, coef, y, a)
        terms.append(scale(b, tangents[0], coef, r))
    if tangents[1] is not None:
        terms.append(scale(b, tangents[1], b.mul(y, b.ew("Log", a)), r))
    return [total(b, terms)]


@jvp("Mod")
def _mod(b: Builder, op, tangents):
    if attribute(op, "fmod") != 1:
        raise UnsupportedOp("Mod with fmod=0 on floating point is not defined by ONNX")
    a, c = op.operands
    r = _out_rank(op)
    q = b.div(a, c)
    trunc = b.mul(b.ew("Sign", q), b.ew("Floor", b.ew("Abs", q)))
    ta = None if tangents[0] is None else b.align(tangents[0], r)
    return [total(b, [ta, scale(b, tangents[1], b.neg(trunc), r)])]


@jvp("Sum", "Mean")
def _sum_mean(b: Builder, op, tangents):
    r = _out_rank(op)
    t = total(b, [None if t is None else b.align(t, r) for t in tangents])
    if op.name.startswith("onnx.Mean") and t is not None:
        t = b.div(t, _c(b, float(len(tangents)), op.results[0]))
    return [t]


@jvp("Max", "Min")
def _max_min(b: Builder, op, tangents):
    # The operands equal to the result share the derivative evenly: at a tie
    # of two, the mean of their tangents, what central differences give, and
    # JAX's and PyTorch's maximum/minimum (MaxPool and ReduceMax share ties
    # alike). A NaN result matches no operand: derivative 0, not 0/0.
    y = op.results[0]
    r = _out_rank(op)
    if all(t is None for t in tangents):
        return [None]
    if len(op.operands) == 1:
        return [b.align(tangents[0], r)]
    if len(op.operands) == 2:  # (the usual case, ReLU-like Max(x, 0) too: fewer ops)
        x0, x1 = op.operands  # (x0 for the element type: no read of the result)
        tie, half = b.compare("Equal", x0, x1), _c(b, 0.5, x0)
        wins = ("Greater", "Less") if op.name.startswith("onnx.Max") else ("Less", "Greater")
        weights = [None if t is None else
                   _tie_weight(b, tie, _mask(b, b.compare(w, x0, x1), x0), half)
                   for t, w in zip(tangents, wins)]
        return [total(b, [scale(b, t, w, r) for t, w in zip(tangents, weights)])]
    hits = [_mask(b, b.compare("Equal", x, y), y) for x in op.operands]
    count = b.ew("Max", b.sum(hits), _c(b, 1.0, y))
    return [total(b, [scale(b, t, b.div(hit, count), r) for hit, t in zip(hits, tangents)])]


def _tie_weight(b: Builder, tie: ir.Value, win: ir.Value, half: ir.Value) -> ir.Value:
    """1/2 where `tie`, else the 0/1 `win` (without Where, before opset 9 or
    where it has no bfloat16: win + tie / 2)."""
    if b.opset >= 9 and (not isinstance(element_type(win), ir.BF16Type) or
                         takes_bfloat16("Where", b.opset)):
        return b.where(tie, half, win)
    return b.add(win, b.mul(_mask(b, tie, win), half))


@jvp("PRelu")
def _prelu(b: Builder, op, tangents):
    x, slope = op.operands
    r = _out_rank(op)
    pos = b.compare("Greater", x, _c(b, 0.0, x))
    dx = _select(b, pos, _c(b, 1.0, x), slope)
    dslope = _select(b, pos, _c(b, 0.0, x), x)
    return [total(b, [scale(b, tangents[0], dx, r), scale(b, tangents[1], dslope, r)])]


@jvp("Where")
def _where(b: Builder, op, tangents):
    cond = op.operands[0]
    r = _out_rank(op)
    _, ta, tc = (None if t is None else b.align(t, r) for t in tangents)
    if ta is None and tc is None:
        return [None]
    zero = _c(b, 0.0, op.results[0])
    return [b.where(cond, zero if ta is None else ta, zero if tc is None else tc)]


@jvp("Clip")
def _clip(b: Builder, op, tangents):
    x = op.operands[0]
    y = op.results[0]
    r = _out_rank(op)
    inside = b.compare("Equal", x, y)
    terms = [scale(b, tangents[0], _mask(b, inside, y), r)]
    # Clip >= 11: optional min/max operands (onnx.NoValue when absent).
    for t, bound in zip(tangents[1:], op.operands[1:]):
        if t is not None:
            at_bound = b.op("And", [b.op("Not", [inside], _bool_like(b, inside)),
                                    b.compare("Equal", y, bound)], _bool_like(b, inside))
            terms.append(scale(b, t, _mask(b, at_bound, y), r))
    return [total(b, terms)]


@jvp("Cast", "CastLike")
def _cast(b: Builder, op, tangents):
    y = op.results[0]
    if tangents[0] is None or not is_float(y):
        return [None]
    return [b.cast_like(tangents[0], y)]


zero_derivative(
    "Sign", "Floor", "Ceil", "Round", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf", "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Shape", "Size", "NonZero",
    "ArgMax", "ArgMin", "Hardmax", "ConstantOfShape", "EyeLike", "RandomNormal",
    "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "QuantizeLinear", "NonMaxSuppression", "BitCast", "Constant")


@jvp("OneHot")
def _one_hot(b: Builder, op, tangents):
    """values[0] off the hot positions, values[1] on them: linear in values,
    t_off + (t_on - t_off) * mask with the mask the node on values [0, 1]."""
    indices, depth, values = op.operands
    y = op.results[0]
    t = tangents[2]
    if t is None:
        return [None]
    yd = dims(y)
    if yd is None:
        raise UnsupportedOp("OneHot needs the rank of its result")
    elem = element_type(values)
    flags = b.constant(ir.DenseElementsAttr.get(np.asarray([0.0, 1.0], np.float32)))
    if not isinstance(elem, ir.F32Type):
        flags = b.cast_like(flags, values)
    mask = b.op("OneHot", [indices, depth, flags], y.type, axis=attribute(op, "axis"))
    k = dims(t)[0]
    ends = [b.unsqueeze(b.slice(t, [1], [i], [i + 1], tensor_type([k, 1], elem)),
                        list(range(2, len(yd) + 1))) for i in (0, 1)]
    return [b.add(ends[0], b.mul(b.sub(ends[1], ends[0]), mask))]


# ---- transposes of the linear ops the rules above emit ----------------------

def _extents(op: ir.Operation) -> list | None:
    """The symbolic extents, past the direction axis, of a broadcasting op's
    result: those of its cotangent and of the cotangent times (or Where'd
    with) any operand, which broadcast into the result."""
    d = symdims.dims(op.results[0])
    return None if d is None else d[1:]


@transpose("Add", "Sub")
def _t_add_sub(b: Builder, op, cts, linear):
    ct, r = cts[0], _extents(op)
    a, c = op.operands
    out = [b.unbroadcast(ct, a, r) if linear[0] else None, None]
    if linear[1]:
        neg = b.neg(ct) if op.name == "onnx.Sub" else ct
        out[1] = b.unbroadcast(neg, c, r)
    return out


@transpose("Neg")
def _t_neg(b: Builder, op, cts, linear):
    return [b.neg(cts[0])]


@transpose("Mul")
def _t_mul(b: Builder, op, cts, linear):
    a, c = op.operands
    if linear[0] and linear[1]:
        raise UnsupportedOp("Mul of two linear values is not linear")
    r = _extents(op)
    if linear[0]:
        return [b.unbroadcast(b.mul(cts[0], c), a, r), None]
    return [None, b.unbroadcast(b.mul(cts[0], a), c, r)]


@transpose("Div")
def _t_div(b: Builder, op, cts, linear):
    a, c = op.operands
    if linear[1]:
        raise UnsupportedOp("Div by a linear value is not linear")
    return [b.unbroadcast(b.div(cts[0], c), a, _extents(op)), None]


@transpose("Sum")
def _t_sum(b: Builder, op, cts, linear):
    r = _extents(op)
    return [b.unbroadcast(cts[0], v, r) if lin else None
            for v, lin in zip(op.operands, linear)]


@transpose("Where")
def _t_where(b: Builder, op, cts, linear):
    cond, a, c = op.operands
    ct, r = cts[0], _extents(op)
    zero = _c(b, 0.0, ct)
    return [None,
            b.unbroadcast(b.where(cond, ct, zero), a, r) if linear[1] else None,
            b.unbroadcast(b.where(cond, zero, ct), c, r) if linear[2] else None]


@transpose("CastLike")
def _t_cast_like(b: Builder, op, cts, linear):
    x = op.operands[0]
    return [b.op("Cast", [cts[0]], tensor_type(dims(cts[0]), element_type(x)),
                 to=onnx_dtype(element_type(x))), None]


@transpose("Cast")
def _t_cast(b: Builder, op, cts, linear):
    x = op.operands[0]
    return [b.op("Cast", [cts[0]], tensor_type(dims(cts[0]), element_type(x)),
                 to=onnx_dtype(element_type(x)))]


@transpose("Identity")
def _t_identity(b: Builder, op, cts, linear):
    return [cts[0]]


def onnx_dtype(elem: ir.Type) -> int:
    """The TensorProto data type of a float element type."""
    for t, code in ((ir.F16Type, onnx.TensorProto.FLOAT16), (ir.BF16Type, onnx.TensorProto.BFLOAT16),
                    (ir.F32Type, onnx.TensorProto.FLOAT), (ir.F64Type, onnx.TensorProto.DOUBLE)):
        if isinstance(elem, t):
            return code
    raise UnsupportedOp(f"no derivative for element type {elem}")
