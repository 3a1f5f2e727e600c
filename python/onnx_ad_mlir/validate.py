"""Checks of attribute values against the ranks of their operands, before any
IR is built. ONNX shape inference (run non-strict by import_prep) lets an
out-of-range `axis` or a `perm` that is not a permutation through; the
derivative rules would then fail with an internal error or emit an invalid
model. Found by the fuzzer (test/fuzz). Failures are `ImportFailure`s naming
the node, op and attribute."""
from __future__ import annotations

import functools
import math
import re
from typing import Sequence

import onnx
import onnx.numpy_helper

from . import _op_table
from .errors import ImportFailure, UnsupportedOp

# op -> (attribute, operand index whose rank bounds it, extra: axis may equal the rank)
_AXIS_OPS = {
    "Softmax": 0, "LogSoftmax": 0, "Hardmax": 0, "Concat": 0, "Gather": 0,
    "GatherElements": 0, "LayerNormalization": 0, "Split": 0, "CumSum": 0,
    "ScatterElements": 0, "Compress": 0, "ArgMax": 0, "ArgMin": 0, "TopK": 0,
    "LpNormalization": 0, "RMSNormalization": 0, "Scatter": 0, "TensorScatter": 0,
    "Unique": 0, "SplitToSequence": 0,
}
_AXIS_INCLUSIVE = {"Flatten"}  # axis in [-r, r]
_AXIS_OF_RESULT = {"OneHot"}  # a new axis of the result: in [-r - 1, r]
_REGIONS = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",)}
# The default-domain ops with graph attributes. The importer refuses a graph
# attribute on any other node (an unknown attribute, or an op of another
# domain), so the checks only descend into theirs: reading every node's
# attributes would cost more than all the checks of a graph without any.
_GRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


# (node, op type, domain, inputs, outputs, name, doc_string, attributes, metadata_props)
NodeRow = tuple[onnx.NodeProto, str, str, list[str], list[str], str, str,
                list[onnx.AttributeProto], Sequence[onnx.StringStringEntryProto]]


def node_fields(graph: onnx.GraphProto) -> list[NodeRow]:
    """The NodeRow of each node of the graph. At 10**4 nodes reading protobuf
    fields is much of what an import costs: import_prep reads them once for
    these checks and the importer. Strings are as protobuf hands them back
    (bytes when not valid UTF-8: see check_text)."""
    return [(n, n.op_type, n.domain, n.input[:], n.output[:], n.name, n.doc_string,
             n.attribute[:], n.metadata_props) for n in graph.node]  # (rarely set: not sliced)


# (initializer, name, data type, dims)
InitRow = tuple[onnx.TensorProto, str, int, list[int]]


def initializer_fields(graph: onnx.GraphProto) -> list[InitRow]:
    """The InitRow of each initializer of the graph: read once for the
    checks, import_prep and the importer, as node_fields are."""
    return [(t, t.name, t.data_type, t.dims[:]) for t in graph.initializer]


Declared = list[tuple[str, str, bytes]]


def declared_types(graph: onnx.GraphProto) -> Declared:
    """(kind, name, serialized TypeProto) of the graph's inputs, outputs and
    value_info entries, in that order. Serialized once for the checks, which
    read types through caches by these bytes: thousands of values share a
    few types, and reading each one's fields costs more than this."""
    return [(kind, v.name, v.type.SerializeToString())
            for kind, values in (("input", graph.input), ("output", graph.output),
                                 ("value_info", graph.value_info)) for v in values]


@functools.lru_cache(maxsize=4096)
def _type_facts(type_bytes: bytes) -> tuple[int | None, int]:
    """(rank or None, element type or 0) of a serialized TypeProto's tensor
    type; (None, 0) for other types."""
    tp = onnx.TypeProto.FromString(type_bytes)
    if not tp.HasField("tensor_type"):
        return None, 0
    t = tp.tensor_type
    return (len(t.shape.dim) if t.HasField("shape") else None), t.elem_type


def _unique_facts(declared: Declared, index: int) -> dict[bytes, int | None]:
    """_type_facts(type)[index] of each distinct declared type: thousands of
    values share a few types."""
    return {b: _type_facts(b)[index] for b in {b for _, _, b in declared}}


def _declared_ranks(declared: Declared) -> dict[str, int]:
    """Ranks of the declared values that have one (a later entry wins)."""
    ranks = _unique_facts(declared, 0)
    return {name: ranks[b] for _, name, b in declared if ranks[b] is not None}


def _declared_elem_types(declared: Declared) -> dict[str, int]:
    """Element types of the declared values that have one (a later entry wins)."""
    elems = _unique_facts(declared, 1)
    return {name: elems[b] for _, name, b in declared if elems[b]}


def _ranks(graph: onnx.GraphProto, outer: dict[str, int], declared: Declared | None = None,
           inits: list[InitRow] | None = None) -> dict[str, int]:
    ranks = dict(outer)
    ranks.update(_declared_ranks(declared_types(graph) if declared is None else declared))
    for _, name, _, dims in initializer_fields(graph) if inits is None else inits:
        ranks[name] = len(dims)
    return ranks


# Operands ONNX asks to hold one value. ONNX's inference does not look at
# their extents; ONNX Runtime runs one element of rank 1 alike (an If
# condition of any rank) but refuses more, or reads only the first (sequence
# positions), so derivative models built on more failed there (seed 182 case
# 1638: a position of two elements; seed 218 case 1146: a Trilu k of two).
_ONE_VALUE = {"SequenceAt": {1: "position"}, "SequenceInsert": {2: "position"},
              "SequenceErase": {1: "position"}, "Trilu": {1: "k"}, "CumSum": {1: "axis"},
              "CumProd": {1: "axis"},
              "Pad": {2: "constant_value"}, "If": {0: "condition"},
              "Clip": {1: "min", 2: "max"}}
# Operands ONNX asks to be 1-D and ONNX Runtime refuses of any other rank
# (TorchScript exports Mamba's chunking with a Tile of repeats [1, 1]), or,
# for Compress, runs flattened where the derivative's reshapes then fail.
_REDUCE_AXES = {op: {1: "axes"} for op in (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}
_ONE_AXIS = {"Reshape": {1: "shape"},
             "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
             "Tile": {1: "repeats"}, "Pad": {1: "pads"}, "Split": {1: "split"},
             "Squeeze": {1: "axes"}, "Compress": {1: "condition"}, **_REDUCE_AXES}
# Unsqueeze's axes: ONNX Runtime also takes a scalar.
_AT_MOST_ONE_AXIS = {"Unsqueeze": {1: "axes"}}
# Ops whose input ONNX Runtime refuses empty past these axes ("Only N can be
# zero"), where ONNX defines them: the first axis that must not be 0.
_NOT_EMPTY_FROM = {"MaxPool": 1, "AveragePool": 1, "LpPool": 1, "GlobalAveragePool": 1,
                   "GlobalMaxPool": 1, "GlobalLpPool": 1, "Conv": 2}


def check_operand_shapes(graph: onnx.GraphProto, outer: dict[str, list] | None = None
                         ) -> None:
    """The operands of _ONE_VALUE (one element), _ONE_AXIS (rank 1) and
    _AT_MOST_ONE_AXIS, the inputs of _NOT_EMPTY_FROM,
    where their extents are known (declared, inferred, initializers,
    Constants), subgraphs included. Run before the sequence lowering, which
    reads positions."""
    nodes = [n for n in graph.node if n.op_type in _ONE_VALUE or n.op_type in _ONE_AXIS
             or n.op_type in _AT_MOST_ONE_AXIS or n.op_type in _NOT_EMPTY_FROM
             or n.op_type in _GRAPH_OPS]
    if not nodes:
        return
    shapes = dict(outer or {})
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            shapes[v.name] = [d.dim_value if d.HasField("dim_value") else None
                              for d in _dims(v)]
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    shapes.update({n.output[0]: list(n.attribute[0].t.dims) for n in graph.node
                   if n.op_type == "Constant" and n.output and n.attribute
                   and n.attribute[0].type == onnx.AttributeProto.TENSOR})
    for node in nodes:
        if node.domain in ("", "ai.onnx"):
            _check_operand_shapes(node, shapes)
        for g in node_subgraphs(node) if node.op_type in _GRAPH_OPS else ():
            check_operand_shapes(g, shapes)


def _check_operand_shapes(node: onnx.NodeProto, shapes: dict[str, list]) -> None:
    first = _NOT_EMPTY_FROM.get(node.op_type)
    shape = shapes.get(node.input[0]) if first is not None and node.input else None
    if shape is not None and 0 in shape[first:]:
        raise ImportFailure(f"{_label(node)}: input '{node.input[0]}' has shape {shape}; "
                            f"ONNX Runtime refuses it empty on any axis from {first} on")
    for table, fits, wanted in ((_ONE_VALUE, lambda s: None in s or math.prod(s) == 1,
                                 "a single value"),
                                (_ONE_AXIS, lambda s: len(s) == 1, "a 1-D list"),
                                (_AT_MOST_ONE_AXIS, lambda s: len(s) <= 1,
                                 "a scalar or a 1-D list")):
        for i, role in table.get(node.op_type, {}).items():
            name = node.input[i] if len(node.input) > i else ""
            shape = shapes.get(name) if name else None
            if shape is not None and not fits(shape):
                raise ImportFailure(f"{_label(node)}: {role} '{name}' has shape {shape}; "
                                    f"ONNX asks for {wanted}")


def _label(node: onnx.NodeProto) -> str:
    return f"node '{node.name}' ({node.op_type})"


def _constants(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Small int64 constants (initializers, Constant nodes) by name."""
    out = {}
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], n.attribute[0].t) for n in graph.node
                if n.op_type == "Constant" and n.output and n.attribute
                and n.attribute[0].type == onnx.AttributeProto.TENSOR]
    for name, t in tensors:
        if t.data_type == onnx.TensorProto.INT64 and len(t.dims) <= 1 and \
                (not t.dims or t.dims[0] <= 64):
            try:
                out[name] = [int(v) for v in onnx.numpy_helper.to_array(t).reshape(-1)]
            except Exception:  # noqa: BLE001 - unreadable data: the importer reports it
                pass
    return out


def _check_axes(node, attrs, r: int | None, consts: dict[str, list[int]]) -> None:
    """`axes` (attribute, or the constant operand of Slice / opset-18 reductions)
    within [-r, r-1] and without repeats; Unsqueeze's r is its result's rank.
    MeanVarianceNormalization's not empty: ONNX Runtime refuses that ("No
    valid axes are specified"; fuzz seed 236 case 346)."""
    if node.op_type == "MeanVarianceNormalization" and "axes" in attrs and \
            attrs["axes"].type == onnx.AttributeProto.INTS and not attrs["axes"].ints:
        raise ImportFailure(f"{_label(node)}: empty axes (ONNX Runtime normalizes over at "
                            "least one)")
    if r is None:
        return
    axes = None
    if "axes" in attrs and attrs["axes"].type == onnx.AttributeProto.INTS:
        axes = list(attrs["axes"].ints)
    elif node.op_type == "MeanVarianceNormalization" and "axes" not in attrs:
        axes = _op_table.OPS["MeanVarianceNormalization"]["attributes"]["axes"][2]
    elif node.op_type not in _AXES_ATTRIBUTE_OPS:  # (their operand 1 is not axes)
        pos = 3 if node.op_type == "Slice" else 1
        if len(node.input) > pos and node.input[pos] in consts:
            axes = consts[node.input[pos]]
    if axes is None:
        return
    what = f"its rank-{r} input '{node.input[0]}'"
    if node.op_type == "Unsqueeze":
        r += len(axes)
        what = f"its rank-{r} result"
    if any(not -r <= a < r for a in axes) or len({a % r for a in axes}) != len(axes):
        raise ImportFailure(f"{_label(node)}: axes {axes} are out of range or repeated for "
                            f"{what}")


def _check_pads(node, attrs, inputs: list[str], r: int, consts: dict[str, list[int]]) -> None:
    """Pad's pads: two per padded axis (every axis without `axes`, opset 18).
    The checker does not look, ONNX Runtime refuses them at run time, and the
    Pad rules index them by axis."""
    if "pads" in attrs and attrs["pads"].type == onnx.AttributeProto.INTS:  # Pad-2
        pads = list(attrs["pads"].ints)
    elif len(inputs) > 1 and inputs[1] in consts:
        pads = consts[inputs[1]]
    else:
        return
    count = r
    if len(inputs) > 3 and inputs[3]:
        if inputs[3] not in consts:
            return
        axes = consts[inputs[3]]
        if any(not -r <= a < r for a in axes) or len({a % r for a in axes}) != len(axes):
            raise ImportFailure(f"{_label(node)}: axes {axes} are out of range or repeated "
                                f"for its rank-{r} input '{inputs[0]}'")
        count = len(axes)
    if len(pads) != 2 * count:
        raise ImportFailure(f"{_label(node)}: {len(pads)} pads for {count} padded axes of "
                            f"its rank-{r} input '{inputs[0]}' (expected {2 * count})")


def _check_window(node, attrs, r: int) -> None:
    """Conv/pool window attributes: one entry per spatial axis (two for pads),
    kernel, strides and dilations >= 1, pads >= 0."""
    n = r - 2
    g = attrs.get("group")
    if g is not None and g.type == onnx.AttributeProto.INT and not 1 <= g.i <= MAX_DIM:
        raise ImportFailure(f"{_label(node)}: group {g.i} is invalid (expected >= 1)")
    for name, count, low in (("kernel_shape", n, 1), ("strides", n, 1), ("dilations", n, 1),
                             ("pads", 2 * n, 0), ("output_padding", n, 0)):
        a = attrs.get(name)
        if a is None or a.type != onnx.AttributeProto.INTS:
            continue
        v = list(a.ints)
        if len(v) != count or any(not low <= x <= MAX_DIM for x in v):
            raise ImportFailure(f"{_label(node)}: {name} {v} is invalid for a rank-{r} input "
                                f"(expected {count} values >= {low})")
    kernel, pads = attrs.get("kernel_shape"), attrs.get("pads")
    if node.op_type in _POOLS and kernel is not None and pads is not None and n > 0 and \
            len(kernel.ints) == n and len(pads.ints) == 2 * n and \
            any(p >= kernel.ints[i % n] for i, p in enumerate(pads.ints)):
        # a window of padding only: ONNX Runtime refuses it
        raise ImportFailure(f"{_label(node)}: pads {list(pads.ints)} are not all smaller "
                            f"than the kernel {list(kernel.ints)}")


_WINDOW_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "MaxUnpool")
# ops on images N x C x D1 x ... whose rank ONNX's inference does not check
_GLOBAL_POOLS = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
# ops whose attribute names an element type
_DTYPE_ATTRIBUTE = {"Cast": "to", "Bernoulli": "dtype", "RandomNormal": "dtype",
                    "RandomUniform": "dtype", "RandomNormalLike": "dtype",
                    "RandomUniformLike": "dtype", "EyeLike": "dtype", "Multinomial": "dtype"}
_ELEMENT_TYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v)
_AXES_ATTRIBUTE_OPS = ("CenterCropPad", "MeanVarianceNormalization")  # `axes` attribute only
# and Reduce*: `axes` attribute or operand
_AXES_OPS = ("Slice", "Squeeze", "Unsqueeze", *_AXES_ATTRIBUTE_OPS)
_CONST_OPS = (*_AXES_OPS, "Reshape", "Loop", "Pad", "CumSum")  # constant operands checked
_POOLS = ("MaxPool", "AveragePool", "LpPool")
# Flags ONNX defines for 0 and 1 only (and Reduce*'s keepdims and
# noop_with_empty_axes); runtimes read other values differently: ONNX
# Runtime's Reshape honours zeros for allowzero == 1 only, its Gemm takes any
# non-zero transB as true where the shapes were inferred with it false.
_FLAGS = {"Reshape": ("allowzero",), "Gemm": ("transA", "transB"),
          "ArgMax": ("keepdims", "select_last_index"),
          "ArgMin": ("keepdims", "select_last_index"),
          "CumSum": ("exclusive", "reverse"), "TopK": ("largest", "sorted"),
          "AveragePool": ("ceil_mode", "count_include_pad"),
          "MaxPool": ("ceil_mode", "storage_order"), "CumProd": ("exclusive", "reverse"),
          "Cast": ("saturate",), "CastLike": ("saturate",), "Unique": ("sorted",),
          "Attention": ("is_causal",), "DFT": ("inverse", "onesided"), "Mod": ("fmod",),
          "Resize": ("exclude_outside",), "GridSample": ("align_corners",),
          "AffineGrid": ("align_corners",),
          "LpPool": ("ceil_mode",), "GRU": ("linear_before_reset", "layout"),
          "LSTM": ("input_forget", "layout"), "RNN": ("layout",),
          "IsInf": ("detect_negative", "detect_positive"), "Trilu": ("upper",),
          "BatchNormalization": ("training_mode",)}
# String attributes of a fixed set of values: ONNX's checker takes any string;
# ONNX Runtime refuses others (an auto_pad "bogus" when loading: fuzz seed 220
# case 1726), and the rules would read them as some other value
_PADDING = {"auto_pad": {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}}
_REDUCTION = {"reduction": {"none", "add", "mul", "max", "min"}}
_ENUMS = {**{op: _PADDING for op in (*_WINDOW_OPS, "ConvInteger", "QLinearConv")},
          "Pad": {"mode": {"constant", "reflect", "edge", "wrap"}},
          "Resize": {"mode": {"nearest", "linear", "cubic"},
                     "coordinate_transformation_mode": {
                         "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                         "align_corners", "asymmetric", "tf_half_pixel_for_nearest",
                         "tf_crop_and_resize"},
                     "nearest_mode": {"round_prefer_floor", "round_prefer_ceil", "floor",
                                      "ceil"},
                     "keep_aspect_ratio_policy": {"stretch", "not_larger", "not_smaller"}},
          "ScatterElements": _REDUCTION, "ScatterND": _REDUCTION,
          "DepthToSpace": {"mode": {"DCR", "CRD"}}, "Gelu": {"approximate": {"none", "tanh"}}}
# The ops _check_node_attributes looks at (with Reduce*): filtered first, as
# building attribute dicts for every node costs more than all the checks.
_ATTR_OPS = {*_AXIS_OPS, *_AXIS_INCLUSIVE, *_AXIS_OF_RESULT, *_REGIONS, *_WINDOW_OPS,
             *_AXES_OPS, *_FLAGS, "Concat", "Transpose", "Reshape", "Pad", "DepthToSpace",
             "SpaceToDepth", "CumSum", "ReverseSequence", "DFT", "GatherND", "LRN",
             "MaxUnpool", "Col2Im", "Split", *_GLOBAL_POOLS, *_DTYPE_ATTRIBUTE, *_ENUMS}


def check_attributes(graph: onnx.GraphProto, outer: dict[str, int] | None = None,
                     rows: list[NodeRow] | None = None, declared: Declared | None = None,
                     inits: list[InitRow] | None = None) -> None:
    """`rows`, `declared`, `inits`: the graph's node_fields, declared_types
    and initializer_fields, when already read."""
    ranks = _ranks(graph, outer or {}, declared, inits)
    consts: dict[str, list[int]] | None = None  # built when a _CONST_OPS op needs them
    for node, op, domain, inputs, _, _, _, attributes, _ in \
            node_fields(graph) if rows is None else rows:
        if not isinstance(op, str) or not isinstance(domain, str):
            raise ImportFailure(f"node {node.name!r}: op type {op!r} or domain "
                                f"{domain!r} is not valid UTF-8 text")
        if domain in ("", "ai.onnx") and (op in _ATTR_OPS or op.startswith("Reduce")):
            if consts is None and (op in _CONST_OPS or op.startswith("Reduce")):
                consts = _constants(graph)
            _check_node_attributes(node, op, inputs, attributes, ranks, consts or {})
        if op in _GRAPH_OPS:
            for g in node_subgraphs(node):
                check_attributes(g, ranks)


def _check_node_attributes(node: onnx.NodeProto, op: str, inputs: list[str],
                           attributes: list[onnx.AttributeProto], ranks: dict[str, int],
                           consts: dict[str, list[int]]) -> None:
    """A default-domain node's attributes against its operands' ranks
    (`op`, `inputs`, `attributes`: its node_fields)."""
    attrs = {a.name: a for a in attributes}
    src = inputs[0] if inputs else ""
    if op == "Concat":  # all inputs have one rank: any known one
        src = next((n for n in inputs if n in ranks), src)
    r = ranks.get(src) if src else None
    if r is not None and "axis" in attrs and attrs["axis"].type == onnx.AttributeProto.INT \
            and (op in _AXIS_OPS or op in _AXIS_INCLUSIVE or op in _AXIS_OF_RESULT):
        a = attrs["axis"].i
        hi = r if op in _AXIS_INCLUSIVE or op in _AXIS_OF_RESULT else r - 1
        lo = -r - 1 if op in _AXIS_OF_RESULT else -r
        if not lo <= a <= hi and not (op == "Softmax" and r == 0):
            raise ImportFailure(f"{_label(node)}: axis {a} is out of range for its "
                                f"rank-{r} input '{src}'")
    if op.startswith("Reduce") or op in _AXES_OPS:
        _check_axes(node, attrs, r, consts)
    if op == "Slice" and len(inputs) >= 3:
        # constant starts/ends/axes/steps of different lengths (ONNX cannot
        # tell when the data's shape is unknown; the rules read them zipped)
        known = [(role, consts[n]) for role, n in zip(("starts", "ends", "axes", "steps"),
                                                      inputs[1:5]) if n in consts]
        if len({len(v) for _, v in known}) > 1:
            raise ImportFailure(f"{_label(node)}: " + ", ".join(
                f"{role} has {len(v)}" for role, v in known) + " entries (must be equal)")
    if op == "Reshape" and len(inputs) > 1 and inputs[1] in consts:
        # the onnx checker and ONNX Runtime refuse these (at load, at run
        # time); the Reshape rules would build tangent shapes from them
        shape = consts[inputs[1]]
        if any(d < -1 for d in shape) or shape.count(-1) > 1:
            raise ImportFailure(f"{_label(node)}: shape {shape} is invalid (extents >= 0, "
                                "at most one -1)")
    flags = ("keepdims", "noop_with_empty_axes") if op.startswith("Reduce") else \
        _FLAGS.get(op, ())
    for flag in flags:
        if flag in attrs and attrs[flag].type == onnx.AttributeProto.INT and \
                attrs[flag].i not in (0, 1):
            raise ImportFailure(f"{_label(node)}: {flag} is {attrs[flag].i}, "
                                "expected 0 or 1")
    if op in ("LpPool", "GlobalLpPool") and "p" in attrs and \
            attrs["p"].type == onnx.AttributeProto.INT and attrs["p"].i < 1:
        # (ONNX Runtime computes p <= 0 anyway: inf for 0, an underflow to 0
        # whose derivative is 0 * inf for p -2^62, fuzz seed 189 case 486)
        raise ImportFailure(f"{_label(node)}: p is {attrs['p'].i}: the Lp norm it pools "
                            "with needs p >= 1")
    for needed in _REGIONS.get(op, ()):
        if needed not in attrs or attrs[needed].type != onnx.AttributeProto.GRAPH:
            raise ImportFailure(f"{_label(node)}: the graph attribute '{needed}' "
                                "is missing")
    if op == "Scan" and "num_scan_inputs" in attrs:
        _check_scan_axes(node, attrs, inputs, ranks)
    if op == "Loop":
        # ONNX Runtime refuses a trip count or condition of more than one
        # element when running; the rules read them as scalars
        for role, name in zip(("trip count M", "condition"), inputs[:2]):
            count = len(consts[name]) if name in consts else None
            if name and (ranks.get(name, 0) > 1 or count not in (None, 1)):
                raise ImportFailure(f"{_label(node)}: its {role} '{name}' is not a scalar "
                                    f"(rank {ranks.get(name)}"
                                    + ("" if count is None else f", {count} elements") + ")")
    if op in ("GatherElements", "ScatterElements", "Scatter"):
        # ONNX's inference does not compare them (the result takes the
        # indices' shape); ONNX Runtime refuses them when running
        known = [(n, ranks[n]) for n in inputs[:3] if n in ranks]
        if len({k for _, k in known}) > 1:
            roles = "data and indices" if op == "GatherElements" else \
                "data, indices and updates"
            raise ImportFailure(f"{_label(node)}: {roles} must have one rank, not "
                                + ", ".join(f"{n!r} ({k})" for n, k in known))
    if op == "Concat":
        known = [(n, ranks[n]) for n in inputs if n in ranks]
        if len({k for _, k in known}) > 1:
            raise ImportFailure(f"{_label(node)}: inputs of different ranks "
                                f"{', '.join(f'{n!r} ({k})' for n, k in known)}")
    if op in _GLOBAL_POOLS and r is not None and r < 3:
        # (ONNX's inference passes a lower rank; ONNX Runtime refuses it:
        # "Input dimension cannot be less than 3", fuzz seed 233 case 836)
        raise ImportFailure(f"{_label(node)}: input '{src}' has rank {r}; ONNX asks for "
                            "N x C x D1 x ... (rank 3 or more)")
    if op in _WINDOW_OPS and r is not None:
        _check_window(node, attrs, r)
    if op == "Pad" and r is not None:
        _check_pads(node, attrs, inputs, r, consts)
    if op in ("DepthToSpace", "SpaceToDepth") and "blocksize" in attrs and \
            attrs["blocksize"].type == onnx.AttributeProto.INT and attrs["blocksize"].i < 1:
        # ONNX's checker refuses it; non-strict inference leaves the result
        # untyped (fuzz seed 162 case 778 accepted it on a dead node)
        raise ImportFailure(f"{_label(node)}: blocksize {attrs['blocksize'].i} is not "
                            "positive")
    if op == "Transpose" and "perm" in attrs \
            and attrs["perm"].type == onnx.AttributeProto.INTS:  # (type: importer)
        perm = list(attrs["perm"].ints)
        n = r if r is not None else len(perm)  # rank unknown (a Loop result): perm's own
        if sorted(perm) != list(range(n)):
            raise ImportFailure(f"{_label(node)}: perm {perm} is not a permutation of "
                                f"the {n} axes of input '{inputs[0]}'")
    if op in ("CumSum", "ReverseSequence", "DFT", "GatherND"):
        _check_index_attributes(node, op, attrs, inputs, r, ranks, consts)
    _check_counts(node, op, attrs)


def _check_counts(node: onnx.NodeProto, op: str,
                  attrs: dict[str, onnx.AttributeProto]) -> None:
    """Element types, enumerations and counts that ONNX's checker lets
    through and ONNX Runtime refuses."""
    name = _DTYPE_ATTRIBUTE.get(op)
    dtype = _int_attr(attrs, name) if name else None  # (not an attribute named "")
    if dtype is not None and dtype not in _ELEMENT_TYPES:
        raise ImportFailure(f"{_label(node)}: {name} {dtype} is not an ONNX element type")
    for name, allowed in _ENUMS.get(op, {}).items():
        a = attrs.get(name)
        if a is not None and a.type == onnx.AttributeProto.STRING and \
                a.s.decode("utf-8", "replace") not in allowed:
            raise ImportFailure(f"{_label(node)}: {name} {a.s.decode('utf-8', 'replace')!r} "
                                f"is not one of {', '.join(sorted(allowed))}")
    mode = _int_attr(attrs, "qk_matmul_output_mode")
    if op == "Attention" and mode is not None and mode not in range(4):
        raise ImportFailure(f"{_label(node)}: qk_matmul_output_mode {mode} is not 0 to 3")
    n = _int_attr(attrs, "num_outputs")
    if op == "Split" and n is not None and n != len(node.output):
        raise ImportFailure(f"{_label(node)}: num_outputs {n} but {len(node.output)} "
                            "outputs")
    if op == "Col2Im":
        for name, low in (("strides", 1), ("dilations", 1), ("pads", 0)):
            a = attrs.get(name)
            if a is not None and a.type == onnx.AttributeProto.INTS and \
                    any(v < low for v in a.ints):
                raise ImportFailure(f"{_label(node)}: {name} {list(a.ints)} has values "
                                    f"below {low}")
    out_pad = attrs.get("output_padding")
    if op == "ConvTranspose" and out_pad is not None and \
            out_pad.type == onnx.AttributeProto.INTS:
        strides, dilations = (list(attrs[k].ints) if k in attrs else [] for k in
                              ("strides", "dilations"))
        bound = [max(s, d) for s, d in zip(strides or [1] * len(out_pad.ints),
                                           dilations or [1] * len(out_pad.ints))]
        if any(p >= b for p, b in zip(out_pad.ints, bound)):
            raise ImportFailure(f"{_label(node)}: output_padding {list(out_pad.ints)} is not "
                                f"smaller than its stride or dilation")
    shape = attrs.get("output_shape")
    if op == "ConvTranspose" and shape is not None and any(v < 0 for v in shape.ints):
        raise ImportFailure(f"{_label(node)}: output_shape {list(shape.ints)} has negative "
                            "extents")
    for name, ops in (("hidden_size", ("RNN", "GRU", "LSTM")), ("size", ("LRN",))):
        size = _int_attr(attrs, name)
        if op in ops and size is not None and size < 1:
            raise ImportFailure(f"{_label(node)}: {name} {size} is not positive")


def _int_attr(attrs: dict[str, onnx.AttributeProto], name: str) -> int | None:
    a = attrs.get(name)
    return a.i if a is not None and a.type == onnx.AttributeProto.INT else None


def _check_index_attributes(node: onnx.NodeProto, op: str,
                            attrs: dict[str, onnx.AttributeProto], inputs: list[str],
                            r: int | None, ranks: dict[str, int],
                            consts: dict[str, list[int]]) -> None:
    """Axes the rules index shapes by, which ONNX's checker and inference
    let through and ONNX Runtime refuses (at load or at run)."""
    if op == "CumSum" and r is not None and len(inputs) > 1 and inputs[1] in consts:
        a = consts[inputs[1]][0] if len(consts[inputs[1]]) == 1 else None
        if a is not None and not -r <= a < r:
            raise ImportFailure(f"{_label(node)}: axis {a} is out of range for its "
                                f"rank-{r} input '{inputs[0]}'")
    if op == "ReverseSequence":
        batch, time = _int_attr(attrs, "batch_axis"), _int_attr(attrs, "time_axis")
        batch, time = 1 if batch is None else batch, 0 if time is None else time
        if {batch, time} != {0, 1}:
            raise ImportFailure(f"{_label(node)}: batch_axis {batch} and time_axis {time} "
                                "must be 0 and 1")
    a = _int_attr(attrs, "axis")
    if op == "DFT" and r is not None and a is not None and not (
            -r <= a <= -2 or 0 <= a <= r - 2):
        # the last axis holds the real and imaginary parts
        raise ImportFailure(f"{_label(node)}: axis {a} is out of range for its rank-{r} "
                            f"input '{inputs[0]}' (expected [-{r}, -2] or [0, {r - 2}])")
    batch_dims = _int_attr(attrs, "batch_dims")
    if op == "GatherND" and batch_dims is not None and len(inputs) > 1:
        known = [k for k in (r, ranks.get(inputs[1])) if k is not None]
        if batch_dims < 0 or known and batch_dims >= min(known):
            raise ImportFailure(f"{_label(node)}: batch_dims {batch_dims} is out of range "
                                "for the ranks of its data and indices")


def _check_scan_axes(node: onnx.NodeProto, attrs: dict[str, onnx.AttributeProto],
                     inputs: list[str], ranks: dict[str, int]) -> None:
    """Each scan input has the axis it is scanned along: ONNX's inference
    lets a scalar through, and the AD rules index its extents."""
    n = attrs["num_scan_inputs"].i
    scans = inputs[len(inputs) - n:] if 0 < n <= len(inputs) else []
    axes = attrs.get("scan_input_axes")
    for i, name in enumerate(scans):
        a = axes.ints[i] if axes is not None and i < len(axes.ints) else 0
        k = ranks.get(name)
        if k is not None and not -k <= a < k:
            raise ImportFailure(f"{_label(node)}: scan input '{name}' has rank {k}, "
                                f"so no axis {a} to scan along")


MAX_DIM = 2**53  # extents beyond this overflow int64 in any product of two


def check_dims(graph: onnx.GraphProto, nested: bool = False,
               declared: Declared | None = None, rows: list[NodeRow] | None = None) -> None:
    """Graph inputs, outputs and value infos with negative or absurd extents
    (products of them overflow int64 when types are built) are malformed.
    Subgraph declarations are only hints (their values are typed from the
    outer graph): a negative extent there, which ONNX's own test models carry
    (-1 for "unknown"), is cleared by `clear_negative_subgraph_dims` instead.
    `declared`, `rows`: the graph's declared_types and node_fields, when
    already read."""
    declared = declared_types(graph) if declared is None else declared
    # each of the few distinct types once; the first value of a bad one reported
    if any(_bad_dim(b, nested) is not None for b in {b for _, _, b in declared}):
        for kind, name, type_bytes in declared:
            bad = _bad_dim(type_bytes, nested)
            if bad is not None:
                raise ImportFailure(f"graph {kind} '{name}': dimension {bad[0]} is "
                                    f"{bad[1]}, outside [0, 2**53]")
    for g in _subgraphs(graph, rows):
        check_dims(g, nested=True)


def check_extent_attributes(graph: onnx.GraphProto, rows: list[NodeRow] | None = None) -> None:
    """Attributes that set a result's extents, refused when negative before
    ONNX's shape inference runs: it gives the result that extent and then
    aborts the process in the ops after it (a Slice's std::clamp assertion
    after a RoiAlign's output_width -2**62: fuzz seed 277 case 906). ONNX
    Runtime refuses them too, and RoiAlign's negative sampling_ratio."""
    for node, op, domain, _, _, _, _, attributes, _ in node_fields(graph) if rows is None else rows:
        if op not in ("RoiAlign", "MaxRoiPool") or domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: a for a in attributes}
        for name in ("output_height", "output_width", "sampling_ratio") if op == "RoiAlign" \
                else ():
            size = _int_attr(attrs, name)
            if size is not None and size < 0:
                raise ImportFailure(f"{_label(node)}: {name} {size} is negative")
        pooled = attrs.get("pooled_shape")
        if op == "MaxRoiPool" and pooled is not None and any(v < 1 for v in pooled.ints):
            raise ImportFailure(f"{_label(node)}: pooled_shape {list(pooled.ints)} is not "
                                "positive")
    for g in _subgraphs(graph, rows):
        check_extent_attributes(g)


@functools.lru_cache(maxsize=4096)
def _bad_dim(type_bytes: bytes, nested: bool) -> tuple[int, int] | None:
    """(index, extent) of the first extent of a serialized TypeProto that
    check_dims refuses, or None. By the type's bytes: thousands of values
    share a few types, and walking dims in Python costs more than this."""
    v = onnx.ValueInfoProto()
    v.type.ParseFromString(type_bytes)
    for i, d in enumerate(_dims(v)):
        if d.HasField("dim_value") and (d.dim_value > MAX_DIM or (d.dim_value < 0 and not nested)):
            return i, d.dim_value
    return None


def clear_negative_subgraph_dims(model: onnx.ModelProto,
                                 rows: list[NodeRow] | None = None) -> onnx.ModelProto:
    """The model with negative extents declared in subgraphs made unknown
    (a copy when there are any: the caller's model is never modified).
    `rows`: the main graph's node_fields, when already read."""
    def negatives(graph: onnx.GraphProto, rows: list[NodeRow] | None = None) -> list:
        subgraphs = _subgraphs(graph, rows)
        found = [d for g in subgraphs for v in list(g.input) + list(g.output)
                 + list(g.value_info) for d in _dims(v)
                 if d.HasField("dim_value") and d.dim_value < 0]
        return found + [d for g in subgraphs for d in negatives(g)]
    if not negatives(model.graph, rows):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for d in negatives(copy.graph):
        d.ClearField("dim_value")
    return copy


def _dims(v: onnx.ValueInfoProto) -> list:
    t = v.type
    if t.HasField("tensor_type") and t.tensor_type.HasField("shape"):
        return list(t.tensor_type.shape.dim)
    return []


def _subgraphs(graph: onnx.GraphProto, rows: list[NodeRow] | None = None
               ) -> list[onnx.GraphProto]:
    """The graph attributes of the graph's If/Loop/Scan/SequenceMap nodes
    (see _GRAPH_OPS). `rows`: the graph's node_fields, when already read."""
    if rows is None:
        return [g for n in graph.node if n.op_type in _GRAPH_OPS for g in node_subgraphs(n)]
    return [g for row in rows if row[1] in _GRAPH_OPS for g in node_subgraphs(row[0])]


def node_subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs of a node's GRAPH and GRAPHS attributes."""
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def check_opsets(model: onnx.ModelProto) -> None:
    for o in model.opset_import:
        if not 1 <= o.version < 2**31:
            raise ImportFailure(f"opset_import: version {o.version} of domain "
                                f"'{o.domain or 'ai.onnx'}' is not a valid opset")
        if o.domain in ("", "ai.onnx") and o.version > _op_table.MAX_OPSET:
            # ONNX's checker takes any opset; its ops there may have versions
            # the dialect lacks, and no opset can be exported for them
            raise UnsupportedOp(f"opset_import: ai.onnx opset {o.version} is newer than the "
                                f"newest the dialect has ({_op_table.MAX_OPSET}, from ONNX "
                                f"{onnx.__version__})")


def check_node_domains(model: onnx.ModelProto, rows: list[NodeRow]) -> None:
    """Every node's domain has an opset_import entry, as ONNX's checker
    requires: before the lowerings, which read nodes by op type (a
    SequenceAt of an unknown domain must not pass for the ONNX op, or
    vanish in a lowering)."""
    imported = {"ai.onnx" if o.domain in ("", "ai.onnx") else o.domain
                for o in model.opset_import}

    def check(rows: list[NodeRow]) -> None:
        for node, op, domain, *_ in rows:
            if ("ai.onnx" if domain in ("", "ai.onnx") else domain) not in imported:
                raise ImportFailure(f"{_label(node)}: its domain '{domain or 'ai.onnx'}' has "
                                    "no opset_import entry")
            if domain in ("", "ai.onnx") and op in _GRAPH_OPS:
                for g in node_subgraphs(node):
                    check(node_fields(g))
    check(rows)


def _elem_types(graph: onnx.GraphProto, outer: dict[str, int], declared: Declared | None,
                rows: list[NodeRow], inits: list[InitRow] | None) -> dict[str, int]:
    types = dict(outer)
    types.update(_declared_elem_types(declared_types(graph) if declared is None else declared))
    for _, name, data_type, _ in initializer_fields(graph) if inits is None else inits:
        types[name] = data_type
    for _, op, _, _, outputs, _, _, attributes, _ in rows:
        # Constant outputs: the type of their value
        if op == "Constant" and outputs and attributes \
                and attributes[0].type == onnx.AttributeProto.TENSOR:
            types.setdefault(outputs[0], attributes[0].t.data_type)
    types.pop("", None)  # an absent input, never a value: readers need not test for it
    return types


def _type_name(elem: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem).lower()
    except ValueError:
        return f"unknown({elem})"


def check_types(graph: onnx.GraphProto, opset: int, outer: dict[str, int] | None = None,
                rows: list[NodeRow] | None = None, declared: Declared | None = None,
                inits: list[InitRow] | None = None) -> None:
    """Operand element types against each schema's type constraints: the
    operands bound to one type variable (Concat's inputs, Add's A and B) must
    agree and be allowed. A mismatch would reach MLIR ops whose C++ asserts
    on it (a process abort; found by the fuzzer). `rows`, `declared`,
    `inits`: the graph's node_fields, declared_types and initializer_fields,
    when already read."""
    rows = node_fields(graph) if rows is None else rows
    types = _elem_types(graph, outer or {}, declared, rows, inits)
    accepted: set[tuple] = set()  # (op, operand element types) already checked
    elem_type = types.get
    for node, op, domain, inputs, _, _, _, _, _ in rows:
        if domain not in ("", "ai.onnx"):
            continue
        key = (op, *map(elem_type, inputs))
        if key not in accepted:  # the check depends on nothing else
            _check_operand_types(node, _type_rules(op, opset), types)
            accepted.add(key)
        if op == "Constant":
            _check_constant_type(node, opset)
        if op in _GRAPH_OPS:
            for g in node_subgraphs(node):
                check_types(g, opset, types)


_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic


@functools.lru_cache(maxsize=None)
def _type_rules(op_type: str, opset: int) -> tuple[list, dict[str, list[str]]] | None:
    """The schema's formal inputs as (type variable, variadic, homogeneous)
    and the allowed type strings of each variable; None for unknown ops (the
    importer's to report) and ops without inputs. Cached: schema lookups
    cost more than the check."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # noqa: BLE001 - unknown ops are the importer's to report
        return None
    if not schema.inputs:
        return None
    formals = [(f.type_str, f.option == _VARIADIC, f.is_homogeneous) for f in schema.inputs]
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    return formals, allowed


@functools.lru_cache(maxsize=None)
def _constant_types(opset: int) -> tuple[str, ...]:
    """The element types a Constant may hold at this opset (before 9: float
    types only)."""
    schema = onnx.defs.get_schema("Constant", opset, "")
    return tuple(s for c in schema.type_constraints for s in c.allowed_type_strs)


def _check_constant_type(node: onnx.NodeProto, opset: int) -> None:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and \
                f"tensor({_type_name(a.t.data_type)})" not in _constant_types(opset):
            raise ImportFailure(f"{_label(node)}: a Constant of element type "
                                f"{_type_name(a.t.data_type)} does not exist at opset {opset}")


def _check_operand_types(node: onnx.NodeProto, rules: tuple | None,
                         types: dict[str, int]) -> None:
    if rules is None:
        return
    formals, allowed = rules
    bound: dict[str, tuple[str, int]] = {}
    for i, name in enumerate(node.input):
        var, variadic, homogeneous = formals[min(i, len(formals) - 1)]
        if i >= len(formals) and not variadic:
            break
        elem = types.get(name) if name else None
        if elem is None or var not in allowed:
            continue
        # a variable that also takes sequences or optionals (Loop's V, If's
        # outputs) still lists the tensor types it takes
        tensor_strs = [s for s in allowed[var] if s.startswith("tensor(")]
        if tensor_strs and f"tensor({_type_name(elem)})" not in tensor_strs:
            raise ImportFailure(
                f"{_label(node)}: input '{name}' has element type {_type_name(elem)}, "
                f"which {node.op_type} does not accept for {var}")
        if variadic and not homogeneous:
            continue
        if var in bound and bound[var][1] != elem:
            raise ImportFailure(
                f"{_label(node)}: inputs '{bound[var][0]}' ({_type_name(bound[var][1])}) "
                f"and '{name}' ({_type_name(elem)}) must have the same element type")
        bound.setdefault(var, (name, elem))


def check_text(graph: onnx.GraphProto, rows: list[NodeRow] | None = None,
               inits: list[InitRow] | None = None) -> None:
    """Names must be text: protobuf hands back invalid UTF-8 as bytes, which
    MLIR locations and attributes cannot hold; and every graph needs one, as
    ONNX's checker says. `rows`, `inits`: the graph's node_fields and
    initializer_fields, when already read."""
    def bad(what: str, value) -> None:
        raise ImportFailure(f"{what} {value!r} is not valid UTF-8 text")
    if not isinstance(graph.name, str):
        bad("graph name", graph.name)
    if not graph.name:
        raise ImportFailure("a graph has no name, which ONNX requires (its checker refuses the "
                            "model)")
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if not isinstance(v.name, str):
            bad("value name", v.name)
    for _, name, _, _ in initializer_fields(graph) if inits is None else inits:
        if not isinstance(name, str):
            bad("initializer name", name)
    for _, op, domain, inputs, outputs, name, _, attributes, _ in \
            node_fields(graph) if rows is None else rows:
        strings = inputs + outputs
        strings += (name, op, domain)
        try:
            "".join(strings)  # raises on bytes, in C: the loop below finds which
        except TypeError:
            for s in strings:
                if not isinstance(s, str):
                    bad(f"in node {name!r}: name", s)
        for a in attributes:
            if not isinstance(a.name, str) or (a.type == onnx.AttributeProto.STRING and
                                               not isinstance(a.s, bytes)):
                bad(f"in node {name!r}: attribute", a.name)
            if a.type == onnx.AttributeProto.GRAPH:
                check_text(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    check_text(g)


def check_versions(model: onnx.ModelProto) -> None:
    """ir_version within what ONNX defines: < 3 cannot carry opset_import (0:
    not set), above onnx.IR_VERSION is a format this onnx does not know (the
    derivative would declare it too, and ONNX Runtime refuses it)."""
    v = model.ir_version
    if not 3 <= v <= onnx.IR_VERSION:
        raise ImportFailure(
            f"ir_version {v} is not a valid IR version (expected 3..{onnx.IR_VERSION}"
            + ("; 0 means it is not set" if v == 0 else "") + ")")
    seen: dict[str, int] = {}
    for o in model.opset_import:  # ONNX reads one entry, we another: refuse both
        domain = "ai.onnx" if o.domain in ("", "ai.onnx") else o.domain
        if seen.get(domain, o.version) != o.version:  # (skl2onnx repeats entries)
            raise ImportFailure(f"opset_import lists domain '{domain}' twice "
                                f"(versions {seen[domain]} and {o.version})")
        seen[domain] = o.version


def check_io_types(graph: onnx.GraphProto) -> None:
    """Main graph inputs and outputs declared as tensors need an element type
    (0 is UNDEFINED: ONNX Runtime refuses the model, and the derivative's
    seeds would have no type)."""
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for v in values:
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == 0:
                raise ImportFailure(f"graph {kind} '{v.name}' has no element type "
                                    "(elem_type 0, UNDEFINED)")


# ONNX shape inference messages that mean the model contradicts itself (a
# declared shape or type against what its ops produce), not that inference
# could not follow a valid model. (Not TopK's k beyond its axis or an axis
# out of range: import's own checks refuse those first, naming the values.)
_CONTRADICTIONS = ("Inferred shape and existing shape differ", "Can't merge shape info",
                   "Incompatible dimensions", "Dimension mismatch in unification",
                   "Inferred elem type differs", "Type Error:", "has incorrect length",
                   "of wrong rank", "expected to have rank", "incompatible shapes",
                   "Mismatch between the sum of", "-dimensional", "must have rank",
                   "must have at least", "Input rank must be",
                   "shall be 3 or 4 dimensions",  # (Attention's inputs)
                   "'Repeats' input has incorrect number of values",  # (Tile's)
                   "must not be larger than the rank of",  # (GatherND's index depth)
                   "has incorrect size",  # (LpPool's kernel_shape)
                   "must be 1 instead of",  # (Squeeze of an axis of extent > 1)
                   "does not match the number of axes",  # (CenterCropPad's target shape)
                   "one-sided DFT requires real input",
                   "must be the rank of the grid tensor",  # (GridSample's grid)
                   "must be same as rank of input",  # (Resize's scales or sizes)
                   "does not match the equation indices")  # (Einsum's operand ranks)


def infer_shapes(model: onnx.ModelProto, data_prop: bool = False) -> onnx.ModelProto:
    """onnx.shape_inference.infer_shapes in strict mode: a declared shape or
    type that contradicts what a node produces (an output declared [0] for a
    Slice of a rank-2 value, a MatMul of mismatched known extents) is an
    ImportFailure naming the node. Non-strict inference keeps the declared
    type, which the rules then trust (a rank-2 operand with a rank-1
    result). Other inference errors (ONNX's own gaps on valid models) fall
    back to the non-strict result, as before."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=data_prop)
    except Exception as e:  # noqa: BLE001 - InferenceError and friends
        msg = " ".join(str(e).split())
        if any(c in msg for c in _CONTRADICTIONS) and \
                _contradiction(msg)[0] not in _WRONG_INFERENCE:
            # an attribute of the wrong type is the likelier cause: say so
            opset = next((o.version for o in model.opset_import
                          if o.domain in ("", "ai.onnx")), None)
            if opset:
                check_attribute_types(model.graph, opset)
            raise ImportFailure(_inference_message(msg)) from None
    return onnx.shape_inference.infer_shapes(model, data_prop=data_prop)


@functools.lru_cache(maxsize=None)
def _attr_types(op_type: str, opset: int) -> dict[str, int]:
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # noqa: BLE001 - unknown ops are the importer's to report
        return {}
    return {name: int(a.type) for name, a in schema.attributes.items()}


def check_attribute_types(graph: onnx.GraphProto, opset: int) -> None:
    """Attributes of the type their schema declares (as the importer checks
    them), subgraphs included."""
    for node in graph.node:
        expected = _attr_types(node.op_type, opset) if node.domain in ("", "ai.onnx") else {}
        for a in node.attribute:
            want = expected.get(a.name)
            if want is not None and a.type != want:
                names = onnx.AttributeProto.AttributeType
                raise ImportFailure(f"{_label(node)}: attribute '{a.name}' has type "
                                    f"{names.Name(a.type)}, expected {names.Name(want)}")
            if a.type == onnx.AttributeProto.GRAPH:
                check_attribute_types(a.g, opset)


# Ops whose ONNX shape inference is wrong on valid models: a contradiction
# there is ONNX's, not the model's.
_WRONG_INFERENCE = {"STFT"}  # ignores the default onesided=1 (infers all bins)


def _inference_message(msg: str) -> str:
    """'node 'n' (Op): <ONNX's words>' from ONNX's nested inference report
    '[ShapeInferenceError] Inference error(s): (op_type:Op, node name: n): ...':
    the node whose own clause holds the contradiction (outer ones hold the
    subgraph that holds it)."""
    op, name, text = _contradiction(msg)
    text = re.sub(r"\[(Shape|Type)InferenceError\]\s*|Inference error\(s\):\s*", "", text)
    text = " ".join(text.split())[:300]
    if op is None:
        return f"strict ONNX shape inference rejects the model: {text}"
    return f"node '{name}' ({op}): strict ONNX shape inference rejects the model: {text}"


def _contradiction(msg: str) -> tuple[str | None, str | None, str]:
    """(op type, node name, clause) of the innermost node whose clause of
    ONNX's report holds the contradiction."""
    marks = list(re.finditer(r"\(op_type:([^,)]*)(?:, node name: ([^)]*))?\):", msg))
    clauses = [(m.group(1), m.group(2) or "", msg[m.end():marks[j + 1].start()
                                                   if j + 1 < len(marks) else len(msg)])
               for j, m in enumerate(marks)]
    hit = next(((op, name, text) for op, name, text in clauses
                if any(c in text for c in _CONTRADICTIONS)), None)
    return hit or (clauses[-1] if clauses else (None, None, msg))


def check_acyclic(graph: onnx.GraphProto, rows: list[NodeRow]) -> None:
    """The main graph's nodes have an order (the importer sorts an unsorted
    graph): ONNX's shape inference aborts the process on some cycles
    (std::clamp assertion in Slice's inference, onnx 1.23.2; fuzzer seed 102
    case 1538), so before inference. Names defined nowhere are
    check_defined's to name."""
    producer = {out: i for i, row in enumerate(rows) for out in row[4] if out}
    waiting = [0] * len(rows)
    users: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        for x in set(row[3]):
            if x in producer:
                waiting[i] += 1
                users.setdefault(producer[x], []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in users.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if done < len(rows):
        def waiting_input(k: int) -> str:
            return next(x for x in rows[k][3] if x in producer and waiting[producer[x]])
        # back through waiting producers from a waiting node until one
        # repeats: that one is on the cycle (the first may only follow it)
        i, seen = next(k for k, w in enumerate(waiting) if w), set()
        while i not in seen:
            seen.add(i)
            i = producer[waiting_input(i)]
        x = waiting_input(i)
        raise ImportFailure(f"{_label(rows[i][0])}: input '{x}' depends on the node's own "
                            "output (the graph has a cycle)")


def check_defined(graph: onnx.GraphProto, rows: list[NodeRow],
                  outer: frozenset[str] = frozenset()) -> None:
    """Every input a node reads is defined somewhere in its graph or an
    enclosing one, and every node output once in its graph: before the
    lowerings, which drop nodes they rewrite (a SequenceConstruct of an
    undefined name, read only at a defined position, vanished with it, fuzz
    seed 161 case 1386; a SplitToSequence whose output a Flatten also wrote,
    seed 228 case 895)."""
    given = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    written: set[str] = set()
    for node, _, _, _, outputs, *_ in rows:
        for o in outputs:
            if o and (o in given or o in written):
                raise ImportFailure(f"{_label(node)}: output '{o}' is already defined "
                                    "(graphs must be in SSA form)")
            written.add(o)
    defined = set(outer) | given | written
    for node, op, domain, inputs, *_ in rows:
        for x in inputs:
            if x and x not in defined:
                raise ImportFailure(f"{_label(node)}: input '{x}' is not defined by any graph "
                                    "input, initializer or node")
        if domain in ("", "ai.onnx") and op in _GRAPH_OPS:
            for g in node_subgraphs(node):
                check_defined(g, node_fields(g), frozenset(defined))


def check_tensor_dims(graph: onnx.GraphProto, rows: list[NodeRow] | None = None,
                      inits: list[InitRow] | None = None) -> None:
    """Initializers and Constant values with a negative extent: ONNX shape
    inference aborts the process on them (std::clamp assertion in Slice's
    inference after a Gather of such indices; found by the fuzzer). `rows`,
    `inits`: the graph's node_fields and initializer_fields, when already
    read."""
    for _, name, _, dims in initializer_fields(graph) if inits is None else inits:
        if dims and min(dims) < 0:  # min(): cheaper than a generator per tensor
            raise ImportFailure(f"initializer '{name}' has a negative extent "
                                f"(dims {list(dims)})")
    for node, _, _, _, _, _, _, attributes, _ in node_fields(graph) if rows is None else rows:
        for a in attributes:
            if a.type == onnx.AttributeProto.TENSOR and any(d < 0 for d in a.t.dims):
                raise ImportFailure(f"{_label(node)}: attribute '{a.name}' is a tensor with "
                                    f"a negative extent (dims {list(a.t.dims)})")
            if a.type == onnx.AttributeProto.GRAPH:
                check_tensor_dims(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    check_tensor_dims(g)


def check_doc_text(model: onnx.ModelProto, rows: list[NodeRow] | None = None) -> None:
    """The free-text fields the importer keeps as MLIR string attributes
    (producer, domain, doc strings, metadata) must be text too: protobuf
    hands back invalid UTF-8 as bytes, and the exporter could not turn them
    back into strings (a RuntimeError from the bindings; fuzzer). `rows`:
    the main graph's node_fields, when already read."""
    def bad(what: str, value) -> None:
        raise ImportFailure(f"{what} {value!r} is not valid UTF-8 text")

    def props(owner: str, entries) -> None:
        for p in entries:
            if not isinstance(p.key, str) or not isinstance(p.value, str):
                bad(f"{owner} metadata_props entry", p.key)

    for field in ("producer_name", "producer_version", "domain", "doc_string"):
        if not isinstance(getattr(model, field), str):
            bad(f"model {field}", getattr(model, field))
    props("model", model.metadata_props)

    def graph(g: onnx.GraphProto, rows: list[NodeRow] | None = None) -> None:
        if not isinstance(g.doc_string, str):
            bad(f"graph {g.name!r} doc_string", g.doc_string)
        props(f"graph {g.name!r}", g.metadata_props)
        for v in list(g.input) + list(g.output):
            if not isinstance(v.doc_string, str):
                bad(f"doc_string of {v.name!r}", v.doc_string)
        for node, _, _, _, _, _, doc, attributes, metadata in \
                node_fields(g) if rows is None else rows:
            if not isinstance(doc, str):
                bad(f"{_label(node)}: doc_string", doc)
            if metadata:
                props(_label(node), metadata)
            for a in attributes:
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        graph(sub)
    graph(model.graph, rows)
