"""Einsum and Det.

Einsum is multilinear: its JVP is one Einsum per differentiated operand with
that operand replaced by its tangent, the direction axis a fresh letter in
front of the operand and the output; the transpose of such a linear Einsum
is an Einsum from the cotangent and the other operands back to the linear
operand's subscripts (letters only that operand carries are broadcast back,
repeated ones put on a diagonal through an identity operand).

Det: d det(A) = sum(cof(A) * dA), with the cofactors det of the minors,
exact for singular A too (no inverse). The minors are one Einsum of A with
constant selection tensors, so the rule is closed under differentiation.
"""
from __future__ import annotations

import string

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from .. import symdims
from ..builder import Builder, attribute, broadcast_dims, dims, element_type, tensor_type
from ..registry import jvp, transpose
from .elementwise import total


def parse(equation: str) -> tuple[list[str], str]:
    """Input terms and the explicit output term ('...' kept as is)."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if "->" not in eq:
        letters = [c for c in lhs if c.isalpha()]
        rhs = ("..." if "..." in lhs else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, rhs


def _fresh(terms: list[str], out: str) -> str:
    used = set("".join(terms) + out)
    return next(c for c in "zyxwvutsrqponZYXWVUTSRQPON" + string.ascii_letters if c not in used)


def _letters(term: str) -> list[str]:
    return [c for c in term if c.isalpha()]


def _extents(terms: list[str], operands: list[ir.Value]) -> dict[str, int | None]:
    ext: dict[str, int | None] = {}
    for term, v in zip(terms, operands):
        d = dims(v)
        if d is None or "..." in term:
            if d is not None:
                head, _, tail = term.partition("...")
                for i, c in enumerate(head):
                    ext.setdefault(c, d[i])
                for i, c in enumerate(tail):
                    ext.setdefault(c, d[len(d) - len(tail) + i])
            continue
        for c, e in zip(term, d):
            if ext.get(c) in (None, 1):
                ext[c] = e
    return ext


def _ellipsis_dims(terms: list[str], operands: list[ir.Value]):
    parts = []
    for term, v in zip(terms, operands):
        if "..." in term:
            d = dims(v)
            if d is None:
                return None
            head, _, tail = term.partition("...")
            parts.append(d[len(head):len(d) - len(tail)])
    return broadcast_dims(*parts) if parts else []


def einsum(b: Builder, terms: list[str], out: str, operands: list[ir.Value]) -> ir.Value:
    """An Einsum with its static result type where derivable."""
    ext = _extents(terms, operands)
    ell = _ellipsis_dims(terms, operands) if "..." in out else []
    shape = None
    if ell is not None:
        head, _, tail = out.partition("...")
        shape = [ext.get(c) for c in head] + (ell if "..." in out else []) + \
            [ext.get(c) for c in tail]
    return b.op("Einsum", operands, tensor_type(shape, element_type(operands[0])),
                equation=",".join(terms) + "->" + out)


def _check_terms(terms: list[str], operands: list[ir.Value]) -> None:
    """The equation fits the operands: one term each, as many subscripts as
    a term's operand has axes ('...' standing for any number), and one
    extent per letter. ONNX's inference rejects anything else; a model
    imported without it was differentiated as if it fitted."""
    if len(terms) != len(operands):
        raise UnsupportedOp(f"the equation has {len(terms)} input terms for "
                            f"{len(operands)} operands")
    seen: dict[str, int] = {}
    for i, (t, v) in enumerate(zip(terms, operands)):
        d, n = dims(v), len(_letters(t))
        if d is None:
            continue
        if ("..." in t and n > len(d)) or ("..." not in t and n != len(d)):
            raise UnsupportedOp(f"term '{t}' has {n} subscripts for operand {i} of rank {len(d)}")
        head = _letters(t.partition("...")[0])
        tail = _letters(t.partition("...")[2]) if "..." in t else []
        for c, e in list(zip(head, d)) + list(zip(tail, d[len(d) - len(tail):])):
            if e is not None and seen.setdefault(c, e) != e:
                raise UnsupportedOp(f"subscript '{c}' has extents {seen[c]} and {e}")


@jvp("Einsum")
def _einsum(b: Builder, op, tangents):
    terms, out = parse(attribute(op, "equation"))
    _check_terms(terms, list(op.operands))
    d = _fresh(terms, out)
    operands = list(op.operands)
    parts = []
    for i, t in enumerate(tangents):
        if t is None:
            continue
        ts = list(terms)
        ts[i] = d + terms[i]
        parts.append(einsum(b, ts, d + out, operands[:i] + [t] + operands[i + 1:]))
    return [total(b, parts)]


@transpose("Einsum")
def _t_einsum(b: Builder, op, cts, linear):
    if sum(linear) != 1:
        raise UnsupportedOp("Einsum linear in more than one operand is not linear")
    i = linear.index(True)
    terms, out = _explicit(*parse(attribute(op, "equation")), list(op.operands))
    x = op.operands[i]
    others = [t for j, t in enumerate(terms) if j != i]
    other_ops = [v for j, v in enumerate(op.operands) if j != i]
    # A repeated subscript (a diagonal, "ii"): each repeat gets a fresh letter
    # tied to the first by an identity operand, which puts ct on the diagonal.
    target, used = "", set("".join(terms) + out)
    for pos, c in enumerate(terms[i]):
        if c not in target:
            target += c
            continue
        n = dims(x)[pos] if dims(x) is not None else None
        if n is None:
            raise UnsupportedOp("transposing an Einsum diagonal needs a static extent")
        fresh = next(l for l in string.ascii_letters if l not in used)
        used.add(fresh)
        target += fresh
        others.append(c + fresh)
        other_ops.append(b.constant(ir.DenseElementsAttr.get(
            np.eye(n, dtype=_np_dtype(element_type(x))), type=element_type(x))))
    mine = _letters(target)
    avail = set(_letters(out) + [c for t in others for c in _letters(t)])
    missing = [c for c in mine if c not in avail]
    kept = "".join(c for c in target if c not in missing)
    ct = einsum(b, [out] + others, kept, [cts[0]] + other_ops)
    if missing:
        # Letters only the linear operand carries were summed: broadcast back.
        pos = [j for j, c in enumerate(_positions(target)) if c in missing]
        ct = b.unsqueeze(ct, pos)
        dx = dims(x)
        ct = b.expand_directions(ct, x, 1, None if dx is None else [None] + dx[1:])
    return [ct if j == i else None for j in range(len(terms))]


def _explicit(terms: list[str], out: str, operands: list[ir.Value]) -> tuple[list[str], str]:
    """The equation with '...' spelled as letters, when the ellipsis extents
    are provably equal wherever they meet (static, or the same symbolic
    extent: a batch named at run time; no size-1 broadcasting)."""
    if not any("..." in t for t in terms):
        return terms, out
    ell = []
    for t, v in zip(terms, operands):
        if "..." in t:
            d = symdims.dims(v)
            if d is None:
                raise UnsupportedOp("transposing Einsum with '...' needs its operands' ranks")
            head, _, tail = t.partition("...")
            ell.append(d[len(head):len(d) - len(tail)])
    n = max(len(e) for e in ell)
    full: list = [None] * n
    for e in ell:
        for j, ext in enumerate(e[::-1]):
            if full[n - 1 - j] not in (None, ext):
                raise UnsupportedOp("transposing Einsum with a '...' that may broadcast (its "
                                    "extents are not provably equal)")
            full[n - 1 - j] = ext
    used = set("".join(terms) + out)
    fresh = [c for c in string.ascii_letters if c not in used][:n]
    spell = lambda t, e: t.replace("...", "".join(fresh[n - e:]))  # noqa: E731
    it = iter(ell)
    new_terms = [spell(t, len(next(it))) if "..." in t else t for t in terms]
    return new_terms, spell(out, n)


def _positions(term: str) -> list[str]:
    """Per-axis labels of a term of known rank ('...' axes as '.')."""
    return list(term)


# ---- Det ---------------------------------------------------------------------

def _selection(n: int, dtype) -> np.ndarray:
    """S[i, a, p] = 1 where p is the a-th index of range(n) without i."""
    s = np.zeros((n, n - 1, n), dtype=dtype)
    for i in range(n):
        for a, p in enumerate(q for q in range(n) if q != i):
            s[i, a, p] = 1
    return s


def _np_dtype(elem: ir.Type):
    for t, d in ((ir.F16Type, np.float16), (ir.F32Type, np.float32), (ir.F64Type, np.float64)):
        if isinstance(elem, t):
            return d
    raise UnsupportedOp(f"Det of element type {elem}")


def cofactors(b: Builder, a: ir.Value) -> ir.Value:
    """cof(A)[..., i, j] = (-1)^(i+j) det(A without row i and column j)."""
    d = dims(a)
    n = d[-1]
    elem = element_type(a)
    if n == 1:
        return b.expand(b.scalar(1.0, a), b.shape(a), d)
    sel = b.constant(ir.DenseElementsAttr.get(_selection(n, _np_dtype(elem)), type=elem))
    minors = einsum(b, ["...pq", "iap", "jbq"], "...ijab", [a, sel, sel])
    det = b.op("Det", [minors], tensor_type(d, elem))
    signs = np.fromfunction(lambda i, j: (-1.0) ** (i + j), (n, n)).astype(_np_dtype(elem))
    return b.mul(det, b.constant(ir.DenseElementsAttr.get(signs, type=elem)))


@jvp("Det")
def _det(b: Builder, op, tangents):
    a = op.operands[0]
    d = dims(a)
    if d is None or d[-1] is None:
        raise UnsupportedOp("Det needs a static matrix size")
    r = len(d)
    return [b.reduce("ReduceSum", b.mul(tangents[0], cofactors(b, a)), [r - 1, r], False)]
