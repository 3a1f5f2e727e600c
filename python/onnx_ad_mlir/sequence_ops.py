"""Sequences replaced by tensors where every read has a tensor form, before
import.

Sequence values carry no derivatives: the differentiation refuses one that
a derivative reaches. Three export idioms build sequences whose reads all
have tensor forms; they are rewritten on the inferred ONNX model, in every
graph (reads inside Loop/If/Scan bodies included):

  append in a Loop   a loop-carried sequence started by SequenceEmpty or
      SequenceConstruct, appended once an iteration (SequenceInsert without
      a position) becomes a scan output of the Loop: TorchScript's
      `ys.append(y)` in a loop, then `torch.stack(ys)` or `torch.cat(ys)`;
      only where the appended tensor's extents are proved the same in
      every iteration. Reads inside the loop at constant positions (a
      multistep method's fs[-1], fs[-2]) become states holding the last
      elements, or the start's tensors.
  SplitToSequence   read at constant positions in its own graph: one Split;
      otherwise each read is a Slice or Gather of the split tensor (a Loop
      over `torch.split`'s pieces reads them at run-time positions; sizes
      computed at run time, a scripted `torch.tensor_split`'s, are summed
      into the Slice's bounds).
  SequenceConstruct   read at constant positions: the tensors themselves.

Reads are SequenceAt, SequenceLength and ConcatFromSequence. A sequence with
any other use, or a read without a tensor form, stays a sequence; a model
with a malformed sequence node is left as it is.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .node_lowering import default_opset, fresh_name
from .validate import node_subgraphs

# What each op becomes where its sequence has a tensor form (docs/COVERAGE.md).
LOWERED = {
    "SequenceEmpty": "the start of a list a Loop appends to: dropped",
    "SequenceConstruct": "read at constant positions: its tensors; a Loop's list's start: "
                         "stacked ahead of the Loop's scan output",
    "SequenceInsert": "appending (no position) once a Loop iteration: a scan output of the Loop",
    "SplitToSequence": "read at constant positions: Split; at run-time positions or with "
                       "sizes computed at run time: Slice or Gather",
    "SequenceAt": "the piece, Gather/Slice of what holds the elements, or in the Loop that "
                  "appends: a state holding the last elements",
    "SequenceLength": "a constant, or an extent of what holds the elements",
    "ConcatFromSequence": "Concat of the pieces, or the stacked elements transposed (and "
                          "reshaped)",
}
_BUILDERS = {"SequenceEmpty", "SequenceConstruct", "SplitToSequence"}
# op -> (fewest, most operands, its INT attributes, those required): the form
# of a node the rewrite may remove; a model with another form of one is left
# as it is, for import's checks to name what is wrong
_FORMS = {
    "SequenceEmpty": (0, 0, {"dtype"}, set()),
    "SequenceConstruct": (1, None, set(), set()),
    "SequenceInsert": (2, 3, set(), set()),
    "SplitToSequence": (1, 2, {"axis", "keepdims"}, set()),
    "SequenceAt": (2, 2, set(), set()),
    "SequenceLength": (1, 1, set(), set()),
    "ConcatFromSequence": (1, 1, {"axis", "new_axis"}, {"axis"}),
}
_FLAGS = {"keepdims", "new_axis"}  # INT attributes ONNX allows 0 and 1 for
_INT_TYPES = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
_SMALL = 4096  # elements of a constant read for positions or sizes
_PASSES = 3
_READS = {"SequenceAt", "SequenceLength", "ConcatFromSequence"}


@dataclasses.dataclass
class _Stacked:
    """Element i is stack[i]; `extents` are the elements' (ints, input
    symbols, None where unknown)."""
    stack: str
    extents: list


@dataclasses.dataclass
class _Pieces:
    """The elements are these tensors."""
    parts: list[str]


@dataclasses.dataclass
class _Slices:
    """SplitToSequence's pieces of x along axis: of these extents; when
    `sizes` is None (x's extent known at run time only), of extent `chunk`
    but the last, and for chunks of 1 without the axis unless keepdims; or,
    when `split` names a 1-D tensor, of the extents it holds at run time."""
    x: str
    axis: int
    sizes: list[int] | None
    keepdims: bool
    chunk: int = 1
    split: str | None = None


_Plan = _Stacked | _Pieces | _Slices


def lower(model: onnx.ModelProto,
          infer: Callable[[onnx.ModelProto], onnx.ModelProto]) -> onnx.ModelProto | None:
    """A copy of `model` with the sequences described above as tensors, or
    None when it has none of them. In passes, inferred again (by `infer`,
    import's inference: ONNX's alone declares its wrong extents, a 3-D
    Attention's 0, for every later round to keep) between them: a list a
    Loop starts with pieces of a split is proved on the types the split's
    lowering gives its reads (ONNX Runtime's ranks, see _split)."""
    opset = default_opset(model)
    if opset < 11 or not _has_builders(model):
        return None
    out = None
    for _ in range(_PASSES):
        work = onnx.ModelProto()
        work.CopyFrom(model if out is None else out)
        try:
            if not _Rewrite(work, opset).run():
                break
        except (IndexError, KeyError, TypeError, ValueError):
            # a malformed node (a read without its operands, an attribute of
            # another type): left as it is, for import's checks to name
            break
        out = work
        if not _has_builders(out):
            break
        try:
            out = infer(out)
        except Exception:  # noqa: BLE001 - the next pass reads the types it has
            pass
    return out


def _is(node: onnx.NodeProto, *ops: str) -> bool:
    """node is one of these default-domain ops: a node of another domain
    under the same name is no sequence op (import refuses it by name)."""
    return node.op_type in ops and node.domain in ("", "ai.onnx")


def _has_builders(model: onnx.ModelProto) -> bool:
    return any(_is(n, *_BUILDERS) for _, n in _nodes(model.graph))


def _nodes(graph: onnx.GraphProto) -> Iterator[tuple[onnx.GraphProto, onnx.NodeProto]]:
    """(graph, node) for the nodes of graph and of its subgraphs."""
    for n in graph.node:
        yield graph, n
        for sub in node_subgraphs(n):
            yield from _nodes(sub)


def _well_formed(node: onnx.NodeProto) -> bool:
    fewest, most, ints, required = _FORMS[node.op_type]
    names = {a.name for a in node.attribute}
    return fewest <= len(node.input) <= (most if most is not None else len(node.input)) and \
        len(node.output) == 1 and bool(node.output[0]) and names <= ints and \
        required <= names and all(a.type == onnx.AttributeProto.INT for a in node.attribute) and \
        all(a.i in (0, 1) for a in node.attribute if a.name in _FLAGS) and \
        all(a.i in _DATA_TYPES for a in node.attribute if a.name == "dtype")


_DATA_TYPES = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
_MOST_PIECES = 1 << 16  # a split into more (a 2^40 extent: MemoryError) stays a sequence


def _ints(node: onnx.NodeProto) -> dict[str, int]:
    return {a.name: a.i for a in node.attribute}


def _unbinds(n: onnx.NodeProto, rewrite: "_Rewrite") -> bool:
    """Whether a SplitToSequence is torch's unbind: a scalar split of 1 with
    keepdims 0, which ONNX Runtime squeezes and ONNX's inference does not."""
    split = rewrite.int_const(n.input[1]) if len(n.input) > 1 and n.input[1] else None
    return split == 1 and not _ints(n).get("keepdims", 1)


def _state_layout(node: onnx.NodeProto):
    """(body, state starts, state arguments, state yields, the other
    arguments) of a Loop or Scan (9 and later), None if malformed."""
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None or len(body.input) != len(node.input):
        return None
    if _is(node, "Loop"):
        n = len(node.input) - 2
        if len(body.output) < 1 + n:
            return None
        return body, list(node.input[2:]), list(body.input[2:]), list(body.output[1:1 + n]), \
            list(body.input[:2])
    m = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
    n = len(node.input) - m
    if not 0 <= n <= len(body.output):
        return None
    return body, list(node.input[:n]), list(body.input[:n]), list(body.output[:n]), \
        list(body.input[n:])


def _post_order(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The nodes of graph in order, each after those of its subgraphs."""
    for n in graph.node:
        for sub in node_subgraphs(n):
            yield from _post_order(sub)
        yield n


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for n in graph.node:
        for sub in node_subgraphs(n):
            yield from _graphs(sub)


class _Rewrite:
    """One rewrite of `model` in place: plans (which sequences have tensor
    forms) are made on the original graphs, then applied in one pass."""

    def __init__(self, model: onnx.ModelProto, opset: int):
        self.model, self.opset = model, opset
        self.types: dict[str, onnx.TypeProto] = {}
        self.consts: dict[str, onnx.TensorProto] = {}  # read when asked (constant)
        self.names: set[str] = set()
        self.input_symbols = {d.dim_param for v in model.graph.input
                              for d in v.type.tensor_type.shape.dim if d.dim_param}
        for g in _graphs(model.graph):
            for v in list(g.input) + list(g.output) + list(g.value_info):
                self.types[v.name] = v.type
                self.names.add(v.name)
            for t in g.initializer:
                self.consts[t.name] = t
                self.names.add(t.name)
        self.producer: dict[str, onnx.NodeProto] = {}
        self.uses: dict[str, list[tuple[onnx.NodeProto, onnx.GraphProto]]] = {}
        self.escapes: set[str] = set()  # names some graph outputs
        for g, n in _nodes(model.graph):
            self.names.update(n.output)
            self.names.update(n.input)
            for o in n.output:
                self.producer[o] = n
            for i in n.input:
                self.uses.setdefault(i, []).append((n, g))
            if _is(n, "Constant") and n.output and n.attribute and \
                    n.attribute[0].name == "value":
                self.consts[n.output[0]] = n.attribute[0].t
        for g in _graphs(model.graph):
            self.escapes.update(v.name for v in g.output)
        # output[0] of a read -> the nodes computing it; a lowered builder's
        # output[0] -> the nodes replacing it ([] drops it)
        self.replace: dict[str, list[onnx.NodeProto]] = {}
        self.after: dict[str, list[onnx.NodeProto]] = {}  # output name -> nodes to place after it
        self.runtime_ranks = False  # whether a read now has a rank ONNX's inference did not give

    # ---- names, constants, shapes

    def fresh(self, base: str) -> str:
        return fresh_name(self.names, base)

    def node(self, out: list, op_type: str, inputs: list[str], name: str | None = None,
             **attrs) -> str:
        name = name or self.fresh(f"seq/{op_type}")
        out.append(helper.make_node(op_type, inputs, [name], name=self.fresh(name), **attrs))
        return name

    def const(self, out: list, value: np.ndarray, name: str | None = None) -> str:
        return self.node(out, "Constant", [], name, value=numpy_helper.from_array(value))

    def unsqueeze(self, out: list, x: str, axis: int, name: str | None = None) -> str:
        if self.opset >= 13:
            return self.node(out, "Unsqueeze", [x, self.const(out, np.array([axis], np.int64))],
                             name)
        return self.node(out, "Unsqueeze", [x], name, axes=[axis])

    def constant(self, name: str) -> np.ndarray | None:
        """The value of a small integer constant (positions, split sizes), or
        None: not a constant, too big to be one, or malformed (import's
        checks report those)."""
        t = self.consts.get(name)
        if t is None or t.data_type not in _INT_TYPES or math.prod(t.dims) > _SMALL:
            return None
        try:
            return numpy_helper.to_array(t)
        except Exception:  # noqa: BLE001 - any malformed tensor
            return None

    def int_const(self, name: str) -> int | None:
        v = self.constant(name)
        if v is None or v.size != 1:
            return None
        return int(v.reshape(()))

    def dims(self, name: str) -> list | None:
        """Extents of a tensor (int, input symbol, or None), None if its rank
        is unknown."""
        return self._extents(self.types.get(name))

    def _extents(self, t: onnx.TypeProto | None) -> list | None:
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else
                (d.dim_param if d.dim_param in self.input_symbols else None)
                for d in t.tensor_type.shape.dim]

    def _integer_operands(self, n: onnx.NodeProto) -> bool:
        """Whether the positions and split sizes are typed as ONNX asks."""
        i = {"SequenceAt": 1, "SequenceInsert": 2, "SplitToSequence": 1}.get(n.op_type)
        if i is None or len(n.input) <= i or not n.input[i] or n.input[i] not in self.types:
            return True
        t = self.types[n.input[i]]
        return t.HasField("tensor_type") and t.tensor_type.elem_type in _INT_TYPES

    # ---- the rewrite

    def run(self) -> bool:
        if not all(_well_formed(n) and self._integer_operands(n)
                   for _, n in _nodes(self.model.graph)
                   if _is(n, *_FORMS)):
            return False
        self.invariant, self.inferred = self._invariant_extents()
        # ONNX's inference gives an unbound row (see _split) a rank ONNX
        # Runtime does not: all else waits for the pass after such a split's
        # lowering, whose inference has the rank right (a Loop's list, a
        # split of the row: fuzz seed 183 case 2, whose pieces came out of
        # the row's rank by ONNX)
        unbinds = {id(n) for _, n in _nodes(self.model.graph)
                   if _is(n, "SplitToSequence") and _unbinds(n, self)}
        for g, n in list(_nodes(self.model.graph)):
            if unbinds and id(n) not in unbinds:
                continue
            if _is(n, "Loop"):
                self._appends(n)
            elif _is(n, "SplitToSequence"):
                self._split(n, g)
            elif _is(n, "SequenceConstruct") and \
                    n.output[0] not in self.replace:
                self._construct(n)
        if not self.replace and not self.after:
            return False
        for g in reversed(list(_graphs(self.model.graph))):  # bodies before their graphs
            self._rebuild(g)
        self._drop_dead_builders()
        self._drop_stale_types()
        return True

    def _reads_of(self, seq: str, plan: _Plan) -> dict[str, list[onnx.NodeProto]] | None:
        """The replacement of every read of `seq`, or None when a use is not
        a read with a tensor form."""
        if seq in self.escapes:
            return None
        done = {}
        for user, _ in self.uses.get(seq, []):
            if not _is(user, *_READS) or \
                    user.input[0] != seq:
                return None
            nodes: list = []
            if not self._read(user, plan, nodes):
                return None
            done[user.output[0]] = nodes
        return done

    def _read(self, user: onnx.NodeProto, plan: _Plan, out: list) -> bool:
        y = user.output[0]
        attrs = _ints(user)
        if user.op_type == "SequenceLength":
            return self._length(plan, y, out)
        if user.op_type == "SequenceAt":
            return self._at(plan, user.input[1], y, out)
        return self._concat(plan, attrs["axis"], attrs.get("new_axis", 0), y, out)

    def _length(self, plan: _Plan, y: str, out: list) -> bool:
        if isinstance(plan, _Pieces):
            self.const(out, np.array(len(plan.parts), np.int64), y)
        elif isinstance(plan, _Slices) and plan.sizes is not None:
            self.const(out, np.array(len(plan.sizes), np.int64), y)
        elif isinstance(plan, _Slices) and plan.split is not None:
            self.node(out, "Size", [plan.split], y)
        elif isinstance(plan, _Slices) and plan.chunk > 1:
            self._chunk_count(plan, out, y)
        else:
            x, axis = (plan.stack, 0) if isinstance(plan, _Stacked) else (plan.x, plan.axis)
            shape = self.node(out, "Shape", [x])
            self.node(out, "Gather", [shape, self.const(out, np.array(axis, np.int64))], y)
        return True

    def _chunk_count(self, plan: _Slices, out: list, y: str | None = None) -> str:
        """ceil(extent / chunk), 0-D int64, of a split whose extent is known at run time."""
        shape = self.node(out, "Shape", [plan.x])
        extent = self.node(out, "Gather", [shape, self.const(out, np.array(plan.axis, np.int64))])
        c = np.array(plan.chunk, np.int64)
        return self.node(out, "Div", [self.node(out, "Add", [extent, self.const(out, c - 1)]),
                                      self.const(out, c)], y)

    def _at(self, plan: _Plan, position: str, y: str, out: list) -> bool:
        p = self.int_const(position)
        if isinstance(plan, _Stacked):
            self.node(out, "Gather", [plan.stack, position], y, axis=0)
            return True
        if isinstance(plan, _Pieces):
            n = len(plan.parts)
            if p is None or not -n <= p < n:
                return False
            self.node(out, "Identity", [plan.parts[p]], y)
            return True
        if plan.split is not None:  # piece p: from the sum of the sizes before it
            sizes = self.node(out, "Cast", [plan.split], to=onnx.TensorProto.INT64)
            ends = self.node(out, "CumSum", [sizes, self.const(out, np.array(0, np.int64))])
            index = self.unsqueeze(out, position, 0)  # (Gather counts negatives from the back)
            bounds = [self.node(out, "Gather", [v, index])
                      for v in (self.node(out, "Sub", [ends, sizes]), ends)]
            axes = self.const(out, np.array([plan.axis], np.int64))
            self.node(out, "Slice", [plan.x, *bounds, axes], y)
            return True
        if plan.sizes is None and plan.chunk == 1:
            index = self.unsqueeze(out, position, 0) if plan.keepdims else position
            self.node(out, "Gather", [plan.x, index], y, axis=plan.axis)
            return True
        axes = self.const(out, np.array([plan.axis], np.int64))
        if plan.sizes is None:  # chunk p: [p c, p c + c), the last one clipped by Slice
            c = self.const(out, np.array([plan.chunk], np.int64))
            if p is not None and p >= 0:
                start = self.const(out, np.array([p * plan.chunk], np.int64))
            else:  # a position that may count from the back
                index = self.unsqueeze(out, self.node(out, "Cast", [position],
                                                      to=onnx.TensorProto.INT64), 0)
                count = self.unsqueeze(out, self._chunk_count(plan, out), 0)
                negative = self.node(out, "Less", [index, self.const(out, np.zeros(1, np.int64))])
                index = self.node(out, "Where", [negative, self.node(out, "Add", [index, count]),
                                                 index])
                start = self.node(out, "Mul", [index, c])
            self.node(out, "Slice", [plan.x, start, self.node(out, "Add", [start, c]), axes], y)
            return True
        ends = np.cumsum(plan.sizes, dtype=np.int64)
        starts = ends - np.asarray(plan.sizes, np.int64)
        if p is not None:
            if not -len(ends) <= p < len(ends):
                return False
            bounds = [self.const(out, starts[[p]]), self.const(out, ends[[p]])]
        else:  # Gather takes negative positions as SequenceAt does
            index = self.unsqueeze(out, position, 0)
            bounds = [self.node(out, "Gather", [self.const(out, v), index]) for v in (starts, ends)]
        self.node(out, "Slice", [plan.x, *bounds, axes], y)
        return True

    def _concat(self, plan: _Plan, axis: int, new_axis: int, y: str, out: list) -> bool:
        if isinstance(plan, _Pieces):
            parts = [self.unsqueeze(out, p, axis) for p in plan.parts] if new_axis \
                else plan.parts
            self.node(out, "Concat", parts, y, axis=axis)
            return True
        if not isinstance(plan, _Stacked):
            return False
        r = len(plan.extents)
        a = axis + (r + 1 if new_axis else r) if axis < 0 else axis
        if not 0 <= a <= (r if new_axis else r - 1):
            return False
        perm = list(range(1, a + 1)) + [0] + list(range(a + 1, r + 1))
        if new_axis:
            self.node(out, "Transpose", [plan.stack], y, perm=perm)
            return True
        # [.., T, d_a, ..] with T before d_a: concatenation along a is
        # element-major. The merged extent is -1 only where every other
        # extent is known and non-zero: a -1 beside a 0 has no value (ONNX's
        # checker rejects it, ONNX Runtime fails); else T * d_a at run time,
        # where a 0 is an extent: allowzero (before opset 14 a 0 read at run
        # time copies the input's extent there, as for the transposes'
        # Reshapes).
        moved = self.node(out, "Transpose", [plan.stack], perm=perm)
        others = plan.extents[:a] + plan.extents[a + 1:]
        zeros: dict = {}
        if all(isinstance(d, int) and d > 0 for d in others):
            target = self.const(out, np.array(others[:a] + [-1] + others[a:], np.int64))
        else:
            shape = self.node(out, "Shape", [plan.stack])  # [T, d_0, .., d_{r-1}]

            def part(start: int, end: int) -> str:
                return self.node(out, "Slice", [shape, self.const(out, np.array([start], np.int64)),
                                                self.const(out, np.array([end], np.int64))])
            merged = self.node(out, "Mul", [part(0, 1), part(a + 1, a + 2)])
            target = self.node(out, "Concat", [part(1, a + 1), merged, part(a + 2, 2 ** 62)],
                               axis=0)
            zeros = {"allowzero": 1} if self.opset >= 14 else {}
        self.node(out, "Reshape", [moved, target], y, **zeros)
        return True

    # ---- builders

    def _construct(self, n: onnx.NodeProto) -> None:
        reads = self._reads_of(n.output[0], _Pieces(list(n.input)))
        if reads is not None:
            self.replace.update(reads)
            self.replace[n.output[0]] = []

    def _split(self, n: onnx.NodeProto, g: onnx.GraphProto) -> None:
        x, seq = n.input[0], n.output[0]
        attrs = _ints(n)
        axis, keepdims = attrs.get("axis", 0), bool(attrs.get("keepdims", 1))
        dims = self.dims(x)
        if dims is not None and not -len(dims) <= axis < len(dims):
            return  # (an invalid node: import's checks name it)
        extent = dims[axis] if dims is not None and isinstance(dims[axis], int) else None
        if extent is not None and extent > _MOST_PIECES:
            return  # (a list of that many pieces has no per-piece form worth writing)
        unit, sizes = True, None  # unit: pieces of extent 1, `keepdims` applies
        scalar_one, chunk = False, 1
        if len(n.input) > 1 and n.input[1]:
            split = self.constant(n.input[1])
            if split is None:
                self._run_time_split(n)
                return
            if split.ndim > 1 or (split <= 0).any():
                return
            if split.ndim == 1:
                unit, sizes, keepdims = False, [int(s) for s in split], True
                if extent is not None and sum(sizes) != extent:
                    return  # (an invalid node: import's checks name it)
            elif int(split) == 1:
                scalar_one = True
            else:  # (keepdims=0 fails in ONNX Runtime unless the chunks are 1)
                if not keepdims:
                    return
                unit, chunk = False, int(split)
                if extent is not None:
                    sizes = [chunk] * (extent // chunk) + \
                        ([extent % chunk] if extent % chunk else [])
        if unit and extent is not None:
            sizes = [1] * extent
        if sizes == []:
            return
        done = self._split_node(n, g, x, axis, sizes, keepdims)
        if not done:
            reads = self._reads_of(seq, _Slices(x, axis, None if unit else sizes, keepdims,
                                                chunk))
            if reads is not None:
                self.replace.update(reads)
                self.replace[seq] = []
                done = True
        # ONNX Runtime applies keepdims to a scalar split of 1 too (torch
        # exports unbind so), where ONNX ignores it: ONNX's inference, and the
        # exporter's declarations, keep the axis in what reads the pieces
        self.runtime_ranks |= done and scalar_one and not keepdims

    def _run_time_split(self, n: onnx.NodeProto) -> None:
        """A split whose sizes are a 1-D tensor computed at run time
        (TorchScript exports a scripted torch.tensor_split with Shape
        arithmetic): every read slices at the sizes' running sum."""
        sizes = self.dims(n.input[1])
        if sizes is None or len(sizes) != 1:
            return
        seq = n.output[0]
        reads = self._reads_of(seq, _Slices(n.input[0], _ints(n).get("axis", 0), None, True,
                                            split=n.input[1]))
        if reads is not None:
            self.replace.update(reads)
            self.replace[seq] = []

    def _split_node(self, n: onnx.NodeProto, g: onnx.GraphProto, x: str, axis: int,
                    sizes: list[int] | None, keepdims: bool) -> bool:
        """One Split when every read is SequenceAt at a constant position,
        in n's graph; False when not."""
        seq = n.output[0]
        users = self.uses.get(seq, [])
        if sizes is None or seq in self.escapes or not users or any(
                not _is(u, "SequenceAt") or u.input[0] != seq or h is not g or
                self.int_const(u.input[1]) is None or
                not -len(sizes) <= self.int_const(u.input[1]) < len(sizes)
                for u, h in users):
            return False
        nodes: list = []
        pieces = [self.fresh(f"{seq}/piece{i}") for i in range(len(sizes))]
        split = np.array(sizes, np.int64)
        if self.opset >= 13:
            ins = [x, self.const(nodes, split)]
            nodes.append(helper.make_node("Split", ins, pieces, name=self.fresh(f"{seq}/Split"),
                                          axis=axis))
        else:
            nodes.append(helper.make_node("Split", [x], pieces, name=self.fresh(f"{seq}/Split"),
                                          axis=axis, split=sizes))
        self.replace[seq] = nodes
        for u, _ in users:
            piece = pieces[self.int_const(u.input[1])]
            read: list = []
            if keepdims:
                self.node(read, "Identity", [piece], u.output[0])
            elif self.opset >= 13:
                axes = self.const(read, np.array([axis], np.int64))
                self.node(read, "Squeeze", [piece, axes], u.output[0])
            else:
                self.node(read, "Squeeze", [piece], u.output[0], axes=[axis])
            self.replace[u.output[0]] = read
        return True

    def _invariant_extents(self) -> tuple[dict[str, list], dict[str, onnx.TypeProto]]:
        """Extents of values in Loop/Scan bodies that are the same in every
        iteration: those ONNX's inference gives the bodies whose tensor
        states provably keep their extents (each one's start and yield, as
        inferred from the body's arguments, have its argument's extents,
        all static or the main graph's input symbols: by induction, every
        iteration sees those). Inferred on a copy whose state arguments
        have their starts' extents and whose bodies' outputs have none
        (torch declares them under names of their own), in rounds: ONNX's inference leaves a Loop's results unshaped, so the
        final states of the Loops proved are declared for the next round
        (a Loop after or around another). The types inferred come second."""
        regions = [n for n in _post_order(self.model.graph)
                   if _is(n, "Loop", "Scan") and any(n.output)]
        if not any(_is(n, "Loop") and any(
                self.producer.get(i) is not None and _is(self.producer[i], *_BUILDERS)
                for i in n.input) for n in regions):
            return {}, {}
        copy = onnx.ModelProto()
        copy.CopyFrom(self.model)
        for g in _graphs(copy.graph):
            if g is copy.graph:
                continue
            g.ClearField("value_info")
            for v in g.output:
                if v.type.HasField("tensor_type"):
                    v.type.tensor_type.ClearField("shape")
        finals: dict[str, list] = {}  # final states of the Loops/Scans proved
        proved: dict[str, tuple] = {}  # first output -> the region's state layout
        types: dict[str, onnx.TypeProto] = {}
        copies = [n for n in _post_order(copy.graph)
                  if _is(n, "Loop", "Scan") and any(n.output)]
        declared: dict[str, list] = {}  # reads of lists in bodies, typed as their elements
        for _ in range(len(regions) + 1):
            # the induction's base: each state argument has its start's extents
            # (not the body's declaration, which torch writes with names of
            # its own)
            for node in copies:
                layout = _state_layout(node)
                for start, arg in zip(*layout[1:3]) if layout is not None else ():
                    d = finals.get(start) or self._known(types.get(start)) or \
                        self._known(self.types.get(start))
                    # (a declaration of other static extents stays: no proof)
                    if d is not None and arg.type.HasField("tensor_type") and \
                            self._known(arg.type) in (None, d):
                        arg.type.CopyFrom(helper.make_tensor_type_proto(
                            arg.type.tensor_type.elem_type, d))
            try:
                inferred = onnx.shape_inference.infer_shapes(copy)
            except Exception:  # noqa: BLE001 - no proof then
                break
            types = {v.name: v.type for g in _graphs(inferred.graph)
                     for v in list(g.input) + list(g.output) + list(g.value_info)}
            dims = lambda name: finals.get(name) or self._known(types.get(name))
            grew = {}
            for node in regions:  # nested and earlier ones first
                key = next(o for o in node.output if o)
                layout = _state_layout(node)
                if key in proved or layout is None:
                    continue
                _, starts, args, yields, _ = layout
                tensors = [(s, a, y) for s, a, y in zip(starts, args, yields)
                           if types.get(a.name) is None or
                           not types[a.name].HasField("sequence_type")]
                if all(dims(a.name) is not None and dims(s) == dims(a.name) and
                       dims(y.name) == dims(a.name) for s, a, y in tensors):
                    proved[key] = layout
                    grew.update({out: dims(a.name) for out, a in zip(node.output, args)
                                 if out and dims(a.name) is not None})
            # the induction's hypothesis for a list the body reads: its
            # elements (the start's, and the earlier appended) have the
            # appended tensor's extents
            read = {r: d for r, d in self._list_reads(copy.graph, dims).items()
                    if r not in declared}
            if not grew and not read:
                break
            finals.update(grew)
            declared.update(read)
            for g in _graphs(copy.graph):  # declared where they are, for the next round
                here = {o for n in g.node for o in n.output}
                g.value_info.extend(helper.make_tensor_value_info(
                    name, types[name].tensor_type.elem_type, d)
                    for name, d in {**grew, **read}.items() if name in here and name in types)
        dims = lambda name: finals.get(name) or self._known(types.get(name))
        extents = dict(finals)
        for key, (body, _, args, _, given) in proved.items():
            # values computed from the states (and from captures, fixed during
            # the loop); not those of nested Loops/Scans without a proof
            trusted = {v.name for v in list(given) + list(args)}
            own = trusted | {o for n in body.node for o in n.output}
            for n in body.node:
                unproved = _is(n, "Loop", "Scan") and \
                    next((o for o in n.output if o), None) not in proved
                reads = set(n.input) | {i for sub in node_subgraphs(n) for _, m in _nodes(sub)
                                        for i in m.input}
                if not unproved and all(i in trusted or i not in own for i in reads if i):
                    trusted.update(n.output)
            extents.update({v: dims(v) for n in body.node for v in n.output
                            if v in trusted and dims(v) is not None})
        return extents, types

    def _list_reads(self, graph: onnx.GraphProto, dims) -> dict[str, list]:
        """SequenceAt outputs in Loop bodies reading a list the body appends
        to, with the extents of what it appends (where `dims` knows them and
        the list's start holds elements of them)."""
        out = {}
        for _, loop in _nodes(graph):
            if not _is(loop, "Loop"):
                continue
            body = next((a.g for a in loop.attribute if a.name == "body"), None)
            if body is None or len(body.input) != len(loop.input):
                continue
            for start, arg in zip(loop.input[2:], body.input[2:]):
                first = self.producer.get(start)
                if first is None or not _is(first, "SequenceEmpty", "SequenceConstruct"):
                    continue
                inserts = [n for n in body.node if _is(n, "SequenceInsert") and
                           n.input and n.input[0] == arg.name]
                if len(inserts) != 1 or len(inserts[0].input) < 2:
                    continue
                d = dims(inserts[0].input[1])
                if d is None or any(dims(e) != d for e in first.input):
                    continue
                lists = {arg.name, inserts[0].output[0]}
                out.update({n.output[0]: d for n in body.node
                            if _is(n, "SequenceAt") and n.input and n.input[0] in lists})
        return out

    def _known(self, t: onnx.TypeProto | None) -> list | None:
        """A tensor type's extents if all are static or input symbols."""
        d = self._extents(t)
        return None if d is None or None in d else d

    def _appends(self, loop: onnx.NodeProto) -> None:
        """Loop-carried sequences appended once an iteration, read after the
        loop: scan outputs (highest state first: indices below stay valid)."""
        body = next((a.g for a in loop.attribute if a.name == "body"), None)
        if body is None:
            return
        n_states = len(loop.input) - 2
        for j in reversed(range(n_states)):
            self._append(loop, body, j)

    def _append(self, loop: onnx.NodeProto, body: onnx.GraphProto, j: int) -> None:
        start = self.producer.get(loop.input[2 + j])
        if start is None or not _is(start, "SequenceEmpty", "SequenceConstruct") or \
                len(body.input) != len(loop.input) or len(body.output) < 1 + len(loop.input) - 2 \
                or len(loop.output) != len(body.output) - 1:  # (every result named or "")
            return
        if any(v.type.WhichOneof("value") not in (None, "sequence_type")
               for v in (body.input[2 + j], body.output[1 + j])):
            return  # (a list state declared a tensor: import's checks name it)
        arg = body.input[2 + j].name
        inserts = [u for u, g in self.uses.get(arg, []) if _is(u, "SequenceInsert")]
        if len(inserts) != 1 or arg in self.escapes:
            return
        insert = inserts[0]
        if insert.input[0] != arg or (len(insert.input) > 2 and insert.input[2]):
            return
        appended = insert.output[0]
        if body.output[1 + j].name != appended or \
                sum(o.name == appended for o in body.output) != 1:
            return
        # a scan output has one shape in every iteration (ONNX Runtime fails
        # the Loop otherwise, where the sequence took any shapes)
        x = insert.input[1]
        dims = self.invariant.get(x)
        firsts = list(start.input) if _is(start, "SequenceConstruct") else []
        if dims is None or any(self.invariant.get(e, self.dims(e)) != dims for e in firsts):
            return
        window = self._window_reads(body, arg, insert, x, firsts)
        if window is None:
            return
        in_loop, depth = window
        final = loop.output[j] if j < len(loop.output) else ""
        stacked = self.fresh(f"{final or appended}/stacked")
        stack = stacked
        before: list = []
        if firsts:
            stack = self.fresh(f"{final or appended}/all")
            self.node(before, "Concat", [self.unsqueeze(before, e, 0) for e in firsts] +
                      [stacked], stack, axis=0)
        reads = {}
        if final:
            reads = self._reads_of(final, _Stacked(stack, dims))
            if reads is None:
                return
        self.replace.update(reads)
        if before:
            self.after[stacked] = before
        # the Loop: state j out, a scan output of x's copy in (x may be a
        # body output already, and a graph yields a name once), and the last
        # `depth` elements the body reads as states of their own
        elem = self.inferred[x].tensor_type.elem_type
        scan_out = self.fresh(f"{x}/appended")
        copies: list = []
        self.node(copies, "Identity", [x], scan_out)
        last = [self.fresh(f"{arg}/last{i + 1}") for i in range(depth)]
        nexts = [self.node(copies, "Identity", [x if i == 0 else last[i - 1]])
                 for i in range(depth)]
        self.replace[appended] = copies
        for read, (kind, i) in in_loop.items():
            source = firsts[i] if kind == "first" else x if kind == "new" else last[i]
            self.replace[read] = []
            self.node(self.replace[read], "Identity", [source], read)
        del body.input[2 + j]
        del body.output[1 + j]
        carried = len(loop.input) - 3  # after this state is gone
        body.input.extend(helper.make_tensor_value_info(a, elem, dims) for a in last)
        yields = [helper.make_tensor_value_info(n, elem, dims) for n in nexts]
        outputs = list(body.output)
        outputs[1 + carried:1 + carried] = yields
        outputs.append(helper.make_tensor_value_info(scan_out, elem, dims))
        del body.output[:]
        body.output.extend(outputs)
        del loop.input[2 + j]
        loop.input.extend(firsts[len(firsts) - 1 - i] for i in range(depth))
        outs = [v for k, v in enumerate(loop.output) if k != j]
        outs[carried:carried] = [self.fresh(f"{a}/final") for a in last]
        del loop.output[:]
        loop.output.extend(outs + [stacked])

    def _window_reads(self, body: onnx.GraphProto, arg: str, insert: onnx.NodeProto, x: str,
                      firsts: list[str]) -> tuple[dict, int] | None:
        """The body's reads of the list (SequenceAt at constant positions, in
        the body itself) as (read output -> ("first", i): the start's element
        i; ("new", 0): x; ("last", i): the (i+1)-th last element before this
        iteration's append), and how many last elements they need; None when
        a use is another or reads what the start does not hold (where ONNX
        Runtime fails the first iteration)."""
        m = len(firsts)
        found, depth = {}, 0
        for seq, before in ((arg, True), (insert.output[0], False)):
            for user, g in self.uses.get(seq, []):
                if user is insert:
                    continue
                p = self.int_const(user.input[1]) if len(user.input) > 1 else None
                if not _is(user, "SequenceAt") or g is not body or user.input[0] != seq or \
                        p is None:
                    return None
                if 0 <= p < m:  # an element of the start, the same in every iteration
                    found[user.output[0]] = ("first", p)
                elif p == -1 and not before:
                    found[user.output[0]] = ("new", 0)
                elif p < 0 and -p - (0 if before else 1) <= m:
                    i = -p - (1 if before else 2)  # elements back from the last one before x
                    found[user.output[0]] = ("last", i)
                    depth = max(depth, i + 1)
                else:
                    return None
        return found, depth

    # ---- applying

    def _rebuild(self, g: onnx.GraphProto) -> None:
        if not any(n.output and n.output[0] in self.replace or
                   any(o in self.after for o in n.output) for n in g.node):
            return
        nodes = []
        for n in g.node:
            key = n.output[0] if n.output else None
            if key in self.replace:
                nodes.extend(self.replace[key])
                continue
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            nodes.append(copy)
            for o in n.output:
                nodes.extend(self.after.get(o, []))
        g.ClearField("node")
        g.node.extend(nodes)

    def _drop_dead_builders(self) -> None:
        """Sequence builders nothing reads any more (a lowered Loop's start)."""
        while True:
            used = {i for _, n in _nodes(self.model.graph) for i in n.input}
            for g in _graphs(self.model.graph):
                used.update(v.name for v in g.output)
            dropped = False
            for g in list(_graphs(self.model.graph)):
                dead = [k for k, n in enumerate(g.node) if _is(n, *_BUILDERS) and
                        not any(o in used for o in n.output)]
                for k in reversed(dead):
                    del g.node[k]
                dropped = dropped or bool(dead)
            if not dropped:
                return

    def _drop_stale_types(self) -> None:
        """Drops the types of the sequences gone, and inferred types with
        extents named after a sequence's elements: one name for extents its
        elements need not share (two pieces of a split), wrong for the
        tensors now read. After a read of another rank (runtime_ranks),
        every shape but those of graph inputs (a body's iteration number
        and states: ONNX's inference of a Loop reads their declarations).
        Inference gives them again."""
        for g in _graphs(self.model.graph):
            defined = {v.name for v in g.input} | {o for n in g.node for o in n.output}
            kept = [v for v in g.value_info
                    if (v.name in defined or not v.type.HasField("sequence_type")) and
                    not any(d.dim_param and d.dim_param not in self.input_symbols
                            for d in v.type.tensor_type.shape.dim) and not self.runtime_ranks]
            if len(kept) < len(g.value_info):
                kept = [onnx.ValueInfoProto.FromString(v.SerializeToString()) for v in kept]
                g.ClearField("value_info")
                g.value_info.extend(kept)
            if self.runtime_ranks:
                for v in g.output:
                    if v.type.HasField("tensor_type"):
                        v.type.tensor_type.ClearField("shape")
