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
from onnx_ad_mlir.errors import OnnxAdError, RuleError, UnsupportedOp

from . import symdims
from .builder import Builder, dims, is_float
from .registry import JVP, JvpRule

# Region ops (If, Loop, Scan): rule(op, rewriter, state) -> bool (rewritten),
# filled by rules/control_flow.py.
REGION_RULES: dict = {}


STANDS_FOR = "onnx_ad.stands_for"  # on reverse mode's linear stand-ins: the region op's name


def node_label(op: ir.Operation) -> str:
    """`onnx.Tanh (node 'name')` for messages; the importer puts the ONNX node
    name first in the op's location. A stand-in is labelled as its region op."""
    loc = str(op.location)
    start = loc.find('"')
    end = loc.find('"', start + 1)
    name = loc[start + 1:end] if 0 <= start < end else loc
    attrs = op.attributes
    kind = ir.StringAttr(attrs[STANDS_FOR]).value if STANDS_FOR in attrs else op.name
    return f"{kind} (node '{name}')"


class Tangents:
    """Primal value -> tangent, with the first refusal met during the walk.

    `mode` is "forward" (region bodies are differentiated in place) or
    "linear" (reverse mode's linearization: only the ops of `scope`, one
    block, are visited; a region op there gets an opaque linear stand-in
    that control_flow.py transposes directly). `k` is the seed count as a
    1-D i64 value visible everywhere in scope (zeros for region yields)."""

    def __init__(self, opset: int, mode: str = "forward", scope: ir.Block | None = None,
                 k: ir.Value | None = None):
        self.opset = opset
        self.mode = mode
        self.scope = scope
        self.k = k
        self.of: dict[ir.Value, ir.Value] = {}
        self.error: OnnxAdError | None = None

    def get(self, v: ir.Value) -> ir.Value | None:
        return self.of.get(v)


def _pattern(rule: JvpRule | None, state: Tangents):
    def apply(op: ir.OpView, rewriter) -> bool:
        op = op.operation
        if state.error is not None or (state.scope is not None and op.block != state.scope):
            return True
        if op.name in REGION_RULES:
            return _region(op, rewriter, state)
        tangents = [state.get(v) for v in op.operands]
        if all(t is None for t in tangents):
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
                        if dims(r) is not None:
                            state.of[r] = b.fit(t, r)
                            symdims.register(state.of[r], r)
                        else:
                            state.of[r] = t
                # A rule may replace a primal result by an equal value (e.g. an
                # op that also reports statistics the rule reuses): same tangent.
                for old, new in getattr(b, "replaced", ()):
                    if old in state.of:
                        state.of[new] = state.of[old]
        except Exception as e:  # noqa: BLE001 - must not unwind through the C++ driver
            state.error = located(e, op)
            return True
        return False
    return apply


def located(e: Exception, op: ir.Operation) -> OnnxAdError:
    """The error `e` raised by a rule for `op`, as an OnnxAdError naming the
    node; `e` is its cause (its traceback shows where the rule failed)."""
    if isinstance(e, OnnxAdError):
        err = type(e)(f"{node_label(op)}: {e}")
    else:
        err = RuleError(f"{node_label(op)}: internal error in its derivative rule: "
                        f"{type(e).__name__}: {e}")
    err.__cause__ = e
    return err


def _region(op: ir.Operation, rewriter, state: Tangents) -> bool:
    """If/Loop/Scan: the rule itself decides whether anything differentiated
    reaches the op (operands, values captured by its bodies, body arguments
    given tangents by the pre-step) and replaces the op."""
    try:
        return not REGION_RULES[op.name](op, rewriter, state)
    except Exception as e:  # noqa: BLE001 - must not unwind through the C++ driver
        state.error = located(e, op)
        return True
    finally:
        symdims.reset()  # region rules erase ops: no cached extents may outlive them


def patterns(state: Tangents):
    ps = RewritePatternSet()
    for name in _op_table.OPS:
        ps.add("onnx." + name, _pattern(JVP.get("onnx." + name), state))
    return ps.freeze()


def linearize(f: ir.Operation, state: Tangents, loops: bool = True) -> None:
    """Runs the JVP walk over `f`; `state.of` must hold the seed tangents.
    In forward mode, Loop/Scan bodies first get tangent block arguments for
    their active loop-carried and scanned values (a fixpoint, see
    control_flow.prepare_loops): the post-order walk reaches a body before
    its op, so the body must already know its tangent inputs. `loops=False`:
    the caller knows f's body holds no region op (that step's two walks
    over f are skipped)."""
    if state.mode == "forward" and REGION_RULES and loops:
        from .rules.control_flow import prepare_loops
        prepare_loops(f, state)
    if f.operation.name == "func.func":
        symdims.reset_all()  # a new run: nothing cached refers to it yet
    for x, t in state.of.items():  # seeds and stand-ins: [k] + shape(x)
        if dims(x) is not None and dims(t) is not None and len(dims(t)) == len(dims(x)) + 1:
            symdims.register(t, x)
    walk_and_apply_patterns(f, patterns(state))
    if state.error is not None:
        raise state.error
