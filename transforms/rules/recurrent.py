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
All directions run in one Scan: arrays are [T, D, B, *] in processing order
(the reverse direction's time flipped), state [k, D, B, H].

LSTM peepholes P: i and f read c_{t-1}, so the cell-state Scan computes them;
their terms fold into the coefficients of tc (the step keeps its form).

sequence_lens (constant or not, ragged): a mask of the steps each sequence
takes makes the step past its length the identity (folded into the
coefficients) and zeroes tY there; the reverse direction's processing order
is a ReverseSequence by the lengths instead of a flip.

LSTM input_forget: f = 1 - i, so ti multiplies g - c_{t-1} and tf drops out.

clip: the recomputed gates clip their pre-activations, and the activation
derivatives are zero where the clip was active.

Activations: Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, HardSigmoid, Elu,
Softsign, Softplus, ScaledTanh, Affine (alpha/beta consumed in order).

Refused: other activations, ScaledTanh/Affine without alpha/beta, LeakyRelu
and ThresholdedRelu with a negative alpha.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from onnx_ad_mlir.errors import ImportFailure, UnsupportedOp

from .. import symdims
from ..builder import Builder, attribute, constant_ints, constant_uniform, constant_value, \
    defining_op, dims, element_type, operand_or_none, op_type, producer, rank, tensor_type
from ..linearize import REGION_RULES, STANDS_FOR, Tangents
from ..registry import TRANSPOSE, mlir_names
from . import control_flow as cf
from .linalg import matmul

_ACTS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "leakyrelu": "LeakyRelu",
         "thresholdedrelu": "ThresholdedRelu", "hardsigmoid": "HardSigmoid", "elu": "Elu",
         "softsign": "Softsign", "softplus": "Softplus", "scaledtanh": None, "affine": None}
# activation_alpha/beta are consumed in order by the activations that take them
# (ONNX Runtime's rule); defaults are the ONNX ops' (none for ScaledTanh/Affine)
_ALPHA = {"leakyrelu": 0.01, "thresholdedrelu": 1.0, "hardsigmoid": 0.2, "elu": 1.0,
          "scaledtanh": None, "affine": None}
_BETA = {"hardsigmoid": 0.5, "scaledtanh": None, "affine": None}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RECURRENCES: dict[int, dict] = {}  # stand-in id -> what its transpose needs
RECURRENCE = "onnx_ad.recurrence"
# On a reverse recurrence Scan: its first state is [k, D, B, *] (k = seed count)
K_STATE = "onnx_ad.k_state"
# On an LSTM's reverse Scan laid out as pipelined_pair reads it: one
# direction, operands [a_h, a_c, (ct_y), de, ff, ohc], the step matrix made
# in the body from a constant R, the adjoint of tA its one scan output
LSTM_STEP = "onnx_ad.lstm_step"


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


def _act(b: Builder, spec: tuple, x: ir.Value) -> ir.Value:
    name, alpha, beta = spec
    if name == "scaledtanh":
        return b.mul(b.scalar(alpha, x), b.ew("Tanh", b.mul(b.scalar(beta, x), x)))
    if name == "affine":
        return b.add(b.mul(b.scalar(alpha, x), x), b.scalar(beta, x))
    attrs = {"alpha": alpha} if alpha is not None else {}
    if beta is not None:
        attrs["beta"] = beta
    return b.ew(_ACTS[name], x, **attrs)


def _act_grad(b: Builder, spec: tuple, y: ir.Value) -> ir.Value:
    """f'(a) from y = f(a) (LeakyRelu/ThresholdedRelu: alpha >= 0, checked)."""
    name, alpha, beta = spec
    one = b.scalar(1.0, y)
    pos = lambda: b.cast_like(b.compare("Greater", y, b.scalar(0.0, y)), y)
    if name == "sigmoid":
        return b.mul(y, b.sub(one, y))
    if name == "tanh":
        return b.sub(one, b.mul(y, y))
    if name in ("relu", "thresholdedrelu"):
        return pos()
    if name == "leakyrelu":  # 1 where y > 0, alpha elsewhere
        return b.add(b.scalar(alpha, y), b.mul(b.scalar(1.0 - alpha, y), pos()))
    if name == "elu":  # 1 where y > 0, y + alpha elsewhere
        m = pos()
        return b.add(m, b.mul(b.sub(one, m), b.add(y, b.scalar(alpha, y))))
    if name == "hardsigmoid":
        inside = b.op("And", [b.compare("Greater", y, b.scalar(0.0, y)),
                              b.compare("Less", y, one)],
                      tensor_type(dims(y), ir.IntegerType.get_signless(1)))
        return b.mul(b.scalar(alpha, y), b.cast_like(inside, y))
    if name == "softsign":  # 1 / (1 + |x|)^2 = (1 - |y|)^2
        t = b.sub(one, b.ew("Abs", y))
        return b.mul(t, t)
    if name == "softplus":  # sigmoid(x) = 1 - exp(-y)
        return b.sub(one, b.ew("Exp", b.neg(y)))
    if name == "scaledtanh":  # alpha beta (1 - (y / alpha)^2)
        return b.mul(b.scalar(beta, y), b.sub(b.scalar(alpha, y),
                                              b.mul(b.scalar(1.0 / alpha, y), b.mul(y, y))))
    return b.add(b.mul(b.scalar(0.0, y), y), b.scalar(alpha, y))  # affine


def _add(b: Builder, a, c):
    if a is None:
        return c
    if c is None:
        return a
    return b.add(a, c)


def _flip(b: Builder, v: ir.Value, axis: int) -> ir.Value:
    """v reversed along axis (a Slice with step -1; its own transpose)."""
    return b.slice(v, [axis], [-1], [-2**62], v.type, steps=[-1])


def _revseq(b: Builder, v: ir.Value, d_axis: int, lens: ir.Value) -> ir.Value:
    """[*L, T, 1, B, ..]: each batch entry's first lens[b] steps reversed
    (ReverseSequence wants time and batch as axes 0 and 1)."""
    u = b.squeeze(v, [d_axis])
    n = d_axis - 1
    r = len(dims(u))
    perm = [n, n + 1] + list(range(n)) + list(range(n + 2, r))
    moved = b.transpose(u, perm) if n else u
    rev = b.op("ReverseSequence", [moved, lens], moved.type, time_axis=0, batch_axis=1)
    back = b.transpose(rev, [perm.index(i) for i in range(r)]) if n else rev
    return b.unsqueeze(back, [d_axis])


def _porder(b: Builder, v: ir.Value, d_axis: int, revs: list[bool],
            lens: ir.Value | None = None) -> ir.Value:
    """[.., T, D, ..] between time order and processing order (self-inverse).
    With sequence_lens, the reverse direction reverses each batch entry's
    own steps (the zero steps past its length stay in place)."""
    if not any(revs):
        return v
    flip = (lambda p: _flip(b, p, d_axis - 1)) if lens is None else \
        (lambda p: _revseq(b, p, d_axis, lens))
    if len(revs) == 1:
        return flip(v)
    d = dims(v)
    half = tensor_type(d[:d_axis] + [1] + d[d_axis + 1:], element_type(v))
    if b.opset >= 13:
        parts = b.create("Split", [v, b.ints([1, 1])], [half, half], axis=d_axis)
    else:
        parts = b.create("Split", [v], [half, half], axis=d_axis, split=[1, 1])
    return b.concat([flip(p) if r else p for p, r in zip(parts, revs)], d_axis)


def _unflat(b: Builder, p: ir.Value, X: ir.Value) -> ir.Value:
    """[*L, D, T*B, m] -> [*L, T, D, B, m] (T, B from X [T, B, I])."""
    dp, dx = dims(p), dims(X)
    n = len(dp) - 3
    shape = b.concat([b.shape(p, 0, n + 1), b.shape(X, 0, 2), b.ints([dp[-1]])], 0)
    u = b.reshape(p, shape, dp[:n + 1] + dx[:2] + [dp[-1]])
    return b.transpose(u, list(range(n)) + [n + 1, n, n + 2, n + 3])


SMALL = 1 << 16  # MACs below which one broadcast MatMul beats flattening


def _small(X: ir.Value, a: ir.Value, M: ir.Value) -> bool:
    """Few enough multiply-adds that node count, not GEMM shape, decides."""
    T, B = dims(X)[:2]
    dm = dims(M)
    if None in (T, B) or None in dm[-3:]:
        return False
    return T * B * dm[-3] * dm[-2] * dm[-1] <= SMALL


def _direct(b: Builder, a: ir.Value, M: ir.Value) -> ir.Value:
    """a [*L, T, D|1, B, n] times M [*L', D, n, m] as one broadcast MatMul."""
    if len(dims(a)) == 4 and len(dims(M)) == 4:  # primal x tangent: [1,T,..] x [k,1,..]
        a, M = b.unsqueeze(a, [0]), b.unsqueeze(M, [1])
    return matmul(b, a, M)


def _one_dir(M: ir.Value) -> bool:
    """M [1, n, m]: one direction, no leading derivative axes. A MatMul by its
    2-D matrix is one GEMM over all leading axes of the other factor (ONNX
    Runtime folds them), with no Reshape or Transpose around it."""
    d = dims(M)
    return d is not None and len(d) == 3 and d[0] == 1


def _bmm(b: Builder, a: ir.Value, M: ir.Value, X: ir.Value) -> ir.Value:
    """a [*L, T, D, B, n] times M [*L', D, n, m] per direction -> [*L, T, D, B, m]:
    one [T*B, n] x [n, m] product per direction (not T*D small ones)."""
    if _one_dir(M):
        return matmul(b, a, b.squeeze(M, [0]))
    if _small(X, a, M):
        return _direct(b, a, M)
    da = dims(a)
    n = len(da) - 4
    moved = b.transpose(a, list(range(n)) + [n + 1, n, n + 2, n + 3])
    T, D, B = da[n:n + 3]
    flat = b.reshape(moved, [0] * (n + 1) + [-1, da[-1]],
                     da[:n] + [D, None if None in (T, B) else T * B, da[-1]])
    return _unflat(b, matmul(b, flat, M), X)


def _xmm(b: Builder, x: ir.Value, M: ir.Value, X: ir.Value) -> ir.Value:
    """x [*L, T, B, n] (no direction axis, time order) times M [*L', D, n, m]
    -> [*L, T, D, B, m] in time order."""
    if _one_dir(M):
        return b.unsqueeze(matmul(b, x, b.squeeze(M, [0])), [len(dims(x)) - 2])
    if _small(X, x, M):
        return _direct(b, b.unsqueeze(x, [len(dims(x)) - 2]), M)
    dx = dims(x)
    n = len(dx) - 3
    T, B = dx[n:n + 2]
    width = dims(M)[-2]  # X's feature extent, static even where X's type lost it
    flat = b.reshape(x, [0] * n + [-1, width],
                     dx[:n] + [None if None in (T, B) else T * B, width])
    if n:
        flat = b.unsqueeze(flat, [n])  # [*L, 1, T*B, n]: broadcasts against D
    return _unflat(b, matmul(b, flat, M), X)


def _per_dir(b: Builder, fn, names: list[str], x: ir.Value, d_axis: int) -> ir.Value:
    """fn(name, x) applied per direction (one op when all directions agree)."""
    if len(set(names)) == 1:
        return fn(b, names[0], x)
    return b.concat([fn(b, nm, _slice(b, x, d_axis, d, d + 1)) for d, nm in enumerate(names)],
                    d_axis)


# ---- the per-cell recurrences ---------------------------------------------------------
# All directions at once: primal arrays are [T, D, B, *] in processing order
# (the reverse direction's time flipped), so one Scan runs every direction
# forward in time; tangents carry [k] in front.

class _Cell:
    def __init__(self, kind, acts, H, lbr, revs):
        self.kind, self.acts, self.H, self.lbr, self.revs = kind, acts, H, lbr, revs
        self.G = _GATES[kind]

    def act(self, j):
        """The names of activation j for each direction."""
        n = len(_DEFAULT_ACTS[self.kind])
        return [self.acts[d * n + j] for d in range(len(self.revs))]


def _primal(b: Builder, c: _Cell, Xp, W, R, Bv, Yp, h0, c0):
    """Per-step coefficients (scan inputs, [T, D, B, *]) and the primal values
    the tangent sources need. Xp [T, B, I] (time order), Yp [T, D, B, H]
    (processing order), h0/c0 [D, B, H]."""
    H, G = c.H, c.G
    Hprev = b.concat([b.unsqueeze(h0, [0]), _slice(b, Yp, 0, 0, -1)], 0)
    c.Hprev, c.X = Hprev, Xp
    c.R, c.WT = R, b.transpose(W, [0, 2, 1])
    c.RT = b.transpose(R, [0, 2, 1])
    A0, AG0 = (lambda j, x: _per_dir(b, _act, c.act(j), x, 1)), \
        (lambda j, y: _per_dir(b, _act_grad, c.act(j), y, 1))
    A = lambda j, x: A0(j, _clip(b, x, c.clip))  # clip: applied to activation inputs

    def AG(j, y, x=None):  # f' from the output; clip: zero where x was clipped
        d = AG0(j, y)
        return d if c.clip is None or x is None else b.mul(d, _clip_mask(b, x, c.clip))
    if c.kind == "RNN" and c.clip is None:  # h_t = f(a_t) is Y itself
        c.coefs = [AG(0, Yp)]
        return
    a = _porder(b, _xmm(b, Xp, c.WT, Xp), 1, c.revs, c.lens)
    wb = rb = None
    if Bv is not None:
        wb = b.unsqueeze(_slice(b, Bv, 1, 0, G * H), [1])
        rb = b.unsqueeze(_slice(b, Bv, 1, G * H, 2 * G * H), [1])  # [D, 1, GH]
    if c.kind != "GRU":
        # the biases added to each other first (a constant when B is): one
        # Add over [T, D, B, GH] fewer
        a = _add(b, b.add(a, _bmm(b, Hprev, c.RT, Xp)), _add(b, wb, rb))
    if c.kind == "RNN":
        c.coefs = [AG(0, Yp, a)]
        return
    if c.kind == "LSTM":
        g = A(1, _gate(b, a, 3, H))
        if c.P is None:
            iof = A(0, _gate(b, a, 0, H, 3))
            i, o, f = (_gate(b, iof, j, H) for j in range(3))
            if c.input_forget:
                f = b.sub(b.scalar(1.0, i), i)
            C = _cell_states(b, f, b.mul(i, g), c0)
        else:
            # peepholes: i, f read c_{t-1} (the cell-state Scan computes them),
            # o reads c_t
            pi, po, pf = (b.unsqueeze(_slice(b, c.P, 1, j * H, (j + 1) * H), [1])
                          for j in range(3))
            C, i, f = _peephole_states(b, c, _gate(b, a, 0, H), _gate(b, a, 2, H), g, c0,
                                       pi, pf)
            pre_o = b.add(_gate(b, a, 1, H), b.mul(po, C))
            o = A(0, pre_o)
            iof = b.concat([i, o, f], 3)
        Cprev = b.concat([b.unsqueeze(c0, [0]), _slice(b, C, 0, 0, -1)], 0)
        hc = A(2, C)
        c.C, c.Cprev = C, Cprev
        if _plain_lstm(c):
            c.coefs = _plain_lstm_coefs(b, iof, g, hc, Cprev, i, o, f, H)
            return
        if c.input_forget:  # f = 1 - i: tf = -ti, so ti multiplies g - c_{t-1}
            zero = b.expand(b.scalar(0.0, C), b.shape(C), dims(C))
            e = b.concat([b.sub(g, Cprev), hc, zero], 3)
        else:
            e = b.concat([g, hc, Cprev], 3)
        pre_iof = _gate(b, a, 0, H, 3)
        if c.P is not None and c.clip is not None:  # the activations' inputs
            pre_iof = b.concat([b.add(_gate(b, a, 0, H), b.mul(pi, Cprev)), pre_o,
                                b.add(_gate(b, a, 2, H), b.mul(pf, Cprev))], 3)
        de = b.concat([b.mul(AG(0, iof, pre_iof), e), b.mul(AG(1, g, _gate(b, a, 3, H)), i)],
                      3)
        ff, ohc = f, b.mul(o, AG(2, hc))
        if c.P is not None:
            # P_i tc_{t-1}, P_f tc_{t-1} and P_o tc_t fold into the coefficients
            # of tc_{t-1} and tc_t: the step keeps its form
            ff = b.sum([ff, b.mul(pi, _gate(b, de, 0, H)), b.mul(pf, _gate(b, de, 2, H))])
            ohc = b.add(ohc, b.mul(po, _gate(b, de, 1, H)))
        c.coefs = [de, ff, ohc]
        return
    # GRU: gates z, r, h
    a = _add(b, a, wb)
    c.Rzr, c.Rh = _slice(b, R, 1, 0, 2 * H), _slice(b, R, 1, 2 * H, 3 * H)
    c.RzrT, c.RhT = _slice(b, c.RT, 2, 0, 2 * H), _slice(b, c.RT, 2, 2 * H, 3 * H)
    hr = _bmm(b, Hprev, c.RT if c.lbr else c.RzrT, Xp)
    if rb is not None:
        hr = b.add(hr, rb if c.lbr else _slice(b, rb, 2, 0, 2 * H))
    a_zr = b.add(_gate(b, a, 0, H, 2), _gate(b, hr, 0, H, 2))
    zr = A(0, a_zr)
    z, r = _gate(b, zr, 0, H), _gate(b, zr, 1, H)
    if c.lbr:
        hr_h = _gate(b, hr, 2, H)  # Hprev Rh^T + Rbh
        a_h = b.add(_gate(b, a, 2, H), b.mul(r, hr_h))
    else:
        a_h = b.add(_gate(b, a, 2, H), _bmm(b, b.mul(r, Hprev), c.RhT, Xp))
        if rb is not None:
            a_h = b.add(a_h, _slice(b, rb, 2, 2 * H, 3 * H))
    hh = A(1, a_h)
    dzr, dh = AG(0, zr, a_zr), AG(1, hh, a_h)
    dz, dr = _gate(b, dzr, 0, H), _gate(b, dzr, 1, H)
    ch = b.mul(b.sub(b.scalar(1.0, z), z), dh)
    cz = b.mul(dz, b.sub(Hprev, hh))
    c.r = r
    if c.lbr:
        cr = b.mul(b.mul(ch, dr), hr_h)
        c.gru_parts = (cz, cr, ch, r, z)  # the tiled reverse step builds from these
        ones = b.expand(b.scalar(1.0, z), b.shape(zr), dims(zr))
        c.coefs = [b.concat([ones, r], 3), b.concat([cz, cr, ch], 3), z]
    else:
        c.coefs = [z, cz, b.mul(dr, Hprev), r, ch]


def _plain_lstm(c: _Cell) -> bool:
    """Default activations (Sigmoid, Tanh, Tanh), no peepholes, clip or
    input_forget, float32/64."""
    defaults = [(n.lower(), None, None) for n in _DEFAULT_ACTS["LSTM"]] * len(c.revs)
    return list(c.acts) == defaults and c.P is None and c.clip is None and \
        not c.input_forget and isinstance(element_type(c.Hprev), (ir.F32Type, ir.F64Type))


def _plain_lstm_coefs(b: Builder, iof, g, hc, Cprev, i, o, f, H: int) -> list:
    """de (the gates' activation derivatives times what each gate multiplies)
    and o h'(c) from one product: Sigmoid' = (1 - y) y and Tanh' = (1 - y)(1 + y)
    are (1 - y)(y + s) with s 0 or 1 per gate, so over [i, o, f, g, tanh(c)]

        [de | o h'(c)] = (1 - Y)(Y + s) [g, tanh(c), c_{t-1}, i, o]

    (seven ops over [T, D, B, 5H] instead of eleven over the gates)."""
    Y = b.concat([iof, g, hc], 3)
    el = element_type(Y)
    npt = np.float32 if isinstance(el, ir.F32Type) else np.float64
    s = b.constant(ir.DenseElementsAttr.get(np.repeat(np.array([0, 0, 0, 1, 1], npt), H)))
    d = b.mul(b.mul(b.sub(b.scalar(1.0, Y), Y), b.add(Y, s)),
              b.concat([g, hc, Cprev, i, o], 3))
    return [_gate(b, d, 0, H, 4), f, _gate(b, d, 4, H)]


def _clip(b: Builder, x: ir.Value, clip: float | None) -> ir.Value:
    if clip is None:
        return x
    if b.opset >= 11:
        return b.op("Clip", [x, b.scalar(-clip, x), b.scalar(clip, x)], x.type)
    return b.op("Clip", [x], x.type, min=-clip, max=clip)


def _clip_mask(b: Builder, x: ir.Value, clip: float) -> ir.Value:
    """1 where -clip < x < clip (Clip passes the tangent), else 0."""
    inside = b.op("And", [b.compare("Greater", x, b.scalar(-clip, x)),
                          b.compare("Less", x, b.scalar(clip, x))],
                  tensor_type(dims(x), ir.IntegerType.get_signless(1)))
    return b.cast_like(inside, x)


def _mask_coefs(b: Builder, c: _Cell) -> None:
    """Ragged sequences: past its length a sequence's step is the identity
    (th, tc kept), folded into the coefficients; RNN and LSTM get an extra
    coefficient `keep` for the th_prev term their step does not have."""
    m, keep = c.mask, c.keep
    cs = c.coefs
    if c.kind == "RNN":
        c.coefs = [b.mul(cs[0], m), keep]
    elif c.kind == "LSTM":
        de, ff, ohc = cs
        c.coefs = [b.mul(de, m), b.add(b.mul(ff, m), keep), b.mul(ohc, m), keep]
    elif c.lbr:
        k_, cc, z = cs
        c.coefs = [k_, b.mul(cc, m), b.add(b.mul(z, m), keep)]
    else:
        z, cz, q, r, ch = cs
        c.coefs = [b.add(b.mul(z, m), keep), b.mul(cz, m), q, r, b.mul(ch, m)]


def _cell_states(b: Builder, ff, ig, c0):
    """c_t = f_t c_{t-1} + i_t g_t for all t (processing order): an elementwise Scan."""
    scan = cf._create("onnx." + _resolve_scan(b), [c0, ff, ig], [c0.type, ff.type],
                      _scan_attrs(2, [0, 0], [0, 0], [0], [0]), b.location, 1)
    elem = tensor_type(dims(c0), element_type(c0))
    blk = scan.regions[0].blocks.append(c0.type, elem, elem)
    cp, f_t, ig_t = blk.arguments
    with ir.InsertionPoint(blk):
        fc = b.mul(f_t, cp)
        # f_t c_{t-1} is the scan output, c_t = f_t c_{t-1} + i_t g_t is added
        # for all t at once after the Scan: two ops per step (yielding c_t as
        # state and output would cost a copy per step)
        cf._yield(blk, [b.add(fc, ig_t), fc], b.location)
    return b.add(scan.results[1], ig)


def _peephole_states(b: Builder, c: _Cell, a_i, a_f, g, c0, pi, pf):
    """LSTM with peepholes: i_t = f(a_i + P_i c_{t-1}), f_t = f(a_f + P_f c_{t-1}),
    c_t = f_t c_{t-1} + i_t g_t, per step (elementwise); returns C, I, F."""
    scan = cf._create("onnx." + _resolve_scan(b), [c0, a_i, a_f, g], [c0.type] + [g.type] * 3,
                      _scan_attrs(3, [0] * 3, [0] * 3, [0] * 3, [0] * 3), b.location, 1)
    elem = tensor_type(dims(c0), element_type(c0))
    blk = scan.regions[0].blocks.append(c0.type, elem, elem, elem)
    cp, ai, af, gt = blk.arguments
    with ir.InsertionPoint(blk):
        act = lambda x: _per_dir(b, _act, c.act(0), x, 0)
        i = act(_clip(b, b.add(ai, b.mul(pi, cp)), c.clip))
        f = b.sub(b.scalar(1.0, i), i) if c.input_forget else \
            act(_clip(b, b.add(af, b.mul(pf, cp)), c.clip))
        ct = b.add(b.mul(f, cp), b.mul(i, gt))
        cf._yield(blk, [ct, ct, i, f], b.location)
    return scan.results[1], scan.results[2], scan.results[3]


def _resolve_scan(b: Builder) -> str:
    from ..builder import resolve
    if b.opset < 9:
        raise UnsupportedOp("its derivative is a Scan over time, and before opset 9 Scan is "
                            "batched (Scan-8) or missing; re-export at opset >= 9")
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


def _sum_all_gates(b: Builder, u: ir.Value, H: int) -> ir.Value:
    """The sum of a [..., 3H] value's 3 gates, as its product with 3 stacked
    H x H identities (float32/64; slices and a Sum otherwise): one kernel
    launch per step instead of 4. Same sums (a product by 1 and adds of 0
    are exact), but for an infinite element, which makes its row NaN (the
    next step's product by R mixes the row anyway). Measured (in-process
    A/B, x primal) on the GRU's tangent step: forward 6.53 -> 5.69,
    Hessian-vector 15.5 -> 14.4; the LSTM's (three of four gates, the fourth
    sliced anyway) got slower, 7.72 -> 8.02, so it keeps its slices. The
    product costs 3H^2 multiply-adds per row against the Sum's 3H adds: only
    small H (the measured H = 32 and below) take it."""
    d, elem = dims(u), element_type(u)
    dtype = np.float32 if isinstance(elem, ir.F32Type) else \
        np.float64 if isinstance(elem, ir.F64Type) else None
    if dtype is None or d is None or d[-1] is None or H > 32:
        return _sum_gates(b, u, range(3), H)
    eyes = np.tile(np.eye(H, dtype=dtype), (d[-1] // H, 1))
    return b.op("MatMul", [u, b.constant(ir.DenseElementsAttr.get(eyes))],
                tensor_type(d[:-1] + [H], elem))


def _step_names(c: _Cell, transposed: bool) -> tuple[str, ...]:
    if c.kind == "GRU" and not c.lbr:
        return ("RzrT", "RhT") if transposed else ("Rzr", "Rh")
    return ("RT",) if transposed else ("R",)


def _step_mats(b: Builder, c: _Cell, transposed: bool) -> dict | None:
    """The recurrent matrices a step multiplies by ([D, n, m], made before the
    Scan); None for the reverse step of an LSTM with a constant R: _body_mats
    makes its matrix in the body. Measured only there: a 2-D outer matrix made
    the forward Scan slower, the GRU's tiled [4H, 4H] got slower in the body."""
    if c.kind == "LSTM" and not transposed and constant_value(c.R) is not None:
        return None
    return {n: getattr(c, n) for n in _step_names(c, transposed)}


def _body_mats(b: Builder, c: _Cell, mats: dict | None) -> dict:
    """The step matrices inside the body (its insertion point). An LSTM's
    [4H, H] from a constant R is squeezed there (one direction): ONNX Runtime
    folds it to a constant of the body and prepacks the MatMul's 2-D right
    operand, which it does not for a value from outside the body (2-layer
    LSTM, T = 20: reverse Scan -7..12%, in-process A/B of the Scan alone)."""
    if mats is not None:
        return mats
    return {"R": b.squeeze(c.R, [0]) if len(c.revs) == 1 else c.R}


def _fwd_step(b: Builder, c: _Cell, m: dict, th, tc, tA, coefs):
    """One tangent step on [k, D, B, *] (m: _step_mats); returns (th_t, tc_t)."""
    H = c.H
    if c.kind == "RNN":
        th_new = b.mul(_add(b, tA, matmul(b, th, m["RT"])), coefs[0])
        return (th_new if len(coefs) == 1 else b.add(th_new, b.mul(coefs[1], th))), None
    if c.kind == "LSTM":
        de, ff, ohc = coefs[:3]
        u = b.mul(_add(b, tA, matmul(b, th, m["RT"])), de)
        tc_new = b.add(_sum_gates(b, u, (0, 2, 3), H), b.mul(ff, tc))
        th_new = b.add(_gate(b, u, 1, H), b.mul(ohc, tc_new))
        if len(coefs) > 3:
            th_new = b.add(th_new, b.mul(coefs[3], th))
        return th_new, tc_new
    if c.lbr:
        k_, cc, z = coefs
        s = _add(b, tA, b.mul(matmul(b, th, m["RT"]), k_))
        return b.add(_sum_all_gates(b, b.mul(s, cc), H), b.mul(z, th)), None
    z, cz, q, r, ch = coefs
    s = _add(b, None if tA is None else _gate(b, tA, 0, H, 2), matmul(b, th, m["RzrT"]))
    v = b.add(b.mul(_gate(b, s, 1, H), q), b.mul(r, th))
    inner = _add(b, None if tA is None else _gate(b, tA, 2, H), matmul(b, v, m["RhT"]))
    return b.sum([b.mul(ch, inner), b.mul(cz, _gate(b, s, 0, H)), b.mul(z, th)]), None


def _rev_step(b: Builder, c: _Cell, m: dict, g, ac, coefs):
    """Transpose of one step: g = adjoint of th_t (carried + adjoint of y_t),
    ac = adjoint of tc_t (m: _step_mats). Returns (adjoint of tA_t, of th_prev,
    of tc_prev)."""
    last = len(dims(g)) - 1
    if c.kind == "RNN":
        a_s = b.mul(g, coefs[0])
        a_prev = matmul(b, a_s, m["R"])
        return a_s, (a_prev if len(coefs) == 1 else b.add(a_prev, b.mul(g, coefs[1]))), None
    if c.kind == "LSTM":
        de, ff, ohc = coefs[:3]
        act = b.add(ac, b.mul(g, ohc))
        a_u = b.mul(b.concat([act, g, act, act], last), de)
        a_prev = matmul(b, a_u, m["R"])
        if len(coefs) > 3:
            a_prev = b.add(a_prev, b.mul(g, coefs[3]))
        return a_u, a_prev, b.mul(act, ff)
    if c.lbr:
        k_, cc, z = coefs
        a_s = b.mul(b.concat([g, g, g], last), cc)
        return a_s, b.add(b.mul(g, z), matmul(b, b.mul(a_s, k_), m["R"])), None
    z, cz, q, r, ch = coefs
    a_h = b.mul(g, ch)
    a_v = matmul(b, a_h, m["Rh"])
    a_zr = b.concat([b.mul(g, cz), b.mul(a_v, q)], last)
    a_prev = b.sum([b.mul(g, z), b.mul(a_v, r), matmul(b, a_zr, m["Rzr"])])
    return b.concat([a_zr, a_h], last), a_prev, None


def _state_type(c: _Cell, el) -> ir.Type:
    return tensor_type([None] + dims(c.Hprev)[1:], el)


def _forward_scan(b: Builder, c: _Cell, tA, th0, tc0):
    """th (and tc) over processing time; returns (tYp [k,T,D,B,H], th_last, tc_last)."""
    lstm = c.kind == "LSTM"
    el = element_type(th0)
    carried = [th0] + ([tc0] if lstm else [])
    scans = ([tA] if tA is not None else []) + c.coefs
    axes = ([1] if tA is not None else []) + [0] * len(c.coefs)
    y_type = tensor_type([None] + dims(c.Hprev), el)
    st = _state_type(c, el)
    mats = _step_mats(b, c, True)
    scan = cf._create("onnx." + _resolve_scan(b), carried + scans, [st] * len(carried) + [y_type],
                      _scan_attrs(len(scans), axes, [0] * len(scans), [1], [0]), b.location, 1)
    elem = [tensor_type([None] + dims(tA)[2:], el)] if tA is not None else []
    elem += [tensor_type(dims(v)[1:], element_type(v)) for v in c.coefs]
    blk = scan.regions[0].blocks.append(*([st] * len(carried) + elem))
    args = list(blk.arguments)
    th, tc = args[0], (args[1] if lstm else None)
    rest = args[len(carried):]
    tA_t = rest[0] if tA is not None else None
    coefs = rest[1:] if tA is not None else rest
    with ir.InsertionPoint(blk):
        th_new, tc_new = _fwd_step(b, c, _body_mats(b, c, mats), th, tc, tA_t, coefs)
        cf._yield(blk, [th_new] + ([tc_new] if lstm else []) + [th_new], b.location)
    res = list(scan.results)
    return res[-1], res[0], (res[1] if lstm else None)


def _reverse_scan(b: Builder, c: _Cell, ct_y, ct_h, ct_c, k, need_tA: bool):
    """The transpose of _forward_scan: (adjoint of tA, of th0, of tc0)."""
    if c.kind == "GRU" and c.lbr and _tileable(c):
        return _reverse_scan_gru_tiled(b, c, ct_y, ct_h, k, need_tA)
    lstm = c.kind == "LSTM"
    el = element_type(c.Hprev)
    st = _state_type(c, el)
    zeros = lambda: b.zeros(b.concat([k, b.shape(c.Hprev, 1)], 0), dims(st), c.Hprev)
    a_h = ct_h if ct_h is not None else zeros()
    a_c = (ct_c if ct_c is not None else zeros()) if lstm else None
    carried = [a_h] + ([a_c] if lstm else [])
    scans = ([ct_y] if ct_y is not None else []) + c.coefs
    axes = ([1] if ct_y is not None else []) + [0] * len(c.coefs)
    out_types = [tensor_type([None] + dims(c.Hprev)[:3] + [c.G * c.H], el)] if need_tA else []
    mats = _step_mats(b, c, False)
    scan = cf._create("onnx." + _resolve_scan(b), carried + scans,
                      [st] * len(carried) + out_types,
                      _scan_attrs(len(scans), axes, [1] * len(scans), [1] * len(out_types),
                                  [1] * len(out_types)), b.location, 1)
    scan.attributes[K_STATE] = ir.UnitAttr.get()
    if lstm and mats is None and len(c.revs) == 1 and len(c.coefs) == 3 and need_tA:
        scan.attributes[LSTM_STEP] = ir.UnitAttr.get()
    elem = [st] if ct_y is not None else []
    elem += [tensor_type(dims(v)[1:], element_type(v)) for v in c.coefs]
    blk = scan.regions[0].blocks.append(*([st] * len(carried) + elem))
    args = list(blk.arguments)
    gh, gc = args[0], (args[1] if lstm else None)
    rest = args[len(carried):]
    coefs = rest[1:] if ct_y is not None else rest
    with ir.InsertionPoint(blk):
        g = b.add(gh, rest[0]) if ct_y is not None else gh
        a_tA, a_prev, a_cprev = _rev_step(b, c, _body_mats(b, c, mats), g, gc, coefs)
        cf._yield(blk, [a_prev] + ([a_cprev] if lstm else []) + ([a_tA] if need_tA else []),
                  b.location)
    res = list(scan.results)
    return (res[-1] if need_tA else None), res[0], (res[1] if lstm else None)


def _body_matrix(scan: ir.Operation) -> ir.Value | None:
    """The constant R [1, 4H, H] an LSTM_STEP Scan's body squeezes for its MatMul."""
    for o in scan.regions[0].blocks[0].operations:
        op = o.operation
        if op_type(op) == "MatMul":
            sq = producer(op.operands[1], "Squeeze")
            if sq is None or defining_op(sq.operands[0]) is None:
                return None
            return sq.operands[0] if constant_value(sq.operands[0]) is not None else None
    return None


def _is_zeros(v: ir.Value) -> bool:
    """v is an Expand of the constant 0 (Builder.zeros)."""
    op = producer(v, "Expand")
    return op is not None and constant_uniform(op.operands[0]) == 0.0


# pipelined_pair pays for its fewer ops with a MatMul by [8H, 2H] (a quarter
# zeros) where the two layers' were [4H, H] three times: more multiply-adds
# and matrix bytes a step, which win over op count only for small H (2-layer
# LSTM, T = 20, B = 4, 1 thread, reverse time pipelined / sequential: H = 16
# 0.88, 32 0.91, 48 0.97, 64 1.01-1.03, 128 1.09; H = 32: B = 8 0.96, 16 1.01,
# 32 1.05)
PIPELINE_MAX_H = 32
# ... and a batch known to be larger than this (a symbolic batch is taken as
# small: the control and ODE models this serves run few trajectories).
PIPELINE_MAX_BATCH = 8


def pipelined_pair(s1: ir.Operation, s2: ir.Operation, w: ir.Value, b: Builder) -> dict | None:
    """Stacked LSTM layers' reverse Scans, layer l+1's (s1) feeding layer l's
    (s2) its adjoint of tA times w [4H, H] step by step, as one Scan whose
    iteration i runs layer l+1's step at time i and layer l's at time i + 1
    (one step behind, T + 1 iterations; each layer's arrays get one padding
    step, coefficients 0 and ff 1: the pad step passes the cell adjoint on and
    adds nothing). Both layers' elementwise ops then run once on [l+1 | l]
    side by side, and one MatMul by

        M = per gate x: [[R_{l+1,x}, w_x], [0, R_{l,x}]]   ([8H, 2H])

    gives layer l+1's next adjoint of h and layer l's adjoint of h plus its
    input adjoint at once: seven ops a step instead of fifteen (bench lstm,
    H = 32, T = 20, B = 4, 1 thread: reverse model 0.92x time, interleaved
    A/B; only up to H = PIPELINE_MAX_H).
    Layer l's adjoint of h is one sum over K = 8H (zero products included)
    where it was two sums and an Add: rounding-level differences; the rest
    are the same products and sums. Needs layer l's initial adjoint of h zero
    (its pad step cannot add it) and layer l+1's final one unread (the pad
    step's MatMul drops it). Emits before s2; returns {old result: new value}
    or None."""
    if LSTM_STEP not in s1.attributes or LSTM_STEP not in s2.attributes:
        return None
    m1 = ir.IntegerAttr(s1.attributes["num_scan_inputs"]).value
    o1, o2 = list(s1.operands), list(s2.operands)
    de2, ff2, ohc2 = o1[-3:]
    de1, ff1, ohc1 = o2[-3:]
    cty = o1[2] if m1 == 4 else None
    R2, R1 = _body_matrix(s1), _body_matrix(s2)
    el = element_type(de1)
    G4 = dims(de1)[-1]
    if R2 is None or R1 is None or G4 is None or G4 % 4 or G4 > 4 * PIPELINE_MAX_H or \
            dims(de2)[-1] != G4 or \
            dims(w) != [G4, G4 // 4] or dims(R2) != [1, G4, G4 // 4] or \
            dims(R1) != [1, G4, G4 // 4] or element_type(de2) != el or \
            not isinstance(el, (ir.F32Type, ir.F64Type)) or \
            any(True for _ in s1.results[0].uses) or not _is_zeros(o2[0]) or \
            (dims(de1)[-2] or 0) > PIPELINE_MAX_BATCH:
        return None
    from ..legalize import scan_axes
    if scan_axes(s1, "scan_input_axes", m1)[-3:] != [0] * 3 or \
            scan_axes(s2, "scan_input_axes", 4)[-3:] != [0] * 3 or \
            scan_axes(s1, "scan_output_axes", 1) != scan_axes(s2, "scan_output_axes", 1):
        return None
    H = G4 // 4
    npt = np.float32 if isinstance(el, ir.F32Type) else np.float64

    def pad(v, front: bool, value: float = 0.0):  # one step along axis 0
        d = dims(v)
        r = len(d)
        pads = [1 if front else 0] + [0] * (r - 1) + [0 if front else 1] + [0] * (r - 1)
        out = tensor_type([None if d[0] is None else d[0] + 1] + d[1:], el)
        return b.pad(v, pads, out, None if value == 0.0 else value)

    def gates(v):  # [T+1, 1, B, 4H] -> [T+1, 1, B, 4, 1, H]
        return b.reshape(v, [0, 0, 0, 4, 1, H], dims(v)[:3] + [4, 1, H])

    de = b.concat([gates(pad(de2, True)), gates(pad(de1, False))], 4)
    de = b.reshape(de, [0, 0, 0, 8 * H], dims(de)[:3] + [8 * H])
    ff = b.concat([pad(ff2, True, 1.0), pad(ff1, False, 1.0)], 3)
    ohc = b.concat([pad(ohc2, True), pad(ohc1, False)], 3)
    scans, axes = [de, ff, ohc], [0, 0, 0]
    if cty is not None:  # one step more along its scan axis, layer l's half zero
        ax = scan_axes(s1, "scan_input_axes", m1)[0]
        d = dims(cty)
        pads = [0] * 2 * len(d)
        pads[ax], pads[-1] = 1, H
        out = [None if i == ax and e is None else e + 1 if i == ax else e
               for i, e in enumerate(d[:-1])] + [2 * H]
        scans.insert(0, b.pad(cty, pads, tensor_type(out, el)))
        axes.insert(0, ax)
    z0, ac0 = b.concat([o1[0], o2[0]], 3), b.concat([o1[1], o2[1]], 3)
    blocks = lambda v: b.reshape(v, [4, 1, H, H], [4, 1, H, H])
    zero = b.constant(ir.DenseElementsAttr.get(np.zeros((4, 1, H, H), npt)))
    M = b.concat([b.concat([blocks(R2), blocks(w)], 3), b.concat([zero, blocks(R1)], 3)], 1)
    M = b.reshape(M, [8 * H, 2 * H], [8 * H, 2 * H])
    st = z0.type
    oax = scan_axes(s2, "scan_output_axes", 1)[0]  # where s2 put the steps
    au_type = tensor_type([None if i == oax else e
                           for i, e in enumerate(dims(s2.results[2])[:-1])] + [8 * H], el)
    n = len(scans)
    scan = cf._create("onnx." + _resolve_scan(b), [z0, ac0] + scans, [st, st, au_type],
                      _scan_attrs(n, axes, [1] * n, [oax], [1]), b.location, 1)
    elem = [tensor_type(dims(v)[:ax] + dims(v)[ax + 1:], el) for v, ax in zip(scans, axes)]
    blk = scan.regions[0].blocks.append(st, st, *elem)
    args = list(blk.arguments)
    from ..merge_scans import _in_body
    with ir.InsertionPoint(blk):
        g = b.add(args[0], args[2]) if cty is not None else args[0]
        de_t, ff_t, ohc_t = args[-3:]
        act = b.add(args[1], b.mul(g, ohc_t))
        a_u = b.mul(b.concat([act, g, act, act], 3), de_t)
        cf._yield(blk, [matmul(b, a_u, _in_body(blk, M)), b.mul(act, ff_t), a_u], b.location)
    zf, acf, au = scan.results
    au7 = b.reshape(au, [0, 0, 0, 0, 4, 2, H], dims(au)[:4] + [4, 2, H])

    def layer(old: ir.Value, start: int, end: int, half: int) -> ir.Value:
        part = b.slice(au7, [oax, 5], [start, half], [end, half + 1],
                       tensor_type(dims(old)[:4] + [4, 1, H], el))
        return b.reshape(part, [0, 0, 0, 0, G4], dims(old))

    out = {s2.results[2]: layer(s2.results[2], 0, -1, 1),
           s2.results[0]: b.slice(zf, [3], [H], [2 * H], s2.results[0].type),
           s2.results[1]: b.slice(acf, [3], [H], [2 * H], s2.results[1].type),
           s1.results[1]: b.slice(acf, [3], [0], [H], s1.results[1].type)}
    if any(True for _ in s1.results[2].uses):
        out[s1.results[2]] = layer(s1.results[2], 1, 2**62, 0)
    return out


def _tileable(c: _Cell) -> bool:
    el = element_type(c.Hprev)
    d = dims(c.R)
    return isinstance(el, (ir.F32Type, ir.F64Type)) and d is not None and \
        None not in d


def _reverse_scan_gru_tiled(b: Builder, c: _Cell, ct_y, ct_h, k, need_tA: bool):
    """GRU (linear_before_reset) reverse recurrence with the state carried four
    times over, [g, g, g, g] (4H): one step is then

        g4 = gh4 + ct_y4;  gh4' = (g4 * [cc k_ | z]) @ R4;  a4 = g4 * [cc | z]

    with R4 = [[R R R R]; [I I I I]] (the z term g z rides on the identity
    block), so the adjoint of tA (a4's first 3H) and the next state come from
    three elementwise ops and one MatMul (was seven ops: the Concat of g, the
    separate z term and its Add). Same products and sums as _rev_step."""
    H, D = c.H, len(c.revs)
    el = element_type(c.Hprev)
    npt = np.float32 if isinstance(el, ir.F32Type) else np.float64
    k_, cc, z = c.coefs
    last = len(dims(z)) - 1
    parts = getattr(c, "gru_parts", None)
    if c.mask is None and parts is not None:  # the same values, fewer ops
        cz, cr, ch, r, z = parts
        V = b.concat([cz, cr, b.mul(ch, r), z], last)  # [T, D, B, 4H]
        CC = b.concat([cz, cr, ch, z], last)  # the z part of its product is sliced away
    else:
        V = b.concat([b.mul(cc, k_), z], last)
        CC = b.concat([cc, z], last)
    eye = b.constant(ir.DenseElementsAttr.get(
        np.ascontiguousarray(np.broadcast_to(np.tile(np.eye(H, dtype=npt), (1, 4)), (D, H, 4 * H)))))
    R4 = b.concat([b.concat([c.R] * 4, 2), eye], 1)  # [D, 4H, 4H]
    if D == 1:
        R4 = b.squeeze(R4, [0])
    tile = lambda v: b.concat([v] * 4, len(dims(v)) - 1)
    st = tensor_type([None] + dims(c.Hprev)[1:3] + [4 * H], el)
    if ct_h is None:
        gh0 = b.zeros(b.concat([k, b.shape(c.Hprev, 1, 3), b.ints([4 * H])], 0), dims(st),
                     c.Hprev)
    else:
        gh0 = tile(ct_h)
    scans = ([tile(ct_y)] if ct_y is not None else []) + [V, CC]
    axes = ([1] if ct_y is not None else []) + [0, 0]
    out_types = [tensor_type([None] + dims(c.Hprev)[:3] + [4 * H], el)] if need_tA else []
    scan = cf._create("onnx." + _resolve_scan(b), [gh0] + scans, [st] + out_types,
                      _scan_attrs(len(scans), axes, [1] * len(scans), [1] * len(out_types),
                                  [1] * len(out_types)), b.location, 1)
    scan.attributes[K_STATE] = ir.UnitAttr.get()
    elem = ([st] if ct_y is not None else []) + \
        [tensor_type(dims(v)[1:], element_type(v)) for v in (V, CC)]
    blk = scan.regions[0].blocks.append(st, *elem)
    args = list(blk.arguments)
    with ir.InsertionPoint(blk):
        g4 = b.add(args[0], args[1]) if ct_y is not None else args[0]
        v, cc_t = args[-2], args[-1]
        nxt = matmul(b, b.mul(g4, v), R4)
        cf._yield(blk, [nxt] + ([b.mul(g4, cc_t)] if need_tA else []), b.location)
    res = list(scan.results)
    a_h = _gate(b, res[0], 0, H)
    a_tA = _gate(b, res[-1], 0, H, 3) if need_tA else None
    return a_tA, a_h, None


# ---- the rule -------------------------------------------------------------------------

def _check(op: ir.Operation, kind: str, D: int) -> tuple[list[str], int]:
    n = len(_DEFAULT_ACTS[kind])
    acts = attribute(op, "activations") if "activations" in op.attributes else None
    if acts is None:
        acts = _DEFAULT_ACTS[kind] * D
    elif len(acts) == n and D == 2:
        acts = list(acts) * 2
    elif len(acts) != n * D:
        raise UnsupportedOp(f"{len(acts)} activations for {D} direction(s)")
    alphas = list(attribute(op, "activation_alpha") or []) \
        if "activation_alpha" in op.attributes else []
    betas = list(attribute(op, "activation_beta") or []) \
        if "activation_beta" in op.attributes else []
    out = []
    for a in acts:
        a = a.decode() if isinstance(a, bytes) else a
        name = a.lower()
        if name not in _ACTS:
            raise UnsupportedOp(f"activation {a} is not differentiated")
        alpha = beta = None
        if name in _ALPHA:
            alpha = alphas.pop(0) if alphas else _ALPHA[name]
        if name in _BETA:
            beta = betas.pop(0) if betas else _BETA[name]
        if (name in _ALPHA and alpha is None) or (name in _BETA and beta is None):
            raise UnsupportedOp(f"activation {a} needs activation_alpha/activation_beta")
        if name in ("leakyrelu", "thresholdedrelu") and alpha < 0:
            raise UnsupportedOp(f"activation {a} with a negative alpha is not differentiated")
        if name == "scaledtanh" and alpha == 0:
            raise UnsupportedOp("ScaledTanh with alpha 0")
        out.append((name, alpha, beta))
    layout = attribute(op, "layout") or 0
    return out, layout


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
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ImportFailure(f"direction {direction!r} is not forward, reverse or bidirectional")
    D = 2 if direction == "bidirectional" else 1
    revs = [False, True] if D == 2 else [direction == "reverse"]
    acts, layout = _check(op, kind, D)
    for name, v, r in (("X", X, 3), ("W", W, 3), ("R", R, 3), ("B", Bv, 2),
                       ("initial_h", H0, 3), ("initial_c", C0, 3), ("P", P, 2)):
        # (ONNX's inference does not check them: a rank-2 W met an IndexError
        # here, fuzz seed 191 case 416)
        if v is not None and dims(v) is not None and len(dims(v)) != r:
            raise ImportFailure(f"{name} has rank {len(dims(v))}, expected {r}")
    if dims(X) is None or dims(W) is None or dims(R) is None or None in dims(W)[1:] or \
            dims(R)[-1] is None:
        raise UnsupportedOp("needs the ranks of X and the sizes of W and R")
    H = dims(R)[-1]
    # invalid models the rule would read by R's and W's shapes alone
    size = attribute(op, "hidden_size") if "hidden_size" in op.attributes else None
    if size is not None and size != H:
        raise ImportFailure(f"hidden_size {size} differs from R's hidden extent {H}")
    if dims(W)[0] not in (None, D):
        raise ImportFailure(f"W {dims(W)} is for {dims(W)[0]} direction(s), the op "
                            f"runs {D}")
    if isinstance(op.results[0].type, ir.NoneType):
        _with_y(op, D, H, layout)
    results = list(op.results)
    Y = results[0]
    lbr = kind == "GRU" and bool(attribute(op, "linear_before_reset"))
    b = Builder(state.opset, op.location)
    with ir.InsertionPoint.after(op):
        T = dims(X)[1 if layout else 0]
        ragged = SL is not None
        if ragged:
            lens = constant_ints(SL)
            ragged = lens is None or T is None or any(n != T for n in lens)
        # layout 0: X [T,B,I], Y [T,D,B,H], states [D,B,H]
        tX, tH0, tC0 = t["X"], t["H0"], t["C0"]
        if layout:
            X = b.transpose(X, [1, 0, 2])
            tX = None if tX is None else b.transpose(tX, [0, 2, 1, 3])
            Y = b.transpose(Y, [1, 2, 0, 3])
            H0 = None if H0 is None else b.transpose(H0, [1, 0, 2])
            C0 = None if C0 is None else b.transpose(C0, [1, 0, 2])
            tH0 = None if tH0 is None else b.transpose(tH0, [0, 2, 1, 3])
            tC0 = None if tC0 is None else b.transpose(tC0, [0, 2, 1, 3])
        sshape = b.concat([b.ints([D]), b.shape(X, 1, 2), b.ints([H])], 0)
        sdims = [D, dims(X)[1], H]
        h0 = H0 if H0 is not None else b.zeros(sshape, sdims, X)
        c0 = None
        if kind == "LSTM":
            c0 = C0 if C0 is not None else b.zeros(sshape, sdims, X)
        c = _Cell(kind, acts, H, lbr, revs)
        c.P = P
        c.clip = attribute(op, "clip")
        c.input_forget = kind == "LSTM" and bool(attribute(op, "input_forget"))
        c.lens = c.mask = c.keep = None
        if ragged:
            _ragged(b, c, X, SL)
        Yp = _porder(b, Y, 1, revs, c.lens)
        _primal(b, c, X, W, R, Bv, Yp, h0, c0)
        if c.mask is not None:
            _mask_coefs(b, c)
        tA = _sources(b, c, t, tX)
        if tA is None and tH0 is None and tC0 is None:
            return False
        if state.mode == "forward":
            z = None
            if tH0 is None or (kind == "LSTM" and tC0 is None):
                z = b.zeros(b.concat([state.k, sshape], 0), [None] + sdims, X)
            ty, th, tc = _forward_scan(b, c, tA, tH0 if tH0 is not None else z,
                                       (tC0 if tC0 is not None else z) if c0 is not None
                                       else None)
        else:
            primals = [Yp, _take(b, Yp, -1, 0)] + ([_take(b, c.C, -1, 0)] if c0 is not None
                                                   else [])
            ty, th, tc = _standin(b, op, c, tA, tH0, tC0, primals)
        if c.mask is not None:
            ty = b.mul(ty, c.mask)  # zero past each sequence's length
        ty = _porder(b, ty, 2, revs, c.lens)
        if layout:
            ty = b.transpose(ty, [0, 3, 1, 2, 4])
            th = b.transpose(th, [0, 2, 1, 3])
            tc = None if tc is None else b.transpose(tc, [0, 2, 1, 3])
        for r, v in zip(results, (ty, th, tc)):
            if v is not None and not isinstance(r.type, ir.NoneType):
                # exactly [k] + shape(r) by construction: no Expand (whose
                # transpose would unbroadcast at run time)
                state.of[r] = v
                if dims(r) is not None and rank(v) == len(dims(r)) + 1:
                    symdims.register(v, r)
    return False


def _ragged(b: Builder, c: _Cell, X: ir.Value, SL: ir.Value) -> None:
    """sequence_lens not all equal to T: the mask [T, 1, B, 1] of the steps each
    sequence takes, and the lengths as int64 for ReverseSequence."""
    i64 = ir.IntegerType.get_signless(64)
    B = dims(X)[1]
    c.lens = b.op("Cast", [SL], tensor_type([B], i64), to=7)
    T = dims(X)[0]
    if T is not None:
        iota = b.ints(list(range(T)))
    else:
        n = b.squeeze(b.shape(X, 0, 1), [0])
        iota = b.op("Range", [b.int_scalar(0), n, b.int_scalar(1)], tensor_type([None], i64))
    less = b.compare("Less", b.unsqueeze(iota, [1]), c.lens)  # [T, B]
    c.mask = b.unsqueeze(b.cast_like(less, X), [1, 3])
    c.keep = b.sub(b.scalar(1.0, X), c.mask)


def _with_y(op: ir.Operation, D: int, H: int, layout: int) -> None:
    """The op also produces Y (the hidden states the derivative reads): the
    result's type changes from none in place, so every reference to the op
    and its other results stays valid."""
    X = op.operands[0]
    d = dims(X)
    T, B = (d[1], d[0]) if layout else (d[0], d[1])
    op.results[0].set_type(tensor_type([B, T, D, H] if layout else [T, D, B, H],
                                       element_type(X)))


def _sources(b: Builder, c: _Cell, t, tX):
    """The non-recurrent tangent of the gate pre-activations, [k, T, D, B, G*H]:
    tX W^T + X tW^T + tWb, plus Hprev tR^T + tRb (GRU: through the reset gate
    where the cell puts it)."""
    H, G = c.H, c.G
    full = lambda v: b.expand(v, b.concat([b.shape(v, 0, 1), b.shape(c.Hprev, 0, 3),
                                           b.ints([dims(v)[-1]])], 0),
                              [dims(v)[0]] + dims(c.Hprev)[:3] + [dims(v)[-1]])
    xs, hs = [], []
    if tX is not None:
        xs.append(_xmm(b, tX, c.WT, c.X))
    if t["W"] is not None:
        xs.append(_xmm(b, c.X, b.transpose(t["W"], [0, 1, 3, 2]), c.X))
    if xs:  # time order -> processing order
        xs = [_porder(b, b.sum(xs), 2, c.revs, c.lens)]
    tB = t["B"]
    if tB is not None:
        xs.append(b.align(b.unsqueeze(_slice(b, tB, 2, 0, G * H), [2]), 4))
    rb = None if tB is None else b.align(b.unsqueeze(_slice(b, tB, 2, G * H, 2 * G * H), [2]), 4)
    sx = b.sum(xs) if xs else None
    tR = t["R"]  # [k, D, GH, H]
    if c.kind != "GRU":
        if tR is not None:
            hs.append(_bmm(b, c.Hprev, b.transpose(tR, [0, 1, 3, 2]), c.X))
        if rb is not None:
            hs.append(rb)
        out = _add(b, sx, b.sum(hs) if hs else None)
    elif c.lbr:
        # z, r: Hprev tR^T + tRb; h: r ⊙ (Hprev tRh^T + tRbh)
        if tR is not None:
            hs.append(_bmm(b, c.Hprev, b.transpose(tR, [0, 1, 3, 2]), c.X))
        if rb is not None:
            hs.append(rb)
        if hs:
            sh = b.sum(hs)
            if dims(sh)[1] == 1 or dims(sh)[3] == 1:
                sh = full(sh)
            hs = [b.concat([_gate(b, sh, 0, H, 2), b.mul(c.r, _gate(b, sh, 2, H))], 4)]
        out = _add(b, sx, hs[0] if hs else None)
    else:
        # linear_before_reset=0: z, r: Hprev tRzr^T + tRb_zr; h: (r ⊙ Hprev) tRh^T + tRbh
        if tR is not None:
            zr = _bmm(b, c.Hprev, b.transpose(_slice(b, tR, 2, 0, 2 * H), [0, 1, 3, 2]), c.X)
            hh = _bmm(b, b.mul(c.r, c.Hprev),
                      b.transpose(_slice(b, tR, 2, 2 * H, 3 * H), [0, 1, 3, 2]), c.X)
            hs.append(b.concat([zr, hh], 4))
        if rb is not None:
            hs.append(rb)
        out = _add(b, sx, b.sum(hs) if hs else None)
    if t.get("P") is not None:
        # tP_i c_{t-1}, tP_o c_t, tP_f c_{t-1}; nothing for the cell gate
        tp = b.align(b.unsqueeze(t["P"], [2]), 4)  # [k, 1, D, 1, 3H]
        pt = b.mul(tp, b.concat([c.Cprev, c.C, c.Cprev], 3))
        zero = b.expand(b.scalar(0.0, pt), b.concat([b.shape(pt, 0, 4), b.ints([H])], 0),
                        dims(pt)[:4] + [H])
        out = _add(b, out, b.concat([pt, zero], 4))
    if out is not None and (dims(out)[1] == 1 or dims(out)[3] == 1):
        out = full(out)  # only biases: broadcast over time and batch
    return out


def _standin(b: Builder, op: ir.Operation, c: _Cell, tA, th0, tc0, primals):
    """Reverse mode: the recurrence as an opaque linear op (tA, th0, tc0) ->
    (tYp, th_last, tc_last), transposed by _t_recurrence."""
    lstm = c.kind == "LSTM"
    inputs = [v for v in (tA, th0, tc0) if v is not None]
    el = element_type(c.Hprev)
    types = [tensor_type([None] + dims(c.Hprev), el), _state_type(c, el)]
    if lstm:
        types.append(types[1])
    ident = next(cf._ids)
    ph = ir.Operation.create(
        cf.PLACEHOLDER, results=types, operands=inputs,
        attributes={cf.REGION_ID: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ident),
                    RECURRENCE: ir.UnitAttr.get(), STANDS_FOR: ir.StringAttr.get(op.name)},
        loc=b.location)
    _RECURRENCES[ident] = {"cell": c, "has": (tA is not None, th0 is not None, tc0 is not None)}
    cf._PRIMALS[ident] = primals
    res = list(ph.results)
    return res[0], res[1], (res[2] if lstm else None)


_region_transpose = TRANSPOSE[cf.PLACEHOLDER]


def _axis0_source(v: ir.Value) -> ir.Value:
    """The value v's axis 0 comes from, through ops that keep operand 0's
    axis 0 in place: Transpose with perm[0] = 0, (Un)Squeeze of other axes,
    MatMul of a batched left operand by a right one of lower rank."""
    while True:
        op = producer(v, "Transpose", "Squeeze", "Unsqueeze", "MatMul")
        if op is None or rank(op.operands[0]) is None:
            return v
        kind, r0 = op_type(op), rank(op.operands[0])
        if kind == "Transpose":
            perm = attribute(op, "perm")
            if not perm or perm[0] != 0:
                return v
        elif kind in ("Squeeze", "Unsqueeze"):
            n = r0 if kind == "Squeeze" else rank(v)
            axes = constant_ints(op.operands[1]) if len(op.operands) > 1 and \
                not isinstance(op.operands[1].type, ir.NoneType) else attribute(op, "axes")
            if not axes or n is None or 0 in [a % n for a in axes]:
                return v
        elif r0 < 3 or rank(op.operands[1]) is None or rank(op.operands[1]) >= r0:
            return v
        v = op.operands[0]


def _seed_count(b: Builder, ct: ir.Value) -> ir.Value:
    """k, the seed count (axis 0 of every cotangent). Read where ct's axis 0
    comes from: from the first state of the reverse recurrence Scan that made
    ct (a stacked layer's input), that state rather than the Scan's result, so
    the next layer's Scan does not wait for that Scan to finish
    (merge_scans.py can then fuse the two); else from ct itself."""
    src = _axis0_source(ct)
    scan = defining_op(src)
    if scan is not None and scan.name == "onnx." + _resolve_scan(b) and \
            K_STATE in scan.attributes:
        return b.shape(scan.operands[0], 0, 1)
    return b.shape(ct, 0, 1)


def _t_recurrence(b: Builder, ph: ir.Operation, cts, linear) -> list:
    if RECURRENCE not in ph.attributes:
        return _region_transpose(b, ph, cts, linear)
    ident = ir.IntegerAttr(ph.attributes[cf.REGION_ID]).value
    info = _RECURRENCES.pop(ident)
    c = info["cell"]
    if all(ct is None for ct in cts):
        return [None] * len(ph.operands)
    k = _seed_count(b, next(ct for ct in cts if ct is not None))
    has_tA, has_h, has_c = info["has"]
    ct_c = cts[2] if c.kind == "LSTM" else None
    a_tA, a_h, a_c = _reverse_scan(b, c, cts[0], cts[1], ct_c, k, has_tA)
    out = [v for v, h in ((a_tA, has_tA), (a_h, has_h), (a_c, has_c)) if h]
    for ct, t in zip(out, ph.operands):  # exactly the stand-in's operand extents
        symdims.alike(ct, t)
    return out


TRANSPOSE[cf.PLACEHOLDER] = _t_recurrence


for _t in ("RNN", "GRU", "LSTM"):
    for _n in mlir_names(_t):
        REGION_RULES[_n] = _rule
