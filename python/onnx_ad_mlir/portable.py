"""The exported model's loops in the forms every ONNX runtime runs alike.

IREE's ONNX import (3.13: torch-mlir's Scan and Loop lowerings) ignores
Scan's scan_input_axes, scan_output_axes and both directions attributes,
always scanning axis 0 forwards: a reverse sweep (directions 1) or a history
stacked on another axis gives wrong numbers there, silently. It also
refuses Loops with scan outputs, Loops without a cond operand, and it (like
ONNX's shape inference) cannot read the values of outer-scope constants a
body reads (Slice's starts inside a Scan body). The AD passes keep those
attributes (merge_scans, sink_sums and the reversal read them), so the
exporter rewrites the finished model, leaving what it computes unchanged:

  - a Scan's reversed or moved sequences become default ones (axis 0,
    forwards) with a Slice of step -1 and a Transpose outside the Scan;
  - a Loop without a cond operand whose body yields true throughout gets a
    constant true cond (loops_as_scans.py turns those of a constant trip
    count into Scans where it proves the states keep their shapes);
  - small constants a subgraph reads from an enclosing graph get a copy
    inside it (the outer one dropped once nothing reads it: ONNX Runtime
    warns of every unused constant at each session's creation).

Measured with ONNX Runtime 1.32 on the benchmark's recurrent models (A/B
in one process): the reverse models of gru, lstm and scan_rnn 2-4% slower
(the reversal copies); with loops_as_scans, the Loop models' derivatives
6-15% faster.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .node_lowering import constant_tensor, fresh_name
from .validate import node_subgraphs

_SMALL = 64  # elements of a constant a subgraph gets its own copy of
_INT64_MIN = np.iinfo(np.int64).min


def make_portable(model: onnx.ModelProto) -> None:
    """Rewrites `model`'s Scans and Loops (every graph) in place."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 11 or not any(node_subgraphs(n) for n in model.graph.node):
        return  # (no Slice steps before opset 10, no Range before 11)
    names = all_names(model.graph)
    rewriter = _Rewriter(names)
    rewriter.graph(model.graph, {})
    if rewriter.copied:
        _drop_unread(model.graph, rewriter.copied, _read_names(model.graph))


def all_names(graph: onnx.GraphProto) -> set[str]:
    found = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    found |= {t.name for t in graph.initializer}
    for n in graph.node:
        found |= set(n.input) | set(n.output)
        found.add(n.name)
        for sub in node_subgraphs(n):
            found |= all_names(sub)
    return found


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every value a node or a graph output of graph (subgraphs included)
    reads; ONNX names are unique across scopes."""
    found = {o.name for o in graph.output}
    for n in graph.node:
        found |= set(n.input)
        for sub in node_subgraphs(n):
            found |= _read_names(sub)
    return found


def _drop_unread(graph: onnx.GraphProto, copied: set[str], read: set[str]) -> None:
    """Removes the Constant nodes of `copied` values nothing reads any more."""
    for n in graph.node:
        for sub in node_subgraphs(n):
            _drop_unread(sub, copied, read)
    keep = [n for n in graph.node if not (n.output and n.output[0] in copied
                                          and n.output[0] not in read)]
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)


def _ranks(graph: onnx.GraphProto) -> dict[str, int]:
    """The ranks its declared types give graph's values."""
    return {v.name: len(v.type.tensor_type.shape.dim)
            for v in list(graph.input) + list(graph.output) + list(graph.value_info)
            if v.type.tensor_type.HasField("shape")}


class _Rewriter:
    def __init__(self, names: set[str]):
        self.names = names
        self.copied: set[str] = set()  # outer constants some subgraph got a copy of

    def fresh(self, base: str) -> str:
        return fresh_name(self.names, base)

    def graph(self, g: onnx.GraphProto, outer: dict[str, onnx.NodeProto]) -> None:
        """Rewrites g's nodes (subgraphs first); `outer`: the enclosing
        graphs' Constant nodes by output."""
        constants = dict(outer)
        constants.update({n.output[0]: n for n in g.node if constant_tensor(n) is not None})
        nodes: list[onnx.NodeProto] = []
        shared: list[onnx.NodeProto] = []  # the graph's reversal operands, made once
        changed = False
        for n in g.node:
            for sub in node_subgraphs(n):
                self.graph(sub, constants)
            if n.domain in ("", "ai.onnx") and n.op_type in ("Scan", "Loop"):
                out = self.scan(n, shared) if n.op_type == "Scan" else self.loop(n)
                changed |= len(out) != 1 or out[0] is not n
                nodes.extend(out)
            else:
                nodes.append(n)
        if changed:  # (else no copies of every node)
            del g.node[:]
            g.node.extend(shared + nodes)
        if outer:
            self.localize(g, outer)

    # ---- Scan ------------------------------------------------------------------------

    def scan(self, n: onnx.NodeProto, shared: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
        attrs = {a.name: a for a in n.attribute}
        body = attrs["body"].g
        m = attrs["num_scan_inputs"].i
        states = len(n.input) - m
        outs = len(body.output) - states
        listed = {k: list(attrs[k].ints) if k in attrs else [0] * count for k, count in
                  (("scan_input_axes", m), ("scan_input_directions", m),
                   ("scan_output_axes", outs), ("scan_output_directions", outs))}
        if not any(v for values in listed.values() for v in values):
            return [n]
        declared = _ranks(body)
        ranks = [declared.get(v.name) for v in list(body.input[states:]) +
                 list(body.output[states:])]
        axes = listed["scan_input_axes"] + listed["scan_output_axes"]
        if any(a and r is None for a, r in zip(axes, ranks)):
            return [n]  # (a moved axis needs the rank: left as it is)
        before: list[onnx.NodeProto] = []
        after: list[onnx.NodeProto] = []
        inputs = list(n.input[:states])
        for k in range(m):
            v, r = n.input[states + k], ranks[k]
            axis = listed["scan_input_axes"][k] % (r + 1) if r is not None else 0
            if axis:
                v = self.emit(before, "Transpose", [v], "scan_in",
                              perm=[axis] + [i for i in range(r + 1) if i != axis])
            if listed["scan_input_directions"][k]:
                v = self.reversed(before, shared, v)
            inputs.append(v)
        outputs = list(n.output[:states])
        for k in range(outs):
            name, r = n.output[states + k], ranks[m + k]
            axis = listed["scan_output_axes"][k] % (r + 1) if r is not None else 0
            backwards = listed["scan_output_directions"][k]
            if not name or not (axis or backwards):
                outputs.append(name)
                continue
            v = self.fresh(f"{name}/stacked")
            outputs.append(v)
            if backwards:
                v = self.reversed(after, shared, v, None if axis else name)
            if axis:
                perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, r + 1))
                after.append(helper.make_node("Transpose", [v], [name], perm=perm,
                                              name=self.fresh(f"{name}/Transpose")))
        kept = [a for a in n.attribute if a.name not in listed]
        scan = onnx.NodeProto()
        scan.CopyFrom(n)
        del scan.input[:], scan.output[:], scan.attribute[:]
        scan.input.extend(inputs)
        scan.output.extend(outputs)
        scan.attribute.extend(kept)
        return before + [scan] + after

    def reversed(self, nodes: list[onnx.NodeProto], shared: list[onnx.NodeProto], v: str,
                 out: str | None = None) -> str:
        """v with its axis 0 in reverse order: a Slice of step -1, its
        starts (= steps), ends and axes made once per graph in `shared`."""
        if not shared:
            for x in (-1, _INT64_MIN, 0):
                self.emit(shared, "Constant", [], "reverse",
                          value=numpy_helper.from_array(np.asarray([x], np.int64)))
        last, end, axis = (c.output[0] for c in shared)
        return self.emit(nodes, "Slice", [v, last, end, axis, last], "reversed", out=out)

    def emit(self, nodes: list[onnx.NodeProto], op: str, inputs: list[str], base: str,
             out: str | None = None, **attrs) -> str:
        out = out or self.fresh(base)
        nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(f"{base}/{op}"),
                                      **attrs))
        return out

    # ---- Loop ------------------------------------------------------------------------

    def loop(self, n: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The Loop with a constant true cond where it has none and its body
        yields true throughout (where the body computes a cond, an absent
        cond operand makes ONNX ignore it: a for loop)."""
        body = next(a.g for a in n.attribute if a.name == "body")
        if len(n.input) > 1 and n.input[1] or not _yields_true(body):
            return [n]
        nodes: list[onnx.NodeProto] = []
        held = self.emit(nodes, "Constant", [], "cond",
                         value=helper.make_tensor("true", TensorProto.BOOL, [], [True]))
        loop = onnx.NodeProto()
        loop.CopyFrom(n)
        while len(loop.input) < 2:
            loop.input.append("")
        loop.input[1] = held
        return nodes + [loop]

    # ---- constants ------------------------------------------------------------------------

    def localize(self, g: onnx.GraphProto, outer: dict[str, onnx.NodeProto]) -> None:
        """Copies into g the small outer constants its nodes read."""
        own = {v.name for v in g.input} | {t.name for t in g.initializer} | \
            {o for n in g.node for o in n.output}
        read = sorted({i for n in g.node for i in n.input if i and i not in own and i in outer})
        copies, renamed = [], {}
        for name in read:
            if int(np.prod(constant_tensor(outer[name]).dims)) > _SMALL:
                continue
            renamed[name] = self.fresh(name)
            self.copied.add(name)
            copy = onnx.NodeProto()
            copy.CopyFrom(outer[name])
            copy.output[0] = renamed[name]
            copy.name = self.fresh(f"{name}/Constant")
            copies.append(copy)
        if not copies:
            return
        for n in g.node:
            for i, v in enumerate(n.input):
                if v in renamed:
                    n.input[i] = renamed[v]
        nodes = copies + list(g.node)
        del g.node[:]
        g.node.extend(nodes)


def _yields_true(body: onnx.GraphProto) -> bool:
    """Whether a Loop body's cond result is always true: its cond input
    passed on (through Identity nodes) or a true constant."""
    v = body.output[0].name
    producers = {o: n for n in body.node for o in n.output}
    while v in producers and producers[v].op_type == "Identity":
        v = producers[v].input[0]
    if v == body.input[1].name:
        return True
    t = constant_tensor(producers[v]) if v in producers else None
    if t is None or t.data_type != TensorProto.BOOL:
        return False
    value = numpy_helper.to_array(t)
    return value.size == 1 and bool(value.reshape(-1)[0])
