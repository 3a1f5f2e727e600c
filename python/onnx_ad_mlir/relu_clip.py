"""A Relu that feeds only a Clip, folded into the Clip where ONNX Runtime
cannot load the pair.

ONNX Runtime 1.32's Relu+Clip fusion reads a Clip's constant min as float
or float16 only. A Relu with no other user followed by a Clip of another
type (double, int32, int64, int8) with a constant min fails the session's
creation: "Unexpected data type for Clip 'min' input". Unrolled loops put
such pairs side by side (a Relu ending a Scan body, a Clip after the Scan).
Clip(Relu(x), lo, hi) is Clip(x, max(lo, 0), hi) exactly, and the exporter
writes that instead.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .node_lowering import constant_tensor, fresh_name
from .portable import all_names
from .validate import node_subgraphs

_FUSED_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)  # the ones the fusion reads


def fold_relu_into_clip(model: onnx.ModelProto) -> None:
    """Rewrites every graph of `model` in place (Clip-11 on: min an operand)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset >= 11:
        _graph(model.graph, _Names(model.graph))


class _Names:
    """The model's taken names, collected at the first fresh one asked for."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph, self.taken = graph, None

    def fresh(self, base: str) -> str:
        if self.taken is None:
            self.taken = all_names(self.graph)
        return fresh_name(self.taken, base)


def _reads(graph: onnx.GraphProto) -> Counter:
    """How often graph's nodes (subgraphs included) and outputs read each name."""
    found = Counter(o.name for o in graph.output)
    for n in graph.node:
        found.update(n.input)
        for sub in node_subgraphs(n):
            found.update(_reads(sub))
    return found


def _graph(graph: onnx.GraphProto, names: _Names) -> None:
    for n in graph.node:
        for sub in node_subgraphs(n):
            _graph(sub, names)
    relus = {n.output[0]: n for n in graph.node
             if n.op_type == "Relu" and n.domain in ("", "ai.onnx")}
    if not relus:
        return
    reads = _reads(graph)
    constants = {t.name: t for t in graph.initializer}
    constants.update({n.output[0]: constant_tensor(n) for n in graph.node
                      if constant_tensor(n) is not None})
    folded, replaced = set(), Counter()
    for n in graph.node:
        relu = relus.get(n.input[0]) if n.op_type == "Clip" and n.input else None
        if relu is None or reads[n.input[0]] != 1 or n.domain not in ("", "ai.onnx"):
            continue
        lo = constants.get(n.input[1]) if len(n.input) > 1 and n.input[1] else None
        if lo is None or lo.data_type in _FUSED_TYPES:
            continue  # (min absent: the fusion has nothing to read)
        value = numpy_helper.to_array(lo)
        name = names.fresh(f"{n.input[1]}_nonnegative")
        graph.initializer.append(numpy_helper.from_array(
            np.maximum(value, 0).astype(value.dtype), name))
        replaced[n.input[1]] += 1
        n.input[1] = name
        n.input[0] = relu.input[0]
        folded.add(id(relu))
    if not folded:
        return
    gone = {n.output[0] for n in graph.node if id(n) in folded}
    # the mins no node reads any more (ONNX Runtime warns of them)
    gone |= {name for name, count in replaced.items() if reads[name] == count}
    keep = [n for n in graph.node if not n.output or n.output[0] not in gone]
    del graph.node[:]
    graph.node.extend(keep)
    for field in (graph.initializer, graph.value_info):
        kept = [t for t in field if t.name not in gone]
        if len(kept) != len(field):
            del field[:]
            field.extend(kept)
