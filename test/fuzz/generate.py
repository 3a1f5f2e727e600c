"""Seeded generator of random VALID ONNX models over the differentiable op
subset (issue 7): elementwise unary/binary ops with broadcasting (size-0 and
size-1 dims included), MatMul/Gemm, reductions, Reshape/Transpose/Concat/
Slice/Gather, Softmax/LayerNormalization/RMSNormalization, Attention, Conv, MaxPool/AveragePool, Pad/
Expand/Tile/Split/Where/CumSum/Clip/Einsum/Flatten/Unsqueeze, image ops
(Batch/InstanceNormalization, ConvTranspose, Resize, DepthToSpace/
SpaceToDepth, LRN), and nested If/Scan/Loop whose bodies capture outer
values; float32 or float64; random shapes. With `sequences` (1), also the
sequence idioms exporters write: a list a Loop appends to, read after it
(ConcatFromSequence, SequenceAt, SequenceLength), SplitToSequence read at
constant positions or by a Loop over its pieces, SequenceConstruct; with 2,
lists also read back inside the Loop that appends to them (multistep).
With `wide` (1), the rest of the differentiable op set as well: inverse
trigonometric/hyperbolic and other activations (each fed inside its domain),
GatherElements/GatherND/ScatterElements/ScatterND/TopK/Trilu/
ReverseSequence/Compress/CumProd, ReduceProd/L1/LogSum, PRelu/Mean/Sum,
global and Lp pools, Lp/MeanVariance normalization, RNN/GRU/LSTM; with 2,
the shape-keeping ones of them inside If/Scan/Loop bodies too; with 3, values
read piece by piece (Slices, Gathers) and concatenated back; with 4, also
by strided Slices (x[j::step], a patch merge's quarters); with 5, at opsets
7-28 instead of 13-28 (each op in the form its opset has); with 6, also
Det, CenterCropPad, DFT, AffineGrid, Col2Im, RoiAlign, MaxUnpool and
GridSample.

    generate(seed, sequences=0, wide=0) -> (model, feeds)

The same seed always gives the same model. Every model is checked with
`onnx.checker.check_model(full_check=True)` and run once in ONNX Runtime
(output shapes compared with the shapes tracked here); a candidate that
fails is discarded and the next sub-seed tried, so what comes out is valid.
`python test/fuzz/generate.py SEED [out.onnx]` prints (or saves) one.
"""
from __future__ import annotations

import random
import sys
from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h

FLOATS = {TP.FLOAT: np.float32, TP.DOUBLE: np.float64}
Shape = tuple


class GeneratorRejected(Exception):
    """A candidate model failed validation (a generator limitation, retried)."""


def _bcast(a: Shape, b: Shape) -> Shape:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError("not broadcastable")
        out.append(y if x == 1 else x)
    return tuple(out)


class Graph:
    """One graph (main or a body) under construction; `pool` holds the float
    values visible in it (own and captured) with their shapes."""

    def __init__(self, gen: "Gen", pool: dict[str, Shape]):
        self.gen = gen
        self.nodes: list[onnx.NodeProto] = []
        self.pool = dict(pool)

    # ---- helpers -----------------------------------------------------------------------
    def name(self, base: str) -> str:
        return self.gen.fresh(base)

    def node(self, op, inputs, n_out=1, **attrs) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(h.make_node(op, inputs, outs, name=self.name("n_" + op), **attrs))
        return outs

    def const(self, arr: np.ndarray, base="c") -> str:
        arr = np.asarray(arr)
        name = self.name(base)
        t = onnx.numpy_helper.from_array(arr, name)
        self.nodes.append(h.make_node("Constant", [], [name], name=self.name("n_const"), value=t))
        return name

    def fconst(self, shape: Shape, scale=1.0) -> str:
        g = self.gen
        return self.const((g.np.standard_normal(shape) * scale).astype(g.npdtype), "w")

    def i64(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64), "i")

    def add(self, name: str, shape: Shape) -> str:
        self.pool[name] = tuple(shape)
        return name

    def pick(self, pred=lambda s: True) -> Optional[str]:
        cands = [n for n, s in self.pool.items() if pred(s)]
        return self.gen.r.choice(cands) if cands else None

    def operand(self, shape: Shape, allow_new=True) -> str:
        """A float value broadcastable into `shape` (its result stays `shape`)."""
        r = self.gen.r
        cands = [n for n, s in self.pool.items() if _try_bcast(shape, s) == shape]
        if cands and r.random() < 0.6:
            return r.choice(cands)
        # a constant (or new input, main graph only) with some dims set to 1
        k = r.randint(0, len(shape))
        sub = tuple(d if r.random() < 0.6 else 1 for d in shape[len(shape) - k:])
        if allow_new and self.gen.main is self and r.random() < 0.5:
            return self.add(self.gen.input(sub), sub)
        return self.fconst(sub)

    def _exact(self, shape: Shape) -> str:
        """A float value of exactly `shape` (no broadcasting)."""
        cands = [n for n, s in self.pool.items() if s == shape]
        if cands and self.gen.r.random() < 0.6:
            return self.gen.r.choice(cands)
        if self.gen.main is self and self.gen.r.random() < 0.5:
            return self.add(self.gen.input(shape), shape)
        return self.fconst(shape)

    # ---- op families (each returns the new value or None when it does not apply) ----------
    def unary(self, x):
        r = self.gen.r
        s = self.pool[x]
        ops = ["Neg", "Sin", "Cos", "Tanh", "Sigmoid", "Abs", "Relu", "Identity", "Exp", "Log",
               "Sqrt", "Reciprocal", "Clip"]
        if self.gen.dtype == TP.FLOAT:  # ORT has no float64 kernels for these
            ops += ["Softplus", "Erf", "LeakyRelu", "Elu"]
        if self.gen.opset >= 24:
            ops.append("Swish")
        op = r.choice(ops)
        if op in ("Exp",):
            x = self.node("Tanh", [x])[0]
        if op in ("Log", "Sqrt", "Reciprocal"):  # positive argument: x*x + 1
            sq = self.node("Mul", [x, x])[0]
            x = self.node("Add", [sq, self.const(np.ones((), self.gen.npdtype))])[0]
        if op == "Clip":  # (its rule compares result and operand: loop reversals recompute it)
            bounds = [self.const(np.asarray(v, self.gen.npdtype)) for v in (-0.5, 0.5)]
            return self.add(self.node("Clip", [x] + bounds)[0], s)
        attrs = {"alpha": 0.1} if op == "LeakyRelu" else \
            {"alpha": r.choice([0.5, 1.0, 1.702])} if op == "Swish" else {}
        return self.add(self.node(op, [x], **attrs)[0], s)

    def binary(self, x):
        r = self.gen.r
        s = self.pool[x]
        y = self.operand(s)
        op = r.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
        if op in ("Div", "Pow"):  # positive divisor / base
            sq = self.node("Mul", [y if op == "Div" else x, y if op == "Div" else x])[0]
            pos = self.node("Add", [sq, self.const(np.ones((), self.gen.npdtype))])[0]
            if op == "Div":
                y = pos
            else:  # a bounded exponent: float32 overflow gives inf * 0 = NaN derivatives
                x, y = pos, self.node("Tanh", [y])[0]
        a, b = (x, y) if op in ("Pow", "Div") or r.random() < 0.5 else (y, x)
        return self.add(self.node(op, [a, b])[0], s)

    def matmul(self, x):
        r = self.gen.r
        s = self.pool[x]
        if not s or len(s) > 3:
            return None
        n = r.choice([1, 2, 3])
        ws = (s[-1], n) if r.random() < 0.8 else (s[-1],)
        w = self.add(self.gen.input(ws), ws) if (self.gen.main is self and r.random() < 0.5) \
            else self.fconst(ws, 0.5)
        out = s[:-1] + ws[1:]
        return self.add(self.node("MatMul", [x, w])[0], out)

    def gemm(self, x):
        r = self.gen.r
        s = self.pool[x]
        if len(s) != 2:
            return None
        ta, tb = r.randint(0, 1), r.randint(0, 1)
        m, k = (s[1], s[0]) if ta else s
        n = r.choice([1, 2, 3])
        w = self.fconst((n, k) if tb else (k, n), 0.5)
        inputs = [x, w]
        if r.random() < 0.7:
            cs = r.choice([(m, n), (n,), (1, n), (m, 1), ()])
            inputs.append(self.fconst(cs))
        return self.add(self.node("Gemm", inputs, transA=ta, transB=tb,
                                  alpha=r.choice([1.0, 0.5]), beta=r.choice([1.0, 2.0]))[0], (m, n))

    def reduce(self, x):
        r = self.gen.r
        s = self.pool[x]
        op = r.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceSumSquare", "ReduceMin",
                       "ReduceL2", "ReduceLogSumExp"] +
                      (["ReduceProd", "ReduceL1", "ReduceLogSum"] if self.gen.wide else []))
        axes = sorted(r.sample(range(len(s)), r.randint(0, len(s)))) if s else []
        keep = r.randint(0, 1)
        red = axes if axes else list(range(len(s)))
        if op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceMean", "ReduceL2",
                  "ReduceLogSum") and any(s[a] == 0 for a in red):
            op = "ReduceSum"
        if op in ("ReduceL2", "ReduceLogSum"):  # smooth, positive: of x*x+1
            sq = self.node("Mul", [x, x])[0]
            x = self.node("Add", [sq, self.const(np.ones((), self.gen.npdtype))])[0]
        out = tuple((1 if keep else None) if i in red else d for i, d in enumerate(s))
        out = tuple(d for d in out if d is not None)
        attrs = {"keepdims": keep}
        inputs = [x]
        if axes:
            if op == "ReduceSum" or self.gen.opset >= 18:
                inputs.append(self.i64([a - len(s) if r.random() < 0.3 else a for a in axes]))
            else:
                attrs["axes"] = axes
        return self.add(self.node(op, inputs, **attrs)[0], out)

    def reshape(self, x):
        r = self.gen.r
        s = self.pool[x]
        n = int(np.prod(s)) if s else 1
        choices = [(n,), (1, n), (n, 1)]
        if n > 0:
            for d in (2, 3):
                if n % d == 0:
                    choices.append((d, n // d))
        out = r.choice(choices)
        spec = list(out)
        if n > 0 and r.random() < 0.3:
            spec[r.randrange(len(spec))] = -1
        attrs = {"allowzero": 1} if 0 in spec else {}  # else 0 means "copy that dim"
        return self.add(self.node("Reshape", [x, self.i64(spec)], **attrs)[0], out)

    def transpose(self, x):
        s = self.pool[x]
        if len(s) < 2:
            return None
        perm = list(range(len(s)))
        self.gen.r.shuffle(perm)
        return self.add(self.node("Transpose", [x], perm=perm)[0], tuple(s[p] for p in perm))

    def concat(self, x):
        r = self.gen.r
        s = self.pool[x]
        if not s:
            return None
        axis = r.randrange(len(s))
        other = list(s)
        other[axis] = r.choice([0, 1, 2])
        y = self.add(self.gen.input(tuple(other)), tuple(other)) \
            if self.gen.main is self and r.random() < 0.5 else self.fconst(tuple(other))
        out = list(s)
        out[axis] += other[axis]
        ins = [x, y] if r.random() < 0.5 else [y, x, x]
        if len(ins) == 3:
            out[axis] += s[axis]
        return self.add(self.node("Concat", ins, axis=axis - len(s) if r.random() < 0.3 else axis)[0],
                        tuple(out))

    def slice(self, x):
        r = self.gen.r
        s = self.pool[x]
        if not s:
            return None
        axes = sorted(r.sample(range(len(s)), r.randint(1, len(s))))
        starts, ends, steps, out = [], [], [], list(s)
        for a in axes:
            d = s[a]
            step = r.choice([1, 1, 2, -1])
            if step > 0:
                st = r.randint(0, d)
                en = r.choice([r.randint(st, d), 2**62, d + 3])
                cnt = (min(en, d) - st + step - 1) // step if min(en, d) > st else 0
            else:
                st = r.choice([d - 1, 2**62]) if d else -1
                en = r.choice([-(2**62), 0, -1 - d]) if d else -(2**62)
                lo = max(en, -1) if en >= 0 else -1
                hi = min(st, d - 1)
                cnt = max(0, (hi - lo + (-step) - 1) // (-step))
            starts.append(st), ends.append(en), steps.append(step)
            out[a] = cnt
        return self.add(self.node("Slice", [x, self.i64(starts), self.i64(ends), self.i64(axes),
                                            self.i64(steps)])[0], tuple(out))

    def gather(self, x):
        r = self.gen.r
        s = self.pool[x]
        axes = [a for a in range(len(s)) if s[a] > 0]
        if not axes:
            return None
        axis = r.choice(axes)
        ishape = r.choice([(), (2,), (1, 2), (0,)])
        idx = np.asarray([r.randrange(-s[axis], s[axis]) for _ in range(int(np.prod(ishape)))],
                         dtype=np.int64).reshape(ishape)
        out = s[:axis] + ishape + s[axis + 1:]
        return self.add(self.node("Gather", [x, self.const(idx, "idx")], axis=axis)[0], out)

    def pieces(self, x):
        """x read piece by piece along one axis (Slices, Gathers of a scalar or
        of consecutive indices), sometimes with a piece left out or read
        twice, each piece through its own unary op, concatenated back:
        reverse mode sums the pieces' cotangents (simplify's sums of
        placements)."""
        r = self.gen.r
        s = self.pool[x]
        axes = [a for a in range(len(s)) if s[a] > 1]
        if not axes:
            return None
        a = r.choice(axes)
        n = s[a]
        cuts = sorted(r.sample(range(1, n), r.randint(1, n - 1)))
        bounds = list(zip([0] + cuts, cuts + [n]))
        if len(bounds) > 2 and r.random() < 0.3:
            bounds.pop(r.randrange(len(bounds)))
        if r.random() < 0.3:
            bounds.append(r.choice(bounds))
        parts, width = [], 0
        for lo, hi in bounds:
            how = r.choice(["slice", "gather", "scalar"] if hi - lo == 1 else ["slice", "gather"])
            shape = s[:a] + (hi - lo,) + s[a + 1:]
            if how == "slice":
                p = self.node("Slice", [x, self.i64([lo]), self.i64([hi]), self.i64([a])])[0]
            elif how == "gather":
                p = self.node("Gather", [x, self.i64(list(range(lo, hi)))], axis=a)[0]
            else:
                g = self.node("Gather", [x, self.const(np.asarray(lo, np.int64), "i")], axis=a)[0]
                p = self.node("Unsqueeze", [g, self.i64([a])])[0]
            parts.append(self.unary(self.add(p, shape)) or p)
            width += hi - lo
        return self.add(self.node("Concat", parts, axis=a)[0], s[:a] + (width,) + s[a + 1:])

    def strided_pieces(self, x):
        """x read as its strided pieces x[j::step] along one axis, or as the
        quarters x[i::2, j::2] of two even axes (a patch merge), sometimes
        one left out, each through its own unary op, concatenated back:
        reverse mode joins the pieces' grid placements (simplify's sums of
        placements under a Reshape)."""
        r = self.gen.r
        s = self.pool[x]
        axes = [a for a in range(len(s)) if s[a] > 1]
        if not axes:
            return None
        even = [a for a in axes if s[a] % 2 == 0]
        if len(even) >= 2 and r.random() < 0.4:
            picked, step = sorted(r.sample(even, 2)), 2
        else:
            picked = [r.choice(axes)]
            step = r.randint(2, min(4, s[picked[0]]))
        offsets = [[j] for j in range(step)] if len(picked) == 1 else \
            [[i, j] for i in range(2) for j in range(2)]
        if len(offsets) > 2 and r.random() < 0.3:
            offsets.pop(r.randrange(len(offsets)))
        a = picked[0]
        parts, width = [], 0
        for first in offsets:
            shape = list(s)
            for b, j in zip(picked, first):
                shape[b] = len(range(j, s[b], step))
            p = self.node("Slice", [x, self.i64(first), self.i64([s[b] for b in picked]),
                                    self.i64(picked), self.i64([step] * len(picked))])[0]
            parts.append(self.unary(self.add(p, tuple(shape))) or p)
            width += shape[a]
        return self.add(self.node("Concat", parts, axis=a)[0], s[:a] + (width,) + s[a + 1:])

    def softmax(self, x):
        s = self.pool[x]
        if not s:
            return None
        op = self.gen.r.choice(["Softmax", "LogSoftmax"])
        return self.add(self.node(op, [x], axis=self.gen.r.randrange(-len(s), len(s)))[0], s)

    def layernorm(self, x):
        r = self.gen.r
        s = self.pool[x]
        if not s or self.gen.opset < 17:  # (LayerNormalization-17 is the first)
            return None
        axis = r.randrange(len(s))
        if any(d == 0 for d in s[axis:]):
            return None
        ns = s[axis:]
        ins = [x, self.fconst(ns)]
        op = "RMSNormalization" if self.gen.opset >= 23 and r.random() < 0.5 else \
            "LayerNormalization"
        if op == "LayerNormalization" and r.random() < 0.5:
            ins.append(self.fconst(ns))
        # float64 stays float64 inside (by default the statistics are float32:
        # finite differences of that are noise at second order)
        stash = {"stash_type": TP.DOUBLE} if op == "RMSNormalization" and \
            self.gen.dtype == TP.DOUBLE else {}
        return self.add(self.node(op, ins, axis=axis - len(s) if r.random() < 0.3
                                  else axis, epsilon=1e-3, **stash)[0], s)

    def attention(self, x):
        """Attention-23 with x as the queries: 4-D [b, heads, s, d], or 3-D
        [b, s, heads * d] with the head counts as attributes; grouped
        key/value heads, an additive mask, causality and a scale at random."""
        r = self.gen.r
        if self.gen.opset < 23:
            return None
        if len(self.pool[x]) not in (3, 4) or 0 in self.pool[x]:
            x = self.pick(lambda s: len(s) in (3, 4) and 0 not in s)
            if x is None:
                shape = tuple(r.randint(1, 3) for _ in range(r.choice([3, 4])))
                x = self.add(self.gen.input(shape) if self.gen.main is self else
                             self.fconst(shape), shape)
        s = self.pool[x]
        b, kv_len, dv = s[0], r.choice([1, 2, 3]), r.choice([1, 2, 3])
        attrs = {}
        if len(s) == 4:
            heads, q_len, d = s[1], s[2], s[3]
            kv_heads = r.choice([h_ for h_ in (1, heads) if heads % h_ == 0])
            k_shape, v_shape = (b, kv_heads, kv_len, d), (b, kv_heads, kv_len, dv)
            out = (b, heads, q_len, dv)
        else:
            q_len, width = s[1], s[2]
            heads = r.choice([h_ for h_ in (1, 2) if width % h_ == 0])
            d, kv_heads = width // heads, r.choice([h_ for h_ in (1, heads) if heads % h_ == 0])
            attrs.update(q_num_heads=heads, kv_num_heads=kv_heads)
            k_shape, v_shape = (b, kv_len, kv_heads * d), (b, kv_len, kv_heads * dv)
            out = (b, q_len, heads * dv)
        ins = [x, self._exact(k_shape), self._exact(v_shape)]
        if r.random() < 0.3:
            ins.append(self.fconst((q_len, kv_len)))
        if r.random() < 0.3:
            attrs["is_causal"] = 1
        if r.random() < 0.3:
            attrs["scale"] = r.choice([0.5, 2.0])
        return self.add(self.node("Attention", ins, **attrs)[0], out)

    def conv(self, x):
        r = self.gen.r
        if self.gen.main is not self or self.gen.dtype != TP.FLOAT:  # ORT: float32 only
            return None
        nd = r.choice([1, 2])
        n, group = r.choice([1, 2]), r.choice([1, 1, 2])
        c, m = group * r.choice([1, 2]), group * r.choice([1, 2])
        k = [r.choice([1, 2, 3]) for _ in range(nd)]
        strides = [r.choice([1, 2]) for _ in range(nd)]
        dil = [r.choice([1, 1, 2]) for _ in range(nd)]
        pads = [r.choice([0, 1]) for _ in range(2 * nd)]
        sp = [r.randint((k[i] - 1) * dil[i] + 1, 6) for i in range(nd)]
        xs = (n, c, *sp)
        xin = self.add(self.gen.input(xs), xs)
        w = self.add(self.gen.input((m, c // group, *k)), (m, c // group, *k)) \
            if r.random() < 0.5 else self.fconst((m, c // group, *k), 0.5)
        ins = [xin, w] + ([self.fconst((m,))] if r.random() < 0.5 else [])
        out = [n, m]
        for i in range(nd):
            eff = (k[i] - 1) * dil[i] + 1
            out.append((sp[i] + pads[i] + pads[i + nd] - eff) // strides[i] + 1)
        return self.add(self.node("Conv", ins, strides=strides, dilations=dil, pads=pads,
                                  group=group, kernel_shape=k)[0], tuple(out))

    def shaping(self, x):
        """Pad, Expand, Tile, Split, Where, CumSum, Clip, Einsum, Flatten,
        Unsqueeze/Squeeze: one of them on x."""
        r = self.gen.r
        s = self.pool[x]
        op = r.choice(["Pad", "Expand", "Tile", "Split", "Where", "CumSum", "Clip", "Einsum",
                       "Flatten", "Unsqueeze"])
        if op == "Pad" and s and 0 not in s:
            mode = r.choice(["constant", "constant", "reflect", "edge"] +
                            (["wrap"] if self.gen.opset >= 19 else []))
            # a side crops (-1) or pads; edge/reflect/wrap pad what is left
            # after the crops (ONNX Runtime), reflect at most its extent - 1
            pads = [r.randint(-1 if d > 1 else 0, 2) for d in s + s]
            n = len(s)
            if mode != "constant":
                for i, d in enumerate(s):
                    left = d - max(-pads[i], 0) - max(-pads[n + i], 0)
                    lim = left - 1 if mode == "reflect" else min(left, 2)
                    if left < 1 or max(pads[i], pads[n + i]) > lim:
                        pads[i], pads[n + i] = 0, 0
            out = tuple(d + pads[i] + pads[n + i] for i, d in enumerate(s))
            if min(out) < 1:
                return None
            ins = [x, self.i64(pads)] + ([self.const(np.asarray(0.5, self.gen.npdtype))]
                                        if mode == "constant" and r.random() < 0.5 else [])
            return self.add(self.node("Pad", ins, mode=mode)[0], out)
        if op == "Expand" and len(s) <= 3:
            target = tuple(r.choice([d, 2]) if d == 1 else d for d in s)
            target = tuple(r.choice([1, 2]) for _ in range(r.randint(0, 1))) + target
            return self.add(self.node("Expand", [x, self.i64(list(target))])[0],
                            _bcast(s, target))
        if op == "Tile" and s:
            reps = [r.choice([1, 1, 2]) for _ in s]
            return self.add(self.node("Tile", [x, self.i64(reps)])[0],
                            tuple(d * k for d, k in zip(s, reps)))
        if op == "Split" and s and max(s) > 1:
            axis = r.choice([a for a in range(len(s)) if s[a] > 1])
            cut = r.randint(1, s[axis] - 1)
            outs = self.node("Split", [x, self.i64([cut, s[axis] - cut])], n_out=2, axis=axis)
            first = tuple(cut if a == axis else d for a, d in enumerate(s))
            self.add(outs[1], tuple(s[axis] - cut if a == axis else d for a, d in enumerate(s)))
            return self.add(outs[0], first)
        if op == "Where":
            y = self.operand(s)
            cond = self.node("Greater", [x, self.const(np.asarray(0.0, self.gen.npdtype))])[0]
            a, b = (x, y) if r.random() < 0.5 else (y, x)
            return self.add(self.node("Where", [cond, a, b])[0], s)
        if op == "CumSum" and s:
            axis = r.randrange(len(s))
            return self.add(self.node("CumSum", [x, self.i64(axis)], exclusive=r.randint(0, 1),
                                      reverse=r.randint(0, 1))[0], s)
        if op == "Clip":
            lo, hi = sorted([float(r.uniform(-1, 1)), float(r.uniform(-1, 1))])
            ins = [x, self.const(np.asarray(lo, self.gen.npdtype))] + \
                ([self.const(np.asarray(hi, self.gen.npdtype))] if r.random() < 0.7 else [])
            return self.add(self.node("Clip", ins)[0], s)
        if op == "Einsum" and 1 <= len(s) <= 3:
            letters = "abc"[:len(s)]
            n = r.choice([1, 2, 3])
            w = self.fconst((s[-1], n), 0.5)
            keep = letters[:-1]
            eq = f"{letters},{letters[-1]}z->{keep}z" if r.random() < 0.6 else \
                f"{letters},{letters[-1]}z->z{keep[::-1]}"
            out = tuple(s[:-1]) + (n,) if "->" + keep in eq else (n,) + tuple(s[:-1][::-1])
            return self.add(self.node("Einsum", [x, w], equation=eq)[0], out)
        if op == "Flatten" and s:
            axis = r.randint(0, len(s))
            a, b = int(np.prod(s[:axis])), int(np.prod(s[axis:]))
            return self.add(self.node("Flatten", [x], axis=axis)[0], (a, b))
        if op == "Unsqueeze" and len(s) <= 3:
            axis = r.randint(0, len(s))
            u = self.node("Unsqueeze", [x, self.i64([axis])])[0]
            if r.random() < 0.5:
                return self.add(self.node("Squeeze", [u, self.i64([axis])])[0], s)
            return self.add(u, s[:axis] + (1,) + s[axis:])
        return None

    def image_op(self, x):
        """On an [N, C, *S] float32 value: BatchNormalization (inference),
        InstanceNormalization, ConvTranspose, Resize (nearest or linear,
        integer or fractional scales; Upsample before opset 10),
        DepthToSpace/SpaceToDepth, LRN."""
        r = self.gen.r
        if self.gen.main is not self or self.gen.dtype != TP.FLOAT:  # ORT: float32 only
            return None
        if x is None or not 3 <= len(self.pool[x]) <= 4 or 0 in self.pool[x]:
            xs = (r.choice([1, 2]), r.choice([1, 2, 4]), *[r.randint(2, 4) for _ in range(r.choice([1, 2]))])
            x = self.add(self.gen.input(xs), xs)
        s = self.pool[x]
        n, c, sp = s[0], s[1], s[2:]
        op = r.choice(["BatchNormalization", "InstanceNormalization", "ConvTranspose", "Resize",
                       "DepthToSpace", "LRN"])
        if op == "BatchNormalization":
            var = self.const(np.abs(self.gen.np.standard_normal(c)).astype(np.float32) + 0.5)
            return self.add(self.node(op, [x, self.fconst((c,)), self.fconst((c,)), self.fconst((c,)),
                                           var], epsilon=1e-3)[0], s)
        if op == "InstanceNormalization":
            return self.add(self.node(op, [x, self.fconst((c,)), self.fconst((c,))],
                                      epsilon=1e-3)[0], s)
        if op == "ConvTranspose":
            m = r.choice([1, 2])
            k = [r.choice([1, 2, 3]) for _ in sp]
            st = [r.choice([1, 2]) for _ in sp]
            out = tuple((e - 1) * t + kk for e, t, kk in zip(sp, st, k))
            ins = [x, self.fconst((c, m, *k), 0.5)] + ([self.fconst((m,))] if r.random() < 0.5 else [])
            return self.add(self.node(op, ins, kernel_shape=k, strides=st)[0], (n, m) + out)
        if op == "Resize":  # Upsample (scales >= 1) before opset 10, Resize-10 without roi
            mode = r.choice(["nearest", "linear"])
            opset = self.gen.opset
            scales = [1.0, 1.0] + [r.choice([2.0, 1.5] if opset < 10 else [2.0, 1.5, 0.5])
                                   for _ in sp]
            out = tuple(int(np.floor(e * f)) for e, f in zip(sp, scales[2:]))
            if min(out) < 1:
                return None
            given = self.const(np.asarray(scales, np.float32))
            if opset < 9:
                return self.add(self.node("Upsample", [x], mode=mode, scales=scales)[0],
                                (n, c) + out)
            if opset < 11:
                return self.add(self.node("Upsample" if opset < 10 else op, [x, given],
                                          mode=mode)[0], (n, c) + out)
            roi = self.const(np.zeros(0, np.float32))
            return self.add(self.node(op, [x, roi, given], mode=mode)[0], (n, c) + out)
        if op == "DepthToSpace" and len(sp) == 2:
            if c % 4 == 0:
                return self.add(self.node(op, [x], blocksize=2, mode=r.choice(["DCR", "CRD"]))[0],
                                (n, c // 4, sp[0] * 2, sp[1] * 2))
            if sp[0] % 2 == 0 and sp[1] % 2 == 0:
                return self.add(self.node("SpaceToDepth", [x], blocksize=2)[0],
                                (n, c * 4, sp[0] // 2, sp[1] // 2))
            return None
        if op == "LRN" and len(sp) == 2:  # ONNX Runtime: 4-D only
            return self.add(self.node(op, [x], size=r.choice([1, 3]), alpha=1e-2, beta=0.75,
                                      bias=1.0)[0], s)
        return None

    def same_window(self, x):
        """A Conv (C -> C channels, constant weights) or a MaxPool/AveragePool
        whose padding keeps x's shape [N, C, *S]: a window op a loop body can
        carry in its state (an ODE step over a CNN, say)."""
        r = self.gen.r
        s = self.pool[x]
        if self.gen.dtype != TP.FLOAT or not 3 <= len(s) <= 4 or 0 in s:
            return None
        nd = len(s) - 2
        k = [r.choice([1, 3]) if d >= 3 else 1 for d in s[2:]]
        pads = [kk // 2 for kk in k] * 2
        op = r.choice(["Conv", "Conv", "MaxPool", "AveragePool"])
        if op == "Conv":
            ins = [x, self.fconst((s[1], s[1], *k), 0.3)] + \
                ([self.fconst((s[1],))] if r.random() < 0.5 else [])
            return self.add(self.node("Conv", ins, kernel_shape=k, pads=pads)[0], s)
        if op == "MaxPool" and r.random() < 0.4:
            x = self.node("Relu", [x])[0]
        attrs = {"count_include_pad": r.randint(0, 1)} if op == "AveragePool" else {}
        return self.add(self.node(op, [x], kernel_shape=k, pads=pads, strides=[1] * nd,
                                  **attrs)[0], s)

    def pool_op(self, x):
        """MaxPool (maybe of a Relu: the rules fold its mask) or AveragePool
        over an [N, C, *S] value with random windows: tiling, overlapping,
        padded, dilated, ceil-mode, auto_pad."""
        r = self.gen.r
        if self.gen.main is not self or self.gen.dtype != TP.FLOAT:  # ORT: float32 only
            return None
        if x is None or not 3 <= len(self.pool[x]) <= 5 or 0 in self.pool[x]:
            nd = r.choice([1, 2, 2, 3])
            xs = (r.choice([1, 2]), r.choice([1, 2]), *[r.randint(2, 6) for _ in range(nd)])
            x = self.add(self.gen.input(xs), xs)
        xs = self.pool[x]
        nd = len(xs) - 2
        op = r.choice(["MaxPool", "MaxPool", "AveragePool"])
        k = [r.randint(1, min(3, e)) for e in xs[2:]]
        tiling = r.random() < 0.4
        strides = list(k) if tiling else [r.choice([1, 2, 3]) for _ in range(nd)]
        dil = [1] * nd if tiling or op == "AveragePool" else [r.choice([1, 1, 2]) for _ in range(nd)]
        eff = [(k[i] - 1) * dil[i] + 1 for i in range(nd)]
        if any(e > d for e, d in zip(eff, xs[2:])):
            dil, eff = [1] * nd, list(k)
        attrs = {"kernel_shape": k, "strides": strides}
        if op == "MaxPool":
            attrs["dilations"] = dil
        pads = [0] * (2 * nd)
        if not tiling and r.random() < 0.2:
            attrs["auto_pad"] = r.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])
            out = [-(-d // s) if attrs["auto_pad"] != "VALID" else (d - e) // s + 1
                   for d, e, s in zip(xs[2:], eff, strides)]
        else:
            if not tiling:
                pads = [r.choice([0, 0, 1]) if k[i % nd] > 1 else 0 for i in range(2 * nd)]
                attrs["pads"] = pads
            ceil = 0 if tiling else r.choice([0, 0, 1])
            attrs["ceil_mode"] = ceil
            out = []
            for i in range(nd):
                span = xs[2 + i] + pads[i] + pads[nd + i] - eff[i]
                o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
                if ceil and (o - 1) * strides[i] >= xs[2 + i] + pads[i]:
                    o -= 1  # the last window would start in the end padding
                out.append(o)
        if op == "AveragePool" and any(pads) and r.random() < 0.5:
            attrs["count_include_pad"] = 1
        if op == "MaxPool" and r.random() < 0.4:
            x = self.node("Relu", [x])[0]
        return self.add(self.node(op, [x], **attrs)[0], tuple(xs[:2]) + tuple(out))

    # ---- the wider op set (`wide`) -------------------------------------------------------
    def more_unary(self, x):
        """An activation of ONNX Runtime's float32 kernels (its float64
        Shrink rounds to float32: finite differences of it are noise), on x
        moved inside its domain first; Shrink's bias equals its lambd
        (continuous: finite differences cannot judge a jump)."""
        r = self.gen.r
        s = self.pool[x]
        if self.gen.dtype != TP.FLOAT:
            return None
        ops = ["Shrink", "Acos", "Asin", "Atan", "Acosh", "Asinh", "Atanh", "Sinh", "Cosh", "Tan",
               "Softsign", "Selu", "HardSigmoid", "Celu"]
        ops += ["HardSwish"] if self.gen.opset >= 14 else []
        ops += ["Mish"] if self.gen.opset >= 18 else []
        ops += ["Gelu"] if self.gen.opset >= 20 else []
        op = r.choice(ops)
        scalar = lambda v: self.const(np.asarray(v, self.gen.npdtype))  # noqa: E731
        if op in ("Acos", "Asin", "Atanh", "Tan", "Sinh", "Cosh"):  # into (-0.9, 0.9)
            x = self.node("Mul", [self.node("Tanh", [x])[0], scalar(0.9)])[0]
        elif op == "Acosh":  # x*x + 1.5 > 1
            x = self.node("Add", [self.node("Mul", [x, x])[0], scalar(1.5)])[0]
        attrs = {"Shrink": {"lambd": 0.3, "bias": 0.3}, "Celu": {"alpha": 0.5},
                 "Gelu": {"approximate": r.choice(["none", "tanh"])}}.get(op, {})
        return self.add(self.node(op, [x], **attrs)[0], s)

    def more_binary(self, x):
        """PRelu (slope broadcast to x), Mean or Sum of x and one or two
        operands (PRelu and Mean: float32 in ONNX Runtime)."""
        r = self.gen.r
        s = self.pool[x]
        op = r.choice(["PRelu", "Mean", "Sum"] if self.gen.dtype == TP.FLOAT else ["Sum"])
        if op == "PRelu":
            return self.add(self.node(op, [x, self.operand(s, allow_new=False)])[0], s)
        ins = [x] + [self.operand(s) for _ in range(r.randint(1, 2))]
        r.shuffle(ins)
        return self.add(self.node(op, ins)[0], s)

    def _ints(self, values, shape) -> str:
        return self.const(np.asarray(values, np.int64).reshape(shape), "idx")

    def indexing(self, x, same: bool = False):
        """GatherElements, GatherND, ScatterElements/ScatterND (updates from
        the pool; distinct positions unless they reduce), TopK's values,
        Trilu, ReverseSequence, Compress, CumProd, with constant indices;
        `same`: only those keeping x's shape (a loop body's state)."""
        r, rng = self.gen.r, self.gen.np
        s = self.pool[x]
        if not s or 0 in s:
            return None
        ops = ["GatherElements", "GatherND", "ScatterElements", "ScatterND", "TopK", "Trilu",
               "ReverseSequence", "Compress", "CumProd"]
        op = r.choice([o for o in ops if o not in ("GatherElements", "GatherND", "TopK",
                                                   "Compress")] if same else ops)
        axis = r.randrange(len(s))
        if op == "GatherElements":
            ishape = tuple(r.randint(1, 3) if i == axis else d for i, d in enumerate(s))
            idx = rng.integers(-s[axis], s[axis], ishape)
            return self.add(self.node(op, [x, self._ints(idx, ishape)], axis=axis)[0], ishape)
        if op == "GatherND":
            q = r.randint(1, len(s))
            n = r.randint(1, 3)
            idx = np.stack([rng.integers(0, s[i], n) for i in range(q)], 1)
            return self.add(self.node(op, [x, self._ints(idx, (n, q))])[0], (n,) + s[q:])
        if op == "ScatterElements":
            red = r.choice(["none", "none", "add", "mul"] +
                           (["max", "min"] if self.gen.opset >= 18 else []))
            if red != "none" and self.gen.opset < 16:
                red = "none"
            k = r.randint(1, s[axis])
            ishape = tuple(k if i == axis else r.randint(1, d) for i, d in enumerate(s))
            # along the axis, distinct positions per row (a permutation's head)
            perm = np.argsort(rng.random(ishape[:axis] + (s[axis],) + ishape[axis + 1:]), axis=axis)
            idx = np.take(perm, range(k), axis=axis)
            if red != "none" and r.random() < 0.5:  # repeated positions reduce
                idx = rng.integers(0, s[axis], ishape)
            attrs = {"axis": axis} | ({"reduction": red} if red != "none" else {})
            upd = self._exact(ishape)
            return self.add(self.node(op, [x, self._ints(idx, ishape), upd], **attrs)[0], s)
        if op == "ScatterND":
            q = r.randint(1, len(s))
            cells = int(np.prod(s[:q]))
            n = r.randint(1, min(3, cells))
            flat = rng.choice(cells, n, replace=False)
            idx = np.stack(np.unravel_index(flat, s[:q]), 1)
            red = r.choice(["none", "add", "mul"]) if self.gen.opset >= 16 else "none"
            attrs = {"reduction": red} if red != "none" else {}
            upd = self._exact((n,) + s[q:])
            return self.add(self.node(op, [x, self._ints(idx, (n, q)), upd], **attrs)[0], s)
        if op == "TopK":
            k = r.randint(1, s[axis])
            vals, _ = self.node(op, [x, self.i64([k])], n_out=2, axis=axis,
                                largest=r.randint(0, 1), sorted=r.randint(0, 1))
            return self.add(vals, s[:axis] + (k,) + s[axis + 1:])
        if op == "Trilu" and len(s) >= 2 and self.gen.opset >= 14:
            ins = [x] + ([self.i64(r.randint(-1, 1))] if r.random() < 0.5 else [])
            return self.add(self.node(op, ins, upper=r.randint(0, 1))[0], s)
        if op == "ReverseSequence" and len(s) >= 2:
            b, t = r.sample([0, 1], 2)
            lens = rng.integers(1, s[t] + 1, s[b])
            return self.add(self.node(op, [x, self.i64(lens)], batch_axis=b, time_axis=t)[0], s)
        if op == "Compress":
            cond = rng.random(r.randint(1, s[axis])) < 0.6
            c = self.const(cond, "cond")
            if r.random() < 0.3:  # no axis: of x flattened
                return self.add(self.node(op, [x, c])[0], (int(cond[:int(np.prod(s))].sum()),))
            out = s[:axis] + (int(cond.sum()),) + s[axis + 1:]
            return self.add(self.node(op, [x, c], axis=axis)[0], out)
        if op == "CumProd" and self.gen.opset >= 26:
            return self.add(self.node(op, [x, self.i64(axis)], exclusive=r.randint(0, 1),
                                      reverse=r.randint(0, 1))[0], s)
        return None

    def norm_pool(self, x):
        """On [N, C, *S] float32: GlobalAverage/Max/LpPool, LpPool,
        MeanVarianceNormalization; LpNormalization (any rank, float64 too)."""
        r = self.gen.r
        s = self.pool[x]
        if s and 0 not in s and r.random() < 0.3:
            axis = r.randrange(-len(s), len(s))
            if self.gen.wide > 1:  # norms >= 0.5: of a near-zero vector finite differences
                # are noise (rows of norm 3e-8 out of a Scan, seed 189 case 1293)
                sq = self.node("Mul", [x, x])[0]
                x = self.node("Add", [sq, self.const(np.asarray(0.5, self.gen.npdtype))])[0]
            return self.add(self.node("LpNormalization", [x], axis=axis, p=r.choice([1, 2]))[0], s)
        if self.gen.dtype != TP.FLOAT:  # ORT: float32 only
            return None
        if not 3 <= len(s) <= 4 or 0 in s:
            s = (r.choice([1, 2]), r.choice([1, 2, 3]), *[r.randint(2, 4) for _ in range(r.choice([1, 2]))])
            x = self.add(self.gen.input(s) if self.gen.main is self else self.fconst(s), s)
        op = r.choice(["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool",
                       "MeanVarianceNormalization"])
        if op.startswith("Global"):
            attrs = {"p": r.choice([1, 2, 3])} if op == "GlobalLpPool" else {}
            return self.add(self.node(op, [x], **attrs)[0], s[:2] + (1,) * (len(s) - 2))
        if op == "LpPool":
            k = [r.randint(1, min(2, d)) for d in s[2:]]
            st = [r.choice([1, 2]) for _ in k]
            out = tuple((d - kk) // t + 1 for d, kk, t in zip(s[2:], k, st))
            return self.add(self.node(op, [x], kernel_shape=k, strides=st,
                                      p=r.choice([1, 2, 3]))[0], s[:2] + out)
        if self.gen.wide > 1:  # over extents > 1: a constant slice's variance 0 gives NaN
            wide_axes = [a for a in range(len(s)) if s[a] > 1]  # (ONNX's has no epsilon)
            if not wide_axes:
                return None
            axes = sorted(r.sample(wide_axes, r.randint(1, len(wide_axes))))
        else:
            axes = sorted(r.sample(range(len(s)), r.randint(1, len(s))))
        return self.add(self.node(op, [x], axes=axes)[0], s)

    def rare(self, x):
        """Det (float32), CenterCropPad, DFT, AffineGrid and Col2Im (float32),
        RoiAlign, MaxUnpool and GridSample (float32): on x where its shape
        fits, else on a value of a shape that does (a new input in the main
        graph). Each is smooth or linear in its float operands, or piecewise
        so (GridSample's grid: kinks at pixel positions)."""
        r = self.gen.r
        s = self.pool[x]
        f32, opset = self.gen.dtype == TP.FLOAT, self.gen.opset
        ops = (["Det"] if f32 and opset >= 11 else []) + \
            (["CenterCropPad"] if opset >= 18 else []) + \
            (["DFT"] if opset >= 17 else []) + \
            (["AffineGrid"] if f32 and opset >= 20 else []) + \
            (["Col2Im"] if f32 and opset >= 18 else [])
        ops += (["RoiAlign"] if opset >= 10 else []) + \
            (["MaxUnpool"] if f32 and opset >= 11 else []) + \
            (["GridSample"] if f32 and opset >= 16 else [])
        if not ops:
            return None
        op = r.choice(ops)
        if op in ("RoiAlign", "MaxUnpool", "GridSample"):
            return self._image_sampling(op, x)
        if op == "Det":  # [..., n, n] -> [...]
            if len(s) < 2 or s[-1] != s[-2] or not 1 <= s[-1] <= 3:
                s = tuple(r.randint(1, 3) for _ in range(r.randint(0, 1))) + (r.randint(1, 3),) * 2
                x = self._exact(s)
            return self.add(self.node("Det", [x])[0], s[:-2])
        if op == "CenterCropPad":  # each chosen axis cropped or padded about its centre
            if not s:
                return None
            axes = sorted(r.sample(range(len(s)), r.randint(1, len(s))))
            target = [max(1, s[a] + r.randint(-2, 2)) for a in axes]
            out = list(s)
            for a, t in zip(axes, target):
                out[a] = t
            attrs = {} if axes == list(range(len(s))) and r.random() < 0.5 else {"axes": axes}
            return self.add(self.node("CenterCropPad", [x, self.i64(target)], **attrs)[0],
                            tuple(out))
        if op == "DFT":  # real [B, .., n, .., 1] -> complex [.., n', .., 2] along axis
            if len(s) < 2 or 0 in s:
                s = (r.randint(1, 2), r.randint(2, 5))
                x = self._exact(s)
            u = self.node("Unsqueeze", [x, self.i64([len(s)])])[0]
            axis = r.randint(1, len(s) - 1)
            onesided = r.choice([0, 1])
            inverse = 0 if onesided else r.choice([0, 1])
            n = s[axis]
            out = s[:axis] + ((n // 2 + 1) if onesided else n,) + s[axis + 1:] + (2,)
            attrs = {"onesided": onesided, "inverse": inverse}
            if opset >= 20:
                return self.add(self.node("DFT", [u, "", self.i64(axis)], **attrs)[0], out)
            return self.add(self.node("DFT", [u], axis=axis, **attrs)[0], out)
        if op == "AffineGrid":  # theta [N, 2, 3] over size [N, C, H, W]
            n = r.randint(1, 2)
            theta = self._exact((n, 2, 3))
            hw = (r.randint(1, 4), r.randint(1, 4))
            size = self.i64([n, r.randint(1, 2), *hw])
            return self.add(self.node("AffineGrid", [theta, size],
                                      align_corners=r.choice([0, 1]))[0], (n, *hw, 2))
        # Col2Im: blocks [N, C*bh*bw, L] summed back into [N, C, H, W]
        n, c = r.randint(1, 2), r.randint(1, 2)
        hw = (r.randint(1, 4), r.randint(1, 4))
        block = tuple(r.randint(1, d) for d in hw)
        blocks = (hw[0] - block[0] + 1) * (hw[1] - block[1] + 1)
        cols = self._exact((n, c * block[0] * block[1], blocks))
        return self.add(self.node("Col2Im", [cols, self.i64(list(hw)), self.i64(list(block))])[0],
                        (n, c, *hw))

    def _image_sampling(self, op: str, x: str):
        """RoiAlign (average: linear in the image, constant boxes), MaxUnpool
        of a MaxPool's values and Indices, GridSample (bilinear) at a grid
        inside [-0.9, 0.9], on x [N, C, H, W] or a new image."""
        r = self.gen.r
        s = self.pool[x]
        if len(s) != 4 or 0 in s or min(s[2:]) < 2:
            s = (r.randint(1, 2), r.randint(1, 2), r.randint(2, 5), r.randint(2, 5))
            x = self._exact(s)
        n, c, hh, ww = s
        if op == "RoiAlign":
            k = r.randint(1, 3)
            x1, y1 = self.gen.np.uniform(0, ww - 1, k), self.gen.np.uniform(0, hh - 1, k)
            boxes = np.stack([x1, y1, np.minimum(x1 + self.gen.np.uniform(0.5, 2, k), ww - 1),
                              np.minimum(y1 + self.gen.np.uniform(0.5, 2, k), hh - 1)], 1)
            rois = self.const(boxes.astype(self.gen.npdtype), "rois")
            index = self.i64([r.randrange(n) for _ in range(k)])
            out = (r.randint(1, 3), r.randint(1, 3))
            return self.add(self.node("RoiAlign", [x, rois, index], mode="avg",
                                      output_height=out[0], output_width=out[1],
                                      sampling_ratio=r.choice([0, 1, 2]))[0], (k, c, *out))
        if op == "MaxUnpool":
            kernel = [r.randint(1, 2), r.randint(1, 2)]
            pooled = (n, c, hh // kernel[0], ww // kernel[1])
            values, index = self.node("MaxPool", [x], n_out=2, kernel_shape=kernel,
                                      strides=kernel)
            values = self.node("Mul", [values, self.operand(pooled, allow_new=False)])[0]
            # back onto x's extents (the Indices address them; a floor-cut
            # window's would fall outside the default output)
            return self.add(self.node("MaxUnpool", [values, index, self.i64(list(s))],
                                      kernel_shape=kernel, strides=kernel)[0], s)
        out = (r.randint(1, 3), r.randint(1, 3))
        grid = self.node("Tanh", [self._exact((n, *out, 2))])[0]
        grid = self.node("Mul", [grid, self.const(np.asarray(0.9, self.gen.npdtype))])[0]
        mode = "bilinear" if self.gen.opset < 20 else "linear"
        return self.add(self.node("GridSample", [x, grid], mode=mode,
                                  padding_mode=r.choice(["zeros", "border", "reflection"]),
                                  align_corners=r.choice([0, 1]))[0], (n, c, *out))

    def recurrent(self, x):
        """RNN, GRU or LSTM (float32 in ONNX Runtime) over x [seq, batch,
        input] (or a new input of that form): directions, biases, initial
        states, GRU's linear_before_reset at random; Y or Y_h comes out."""
        r = self.gen.r
        if self.gen.dtype != TP.FLOAT:
            return None
        s = self.pool.get(x, ())
        if len(s) != 3 or 0 in s:
            s = (r.randint(1, 3), r.randint(1, 2), r.randint(1, 3))
            x = self.add(self.gen.input(s) if self.gen.main is self else self.fconst(s), s)
        op = r.choice(["RNN", "GRU", "LSTM"])
        gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
        hid = r.randint(1, 3)
        direction = r.choice(["forward", "reverse", "bidirectional"])
        dirs = 2 if direction == "bidirectional" else 1
        seq, batch, size = s
        w = lambda shape: self._exact(shape) if r.random() < 0.3 else self.fconst(shape, 0.5)  # noqa: E731
        ins = [x, w((dirs, gates * hid, size)), w((dirs, gates * hid, hid))]
        # B, sequence_lens (never: full length), initial_h, LSTM's initial_c
        optional = [(dirs, 2 * gates * hid), None, (dirs, batch, hid)] + \
            ([(dirs, batch, hid)] if op == "LSTM" else [])
        for shape in optional:
            ins.append("" if shape is None or r.random() < 0.5 else w(shape))
        while ins[-1] == "":
            ins.pop()
        attrs = {"hidden_size": hid, "direction": direction}
        if op == "GRU":
            attrs["linear_before_reset"] = r.randint(0, 1)
        outs = self.node(op, ins, n_out=2, **attrs)
        if r.random() < 0.5:
            return self.add(outs[1], (dirs, batch, hid))
        return self.add(outs[0], (seq, dirs, batch, hid))

    # ---- control flow ----------------------------------------------------------------------
    def body_chain(self, sub: "Graph", x: str, depth: int, steps: int) -> str:
        """Shape-preserving ops from x inside `sub` (captures come from its pool)."""
        r = self.gen.r
        for _ in range(steps):
            pick = r.random()
            if pick < 0.35:
                x = (self.gen.wide and r.random() < 0.3 and sub.more_unary(x)) or sub.unary(x)
            elif pick < 0.7:
                x = (self.gen.wide > 1 and r.random() < 0.3 and
                     (sub.more_binary(x) if r.random() < 0.4 else sub.indexing(x, same=True))) \
                    or sub.binary(x)
            elif pick < 0.8:
                x = sub.same_window(x) or x
            elif depth > 0:
                x = sub.control(x, depth - 1) or x
            else:
                x = sub.softmax(x) or x
        return x

    def control(self, x, depth=None):
        r = self.gen.r
        depth = self.gen.max_depth if depth is None else depth
        s = self.pool[x]
        kind = r.choice(["If", "Scan", "Loop"])
        T = self.gen.npdtype_proto
        if kind == "If":
            red = self.node("ReduceSum", [x], keepdims=0)[0]
            cond = self.node("Greater", [red, self.const(np.zeros((), self.gen.npdtype))])[0]
            branches = []
            for b in ("then", "else"):
                sub = Graph(self.gen, self.pool)
                y = self.body_chain(sub, x, depth, r.randint(1, 3))
                if y == x:  # a branch that yields an outer value
                    y = sub.node("Identity", [x])[0]
                branches.append(h.make_graph(sub.nodes, self.name(b), [],
                                             [h.make_tensor_value_info(y, T, list(s))]))
            return self.add(self.node("If", [cond], then_branch=branches[0],
                                      else_branch=branches[1])[0], s)
        if kind == "Scan":
            steps = r.choice([1, 2, 3])  # ORT cannot run a Scan over 0 steps
            xs_shape = (steps,) + s
            xs = self.add(self.gen.input(xs_shape), xs_shape) if self.gen.main is self \
                else self.fconst(xs_shape)
            hname, xt = self.name("h"), self.name("xt")
            sub = Graph(self.gen, self.pool)
            sub.pool[hname], sub.pool[xt] = s, s
            a = sub.add(sub.node(r.choice(["Add", "Mul"]), [hname, xt])[0], s)
            hn = self.body_chain(sub, a, depth, r.randint(1, 3))
            yo = sub.node("Identity", [hn])[0]
            body = h.make_graph(sub.nodes, self.name("scan_body"),
                                [h.make_tensor_value_info(hname, T, list(s)),
                                 h.make_tensor_value_info(xt, T, list(s))],
                                [h.make_tensor_value_info(hn, T, list(s)),
                                 h.make_tensor_value_info(yo, T, list(s))])
            hf, ys = self.node("Scan", [x, xs], n_out=2, body=body, num_scan_inputs=1)
            self.add(ys, (steps,) + s)
            return self.add(hf, s)
        # Loop with a constant trip count, cond always true, one scan output
        # (or a list it appends to)
        trip = r.choice([0, 1, 2, 3]) if r.random() < 0.2 else r.choice([1, 2, 3])
        if self.gen.sequences and r.random() < 0.5:
            return self._appending_loop(x, trip, depth)
        sub, it, cin, v, vn, cout = self._loop_step(s, depth)
        so = sub.node("Identity", [vn])[0]
        body = h.make_graph(sub.nodes, self.name("loop_body"),
                            [h.make_tensor_value_info(it, TP.INT64, []),
                             h.make_tensor_value_info(cin, TP.BOOL, []),
                             h.make_tensor_value_info(v, T, list(s))],
                            [h.make_tensor_value_info(cout, TP.BOOL, []),
                             h.make_tensor_value_info(vn, T, list(s)),
                             h.make_tensor_value_info(so, T, list(s))])
        m = self.i64(trip)
        c = self.const(np.asarray(True))
        vf, scan = self.node("Loop", [m, c, x], n_out=2, body=body)
        self.add(scan, (trip,) + s)
        return self.add(vf, s)


    def _loop_step(self, s: Shape, depth: int):
        """A Loop body under construction: (graph, iteration and condition
        names, the state argument v of shape s, its next value, the
        condition yielded)."""
        it, cin, v = self.name("it"), self.name("cond"), self.name("v")
        sub = Graph(self.gen, self.pool)
        sub.pool[v] = s
        vn = self.body_chain(sub, v, depth, self.gen.r.randint(1, 3))
        if vn == v:
            vn = sub.node("Identity", [v])[0]
        return sub, it, cin, v, vn, sub.node("Identity", [cin])[0]

    # ---- sequences ----------------------------------------------------------------------
    def _appending_loop(self, x: str, trip: int, depth: int) -> str:
        """A Loop whose body appends its new state to a list (started empty or
        holding x), the list read after the loop."""
        r, s, T = self.gen.r, self.pool[x], self.gen.npdtype_proto
        construct = trip == 0 or r.random() < 0.4  # (an empty list cannot be concatenated)
        sub, it, cin, v, vn, cout = self._loop_step(s, depth)
        seq = self.name("seq")
        seq_next = sub.node("SequenceInsert", [seq, vn])[0]
        if self.gen.sequences >= 2 and construct and r.random() < 0.5:
            # a multistep method: the next state mixes in an element read back
            # from the list (the last, the one before it, or the start's)
            at = r.choice([(seq_next, -1), (seq_next, -2), (seq, -1), (seq, 0)])
            back = sub.node("SequenceAt", [at[0], self.i64(at[1])])[0]
            vn = sub.node("Mul", [sub.node("Add", [vn, back])[0],
                                  self.const(np.asarray(0.5, self.gen.npdtype))])[0]
        body = h.make_graph(sub.nodes, self.name("loop_body"),
                            [h.make_tensor_value_info(it, TP.INT64, []),
                             h.make_tensor_value_info(cin, TP.BOOL, []),
                             h.make_tensor_value_info(v, T, list(s)),
                             h.make_tensor_sequence_value_info(seq, T, None)],
                            [h.make_tensor_value_info(cout, TP.BOOL, []),
                             h.make_tensor_value_info(vn, T, list(s)),
                             h.make_tensor_sequence_value_info(seq_next, T, None)])
        start = self.node("SequenceConstruct", [x])[0] if construct else \
            self.node("SequenceEmpty", [], dtype=T)[0]
        vf, items = self.node("Loop", [self.i64(trip), self.const(np.asarray(True)), x, start],
                              n_out=2, body=body)
        read, shape, axis = self._read_list(items, s, trip + construct)
        if axis is not None:  # back to s (body chains preserve shapes): sum the list's axis
            if shape != s and len(shape) == len(s):  # concatenated: [.., n, s[axis], ..]
                split = s[:axis] + (trip + construct, s[axis]) + s[axis + 1:]
                read = self.node("Reshape", [read, self.i64(split)])[0]
            read = self.node("ReduceSum", [read, self.i64([axis])], keepdims=0)[0]
        return self.add(self.node("Add", [vf, read])[0], s)

    def _read_list(self, items: str, s: Shape, n: int) -> tuple[str, Shape, int | None]:
        """A read of a list of n tensors of shape s: (value, its shape, the
        list's axis in it or None)."""
        r = self.gen.r
        pick = r.random()
        position = lambda: self.i64(r.randint(-n, n - 1))
        if pick < 0.3 or n == 0:
            length = self.node("Cast", [self.node("SequenceLength", [items])[0]],
                               to=self.gen.npdtype_proto)[0]
            if not n:
                return length, (), None
            return self.node("Mul", [self.node("SequenceAt", [items, position()])[0], length])[0], \
                s, None
        if pick < 0.5:
            return self.node("SequenceAt", [items, position()])[0], s, None
        if s and r.random() < 0.5:  # concatenated along an existing axis
            a = r.randint(0, len(s) - 1)
            out = self.node("ConcatFromSequence", [items],
                            axis=a - len(s) if r.random() < 0.5 else a)[0]
            return out, s[:a] + (s[a] * n,) + s[a + 1:], a
        a = r.randint(0, len(s))
        out = self.node("ConcatFromSequence", [items], new_axis=1,
                        axis=a - len(s) - 1 if r.random() < 0.5 else a)[0]
        return out, s[:a] + (n,) + s[a:], a

    def split_list(self, x):
        """SplitToSequence of x (sizes, a scalar chunk, or unit pieces), read
        at constant positions or summed by a Loop over its pieces; or
        SequenceConstruct of x and a map of it."""
        r, s = self.gen.r, self.pool[x]
        if not s or r.random() < 0.25:
            y = self.unary(x) or x
            read, shape, _ = self._read_list(self.node("SequenceConstruct", [x, y])[0], s, 2)
            return self.add(read, shape)
        a = r.randint(0, len(s) - 1)
        d = s[a]
        if d == 0:
            return None
        form = r.choice(["sizes", "chunk", "unit"])
        keepdims = 1
        if form == "sizes":
            cut = sorted(r.sample(range(1, d), r.randint(0, min(2, d - 1)))) if d > 1 else []
            sizes = [b - e for e, b in zip([0] + cut, cut + [d])]
            pieces = [s[:a] + (k,) + s[a + 1:] for k in sizes]
            ins = [x, self.i64(sizes)]
        elif form == "chunk":
            c = r.randint(1, d)
            sizes = [c] * (d // c) + ([d % c] if d % c else [])
            pieces = [s[:a] + (k,) + s[a + 1:] for k in sizes]
            ins = [x, self.i64(c)]
            keepdims = 1 if c > 1 else r.choice([0, 1])  # ONNX Runtime's unbind
            if not keepdims:
                pieces = [s[:a] + s[a + 1:]] * d
        else:
            keepdims = r.choice([0, 1])
            pieces = [s[:a] + ((1,) if keepdims else ()) + s[a + 1:]] * d
            ins = [x]
        items = self.node("SplitToSequence", ins, axis=a - len(s) if r.random() < 0.5 else a,
                          keepdims=keepdims)[0]
        if r.random() < 0.5:  # pieces read at constant positions
            k = r.randint(-len(pieces), len(pieces) - 1)
            return self.add(self.node("SequenceAt", [items, self.i64(k)])[0], pieces[k])
        # a Loop over the pieces: acc <- acc * tanh(sum(piece)) + sum(piece)
        T = self.gen.npdtype_proto
        it, cin, acc = self.name("it"), self.name("cond"), self.name("acc")
        sub = Graph(self.gen, self.pool)
        piece = sub.node("SequenceAt", [items, it])[0]
        total = sub.node("ReduceSum", [piece], keepdims=0)[0]
        grown = sub.node("Add", [sub.node("Mul", [acc, sub.node("Tanh", [total])[0]])[0],
                                 total])[0]
        cout = sub.node("Identity", [cin])[0]
        body = h.make_graph(sub.nodes, self.name("loop_body"),
                            [h.make_tensor_value_info(it, TP.INT64, []),
                             h.make_tensor_value_info(cin, TP.BOOL, []),
                             h.make_tensor_value_info(acc, T, [])],
                            [h.make_tensor_value_info(cout, TP.BOOL, []),
                             h.make_tensor_value_info(grown, T, [])])
        n = self.node("SequenceLength", [items])[0]
        out = self.node("Loop", [n, self.const(np.asarray(True)),
                                 self.const(np.ones((), self.gen.npdtype))], body=body)[0]
        return self.add(out, ())


def _try_bcast(a, b):
    try:
        return _bcast(a, b)
    except ValueError:
        return None


class Gen:
    def __init__(self, seed: int, sequences: int = 0, wide: int = 0):
        self.seed = seed
        self.sequences = sequences
        self.wide = wide
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.dtype = self.r.choice([TP.FLOAT, TP.DOUBLE])
        self.npdtype = FLOATS[self.dtype]
        self.npdtype_proto = self.dtype
        self.opset = self.r.choice(range(7 if wide > 4 else 13, 29))
        self.max_depth = self.r.choice([0, 1, 1, 2])
        self.counter = 0
        self.inputs: list[tuple[str, Shape]] = []
        self.main = Graph(self, {})

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def dim(self) -> int:
        p = self.r.random()
        return 0 if p < 0.06 else 1 if p < 0.3 else self.r.randint(2, 4)

    def input(self, shape: Shape) -> str:
        name = self.fresh("x")
        self.inputs.append((name, tuple(shape)))
        return name

    def build(self) -> onnx.ModelProto:
        g, r = self.main, self.r
        for _ in range(r.randint(1, 2)):
            s = tuple(self.dim() for _ in range(r.randint(0, 3)))
            g.add(self.input(s), s)
        families = [g.unary, g.binary, g.binary, g.matmul, g.gemm, g.reduce, g.reshape,
                    g.transpose, g.concat, g.slice, g.gather, g.softmax, g.layernorm, g.conv,
                    g.pool_op, g.pool_op, g.shaping, g.shaping, g.image_op, g.control,
                    g.control, g.attention, g.attention] + \
            ([g.split_list, g.split_list] if self.sequences else []) + \
            ([g.more_unary, g.more_binary, g.indexing, g.indexing, g.norm_pool, g.recurrent]
             if self.wide else []) + \
            ([g.pieces, g.pieces] if self.wide > 2 else []) + \
            ([g.strided_pieces, g.strided_pieces] if self.wide > 3 else []) + \
            ([g.rare, g.rare] if self.wide > 5 else [])
        last = None
        for _ in range(r.randint(1, 6)):
            x = last if last is not None and r.random() < 0.6 else g.pick()
            out = r.choice(families)(x)
            last = out or last
        # outputs: the last value plus maybe one more (never an input)
        own = [n for n in g.pool if n not in dict(self.inputs)]
        if not own:
            own = [g.unary(g.pick())]
        outs = [last if last in own else own[-1]]
        if len(own) > 1 and r.random() < 0.3:
            extra = r.choice(own)
            if extra not in outs:
                outs.append(extra)
        graph = h.make_graph(
            g.nodes, f"fuzz{self.seed}",
            [h.make_tensor_value_info(n, self.dtype, list(s)) for n, s in self.inputs],
            [h.make_tensor_value_info(n, self.dtype, list(g.pool[n])) for n in outs])
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", self.opset)],
                             producer_name="onnx-ad-mlir-fuzz")
        model.ir_version = min(model.ir_version, 10)
        return model

    def feeds(self) -> dict[str, np.ndarray]:
        return {n: self.np.standard_normal(s).astype(self.npdtype) for n, s in self.inputs}


def validate(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """full_check + one ORT run whose output shapes match the declared ones."""
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    try:
        onnx.checker.check_model(model, full_check=True)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        got = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        raise GeneratorRejected(f"{type(e).__name__}: {str(e)[:300]}") from None
    for o, a in zip(model.graph.output, got):
        # (an extent declared without a value, a mutant's, is not 0)
        want = tuple(d.dim_value if d.HasField("dim_value") else None
                     for d in o.type.tensor_type.shape.dim)
        if len(a.shape) != len(want) or any(w is not None and w != e
                                            for w, e in zip(want, a.shape)):
            raise GeneratorRejected(f"output {o.name}: ORT shape {a.shape}, declared {want}")


def generate(seed: int, tries: int = 20, sequences: int = 0, wide: int = 0
             ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A valid model and feeds for `seed` (deterministic)."""
    last = None
    for t in range(tries):
        gen = Gen(seed * 1000 + t, sequences, wide)
        try:
            model = gen.build()
            feeds = gen.feeds()
        except (ValueError, IndexError) as e:  # a shape the generator could not honour
            last = e
            continue
        try:
            validate(model, feeds)
        except GeneratorRejected as e:
            last = e
            continue
        return model, feeds
    raise GeneratorRejected(f"seed {seed}: no valid model in {tries} tries: {last}")


if __name__ == "__main__":
    level = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--sequences=")), 0)
    wide = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--wide=")), 0)
    m, f = generate(int(sys.argv[1]), sequences=level, wide=wide)
    sys.argv = [a for a in sys.argv if not a.startswith(("--sequences=", "--wide="))]
    if len(sys.argv) > 2:
        onnx.save(m, sys.argv[2])
    else:
        print(onnx.printer.to_text(m))
