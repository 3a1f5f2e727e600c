"""MLIR module in the onnx dialect -> ONNX ModelProto (DESIGN.md,
"Import/export conventions").

Names come from the importer's locations and `onnx.name` attributes when they
are still unique; everything else gets a fresh name that collides with
nothing already used in the model.
"""
from __future__ import annotations

import onnx
from mlir import ir

from . import _op_table
from ._gc import gc_paused
from .errors import ExportFailure
from .export_opset import model_versions
from .onnx_types import fill_type_proto
from .portable import make_portable
from .relu_clip import fold_relu_into_clip
from .tensors import ResourceReader, array_to_tensor

_A = onnx.AttributeProto
_TERMINATORS = ("onnx.Yield", "func.return")


def export_onnx(module: ir.Module) -> onnx.ModelProto:
    """The ONNX model of `module`'s `main_graph` function (or its only one)."""
    func = _main_function(module)
    model = onnx.ModelProto()
    try:
        with gc_paused():
            _export(module, func, model)
    except RuntimeError as e:  # the bindings cannot make a str of non-UTF-8 bytes
        if "str_from_cstr" not in str(e):
            raise
        raise ExportFailure("a string attribute or location name in the module is not "
                            "valid UTF-8 text (e.g. a \\EF escape in onnx.producer_name)") from None
    return model


def _export(module: ir.Module, func: ir.Operation, model: onnx.ModelProto) -> None:
    """Fills `model` from `func`. The exporter (its maps of values and names)
    is freed on return, before the collector resumes, so it has nothing of
    its to scan."""
    exporter = _Exporter(module)
    exporter.main_graph(func, model.graph)
    _restore_model_fields(module.operation.attributes, model, exporter.op_names)
    make_portable(model)
    fold_relu_into_clip(model)


def _main_function(module: ir.Module) -> ir.Operation:
    funcs = [op.operation for op in module.body.operations if op.operation.name == "func.func"]
    for f in funcs:
        if ir.StringAttr(f.attributes["sym_name"]).value == "main_graph":
            return f
    if len(funcs) == 1:
        return funcs[0]
    raise ExportFailure(f"expected a func.func @main_graph, found {len(funcs)} functions")


def _stored_versions(attrs) -> tuple[int | None, dict[str, int]]:
    """(ir_version, {domain: version}) the module kept from its source model."""
    stored = {}
    if "onnx.opset_import" in attrs:
        for pair in ir.ArrayAttr(attrs["onnx.opset_import"]):
            domain, version = ir.ArrayAttr(pair)
            stored[ir.StringAttr(domain).value] = ir.IntegerAttr(version).value
    ir_version = ir.IntegerAttr(attrs["onnx.ir_version"]).value \
        if "onnx.ir_version" in attrs else None
    return ir_version, stored


def _restore_model_fields(attrs, model: onnx.ModelProto, op_names: set[str]) -> None:
    ir_version, opsets = model_versions(*_stored_versions(attrs), op_names)
    model.ir_version = ir_version
    for domain, version in opsets.items():
        model.opset_import.add(domain=domain, version=version)
    for field in ("producer_name", "producer_version", "domain", "doc_string"):
        if f"onnx.{field}" in attrs:
            setattr(model, field, ir.StringAttr(attrs[f"onnx.{field}"]).value)
    if "onnx.model_version" in attrs:
        model.model_version = ir.IntegerAttr(attrs["onnx.model_version"]).value
    if "onnx.metadata_props" in attrs:
        _restore_props(attrs["onnx.metadata_props"], model.metadata_props)


def _restore_props(attr: ir.Attribute, target) -> None:
    for pair in ir.ArrayAttr(attr):
        key, value = ir.ArrayAttr(pair)
        target.add(key=ir.StringAttr(key).value, value=ir.StringAttr(value).value)


class _Names:
    """Unique value and node names for one model."""

    def __init__(self):
        self.taken: set[str] = set()
        self.node_names: set[str] = set()
        self._counter = 0

    def claim(self, wanted: str | None, base: str = "v") -> str:
        """`wanted` if it is still free, else a fresh name."""
        if wanted and wanted not in self.taken:
            self.taken.add(wanted)
            return wanted
        return self.fresh(wanted or base)

    def fresh(self, base: str) -> str:
        while True:
            self._counter += 1
            name = f"{base}__{self._counter}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def node(self, wanted: str) -> str:
        if not wanted:
            return ""
        name = wanted
        while name in self.node_names:
            self._counter += 1
            name = f"{wanted}__{self._counter}"
        self.node_names.add(name)
        return name


class _OpInfo:
    """What the exporter needs per onnx op name, derived once from `_op_table`."""
    __slots__ = ("mlir_name", "op_type", "op_type_field", "kinds", "regions", "simple",
                 "attribute_fields", "written_defaults", "own_extents")

    def __init__(self, mlir_name: str, spec: dict, own_extents: bool = False):
        self.mlir_name = mlir_name
        # results whose unknown extents are declared with names of their own
        self.own_extents = own_extents
        self.op_type = spec["op_type"]
        self.op_type_field = _string_field(b"\x22", self.op_type)  # NodeProto.op_type
        self.kinds = spec["attributes"]
        self.regions = spec["regions"]
        # what _Exporter._simple_node can export
        self.simple = [kind for _, kind in spec["outputs"]] == ["single"] and not self.regions
        # (name, attribute) -> serialized NodeProto.attribute entry: attributes
        # are uniqued, and the same few values recur on many ops
        self.attribute_fields: dict[tuple[str, ir.Attribute], bytes] = {}
        self.written_defaults = [onnx.helper.make_attribute(n, self.kinds[n][2])
                                 for n in _WRITTEN_DEFAULTS.get(self.op_type, ())]


# Schema defaults written when an op leaves them out: ONNX's checker infers
# MeanVarianceNormalization's function body with its `axes` reference left
# empty then, and rejects every model holding the op.
_WRITTEN_DEFAULTS: dict[str, tuple[str, ...]] = {"MeanVarianceNormalization": ("axes",)}


class _Exporter:
    def __init__(self, module: ir.Module):
        self._infos: dict[str, _OpInfo] = {}
        self._int_lists: dict[ir.Attribute, list[int]] = {}
        self.reader = ResourceReader(module)
        self.names = _Names()
        self.value_names: dict[ir.Value, str] = {}
        self.op_names: set[str] = set()  # MLIR op names present, for opsets
        self._none = ir.NoneType.get(module.context)
        self._type_fields: dict[ir.Type, bytes] = {}
        self._fields: list[bytes] = []  # serialized GraphProto fields of the current block
        self._encoded = _Encoded()
        ir_version, stored = _stored_versions(module.operation.attributes)
        opset = stored.get("", stored.get("ai.onnx"))
        # Constant before opset 9 holds float16/32/64 only: other constants
        # (the rules' int64 shapes and axes) become main-graph initializers,
        # also graph inputs at IR 3, where every initializer must be one
        self._float_constants_only = opset is not None and opset < 9
        self._initializers_are_inputs = ir_version is not None and ir_version < 4
        # ONNX's Slice-10 shape inference gives a sliced axis of unknown extent
        # the input's symbolic extent: x[0:3:2] and x[1:3:2] would share one,
        # and ONNX Runtime, planning buffer reuse by it, fails on such a model
        # ("Shape mismatch attempting to re-use buffer"). A name of its own
        # per unknown extent of a Slice result overrides that inference.
        self._slices_own_extents = opset == 10
        self._main_graph: onnx.GraphProto | None = None
        self._main_fields: list[bytes] = []

    # ----------------------------------------------------------------- graphs
    def main_graph(self, func: ir.Operation, graph: onnx.GraphProto) -> None:
        self._main_graph = graph
        attrs = func.attributes
        block = func.regions[0].blocks[0]
        arg_attrs = _dicts(attrs, "arg_attrs", len(block.arguments))
        ftype = ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value)
        res_attrs = _dicts(attrs, "res_attrs", len(ftype.results))
        for arg, a in zip(block.arguments, arg_attrs):
            name = self.names.claim(_str_attr(a, "onnx.name"), "input")
            self.value_names[arg] = name
            vi = graph.input.add(name=name)
            self._fill_value_info(vi, arg.type, a)
            if a is not None and "onnx.initializer" in a:
                self._tensor(a["onnx.initializer"], name, graph.initializer)
        terminator = _terminator(block)
        outputs = self._claim_outputs(block, list(terminator.operands),
                                      [_str_attr(a, "onnx.name") for a in res_attrs])
        self._block(block, graph, set(outputs))
        self._graph_outputs(graph, list(terminator.operands), outputs, res_attrs)
        if "onnx.graph_name" in attrs:
            graph.name = ir.StringAttr(attrs["onnx.graph_name"]).value
        else:
            graph.name = "main_graph"
        if "onnx.doc_string" in attrs:
            graph.doc_string = ir.StringAttr(attrs["onnx.doc_string"]).value
        if "onnx.metadata_props" in attrs:
            _restore_props(attrs["onnx.metadata_props"], graph.metadata_props)

    def _region(self, region: ir.Region, graph: onnx.GraphProto) -> None:
        block = region.blocks[0]
        for arg in block.arguments:
            name = self.names.claim(_loc_name(arg.location), "arg")
            self.value_names[arg] = name
            fill_type_proto(graph.input.add(name=name).type, arg.type)
        terminator = _terminator(block)
        graph_name, wanted = _names_from_loc(terminator.location)
        operands = list(terminator.operands)
        if len(wanted) != len(operands):
            wanted = [None] * len(operands)
        outputs = self._claim_outputs(block, operands, wanted)
        self._block(block, graph, set(outputs))
        self._graph_outputs(graph, operands, outputs, [None] * len(operands))
        graph.name = graph_name or self.names.fresh("graph")

    def _claim_outputs(self, block: ir.Block, values: list[ir.Value],
                       wanted: list[str | None]) -> list[str]:
        """Graph output names, claimed before the body so they win over names
        inside it. A value produced in this block and not yet an output takes
        the output name itself; others will need an Identity (also a value of
        an enclosing graph that has the wanted name: ONNX wants a subgraph's
        outputs made inside it)."""
        outputs = []
        for value, name in zip(values, wanted):
            if isinstance(value, ir.BlockArgument) and value.owner == block and \
                    self.value_names.get(value) == name:
                outputs.append(name)  # an argument passed straight through
                continue
            name = self.names.claim(name, "output")
            outputs.append(name)
            if _is_op_result(value) and value not in self.value_names:
                self.value_names[value] = name
        return outputs

    def _graph_outputs(self, graph: onnx.GraphProto, values: list[ir.Value],
                       outputs: list[str], attrs: list) -> None:
        for value, name, a in zip(values, outputs, attrs):
            source = self.value_names[value]
            if source != name:
                graph.node.add(op_type="Identity", input=[source], output=[name],
                               name=self.names.node(name + "_identity"))
                self.op_names.add("Identity")
            self._fill_value_info(graph.output.add(name=name), value.type, a)

    def _block(self, block: ir.Block, graph: onnx.GraphProto, outputs: set[str]) -> None:
        """Nodes and initializers of a block; value_info for the ranked results
        that are not graph `outputs`. ONNX shape inference cannot read
        constants of an outer scope (e.g. Squeeze axes hoisted out of a Loop
        body by canonicalization) and gives up on whole Loops when one body
        value is unknown, so without these a re-imported model loses ranks
        that the MLIR types knew.

        Nodes, initializers and value_info entries are collected as
        serialized GraphProto fields and parsed into `graph` at once (in
        order within each field): adding messages one by one costs several
        times more."""
        infos = self._infos
        outer_fields = self._fields
        self._fields = fields = []
        if graph is self._main_graph:
            self._main_fields = fields
        for opview in block.operations:
            op = opview.operation
            name = op.name
            info = infos.get(name)
            if info is not None:  # the common case: a plain onnx op seen before
                if not info.simple or not self._simple_node(op, info):
                    self._node(op, info, graph, outputs)
                continue
            if name in _TERMINATORS:
                continue
            if name == "onnx.NoValue":
                self.value_names[op.result] = ""
            elif name == "onnx.Constant" and "onnx.initializer" in (attrs := op.attributes):
                self._initializer(op, attrs, graph)
            elif self._float_constants_only and name.startswith("onnx.ConstantV") and \
                    not isinstance(ir.ShapedType(op.result.type).element_type,
                                   (ir.F16Type, ir.F32Type, ir.F64Type)):
                self._main_initializer(op, op.attributes)
            elif name.startswith("onnx."):
                info = self._op_info(name)
                if not name.startswith("onnx.ConstantV") and name != "onnx.Constant":
                    infos[name] = info  # (Constants are checked above every time)
                self._node(op, info, graph, outputs)
            else:
                raise ExportFailure(f"op '{name}' is not an onnx dialect op and has no "
                                    "ONNX equivalent")
        self._fields = outer_fields
        if fields:
            graph.MergeFromString(b"".join(fields))

    # ----------------------------------------------------------------- ops
    def _initializer(self, op: ir.Operation, attrs, graph: onnx.GraphProto) -> None:
        result = op.result
        _, wanted = _names_from_loc(op.location)
        name = self.value_names.get(result) or self.names.claim(wanted[0] if wanted else None,
                                                                "init")
        self.value_names[result] = name
        if "value" in attrs:
            raw = self.reader.raw_and_element(attrs["value"])
            if raw is not None:  # the common case: queued as bytes, like nodes
                self._fields.append(_message_field(b"\x2a", _raw_tensor(name, *raw)))
            else:
                self._tensor(attrs["value"], name, graph.initializer)
        else:
            sparse = self._sparse(attrs["sparse_value"])
            sparse.values.name = name
            graph.sparse_initializer.append(sparse)

    def _main_initializer(self, op: ir.Operation, attrs) -> None:
        """A constant as an initializer of the main graph (subgraphs read it
        from the outer scope)."""
        fields, self._fields = self._fields, self._main_fields
        try:
            self._initializer(op, attrs, self._main_graph)
        finally:
            self._fields = fields
        if self._initializers_are_inputs:
            vi = self._main_graph.input.add(name=self.value_names[op.result])
            self._fill_value_info(vi, op.result.type, None)

    def _op_info(self, op_name: str) -> _OpInfo:
        """The export facts of an onnx op (once per op name and export)."""
        mlir_name = op_name[5:]
        spec = _op_table.OPS.get(mlir_name)
        if spec is None:
            raise ExportFailure(f"op 'onnx.{mlir_name}' has no ONNX schema")
        self.op_names.add(mlir_name)
        return _OpInfo(mlir_name, spec, self._slices_own_extents and mlir_name == "Slice")

    def _simple_node(self, op: ir.Operation, info: _OpInfo) -> bool:
        """Queues the common node as `_node` would, at a fraction of its cost,
        which counts at 10**4 ops: an op of one result and no regions, at the
        importer's loc("<node>"("<output>")) whose two names are still free
        (so not a graph output's), without a doc string or metadata. False
        (nothing done) for any other op."""
        loc = op.location
        if not loc.is_a_name():  # (name_str of another location is undefined behaviour)
            return False
        child = loc.child_loc
        if not child.is_a_name():
            return False
        node_name, name = loc.name_str, child.name_str
        taken, node_names, names = self.names.taken, self.names.node_names, self.value_names
        if not name or name in taken or node_name in node_names:
            return False
        attrs = op.attributes
        attribute_fields = self._attribute_fields(attrs, info) \
            if len(attrs) or info.written_defaults else b""
        if attribute_fields is None:
            return False
        r = op.result
        if names.setdefault(r, name) is not name:  # named already (a graph output)
            return False
        taken.add(name)
        inputs = [names[v] for v in op.operands]
        while inputs and not inputs[-1]:
            inputs.pop()
        t = r.type
        if isinstance(t, ir.RankedTensorType):
            self._value_info(name, t, info.own_extents)
        encoded = self._encoded
        parts = [b"\x0a" + encoded[n] for n in inputs]  # NodeProto fields as in _node
        parts.append(b"\x12" + encoded[name])
        if node_name:
            node_names.add(node_name)
            parts.append(b"\x1a" + encoded[node_name])
        parts.append(info.op_type_field)
        parts.append(attribute_fields)
        self._fields.append(_message_field(b"\x0a", b"".join(parts)))
        return True

    def _node(self, op: ir.Operation, info: _OpInfo, graph: onnx.GraphProto,
              graph_outputs: set[str]) -> None:
        names = self.value_names
        inputs = [names[v] for v in op.operands]
        while inputs and not inputs[-1]:
            inputs.pop()
        node_name, wanted = _names_from_loc(op.location)
        results = list(op.results)
        outputs = self._result_names(results, wanted)
        for r, name in zip(results, outputs):
            if name and name not in graph_outputs:
                t = r.type
                if isinstance(t, ir.RankedTensorType):
                    self._value_info(name, t, info.own_extents)
        if node_name:
            node_names = self.names.node_names
            if node_name in node_names:
                node_name = self.names.node(node_name)
            else:  # Names.node's common case, inlined
                node_names.add(node_name)
        attrs = op.attributes
        attribute_fields = self._attribute_fields(attrs, info) \
            if len(attrs) or info.written_defaults else b""
        if attribute_fields is None or info.regions:  # built as a message
            node = onnx.NodeProto(op_type=info.op_type, input=inputs, output=outputs)
            if node_name:
                node.name = node_name
            self._attributes(node, attrs, info.kinds, info.mlir_name)
            node.attribute.extend(a for a in info.written_defaults if a.name not in attrs)
            for region_name, region in zip(info.regions, op.regions):
                a = node.attribute.add(name=region_name, type=_A.GRAPH)
                self._region(region, a.g)
            data = node.SerializeToString()
        else:  # NodeProto fields 1-5 (input, output, name, op_type, attribute)
            encoded = self._encoded
            parts = [b"\x0a" + encoded[n] for n in inputs]
            parts += [b"\x12" + encoded[n] for n in outputs]
            if node_name:
                parts.append(b"\x1a" + encoded[node_name])
            parts.append(info.op_type_field)
            parts.append(attribute_fields)
            data = b"".join(parts)
        self._fields.append(_message_field(b"\x0a", data))  # GraphProto.node

    def _attribute_fields(self, attrs, info: _OpInfo) -> bytes | None:
        """The serialized NodeProto.attribute entries of an op's attributes;
        None when the node must be built as a message (a doc string or
        metadata to restore), or to let `_attributes` report an attribute
        that is not in the schema."""
        cache = info.attribute_fields
        kinds = info.kinds
        parts = []
        for attr_name, attr in attrs.items():
            if "." in attr_name:  # discardable: our own metadata or a pass's
                if attr_name in ("onnx.doc_string", "onnx.metadata_props"):
                    return None
                continue
            key = (attr_name, attr)
            field = cache.get(key)
            if field is None:
                kind = kinds.get(attr_name)
                if kind is None:
                    return None
                a = onnx.AttributeProto(name=attr_name)
                self._attribute(a, kind[0], attr)
                field = _message_field(b"\x2a", a.SerializeToString())
                if kind[0] not in ("tensor", "sparse_tensor"):  # data: not kept twice
                    cache[key] = field
            parts.append(field)
        for a in info.written_defaults:
            if a.name not in attrs:
                parts.append(_message_field(b"\x2a", a.SerializeToString()))
        return b"".join(parts)

    def _value_info(self, name: str, t: ir.RankedTensorType, own_extents: bool = False) -> None:
        """Queues the value_info entry (GraphProto field 13) of a block value;
        `own_extents`: its unknown extents named `<name>_dim<axis>`."""
        type_field = None if own_extents else self._type_fields.get(t)
        if type_field is None:  # ValueInfoProto.type (field 2), built once per type
            tp = onnx.TypeProto()
            fill_type_proto(tp, t, [f"{name}_dim{i}" for i in range(t.rank)] if own_extents
                            else None)
            data = tp.SerializeToString()
            type_field = b"\x12" + _varint(len(data)) + data
            if not own_extents:
                self._type_fields[t] = type_field
        self._fields.append(_message_field(b"\x6a", b"\x0a" + self._encoded[name] + type_field))

    def _result_names(self, results: list[ir.Value], wanted: list[str]) -> list[str]:
        """Output names of an op: the location's names when they fit, else
        fresh ones; '' for unproduced optional outputs (trailing ones dropped)."""
        names = self.value_names
        if len(results) == 1 and len(wanted) == 1:  # the common case
            r = results[0]
            name = names.get(r)
            if name is None:
                name = names[r] = self.names.claim(wanted[0])
            return [name]
        none = self._none
        produced = [r for r in results if r.type != none]
        if len(wanted) != len(produced):
            wanted = [None] * len(produced)
        wanted_iter = iter(wanted)
        outputs = []
        for r in results:
            if r.type == none:
                outputs.append("")
                continue
            want = next(wanted_iter)
            if r not in names:
                names[r] = self.names.claim(want)
            outputs.append(names[r])
        while outputs and not outputs[-1]:
            outputs.pop()
        return outputs

    def _attributes(self, node: onnx.NodeProto, attrs, kinds: dict, mlir_name: str) -> None:
        for attr_name, attr in attrs.items():
            if "." in attr_name:  # discardable: our own metadata or a pass's
                if attr_name == "onnx.doc_string":
                    node.doc_string = ir.StringAttr(attr).value
                elif attr_name == "onnx.metadata_props":
                    _restore_props(attr, node.metadata_props)
                continue
            kind = kinds.get(attr_name)
            if kind is None:
                raise ExportFailure(f"onnx.{mlir_name}: attribute '{attr_name}' is not in "
                                    "its ONNX schema")
            self._attribute(node.attribute.add(name=attr_name), kind[0], attr)

    def _attribute(self, a: onnx.AttributeProto, kind: str, attr: ir.Attribute) -> None:
        if kind == "int":
            a.type, a.i = _A.INT, ir.IntegerAttr(attr).value
        elif kind == "float":
            a.type, a.f = _A.FLOAT, ir.FloatAttr(attr).value
        elif kind == "string":
            a.type, a.s = _A.STRING, ir.StringAttr(attr).value_bytes
        elif kind == "ints":
            a.type = _A.INTS
            values = self._int_lists.get(attr)  # attributes are uniqued: few distinct
            if values is None:
                values = self._int_lists[attr] = [ir.IntegerAttr(x).value
                                                  for x in ir.ArrayAttr(attr)]
            a.ints.extend(values)
        elif kind == "floats":
            a.type = _A.FLOATS
            a.floats.extend(ir.FloatAttr(x).value for x in ir.ArrayAttr(attr))
        elif kind == "strings":
            a.type = _A.STRINGS
            a.strings.extend(ir.StringAttr(x).value_bytes for x in ir.ArrayAttr(attr))
        elif kind == "tensor":
            a.type = _A.TENSOR
            a.t.CopyFrom(self._tensor(attr, ""))
        elif kind == "sparse_tensor":
            a.type = _A.SPARSE_TENSOR
            a.sparse_tensor.CopyFrom(self._sparse(attr))
        else:
            a.type = _A.TYPE_PROTO
            fill_type_proto(a.tp, ir.TypeAttr(attr).value)

    # ----------------------------------------------------------------- data
    def _tensor(self, attr: ir.Attribute, name: str, into=None) -> onnx.TensorProto:
        raw = self.reader.raw_and_element(attr)
        if raw is not None:  # the common case, without a numpy array
            data, dims, elem = raw
            make = onnx.TensorProto if into is None else into.add
            return make(name=name, data_type=elem, dims=dims, raw_data=data)
        array, elem = self.reader.array_and_element(attr)
        return array_to_tensor(array, elem, name, into)

    def _sparse(self, attr: ir.Attribute) -> onnx.SparseTensorProto:
        d = ir.DictAttr(attr)
        sparse = onnx.SparseTensorProto()
        for part in ("values", "indices"):
            name = ir.StringAttr(d[f"{part}_name"]).value if f"{part}_name" in d else ""
            getattr(sparse, part).CopyFrom(self._tensor(d[part], name))
        sparse.dims.extend(ir.IntegerAttr(x).value for x in ir.ArrayAttr(d["dims"]))
        return sparse

    def _fill_value_info(self, vi: onnx.ValueInfoProto, t: ir.Type, attrs) -> None:
        params = None
        if attrs is not None:
            if "onnx.dim_params" in attrs:
                params = [ir.StringAttr(p).value for p in ir.ArrayAttr(attrs["onnx.dim_params"])]
            if "onnx.doc_string" in attrs:
                vi.doc_string = ir.StringAttr(attrs["onnx.doc_string"]).value
        fill_type_proto(vi.type, t, params)


_SMALL_VARINTS = [bytes([n]) for n in range(128)]


def _varint(n: int) -> bytes:
    """Protobuf base-128 encoding of a length."""
    if n < 128:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while n >= 128:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Encoded(dict):
    """Name -> its length-prefixed UTF-8 bytes, the payload of a string
    field: each value name is written as an output, a value_info and inputs."""

    def __missing__(self, name: str) -> bytes:
        data = name.encode()
        n = len(data)
        value = self[name] = (_SMALL_VARINTS[n] if n < 128 else _varint(n)) + data
        return value


def _message_field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited protobuf field: `tag`, then the length, then `data`."""
    n = len(data)  # lengths below 128 are one byte: _varint inlined
    return tag + (_SMALL_VARINTS[n] if n < 128 else _varint(n)) + data


def _string_field(tag: bytes, text: str) -> bytes:
    return _message_field(tag, text.encode())


def _raw_tensor(name: str, data: bytes, dims: list[int], elem: int) -> bytes:
    """A serialized TensorProto: dims (field 1), data_type (2), name (8),
    raw_data (9)."""
    parts = [b"\x08" + _varint(d) for d in dims]
    parts.append(b"\x10" + _varint(elem))
    parts.append(_string_field(b"\x42", name))
    parts.append(_message_field(b"\x4a", data))
    return b"".join(parts)


def _dicts(attrs, key: str, count: int) -> list:
    if key not in attrs:
        return [None] * count
    return [ir.DictAttr(a) for a in ir.ArrayAttr(attrs[key])]


def _str_attr(d, key: str) -> str | None:
    if d is None or key not in d:
        return None
    return ir.StringAttr(d[key]).value


def _terminator(block: ir.Block) -> ir.Operation:
    ops = block.operations
    last = ops[len(ops) - 1].operation
    if last.name not in _TERMINATORS:
        raise ExportFailure(f"block ends with '{last.name}', expected onnx.Yield or func.return")
    return last


def _is_op_result(value: ir.Value) -> bool:
    return isinstance(value, ir.OpResult) and value.owner.name != "onnx.NoValue"


def _loc_name(loc: ir.Location) -> str | None:
    return loc.name_str if loc.is_a_name() else None


def _names_from_loc(loc: ir.Location) -> tuple[str | None, list[str]]:
    """(node name, output names) of the importer's `name(outputs)` locations."""
    if not loc.is_a_name():
        return None, []
    child = loc.child_loc
    if child.is_a_name():
        return loc.name_str, [child.name_str]
    if child.is_a_fused():
        return loc.name_str, [x.name_str if x.is_a_name() else "" for x in child.locations]
    return loc.name_str, []
