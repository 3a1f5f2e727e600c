"""RNN, GRU and LSTM: the fused op stays in the primal, derivatives run a lean recurrence.

Every hidden state h_t is in the fused op's output Y, so the previous state
of each step, Hprev (Y shifted by one step, initial_h at the start), is known
for all t at once; the gates are recomputed for all t with two batched
MatMuls (X W^T, Hprev R^T) and elementwise ops, nothing is taped. LSTM's cell
states c_t are not an output: a cheap elementwise Scan (c_t = f_t c_{t-1} +
i_t g_t) rebuilds them.

A tangent of the gate pre-activations splits into a non-recurrent part tA
(from tX, tW, tR, tB: batched MatMuls over all t, emitted as ordinary linear
ops that the other rules transpose) and the recurrent part th_{t-1} R^T.
With per-step coefficients precomputed from the primal gates, one step is

  RNN   th = d ⊙ (tA + th_prev R^T)
  GRU   s = tA + (th_prev R^T) ⊙ K;  th = Σ_gates (s ⊙ C) + z ⊙ th_prev
        (linear_before_reset=0 puts the reset gate before R_h, see _gru_*)
  LSTM  u = (tA + th_prev R^T) ⊙ DE; tc = u_i + u_f + u_c + f ⊙ tc_prev;
        th = u_o + (o ⊙ h'(c)) ⊙ tc

Forward mode runs this as an onnx.Scan over time whose state is th (and tc).
Reverse mode: the recurrence is an opaque linear stand-in (like the region
ops of control_flow.py) whose transpose rule is a direct reverse rule: a Scan
in the opposite direction carrying the adjoints of h (and c) that emits the
adjoint of tA per step; adjoints of X, W, R, B come out of the transposes of
the batched MatMuls (O(|W|) memory, no per-step accumulation).
Directions are handled one at a time (bidirectional: two recurrences).

Refused: clip, LSTM input_forget, peepholes P (unless a constant of zeros),
activations other than Sigmoid/Tanh/Relu, sequence_lens that is not a
constant equal to the sequence length everywhere.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from ..builder import Builder, attribute, constant_ints, dims, element_type, is_constant_op, \
    operand_or_none, op_type, tensor_type
from ..linearize import REGION_RULES, Tangents
from ..registry import TRANSPOSE, mlir_names
from . import control_flow as cf
from .linalg import matmul

_ACTS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RECURRENCES: dict[int, dict] = {}  # stand-in id -> what its transpose needs
RECURRENCE = "onnx_ad.recurrence"


# ---- small emitters ------------------------------------------------------------------

def _take(b: Builder, v: ir.Value, index: int, axis: int) -> ir.Value:
    d = dims(v)
    out = None if d is None else d[:axis] + d[axis + 1:]
    return b.op("Gather", [v, b.int_scalar(index)], tensor_type(out, element_type(v)), axis=axis)


def _slice(b: Builder, v: ir.Value, axis: int, start: int, end: int) -> ir.Value:
    d = dims(v)
    out = None
    if d is not None:
        out = list(d)
        n = d[axis]
        if n is None:
            out[axis] = None if (start < 0 or end < 0 or end > 2**40) else end - start
        else:
            s, e = start + n if start < 0 else min(start, n), end + n if end < 0 else min(end, n)
            out[axis] = max(0, e - s)
    return b.slice(v, [axis], [start], [end], tensor_type(out, element_type(v)))


def _gate(b: Builder, v: ir.Value, j: int, H: int, n: int = 1) -> ir.Value:
    """Gates j..j+n-1 of a [..., G*H] value (last axis)."""
    return _slice(b, v, len(dims(v)) - 1, j * H, (j + n) * H)


def _act(b: Builder, name: str, x: ir.Value) -> ir.Value:
    return b.ew(_ACTS[name], x)


def _act_grad(b: Builder, name: str, y: ir.Value) -> ir.Value:
    """f'(a) from y = f(a)."""
    one = b.scalar(1.0, y)
    if name == "sigmoid":
        return b.mul(y, b.sub(one, y))
    if name == "tanh":
        return b.sub(one, b.mul(y, y))
    return b.cast_like(b.compare("Greater", y, b.scalar(0.0, y)), y)


def _add(b: Builder, a, c):
    if a is None:
        return c
    if c is None:
        return a
    return b.add(a, c)


def _zeros(b: Builder, shape: ir.Value, out, like: ir.Value) -> ir.Value:
    return b.expand(b.scalar(0.0, like), shape, out)


def _flat_matmul(b: Builder, a: ir.Value, t: ir.Value) -> ir.Value:
    """a [T, B, n] (primal) times t [k, n, m] (tangent) -> [k, T, B, m], as one
    [T*B, n] x [k, n, m] product."""
    da, dt = dims(a), dims(t)
    flat = b.reshape(a, [-1, da[-1]], [None if None in da[:2] else da[0] * da[1], da[-1]])
    prod = matmul(b, flat, t)
    shape = b.concat([b.shape(prod, 0, 1), b.shape(a, 0, 2), b.ints([dt[-1]])], 0)
    return b.reshape(prod, shape, [dt[0]] + da[:2] + [dt[-1]])


def _shift(b: Builder, Yd: ir.Value, h0: ir.Value, rev: bool) -> ir.Value:
    """The previous state of every step: [h0, y_0..y_{T-2}] (or reversed)."""
    first = b.unsqueeze(h0, [0])
    if rev:
        return b.concat([_slice(b, Yd, 0, 1, 2**62), first], 0)
    return b.concat([first, _slice(b, Yd, 0, 0, -1)], 0)


# ---- the per-cell recurrences ---------------------------------------------------------
# Each cell gives: primal coefficients (scan inputs, [T, B, *]), the
# non-recurrent tangent tA, the forward step body and the reverse step body.

class _Cell:
    """One direction of one op: primal values and the coefficients."""

    def __init__(self, kind, acts, H, lbr, rev):
        self.kind, self.acts, self.H, self.lbr, self.rev = kind, acts, H, lbr, rev
        self.G = _GATES[kind]


def _primal(b: Builder, c: _Cell, X, Wd, Rd, Bd, Yd, h0, c0):
    """Coefficients of one direction (all [T, B, *]) and the values the
    tangent sources need. X [T, B, I], Yd [T, B, H], h0/c0 [B, H]."""
    H, G = c.H, c.G
    Hprev = _shift(b, Yd, h0, c.rev)
    c.Hprev, c.Wd = Hprev, Wd
    a = matmul(b, X, b.transpose(Wd, [1, 0]))
    if Bd is not None:
        a = b.add(a, _slice(b, Bd, 0, 0, G * H))
        rb = _slice(b, Bd, 0, G * H, 2 * G * H)
    else:
        rb = None
    f = c.acts
    if c.kind == "RNN":
        hr = matmul(b, Hprev, b.transpose(Rd, [1, 0]))
        a = b.add(a, hr if rb is None else b.add(hr, rb))
        y = _act(b, f[0], a)
        c.coefs = [_act_grad(b, f[0], y)]
        return
    if c.kind == "LSTM":
        hr = matmul(b, Hprev, b.transpose(Rd, [1, 0]))
        a = b.add(a, hr if rb is None else b.add(hr, rb))
        i, o, ff = (_act(b, f[0], _gate(b, a, j, H)) for j in (0, 1, 2))
        g = _act(b, f[1], _gate(b, a, 3, H))
        C = _cell_states(b, c, ff, b.mul(i, g), c0)
        Cprev = _shift(b, C, c0, c.rev)
        hc = _act(b, f[2], C)
        c.C = C
        de = b.concat([b.mul(_act_grad(b, f[0], i), g), b.mul(_act_grad(b, f[0], o), hc),
                       b.mul(_act_grad(b, f[0], ff), Cprev), b.mul(_act_grad(b, f[1], g), i)], 2)
        c.coefs = [de, ff, b.mul(o, _act_grad(b, f[2], hc))]
        return
    # GRU: gates z, r, h
    rzr = _slice(b, Rd, 0, 0, 2 * H)
    hr = matmul(b, Hprev, b.transpose(Rd if c.lbr else rzr, [1, 0]))
    if rb is not None:
        hr = b.add(hr, rb if c.lbr else _slice(b, rb, 0, 0, 2 * H))
    a_zr = b.add(_gate(b, a, 0, H, 2), _gate(b, hr, 0, H, 2))
    z = _act(b, f[0], _gate(b, a_zr, 0, H))
    r = _act(b, f[0], _gate(b, a_zr, 1, H))
    rh = _slice(b, Rd, 0, 2 * H, 3 * H)
    if c.lbr:
        hr_h = _gate(b, hr, 2, H)  # Hprev Rh^T + Rbh
        a_h = b.add(_gate(b, a, 2, H), b.mul(r, hr_h))
    else:
        a_h = b.add(_gate(b, a, 2, H), matmul(b, b.mul(r, Hprev), b.transpose(rh, [1, 0])))
        if rb is not None:
            a_h = b.add(a_h, _slice(b, rb, 0, 2 * H, 3 * H))
    hh = _act(b, f[1], a_h)
    dz, dr, dh = _act_grad(b, f[0], z), _act_grad(b, f[0], r), _act_grad(b, f[1], hh)
    ch = b.mul(b.sub(b.scalar(1.0, z), z), dh)
    cz = b.mul(dz, b.sub(Hprev, hh))
    c.r = r
    if c.lbr:
        cr = b.mul(b.mul(ch, dr), hr_h)
        ones = b.expand(b.scalar(1.0, z), b.shape(z), dims(z))
        c.coefs = [b.concat([ones, ones, r], 2), b.concat([cz, cr, ch], 2), z]
    else:
        c.coefs = [z, cz, b.mul(dr, Hprev), r, ch]


def _cell_states(b: Builder, c: _Cell, ff, ig, c0):
    """c_t = f_t c_{t-1} + i_t g_t for all t: an elementwise Scan."""
    d = dims(c0)
    scan = cf._create("onnx." + _resolve_scan(b), [c0, ff, ig],
                      [c0.type, ff.type], _scan_attrs(2, [0, 0], [int(c.rev)] * 2, [0], [int(c.rev)]),
                      b.location, 1)
    elem = tensor_type(d, element_type(c0))
    blk = scan.regions[0].blocks.append(c0.type, elem, elem)
    cp, f_t, ig_t = blk.arguments
    with ir.InsertionPoint(blk):
        ct = b.add(b.mul(f_t, cp), ig_t)
        cf._yield(blk, [ct, ct], b.location)
    return scan.results[1]


def _resolve_scan(b: Builder) -> str:
    from ..builder import resolve
    return resolve("Scan", b.opset)


def _scan_attrs(n_in, in_axes, in_dirs, out_axes, out_dirs) -> dict:
    from ..builder import _attr
    return {"num_scan_inputs": ir.IntegerAttr.get(ir.IntegerType.get_signed(64), n_in),
            "scan_input_axes": _attr(list(in_axes)) if in_axes else ir.ArrayAttr.get([]),
            "scan_input_directions": _attr(list(in_dirs)) if in_dirs else ir.ArrayAttr.get([]),
            "scan_output_axes": _attr(list(out_axes)) if out_axes else ir.ArrayAttr.get([]),
            "scan_output_directions": _attr(list(out_dirs)) if out_dirs else ir.ArrayAttr.get([])}


def _sum_gates(b: Builder, u: ir.Value, gates, H: int) -> ir.Value:
    return b.sum([_gate(b, u, j, H) for j in gates])


def _fwd_step(b: Builder, c: _Cell, Rd, th, tc, tA, coefs):
    """One tangent step; returns (th_t, tc_t)."""
    H = c.H
    if c.kind == "RNN":
        s = _add(b, tA, matmul(b, th, b.transpose(Rd, [1, 0])))
        return b.mul(s, coefs[0]), None
    if c.kind == "LSTM":
        de, ff, ohc = coefs
        u = b.mul(_add(b, tA, matmul(b, th, b.transpose(Rd, [1, 0]))), de)
        tc_new = b.add(_sum_gates(b, u, (0, 2, 3), H), b.mul(ff, tc))
        return b.add(_gate(b, u, 1, H), b.mul(ohc, tc_new)), tc_new
    if c.lbr:
        k_, cc, z = coefs
        s = _add(b, tA, b.mul(matmul(b, th, b.transpose(Rd, [1, 0])), k_))
        return b.add(_sum_gates(b, b.mul(s, cc), (0, 1, 2), H), b.mul(z, th)), None
    z, cz, q, r, ch = coefs
    s = _add(b, None if tA is None else _gate(b, tA, 0, H, 2),
             matmul(b, th, b.transpose(_slice(b, Rd, 0, 0, 2 * H), [1, 0])))
    v = b.add(b.mul(_gate(b, s, 1, H), q), b.mul(r, th))
    inner = matmul(b, v, b.transpose(_slice(b, Rd, 0, 2 * H, 3 * H), [1, 0]))
    inner = _add(b, None if tA is None else _gate(b, tA, 2, H), inner)
    th_new = b.sum([b.mul(ch, inner), b.mul(cz, _gate(b, s, 0, H)), b.mul(z, th)])
    return th_new, None


def _rev_step(b: Builder, c: _Cell, Rd, g, ac, coefs):
    """Transpose of one step: g = adjoint of th_t (carried + adjoint of y_t),
    ac = adjoint of tc_t. Returns (adjoint of tA_t, of th_prev, of tc_prev)."""
    H = c.H
    if c.kind == "RNN":
        a_s = b.mul(g, coefs[0])
        return a_s, matmul(b, a_s, Rd), None
    if c.kind == "LSTM":
        de, ff, ohc = coefs
        act = b.add(ac, b.mul(g, ohc))
        a_u = b.mul(b.concat([act, g, act, act], len(dims(g)) - 1), de)
        return a_u, matmul(b, a_u, Rd), b.mul(act, ff)
    last = len(dims(g)) - 1
    if c.lbr:
        k_, cc, z = coefs
        a_s = b.mul(b.concat([g, g, g], last), cc)
        return a_s, b.add(b.mul(g, z), matmul(b, b.mul(a_s, k_), Rd)), None
    z, cz, q, r, ch = coefs
    a_h = b.mul(g, ch)
    a_v = matmul(b, a_h, _slice(b, Rd, 0, 2 * H, 3 * H))
    a_zr = b.concat([b.mul(g, cz), b.mul(a_v, q)], last)
    a_prev = b.sum([b.mul(g, z), b.mul(a_v, r), matmul(b, a_zr, _slice(b, Rd, 0, 0, 2 * H))])
    return b.concat([a_zr, a_h], last), a_prev, None


def _tangent_type(b: Builder, like: ir.Value, drop_time: bool) -> ir.Type:
    d = dims(like)
    return tensor_type([None] + (d[1:] if drop_time else d), element_type(like))


def _forward_scan(b: Builder, c: _Cell, Rd, tA, th0, tc0):
    """th (and tc) over time; returns (tY_d [k,T,B,H], th_last, tc_last)."""
    lstm = c.kind == "LSTM"
    carried = [th0] + ([tc0] if lstm else [])
    scans = ([tA] if tA is not None else []) + c.coefs
    axes = ([1] if tA is not None else []) + [0] * len(c.coefs)
    d = int(c.rev)
    y_type = tensor_type([None] + dims(c.Hprev), element_type(th0))
    scan = cf._create("onnx." + _resolve_scan(b), carried + scans,
                      [v.type for v in carried] + [y_type],
                      _scan_attrs(len(scans), axes, [d] * len(scans), [1], [d]), b.location, 1)
    elem = [tensor_type([None] + dims(tA)[2:], element_type(tA))] if tA is not None else []
    elem += [tensor_type(dims(v)[1:], element_type(v)) for v in c.coefs]
    blk = scan.regions[0].blocks.append(*([v.type for v in carried] + elem))
    args = list(blk.arguments)
    th, tc = args[0], (args[1] if lstm else None)
    rest = args[len(carried):]
    tA_t = rest[0] if tA is not None else None
    coefs = rest[1:] if tA is not None else rest
    with ir.InsertionPoint(blk):
        th_new, tc_new = _fwd_step(b, c, Rd, th, tc, tA_t, coefs)
        cf._yield(blk, [th_new] + ([tc_new] if lstm else []) + [th_new], b.location)
    res = list(scan.results)
    return res[-1], res[0], (res[1] if lstm else None)


def _reverse_scan(b: Builder, c: _Cell, Rd, ct_y, ct_h, ct_c, k, need_tA: bool, like_tA):
    """The transpose of _forward_scan: returns (adjoint of tA, of th0, of tc0)."""
    lstm = c.kind == "LSTM"
    hshape = b.concat([k, b.shape(c.Hprev, 1)], 0)
    hdims = [None] + dims(c.Hprev)[1:]
    a_h = ct_h if ct_h is not None else _zeros(b, hshape, hdims, c.Hprev)
    a_c = (ct_c if ct_c is not None else _zeros(b, hshape, hdims, c.Hprev)) if lstm else None
    carried = [a_h] + ([a_c] if lstm else [])
    scans = ([ct_y] if ct_y is not None else []) + c.coefs
    axes = ([1] if ct_y is not None else []) + [0] * len(c.coefs)
    d = 1 - int(c.rev)
    GH = c.G * c.H
    out_types = [tensor_type([None] + dims(c.Hprev)[:2] + [GH], element_type(a_h))] if need_tA \
        else []
    scan = cf._create("onnx." + _resolve_scan(b), carried + scans,
                      [v.type for v in carried] + out_types,
                      _scan_attrs(len(scans), axes, [d] * len(scans), [1] * len(out_types),
                                  [d] * len(out_types)), b.location, 1)
    elem = [tensor_type(hdims, element_type(a_h))] if ct_y is not None else []
    elem += [tensor_type(dims(v)[1:], element_type(v)) for v in c.coefs]
    blk = scan.regions[0].blocks.append(*([tensor_type(hdims, element_type(a_h))] * len(carried)
                                          + elem))
    args = list(blk.arguments)
    gh, gc = args[0], (args[1] if lstm else None)
    rest = args[len(carried):]
    coefs = rest[1:] if ct_y is not None else rest
    with ir.InsertionPoint(blk):
        g = b.add(gh, rest[0]) if ct_y is not None else gh
        a_tA, a_prev, a_cprev = _rev_step(b, c, Rd, g, gc, coefs)
        cf._yield(blk, [a_prev] + ([a_cprev] if lstm else []) + ([a_tA] if need_tA else []),
                  b.location)
    res = list(scan.results)
    return (res[-1] if need_tA else None), res[0], (res[1] if lstm else None)


# ---- the rule -------------------------------------------------------------------------

def _check(op: ir.Operation, kind: str, D: int) -> tuple[list[str], int]:
    if attribute(op, "clip") is not None:
        raise UnsupportedOp("clip is not differentiated (the clipped pre-activations)")
    if kind == "LSTM" and attribute(op, "input_forget"):
        raise UnsupportedOp("input_forget=1 is not differentiated")
    n = len(_DEFAULT_ACTS[kind])
    acts = attribute(op, "activations")
    if acts is None:
        acts = _DEFAULT_ACTS[kind] * D
    elif len(acts) == n and D == 2:
        acts = list(acts) * 2
    elif len(acts) != n * D:
        raise UnsupportedOp(f"{len(acts)} activations for {D} direction(s)")
    out = []
    for a in acts:
        a = a.decode() if isinstance(a, bytes) else a
        if a.lower() not in _ACTS:
            raise UnsupportedOp(f"activation {a} is not differentiated "
                                "(supported: Sigmoid, Tanh, Relu)")
        out.append(a.lower())
    layout = attribute(op, "layout") or 0
    return out, layout


def _const_zero(v: ir.Value) -> bool:
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or not is_constant_op(owner.operation):
        return False
    try:
        return not np.any(np.asarray(owner.operation.attributes["value"]))
    except Exception:
        return False


def _rule(op: ir.Operation, rewriter, state: Tangents) -> bool:
    kind = op_type(op)
    ops = [operand_or_none(op, i) for i in range(len(op.operands))]
    X, W, R, Bv, SL, H0 = (ops + [None] * 8)[:6]
    C0 = ops[6] if kind == "LSTM" and len(ops) > 6 else None
    P = ops[7] if kind == "LSTM" and len(ops) > 7 else None
    t = {name: (None if v is None else state.get(v))
         for name, v in (("X", X), ("W", W), ("R", R), ("B", Bv), ("H0", H0), ("C0", C0),
                         ("P", P))}
    if all(v is None for v in t.values()):
        return False
    direction = attribute(op, "direction") or "forward"
    direction = direction.decode() if isinstance(direction, bytes) else direction
    D = 2 if direction == "bidirectional" else 1
    acts, layout = _check(op, kind, D)
    if P is not None and (t["P"] is not None or not _const_zero(P)):
        raise UnsupportedOp("peephole weights P are not differentiated (only constant zeros)")
    results = list(op.results)
    Y, Yh = results[0], results[1]
    Yc = results[2] if kind == "LSTM" else None
    if isinstance(Y.type, ir.NoneType):
        raise UnsupportedOp("the output Y (all hidden states) must be produced")
    if dims(X) is None or dims(W) is None or dims(R) is None or None in dims(W)[1:] or \
            dims(R)[-1] is None:
        raise UnsupportedOp("needs the ranks of X and the sizes of W and R")
    H = dims(R)[-1]
    lbr = kind == "GRU" and bool(attribute(op, "linear_before_reset"))
    b = Builder(state.opset, op.location)
    with ir.InsertionPoint.after(op):
        T = dims(X)[1 if layout else 0]
        if SL is not None:
            lens = constant_ints(SL)
            if lens is None or T is None or any(n != T for n in lens):
                raise UnsupportedOp("sequence_lens must be a constant equal to the sequence "
                                    "length (ragged batches are not differentiated)")
        # layout 0 everywhere: X [T,B,I], Y [T,D,B,H], states [D,B,H]
        tX, tH0, tC0 = t["X"], t["H0"], t["C0"]
        if layout:
            X = b.transpose(X, [1, 0, 2])
            tX = None if tX is None else b.transpose(tX, [0, 2, 1, 3])
            Y = b.transpose(Y, [1, 2, 0, 3])
            H0 = None if H0 is None else b.transpose(H0, [1, 0, 2])
            C0 = None if C0 is None else b.transpose(C0, [1, 0, 2])
            tH0 = None if tH0 is None else b.transpose(tH0, [0, 2, 1, 3])
            tC0 = None if tC0 is None else b.transpose(tC0, [0, 2, 1, 3])
        bshape = b.concat([b.shape(X, 1, 2), b.ints([H])], 0)
        sdims = [dims(X)[1], H]
        tys, ths, tcs = [], [], []
        k = state.k
        for d in range(D):
            rev = direction == "reverse" or d == 1
            c = _Cell(kind, acts[d * len(_DEFAULT_ACTS[kind]):(d + 1) * len(_DEFAULT_ACTS[kind])],
                      H, lbr, rev)
            Wd, Rd = _take(b, W, d, 0), _take(b, R, d, 0)
            Bd = None if Bv is None else _take(b, Bv, d, 0)
            Yd = _take(b, Y, d, 1)
            h0 = _take(b, H0, d, 0) if H0 is not None else _zeros(b, bshape, sdims, X)
            c0 = None
            if kind == "LSTM":
                c0 = _take(b, C0, d, 0) if C0 is not None else _zeros(b, bshape, sdims, X)
            _primal(b, c, X, Wd, Rd, Bd, Yd, h0, c0)
            tA = _sources(b, c, X, t, tX, d)
            th0 = None if tH0 is None else _take(b, tH0, d, 1)
            tc0 = None if tC0 is None else _take(b, tC0, d, 1)
            last = 0 if rev else -1
            primals = [Yd, _take(b, Yd, last, 0)] + ([_take(b, c.C, last, 0)] if c0 is not None
                                                     else [])
            if tA is None and th0 is None and tc0 is None:
                tys.append(None), ths.append(None), tcs.append(None)
                continue
            if state.mode == "forward":
                kk = k
                z = None
                if th0 is None or (kind == "LSTM" and tc0 is None):
                    z = _zeros(b, b.concat([kk, bshape], 0), [None] + sdims, X)
                ty, th, tc = _forward_scan(b, c, Rd, tA, th0 if th0 is not None else z,
                                           (tc0 if tc0 is not None else z) if c0 is not None
                                           else None)
            else:
                ty, th, tc = _standin(b, c, Rd, tA, th0, tc0, primals)
            tys.append(ty), ths.append(th), tcs.append(tc)
        _outputs(b, state, kind, layout, results, tys, ths, tcs, bshape, sdims, X, Y)
    return False


def _sources(b: Builder, c: _Cell, X, t, tX, d):
    """The non-recurrent tangent of the gate pre-activations, [k, T, B, G*H]:
    tX W^T + X tW^T + tWb, plus Hprev tR^T + tRb (GRU: through the reset gate
    where the cell puts it)."""
    H, G = c.H, c.G
    xs, hs = [], []  # [k,T,B,GH] terms before / after the recurrent weights
    if tX is not None:
        xs.append(matmul(b, tX, b.transpose(c.Wd, [1, 0])))
    if t["W"] is not None:
        xs.append(_flat_matmul(b, X, b.transpose(_take(b, t["W"], d, 1), [0, 2, 1])))
    tR = None if t["R"] is None else _take(b, t["R"], d, 1)  # [k, GH, H]
    tB = None if t["B"] is None else _take(b, t["B"], d, 1)  # [k, 2GH]
    if tB is not None:
        xs.append(b.align(_slice(b, tB, 1, 0, G * H), 3))
    rb = None if tB is None else b.align(_slice(b, tB, 1, G * H, 2 * G * H), 3)
    sx = b.sum(xs) if xs else None
    if c.kind != "GRU":
        if tR is not None:
            hs.append(_flat_matmul(b, c.Hprev, b.transpose(tR, [0, 2, 1])))
        if rb is not None:
            hs.append(rb)
        return _add(b, sx, b.sum(hs) if hs else None)
    if c.lbr:
        # z, r: Hprev tR^T + tRb; h: r ⊙ (Hprev tRh^T + tRbh)
        if tR is not None:
            hs.append(_flat_matmul(b, c.Hprev, b.transpose(tR, [0, 2, 1])))
        if rb is not None:
            hs.append(rb)
        if not hs:
            return sx
        sh = b.sum(hs)
        if dims(sh)[2] == 1 or dims(sh)[1] == 1:
            sh = b.expand(sh, b.concat([b.shape(sh, 0, 1), b.shape(c.Hprev, 0, 2),
                                        b.ints([G * H])], 0),
                          [dims(sh)[0]] + dims(c.Hprev)[:2] + [G * H])
        sh = b.concat([_gate(b, sh, 0, H, 2), b.mul(c.r, _gate(b, sh, 2, H))], 3)
        return _add(b, sx, sh)
    # linear_before_reset=0: z, r: Hprev tRzr^T + tRb_zr; h: (r ⊙ Hprev) tRh^T + tRbh
    if tR is not None:
        zr = _flat_matmul(b, c.Hprev, b.transpose(_slice(b, tR, 1, 0, 2 * H), [0, 2, 1]))
        hh = _flat_matmul(b, b.mul(c.r, c.Hprev),
                          b.transpose(_slice(b, tR, 1, 2 * H, 3 * H), [0, 2, 1]))
        hs.append(b.concat([zr, hh], 3))
    if rb is not None:
        hs.append(rb)
    return _add(b, sx, b.sum(hs) if hs else None)


def _standin(b: Builder, c: _Cell, Rd, tA, th0, tc0, primals):
    """Reverse mode: the recurrence as an opaque linear op (tA, th0, tc0) ->
    (tY_d, th_last, tc_last), transposed by _t_recurrence."""
    lstm = c.kind == "LSTM"
    inputs = [v for v in (tA, th0, tc0) if v is not None]
    hd = dims(c.Hprev)
    el = element_type(c.Hprev)
    types = [tensor_type([None] + hd, el), tensor_type([None] + hd[1:], el)]
    if lstm:
        types.append(types[1])
    ident = next(cf._ids)
    ph = ir.Operation.create(
        cf.PLACEHOLDER, results=types, operands=inputs,
        attributes={cf.REGION_ID: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ident),
                    RECURRENCE: ir.UnitAttr.get()},
        loc=b.location)
    _RECURRENCES[ident] = {"cell": c, "Rd": Rd, "has": (tA is not None, th0 is not None,
                                                       tc0 is not None)}
    cf._PRIMALS[ident] = primals
    res = list(ph.results)
    return res[0], res[1], (res[2] if lstm else None)


_region_transpose = TRANSPOSE[cf.PLACEHOLDER]


def _t_recurrence(b: Builder, ph: ir.Operation, cts, linear) -> list:
    if RECURRENCE not in ph.attributes:
        return _region_transpose(b, ph, cts, linear)
    ident = ir.IntegerAttr(ph.attributes[cf.REGION_ID]).value
    info = _RECURRENCES.pop(ident)
    c = info["cell"]
    if all(ct is None for ct in cts):
        return [None] * len(ph.operands)
    k = next(b.shape(ct, 0, 1) for ct in cts if ct is not None)
    has_tA, has_h, has_c = info["has"]
    ct_y, ct_h = cts[0], cts[1]
    ct_c = cts[2] if c.kind == "LSTM" else None
    a_tA, a_h, a_c = _reverse_scan(b, c, info["Rd"], ct_y, ct_h, ct_c, k, has_tA, None)
    out = []
    if has_tA:
        out.append(a_tA)
    if has_h:
        out.append(a_h)
    if has_c:
        out.append(a_c)
    return out


TRANSPOSE[cf.PLACEHOLDER] = _t_recurrence


def _outputs(b: Builder, state: Tangents, kind, layout, results, tys, ths, tcs, bshape, sdims,
             X, Y):
    """Stacks the per-direction tangents into Y, Y_h (and Y_c) layouts."""
    def zeros_like(lead_time):
        shape = b.concat([state.k] + ([b.shape(X, 0, 1)] if lead_time else []) + [bshape], 0)
        return _zeros(b, shape, [None] + ([dims(X)[0]] if lead_time else []) + sdims, X)

    def stack(parts, axis, lead_time):
        if all(p is None for p in parts):
            return None
        parts = [zeros_like(lead_time) if p is None else p for p in parts]
        parts = [b.unsqueeze(p, [axis]) for p in parts]
        return parts[0] if len(parts) == 1 else b.concat(parts, axis)

    ty = stack(tys, 2, True)
    th = stack(ths, 1, False)
    tc = stack(tcs, 1, False) if kind == "LSTM" else None
    if layout:
        ty = None if ty is None else b.transpose(ty, [0, 3, 1, 2, 4])
        th = None if th is None else b.transpose(th, [0, 2, 1, 3])
        tc = None if tc is None else b.transpose(tc, [0, 2, 1, 3])
    for r, v in zip(results, (ty, th, tc)):
        if v is not None and not isinstance(r.type, ir.NoneType):
            state.of[r] = b.fit(v, r) if dims(r) is not None else v


for _t in ("RNN", "GRU", "LSTM"):
    for _n in mlir_names(_t):
        REGION_RULES[_n] = _rule
