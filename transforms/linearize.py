"""The JVP walk: applies the JVP rules as rewrite patterns over a function.

Every rule in `registry.JVP` becomes a pattern rooted at its op name, applied
by MLIR's walk driver (`walk_and_apply_patterns`): one visit per op, in
program order, nested regions before their op (post-order), ops created by
a pattern not revisited. A pattern matches when a tangent reaches one of the
op's operands; it emits the tangent ops right after the op and records the
tangents of its results. Ops without a rule get a pattern that records a
refusal naming the op when a tangent reaches them.
"""
from __future__ import annotations

from mlir import ir
from mlir.rewrite import RewritePatternSet, walk_and_apply_patterns

from onnx_ad_mlir import _op_table
from onnx_ad_mlir.errors import OnnxAdError, UnsupportedOp

from .builder import Builder, dims, is_float
from .registry import JVP, JvpRule


def node_label(op: ir.Operation) -> str:
    """`onnx.Tanh (node 'name')` for messages; the importer puts the ONNX node
    name first in the op's location."""
    loc = str(op.location)
    start = loc.find('"')
    end = loc.find('"', start + 1)
    name = loc[start + 1:end] if 0 <= start < end else loc
    return f"{op.name} (node '{name}')"


class Tangents:
    """Primal value -> tangent, with the first refusal met during the walk."""

    def __init__(self, opset: int):
        self.opset = opset
        self.of: dict[ir.Value, ir.Value] = {}
        self.error: OnnxAdError | None = None

    def get(self, v: ir.Value) -> ir.Value | None:
        return self.of.get(v)


def _pattern(rule: JvpRule | None, state: Tangents):
    def apply(op: ir.OpView, rewriter) -> bool:
        op = op.operation
        tangents = [state.get(v) for v in op.operands]
        if state.error is not None or all(t is None for t in tangents):
            return True  # no match: nothing differentiated reaches this op
        if rule is None:
            i = next(i for i, t in enumerate(tangents) if t is not None)
            state.error = UnsupportedOp(
                f"{node_label(op)}: no derivative rule, and a differentiated value "
                f"reaches its operand {i}")
            return True
        try:
            b = Builder(state.opset, op.location)
            with ir.InsertionPoint.after(op):
                produced = rule(b, op, tangents)
                for r, t in zip(op.results, produced):
                    if t is not None and is_float(r):
                        state.of[r] = b.fit(t, r) if dims(r) is not None else t
        except OnnxAdError as e:
            state.error = type(e)(f"{node_label(op)}: {e}")
            return True
        return False
    return apply


def patterns(state: Tangents):
    ps = RewritePatternSet()
    for name in _op_table.OPS:
        ps.add("onnx." + name, _pattern(JVP.get("onnx." + name), state))
    return ps.freeze()


def linearize(f: ir.Operation, state: Tangents) -> None:
    """Runs the JVP walk over `f`; `state.of` must hold the seed tangents."""
    walk_and_apply_patterns(f, patterns(state))
    if state.error is not None:
        raise state.error
