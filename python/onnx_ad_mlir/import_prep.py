"""Getting an ONNX model ready for import: load, inline local functions,
infer shapes, order nodes.  All failures become `ImportFailure`."""
from __future__ import annotations

import heapq
import os
from typing import Callable

import onnx
import onnx.inliner
from google.protobuf.message import DecodeError

from . import contrib_ops, index_constants, ml_ops, sequence_ops, validate
from .errors import ImportFailure
from .validate import InitRow, NodeRow

# Shape inference runs on a copy whose large tensors are reduced to their
# metadata when the weights pass this size: protobuf cannot serialise 2 GB,
# and below that, serialising the weights for each of inference's rounds
# cost most of the import (swin_t: 0.74 s a round, 7 rounds).
_SKELETON_BYTES = 1 << 24
_BIG_TENSOR = 1 << 16
_FOLD_ROUNDS = 8  # of index_constants.fold and inference
_REGION_OPS = {"If", "Loop", "Scan", "SequenceMap"}
# Ops with an ONNX data propagator (onnx 1.23), and those that start values
# from shapes alone; integer element types a propagator reads as data.
_PROPAGATING = {"Add", "Sub", "Mul", "Cast", "Concat", "Gather", "Slice", "Squeeze",
                "Unsqueeze"}
_SHAPE_SOURCES = {"Shape", "Size"}
_INT_DATA = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)


def prepare_model(model: onnx.ModelProto | bytes | str | os.PathLike
                  ) -> tuple[onnx.ModelProto, str, list[NodeRow], validate.Declared,
                             list[InitRow]]:
    """The model with local functions inlined and shapes inferred, the
    folder its external data is relative to, and its main graph's
    `node_rows`, `validate.declared_types` and `validate.initializer_fields`
    (read once, for the checks and the importer; inference leaves nodes
    without subgraphs and initializers as they were)."""
    base_dir = ""
    if isinstance(model, (str, os.PathLike)):
        base_dir = os.path.dirname(os.path.abspath(model))
        try:  # external data stays on disk: the importer memory-maps it
            model = onnx.load(model, load_external_data=False)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise ImportFailure(f"{os.fspath(model)}: not a valid ONNX model ({e})") from e
        except OSError as e:
            raise ImportFailure(f"cannot read {os.fspath(model)}: {e}") from e
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            model = onnx.load_from_string(bytes(model))
        except (DecodeError, RuntimeError, ValueError) as e:
            raise ImportFailure(f"not a valid ONNX model ({e})") from e
    elif not isinstance(model, onnx.ModelProto):
        raise ImportFailure(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")
    if not model.HasField("graph"):
        raise ImportFailure("the model has no graph (not an ONNX model?)")
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:  # the inliner reports bad functions in many ways
            raise ImportFailure(f"cannot inline the model's local functions: {e}") from e
    validate.check_opsets(model)
    validate.check_versions(model)
    rows = validate.node_fields(model.graph)  # read once: see node_rows
    inits = validate.initializer_fields(model.graph)
    validate.check_text(model.graph, rows, inits)
    validate.check_node_domains(model, rows)
    validate.check_io_types(model.graph)
    validate.check_tensor_dims(model.graph, rows, inits)
    validate.check_acyclic(model.graph, rows)
    validate.check_defined(model.graph, rows)
    validate.check_doc_text(model, rows)
    # before inference: ONNX's own shape inference aborts the process on a
    # negative declared extent (std::clamp assertion, onnx 1.23.2)
    validate.check_dims(model.graph, rows=rows)
    validate.check_extent_attributes(model.graph, rows)
    model = validate.clear_negative_subgraph_dims(model, rows)
    if not _in_order(model.graph, rows):
        model = sorted_copy(model)
        rows = validate.node_fields(model.graph)
    model = _infer_shapes(model, rows, inits)
    validate.check_operand_shapes(model.graph)  # (before the lowering reads them)
    lowered = ml_ops.lower(model, lambda m: _infer_again(m, inits))
    if lowered is not None:
        model, rows = lowered, validate.node_fields(lowered.graph)
    # What follows copies and infers the model, in rounds: with big weights
    # on the skeleton (the sequence and contrib lowerings read types and
    # small integer constants only, folds small integer tensors, and all
    # leave the initializers as they are), the weights put back once at the
    # end (swin_t: 7 rounds of folds, 0.6 s of copying 28 MB of weights;
    # vit_b_16 after ONNX Runtime's transformer optimizer: 0.7 s in one
    # lowering round).
    big = _big(inits)
    start = work = _without_big_data(model) if big else model
    lowered = sequence_ops.lower(work, lambda m: _infer_again(m, inits))
    if lowered is not None:
        work = _infer_again(lowered, inits)
        rows = validate.node_fields(work.graph)
    lowered = contrib_ops.lower(work, lambda m: _infer_again(m, inits))
    if lowered is not None:
        work, rows = lowered, validate.node_fields(lowered.graph)
    declared = validate.declared_types(work.graph)  # read once for three checks
    # the main graph's order needs no outer scope: its own names are all
    rows = node_rows(work.graph, lambda name: None, _inferred_rows(work.graph, rows), inits)
    validate.check_dims(work.graph, declared=declared, rows=rows)
    validate.check_attributes(work.graph, rows=rows, declared=declared, inits=inits)
    opset = next((o.version for o in work.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset > 0:
        validate.check_types(work.graph, opset, rows=rows, declared=declared, inits=inits)
    constants: dict[str, object] = {}  # Constant values, read once for all rounds
    for _ in range(_FOLD_ROUNDS):
        folded = index_constants.fold(work, rows, inits, constants)
        if folded is None:
            break
        # inferred again: the folds give it what it could not compute, and
        # the shapes it then knows may fold more (a Pad by folded pads)
        work = _infer_again(folded, inits)
        declared = validate.declared_types(work.graph)
        rows = node_rows(work.graph, lambda name: None, validate.node_fields(work.graph), inits)
    if work is start:
        return model, base_dir, rows, declared, inits
    if big:
        work.graph.ClearField("initializer")
        work.graph.initializer.extend(model.graph.initializer)
    return work, base_dir, rows, declared, inits


def _big(inits: list[InitRow]) -> bool:
    """Whether the weights are worth leaving out of inference's copies."""
    return sum(_data_bytes(t) for t, _, _, _ in inits) > _SKELETON_BYTES


def _infer_shapes(model: onnx.ModelProto, rows: list[NodeRow], inits: list[InitRow]
                  ) -> onnx.ModelProto:
    """Types and shapes for every value ONNX can infer; a model inference
    rejects is imported as is (the importer derives missing types itself).
    `rows`, `inits`: the main graph's node_fields and initializer_fields."""
    big = _big(inits)
    skeleton = _without_big_data(model) if big else model
    try:
        # strict: a model contradicting its own declared shapes is refused
        inferred = validate.infer_shapes(skeleton, data_prop=False)
        stand_ins = []
        # rounds: an Attention whose V is another one's result sees V's
        # wrong 0 extent as static until that one has its stand-in
        while (found := _attention_stand_ins(skeleton, inferred)) is not None:
            skeleton, more = found
            stand_ins += more
            inferred = validate.infer_shapes(skeleton, data_prop=False)
        data_prop = _propagates_data(model.graph, rows, inits) and \
            not long_vectors(inferred.graph)
        if data_prop:
            inferred = onnx.shape_inference.infer_shapes(skeleton, data_prop=True)
        if model.graph.value_info:
            _unpin_input_extents(inferred, model, data_prop)
        # (inferred is inference's own copy: declared in place, no copy of
        # the weights; on failure below the model is imported as given)
        if _declare_carried_shapes(inferred.graph, {}):
            # inferred again: the shapes reach the Loops' users
            inferred = validate.infer_shapes(inferred, data_prop=False)
    except ImportFailure:
        raise
    except Exception:  # inference errors on odd but importable models
        return model
    if stand_ins:
        _restore_attention(inferred.graph, stand_ins)
    if big:
        inferred.graph.ClearField("initializer")
        inferred.graph.initializer.extend(model.graph.initializer)
    return inferred


def _attention_stand_ins(skeleton: onnx.ModelProto, inferred: onnx.ModelProto
                         ) -> tuple[onnx.ModelProto, list[tuple]] | None:
    """ONNX's inference (onnx 1.23.2) gives a 3-D Attention's result the
    hidden extent 0 when V's is not static (it multiplies V's unset extent):
    everything computed from it inherits the 0, which derivative Reshapes
    then write. None when no Attention of `inferred` (skeleton's inference)
    is such; else a copy of `skeleton` in which each such node is an Einsum
    that ONNX infers right ([b, s, V's extent]: its result only), and where
    the originals go back (_restore_attention). (A 0 that contradicts a
    declared extent has been refused: ONNX Runtime fails to load those.)"""
    types: dict[str, onnx.TypeProto] = {}
    wrong = []
    for path, i, node in _nodes_with_paths(inferred.graph, ()):
        if node.op_type != "Attention" or node.domain not in ("", "ai.onnx") or len(node.input) < 3:
            continue
        if not types:
            _collect_types(inferred.graph, types)
        q, k, v = (_tensor_dims(types.get(name)) for name in node.input[:3])
        _check_attention_heads(node, (q, k, v))
        _check_attention_width(node, q, v, _tensor_dims(types.get(node.output[0])))
        if q is None or v is None or len(q) != 3 or len(v) != 3 or v[2].HasField("dim_value"):
            continue
        heads = {a.name: a.i for a in node.attribute}
        if heads.get("q_num_heads") != heads.get("kv_num_heads") or any(node.output[1:]):
            raise ImportFailure(
                f"node '{node.name}' (Attention): ONNX's shape inference gives its result the "
                "extent 0 on axis 2 (V's last extent is not static); declare V's last extent")
        wrong.append((path, i))
    if not wrong:
        return None
    patched = onnx.ModelProto()
    patched.CopyFrom(skeleton)
    for path, i in wrong:
        node = _graph_at(patched.graph, path).node[i]
        node.CopyFrom(onnx.helper.make_node("Einsum", list(node.input[:3]), [node.output[0]],
                                            name=node.name, equation="bsq,btk,bte->bse"))
    return patched, [(path, i, _graph_at(skeleton.graph, path).node[i]) for path, i in wrong]


def _check_attention_heads(node: onnx.NodeProto, qkv: tuple) -> None:
    """A 3-D Q needs q_num_heads, a 3-D K or V kv_num_heads (ONNX: "must be
    used with 3D inputs"), to be split into heads. ONNX's inference does not
    ask, and its result for a 4-D Q beside a 3-D V then contradicts ONNX
    Runtime's (fuzz seed 225 case 1268). `qkv`: their _tensor_dims."""
    given = {a.name for a in node.attribute}
    for role, name, d, needed in zip("QKV", node.input[:3], qkv,
                                     ("q_num_heads", "kv_num_heads", "kv_num_heads")):
        if d is not None and len(d) == 3 and needed not in given:
            raise ImportFailure(f"node '{node.name}' (Attention): {role} '{name}' is 3-D, "
                                f"which needs the attribute {needed}")


def _check_attention_width(node: onnx.NodeProto, q: list | None, v: list | None,
                           y: list | None) -> None:
    """A 3-D Attention's result is [b, s, q_num_heads * V's head size] (V's
    last extent if V is 4-D, else over kv_num_heads); ONNX's inference does
    not derive it when Q and V differ in rank and keeps a declared width,
    which ONNX Runtime then contradicts (fuzz seed 205 case 1136). q, v, y:
    the _tensor_dims of Q, V and the result."""
    if q is None or v is None or y is None or len(q) != 3 or len(y) != 3 or len(v) != 4:
        return
    heads = next((a.i for a in node.attribute if a.name == "q_num_heads"), None)
    if heads and v[3].HasField("dim_value") and y[2].HasField("dim_value") and \
            y[2].dim_value != heads * v[3].dim_value:
        raise ImportFailure(
            f"node '{node.name}' (Attention): its result '{node.output[0]}' is declared "
            f"{y[2].dim_value} wide, but {heads} heads of V's width {v[3].dim_value} make "
            f"{heads * v[3].dim_value}")


def _restore_attention(graph: onnx.GraphProto, stand_ins: list[tuple]) -> None:
    """The Attention nodes back in place of their Einsum stand-ins (in place)."""
    for path, i, node in stand_ins:
        _graph_at(graph, path).node[i].CopyFrom(node)


def _nodes_with_paths(graph: onnx.GraphProto, path: tuple):
    """(path of graph, index, node) for every node, subgraphs included; a
    path is the (node index, attribute name) steps from the main graph."""
    for i, n in enumerate(graph.node):
        yield path, i, n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _nodes_with_paths(a.g, path + ((i, a.name),))


def _graph_at(graph: onnx.GraphProto, path: tuple) -> onnx.GraphProto:
    for i, name in path:
        graph = next(a.g for a in graph.node[i].attribute if a.name == name)
    return graph


def _collect_types(graph: onnx.GraphProto, types: dict[str, onnx.TypeProto]) -> None:
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        types[v.name] = v.type
    for n in graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _collect_types(a.g, types)


def _tensor_dims(t: onnx.TypeProto | None) -> list | None:
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return list(t.tensor_type.shape.dim)


def _infer_again(model: onnx.ModelProto, inits: list[InitRow]) -> onnx.ModelProto:
    """_infer_shapes of a model import_prep rewrote (its nodes read anew;
    its initializers are the original's)."""
    return _infer_shapes(model, validate.node_fields(model.graph), inits)


def _unpin_input_extents(inferred: onnx.ModelProto, model: onnx.ModelProto,
                         data_prop: bool) -> None:
    """In a graph with symbolic input extents, the static extents that the
    declared value and output types alone give (inference keeps a declared
    extent over what it derives) are replaced, in place in `inferred` (inferred from
    `model`), by what inference derives without them: an input's symbol, or
    an unknown extent. Exporters declare some wrongly: PyTorch's dynamo
    exporter writes a batch_first LSTM's output with the example's time
    extent under a dynamic time axis, and derivatives built on it fail at
    any other length; an extent that may follow a dynamic axis is read at
    run time instead."""
    symbols = {d.dim_param for v in inferred.graph.input
               for d in v.type.tensor_type.shape.dim if d.dim_param}
    if not symbols:
        return
    bare = _without_big_data(model)
    bare.graph.ClearField("value_info")
    for v in bare.graph.output:  # (declared as wrongly: dynamo declares the LSTM's [b, 6, 2])
        v.type.tensor_type.ClearField("shape")
    try:
        derived = onnx.shape_inference.infer_shapes(bare, data_prop=data_prop)
    except Exception:  # noqa: BLE001 - the declared types stand
        return
    alone = {v.name: v.type.tensor_type for v in list(derived.graph.value_info) +
             list(derived.graph.output)}
    for v in list(inferred.graph.value_info) + list(inferred.graph.output):
        mine, theirs = v.type.tensor_type, alone.get(v.name)
        if not mine.HasField("shape") or theirs is None or (
                theirs.HasField("shape") and len(theirs.shape.dim) != len(mine.shape.dim)):
            continue
        dims = theirs.shape.dim if theirs.HasField("shape") else [None] * len(mine.shape.dim)
        for d, derived_dim in zip(mine.shape.dim, dims):
            if not d.HasField("dim_value") or \
                    derived_dim is not None and derived_dim.HasField("dim_value"):
                continue
            if derived_dim is not None and derived_dim.dim_param in symbols:
                d.dim_param = derived_dim.dim_param  # (clears the value: a oneof)
            else:
                d.Clear()


def _declare_carried_shapes(graph: onnx.GraphProto, outer: dict[str, onnx.TypeProto]) -> int:
    """Declares (in value_info, in place) the shapes of Loop results that
    ONNX's inference leaves without one, in `graph` and its subgraphs; how
    many. ONNX keeps only the element type of a loop-carried value, which may
    change shape from one iteration to the next; one whose start, body
    argument and body result all have the same static shape keeps it through
    any number of iterations, zero included."""
    known = dict(outer)
    known.update({v.name: v.type for v in list(graph.input) + list(graph.value_info) +
                  list(graph.output)})
    for t in graph.initializer:
        known.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    count = 0
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                count += _declare_carried_shapes(a.g, known)
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
            continue
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if body is None:
            continue
        for j, result in enumerate(node.output[:len(node.input) - 2]):
            if not result or _static_shape(known.get(result)) is not None:
                continue
            start = _static_shape(known.get(node.input[2 + j]))
            if start is None or j + 2 >= len(body.input) or j + 1 >= len(body.output) or \
                    _static_shape(body.input[2 + j].type) != start or \
                    _static_shape(body.output[1 + j].type) != start:
                continue
            vi = next((v for v in graph.value_info if v.name == result), None) or \
                graph.value_info.add(name=result)  # (inference's own entry: no shape)
            vi.type.CopyFrom(body.input[2 + j].type)
            known[result] = vi.type
            count += 1
    return count


def _static_shape(t: onnx.TypeProto | None) -> tuple | None:
    """(elem_type, dims) of a tensor type whose extents are all values."""
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dims = t.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return t.tensor_type.elem_type, tuple(d.dim_value for d in dims)


def _inferred_rows(graph: onnx.GraphProto, rows: list[NodeRow]) -> list[NodeRow]:
    """node_fields of the graph shape inference returned, from those of the
    graph it was given: inference adds types, in value_info and in subgraphs,
    and leaves the nodes and their order alone. So without subgraphs the
    given rows (and their node messages) stand; with some, the new messages
    are read (their subgraphs carry the types)."""
    if any(row[1] in _REGION_OPS for row in rows) or len(graph.node) != len(rows):
        return validate.node_fields(graph)
    return rows


def _propagates_data(graph: onnx.GraphProto, rows: list[NodeRow], inits: list[InitRow]
                     ) -> bool:
    """Whether ONNX data propagation could infer more than plain inference.
    Values it computes start at Shape/Size, or at integer constants that a
    propagating op reads (plain inference reads constants only as direct
    operands); values it derives from a 1-D type alone carry no more than
    that type. A model without either (most graphs but exported shape
    arithmetic) skips the second inference. `rows`, `inits`: the graph's
    node_fields and initializer_fields."""
    constants: set[str] = set()
    reads: list = []  # inputs of propagating ops
    if _data_sources(graph, constants, reads, rows, inits):
        return True
    return bool(constants) and any(name in constants for names in reads for name in names)


def _integer_constant(attributes: list[onnx.AttributeProto]) -> bool:
    """Whether a Constant's value is integer data of rank <= 1, the only
    data ONNX's propagation carries (a transformer's float scalars are not)."""
    for a in attributes:
        if a.name in ("value_int", "value_ints", "sparse_value"):
            return True
        if a.name == "value":
            return a.t.data_type in _INT_DATA and len(a.t.dims) <= 1
    return False


def _data_sources(graph: onnx.GraphProto, constants: set[str], reads: list,
                  rows: list[NodeRow] | None = None, inits: list[InitRow] | None = None
                  ) -> bool:
    """True on a Shape/Size node; else collects integer constant names and
    the inputs of propagating ops, subgraphs included. `rows`, `inits`: the
    graph's node_fields and initializer_fields, when already read."""
    for _, name, data_type, dims in validate.initializer_fields(graph) if inits is None \
            else inits:
        if data_type in _INT_DATA and len(dims) <= 1:
            constants.add(name)
    constants.update(t.values.name for t in graph.sparse_initializer)
    for node, op, domain, inputs, outputs, _, _, attributes, _ in \
            validate.node_fields(graph) if rows is None else rows:
        if op in _PROPAGATING:
            reads.append(inputs)
        elif op == "Constant" and _integer_constant(attributes):
            constants.update(outputs)
        elif op in _SHAPE_SOURCES:
            return True
        elif op in _REGION_OPS or domain not in ("", "ai.onnx"):
            for a in attributes:
                graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs
                if any(_data_sources(g, constants, reads) for g in graphs):
                    return True
    return False


def long_vectors(graph: onnx.GraphProto, limit: int = 4096) -> bool:
    """Whether some value is a 1-D tensor longer than `limit`. ONNX's data
    propagation evaluates binary elementwise ops on every 1-D tensor, in time
    linear in its length (minutes for a [10**9] input; found by the fuzzer):
    it is meant for shape tensors, which are short, so it is skipped then."""
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = v.type.tensor_type
        if t.HasField("shape") and len(t.shape.dim) == 1 and \
                t.shape.dim[0].dim_value > limit:
            return True
    for init in graph.initializer:
        if len(init.dims) == 1 and init.dims[0] > limit:
            return True
    for n in graph.node:  # bodies: their values are listed in their own graphs
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH and long_vectors(a.g, limit):
                return True
    return False


def _data_bytes(t: onnx.TensorProto) -> int:
    """A tensor's size by its dims and type: ByteSize() walks the data (0.3 s
    over alexnet's 244 MB, for each round of inference)."""
    if t.data_type == onnx.TensorProto.STRING:
        return t.ByteSize()
    try:
        item = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except KeyError:  # (an unknown type: the importer refuses it)
        return t.ByteSize()
    n = 1
    for d in t.dims:
        n *= d
    return n * item


def _without_big_data(model: onnx.ModelProto) -> onnx.ModelProto:
    # Inference reads only the version, the opsets and the graph.
    skeleton = onnx.ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    graph = skeleton.graph
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(graph, field).extend(getattr(model.graph, field))
    for t in model.graph.initializer:
        small = graph.initializer.add()
        if _data_bytes(t) < _BIG_TENSOR:
            small.CopyFrom(t)
        else:  # dims and type only: inference needs no data of big weights
            small.name, small.data_type = t.name, t.data_type
            small.dims.extend(t.dims)
            small.data_location = onnx.TensorProto.EXTERNAL
            entry = small.external_data.add()
            entry.key, entry.value = "location", "omitted"
    return skeleton


def _in_order(graph: onnx.GraphProto, rows: list[NodeRow] | None = None) -> bool:
    """Whether the graph and its subgraphs list every node after the nodes
    it reads from. ONNX's shape inference visits the nodes as listed and
    checks a node read before its operands' producers against unknown
    shapes: an unsorted model's invalid Tile passed (fuzz seed 176 case 1968)."""
    rows = validate.node_fields(graph) if rows is None else rows
    if [id(r[0]) for r in node_rows(graph, lambda name: None, rows)] != [id(r[0]) for r in rows]:
        return False
    return all(_in_order(g) for node in graph.node for g in validate.node_subgraphs(node))


def sorted_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the model with every graph's nodes in topological order
    (the order ONNX's checker and shape inference need)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)

    def sort(graph: onnx.GraphProto) -> None:
        nodes = [onnx.NodeProto() for _ in graph.node]
        for n, old in zip(nodes, sorted_nodes(graph, lambda name: None)):
            n.CopyFrom(old)
        del graph.node[:]
        graph.node.extend(nodes)
        for node in graph.node:
            for g in validate.node_subgraphs(node):
                sort(g)
    sort(copy.graph)
    return copy


def sorted_nodes(graph: onnx.GraphProto, outer: Callable[[str], object]) -> list[onnx.NodeProto]:
    """The graph's nodes in an order where every name is defined before use
    (the given order when it already is). `outer(name)` tells whether an
    enclosing scope defines a name."""
    return [row[0] for row in node_rows(graph, outer)]


def node_rows(graph: onnx.GraphProto, outer: Callable[[str], object],
              rows: list[NodeRow] | None = None, inits: list[InitRow] | None = None
              ) -> list[NodeRow]:
    """The graph's `validate.node_fields` (`rows`, when already read) in
    `sorted_nodes`' order. `inits`: its initializer_fields, when read."""
    rows = validate.node_fields(graph) if rows is None else rows
    defined = _graph_own_names(graph, inits)
    defined.add("")  # absent optional inputs
    for node, op_type, _, inputs, outputs, _, _, _, _ in rows:
        # Only default-domain region ops have subgraphs (others are refused).
        needed = _needed_names(node) if op_type in _REGION_OPS else inputs
        if not defined.issuperset(needed) and \
                any(name not in defined and outer(name) is None for name in needed):
            break
        defined.update(outputs)
    else:
        return rows
    by_node = {id(row[0]): row for row in rows}
    order = _topological([row[0] for row in rows], [_needed_names(row[0]) for row in rows])
    return [by_node[id(n)] for n in order]


def _topological(nodes: list[onnx.NodeProto], needs: list[set[str]]) -> list[onnx.NodeProto]:
    # Kahn's algorithm, picking the earliest ready node to stay close to the
    # original order. Names no node produces are left for the importer to
    # report (or to resolve in an outer scope).
    producer = {name: i for i, n in enumerate(nodes) for name in n.output if name}
    waiting = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for i, needed in enumerate(needs):
        for name in needed:
            p = producer.get(name)
            if p is not None and p != i:
                waiting[i] += 1
                users[p].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = next(n for i, n in enumerate(nodes) if waiting[i])
        raise ImportFailure(f"the graph has a cycle through node '{stuck.name}' "
                            f"({stuck.op_type})")
    return order


def _graph_own_names(graph: onnx.GraphProto, inits: list[InitRow] | None = None) -> set[str]:
    names = {vi.name for vi in graph.input}
    names.update(row[1] for row in (validate.initializer_fields(graph) if inits is None
                                    else inits))
    names.update(t.values.name for t in graph.sparse_initializer)
    return names


def _needed_names(node: onnx.NodeProto) -> set[str]:
    """Inputs of a node, including names its subgraphs capture."""
    needed = {name for name in node.input if name}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            needed |= _free_names(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            for g in a.graphs:
                needed |= _free_names(g)
    return needed


def _free_names(graph: onnx.GraphProto) -> set[str]:
    defined = _graph_own_names(graph)
    free: set[str] = set()
    for node in graph.node:
        free |= _needed_names(node)
        defined.update(node.output)
    return free - defined

