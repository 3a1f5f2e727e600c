"""Replaces nodes of other domains by default-domain nodes before import.

The dialect holds only the default ONNX domain. Operators of other domains
with an exact default-domain form (ml_ops: ai.onnx.ml; contrib_ops: ONNX
Runtime's fused operators) are rewritten on the inferred ONNX model, each
node of the main graph into the nodes that compute what ONNX Runtime's
kernel computes, so that the derivative model runs on any runtime. ONNX
infers no type past most such nodes: a node whose input is such a result
waits for the next round's inference (`NotYet`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import UnsupportedOp
from .validate import node_subgraphs


class NotYet(Exception):
    """An input's type or rank is not inferred yet."""


def fresh_name(taken: set[str], base: str) -> str:
    """`base`, else `base_1`, `base_2`...: the first not in `taken`, added to it."""
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor of a default-domain Constant node holding a `value`, else None."""
    if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute \
            and node.attribute[0].name == "value":
        return node.attribute[0].t
    return None


class GraphFacts:
    """The facts a rewrite reads (element types and ranks of values, small
    constants) and fresh value names."""

    def __init__(self, graph: onnx.GraphProto, opset: int):
        self.opset = opset  # the default domain's
        self.types: dict[str, onnx.TypeProto] = {
            v.name: v.type for v in list(graph.input) + list(graph.value_info) +
            list(graph.output)}
        for t in graph.initializer:
            self.types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
        self.constants = {t.name: t for t in graph.initializer}
        for n in graph.node:
            t = constant_tensor(n)
            if t is not None:
                self.constants[n.output[0]] = t
        self.producers = {o: n for n in graph.node for o in n.output if o}
        self.names = set(self.types) | set(self.producers)
        self.names |= {i for n in graph.node for i in n.input}

    def elem_type(self, name: str) -> int:
        t = self.types.get(name)
        return t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else 0

    def rank(self, name: str) -> int | None:
        t = self.types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return len(t.tensor_type.shape.dim)

    def dims(self, name: str) -> list[int | str | None] | None:
        """The extents of `name`: an int where known, the symbol's name
        where symbolic, None where neither; None when its rank is unknown."""
        if self.rank(name) is None:
            return None
        return [d.dim_value if d.HasField("dim_value") else d.dim_param or None
                for d in self.types[name].tensor_type.shape.dim]

    def fresh(self, base: str) -> str:
        return fresh_name(self.names, base)


class Emitter:
    """Default-domain nodes replacing one node, named after it."""

    def __init__(self, g: GraphFacts, node: onnx.NodeProto):
        self.g, self.node, self.nodes = g, node, []
        self.prefix = node.name or (node.output[0] if node.output else node.op_type)

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.g.fresh(f"{self.prefix}/{op_type}")
        self.nodes.append(helper.make_node(op_type, inputs, [out],
                                           name=self.g.fresh(f"{self.prefix}/{op_type}"), **attrs))
        return out

    def const(self, value: np.ndarray) -> str:
        return self.op("Constant", [], value=numpy_helper.from_array(value))

    def unsqueeze(self, x: str, axis: int, out: str | None = None) -> str:
        """x with a new axis `axis` >= 0 (negative axes only from opset 11)."""
        if self.g.opset >= 13:  # axes an operand from opset 13
            return self.op("Unsqueeze", [x, self.const(np.array([axis], np.int64))], out)
        return self.op("Unsqueeze", [x], out, axes=[axis])

    def split(self, x: str, sizes: list[int], axis: int) -> list[str]:
        """x cut along `axis` into parts of `sizes`."""
        parts = [self.g.fresh(f"{self.prefix}/Split") for _ in sizes]
        if self.g.opset >= 13:  # sizes an operand from opset 13
            inputs = [x, self.const(np.asarray(sizes, np.int64))]
            attrs = {}
        else:
            inputs, attrs = [x], {"split": list(sizes)}
        self.nodes.append(helper.make_node("Split", inputs, parts, axis=axis,
                                           name=self.g.fresh(f"{self.prefix}/Split"), **attrs))
        return parts

    def reduce(self, op_type: str, x: str, axis: int, keepdims: int) -> str:
        if self.g.opset >= (13 if op_type == "ReduceSum" else 18):  # axes an operand
            return self.op(op_type, [x, self.const(np.array([axis], np.int64))],
                           keepdims=keepdims)
        return self.op(op_type, [x], axes=[axis], keepdims=keepdims)


Lowering = Callable[[Emitter], None]


def default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def lower_nodes(model: onnx.ModelProto, lowering: Callable[[onnx.NodeProto], Lowering | None],
                infer: Callable[[onnx.ModelProto], onnx.ModelProto],
                refuse: Callable[[onnx.NodeProto, str], UnsupportedOp],
                domain: str) -> onnx.ModelProto | None:
    """A copy of `model` whose main-graph nodes with a `lowering` are
    replaced by what it emits, inferred again (`infer`) after each round,
    without the opset import of `domain` when no node uses it any more; or
    None when there are none. A node that waits on types inference never
    gives is refused (`refuse`), as is one of a model that imports no
    default domain for the lowering to emit."""
    first = next((n for n in model.graph.node if lowering(n) is not None), None)
    if first is None:
        return None
    opset = default_opset(model)
    if not opset:
        raise refuse(first, "its lowering emits default-domain ops, but the model imports no "
                     "version of the default domain")
    while any(lowering(n) is not None for n in model.graph.node):
        model = infer(_lower_ready(model, GraphFacts(model.graph, opset), lowering, refuse))
    _drop_unused_domain(model, domain)
    return model


def _lower_ready(model: onnx.ModelProto, g: GraphFacts,
                 lowering: Callable[[onnx.NodeProto], Lowering | None],
                 refuse: Callable[[onnx.NodeProto, str], UnsupportedOp]) -> onnx.ModelProto:
    """The model with the nodes whose inputs are typed lowered; when none
    is, the first one's refusal."""
    nodes, waiting, progressed = [], None, False
    for node in model.graph.node:
        rewrite = lowering(node)
        if rewrite is None:
            nodes.append(node)
            continue
        e = Emitter(g, node)
        try:
            rewrite(e)
        except NotYet as reason:
            waiting = waiting or (node, str(reason))
            nodes.append(node)
            continue
        nodes.extend(e.nodes)
        progressed = True
    if not progressed:
        node, reason = waiting
        raise refuse(node, f"{reason}, which shape inference does not give")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _uses_domain(graph: onnx.GraphProto, domain: str) -> bool:
    """Whether a node of the graph or of its subgraphs is of `domain`."""
    for n in graph.node:
        if n.domain == domain:
            return True
        if any(_uses_domain(sub, domain) for sub in node_subgraphs(n)):
            return True
    return False


def _drop_unused_domain(model: onnx.ModelProto, domain: str) -> None:
    """Removes the opset import of `domain` (in place) when no node uses it."""
    if not _uses_domain(model.graph, domain):
        kept = [o for o in model.opset_import if o.domain != domain]
        del model.opset_import[:]
        model.opset_import.extend(kept)
