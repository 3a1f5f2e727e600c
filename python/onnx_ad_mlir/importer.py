"""ONNX model -> MLIR module in the onnx dialect (DESIGN.md, "Import/export
conventions").

Table-driven: `_op_table` says, per op, the schema inputs, outputs, attribute
kinds and regions; every node is built with the generic `Operation.create`.
Everything that could trip an MLIR assertion is validated in Python first.
"""
from __future__ import annotations

import functools
import os
from typing import Callable

import onnx
from mlir import ir

from . import _op_table
from ._dialect import new_context
from ._gc import gc_paused
from .errors import ImportFailure, UnsupportedOp
from .import_prep import node_rows, prepare_model
from .ml_ops import unsupported
from .onnx_types import TypeConverter
from .ranks import refine_rank
from .schema_types import fallback_result_type
from .tensors import tensor_to_attr, typed_tensor_attr
from .validate import Declared, InitRow, NodeRow

DEFAULT_DOMAINS = ("", "ai.onnx")
_A = onnx.AttributeProto
# Schema attribute kind -> the AttributeProto type a node must use for it.
_KIND_TYPES = {"int": _A.INT, "float": _A.FLOAT, "string": _A.STRING, "ints": _A.INTS,
               "floats": _A.FLOATS, "strings": _A.STRINGS, "tensor": _A.TENSOR,
               "sparse_tensor": _A.SPARSE_TENSOR, "type": _A.TYPE_PROTO}


def import_onnx(model: onnx.ModelProto | str | os.PathLike,
                context: ir.Context | None = None) -> ir.Module:
    """Imports an ONNX model (a ModelProto or a file path) into a new module
    holding `func.func @main_graph`."""
    with gc_paused():
        module = _import(model, context or new_context())
    try:  # cheap (~1 us per op), and the caller gets an exception, not bad IR
        module.operation.verify()
    except ir.MLIRError as e:
        first = e.error_diagnostics[0] if e.error_diagnostics else None
        detail = f"{first.location}: {first.message}" if first else str(e)
        raise ImportFailure(f"the imported IR does not verify: {detail}") from e
    return module


def _import(model: onnx.ModelProto | str | os.PathLike, context: ir.Context) -> ir.Module:
    """import_onnx's module, unverified. Its temporaries (the prepared model,
    rows, values) are freed on return, before the collector resumes, so it
    has nothing of theirs to scan."""
    model, base_dir, rows, declared, inits = prepare_model(model)
    return _ModelImporter(model, context, base_dir, rows, declared, inits).run()


class _OpInfo:
    """What the importer needs per op type, derived once from `_op_table`."""
    __slots__ = ("op_name", "spec", "num_inputs", "all_single", "variadic_input",
                 "num_outputs", "variadic_output", "optional_outputs", "one_single_output",
                 "required", "regions", "plain")

    def __init__(self, mlir_name: str):
        spec = _op_table.OPS[mlir_name]
        self.op_name = "onnx." + mlir_name
        self.spec = spec
        in_kinds = [kind for _, kind in spec["inputs"]]
        out_kinds = [kind for _, kind in spec["outputs"]]
        self.num_inputs = len(in_kinds)
        self.all_single = all(k == "single" for k in in_kinds)
        self.variadic_input = "variadic" in in_kinds
        self.num_outputs = len(out_kinds)
        self.variadic_output = "variadic" in out_kinds
        self.optional_outputs = {i for i, k in enumerate(out_kinds) if k == "optional"}
        self.one_single_output = out_kinds == ["single"]
        self.required = [n for n, (_, req, _) in spec["attributes"].items() if req]
        self.regions = spec["regions"]
        # what _ModelImporter._plain_node can build
        self.plain = self.all_single and self.one_single_output and not self.regions


def _what(node: onnx.NodeProto) -> str:
    """How error messages name a node."""
    return f"node '{node.name}' ({node.op_type})" if node.name else f"node {node.op_type}"


class _Scope:
    """Names visible in one graph; subgraph scopes chain to their parent so
    inner names shadow outer ones."""

    def __init__(self, parent: _Scope | None, graph: onnx.GraphProto):
        self.parent = parent
        self.graph = graph
        self.values: dict[str, ir.Value] = {}
        self.no_value: ir.Value | None = None

    @functools.cached_property
    def types(self) -> dict[str, onnx.TypeProto]:
        """Declared/inferred types of this graph's names. Built on first use:
        the main graph's nodes read theirs from serialized types instead."""
        return _declared_types(self.graph)

    def lookup(self, name: str) -> ir.Value | None:
        scope = self
        while scope is not None:
            value = scope.values.get(name)
            if value is not None:
                return value
            scope = scope.parent
        return None


class _ModelImporter:
    def __init__(self, model: onnx.ModelProto, context: ir.Context, base_dir: str,
                 main_rows: list[NodeRow], declared: Declared, main_inits: list[InitRow]):
        self.model = model
        self.context = context
        self.base_dir = base_dir
        self.main_rows = main_rows  # the main graph's node_rows, from prepare_model
        self.main_inits = main_inits  # and its initializer_fields
        # serialized types of the main graph's names, as _declared_types picks them
        self.main_types = _type_bytes(declared)
        self.types = TypeConverter(context)
        self.opset = _default_opset(model)
        self._used_names: set[str] | None = None
        self._ops: dict[str, _OpInfo] = {}
        self.unknown_loc = ir.Location.unknown(context)
        self._si64 = ir.IntegerType.get_signed(64, context)
        self._i64 = ir.IntegerType.get_signless(64, context)
        self._f32 = ir.F32Type.get(context)
        self._int_attrs: dict[int, ir.Attribute] = {}
        self._list_ints: dict[int, ir.Attribute] = {}
        self._int_lists: dict[tuple[int, ...], ir.Attribute] = {}
        self._none_type = ir.NoneType.get(context)
        self._unit = ir.UnitAttr.get(context)

    # ----------------------------------------------------------------- model
    def run(self) -> ir.Module:
        m, g = self.model, self.model.graph
        with self.context, self.unknown_loc:
            module = ir.Module.create()
            attrs = module.operation.attributes
            attrs["onnx.ir_version"] = ir.IntegerAttr.get(self._i64, m.ir_version)
            attrs["onnx.opset_import"] = ir.ArrayAttr.get(
                [ir.ArrayAttr.get([self._str(o.domain), ir.IntegerAttr.get(self._i64, o.version)])
                 for o in m.opset_import])
            for field in ("producer_name", "producer_version", "domain", "doc_string"):
                if getattr(m, field):
                    attrs[f"onnx.{field}"] = self._str(getattr(m, field))
            if m.model_version:
                attrs["onnx.model_version"] = ir.IntegerAttr.get(self._i64, m.model_version)
            if m.metadata_props:
                attrs["onnx.metadata_props"] = self._props(m.metadata_props)
            self._main_graph(g, module)
        return module

    def _main_graph(self, g: onnx.GraphProto, module: ir.Module) -> None:
        scope = _Scope(None, g)
        initializers = {name: t for t, name, _, _ in self.main_inits}
        if len({vi.name for vi in g.input}) != len(g.input):
            raise ImportFailure(f"graph '{g.name}' has duplicate input names")
        arg_types, arg_attrs = [], []
        for vi in g.input:
            t, params = self._value_type(vi, scope)
            arg_types.append(t)
            attrs = self._value_attrs(vi, params)
            if vi.name in initializers:  # an overridable default: keep its data
                attrs["onnx.initializer"] = tensor_to_attr(
                    initializers.pop(vi.name), self.types, self.base_dir)
            arg_attrs.append(ir.DictAttr.get(attrs))
        func_op = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": self._str("main_graph"),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get(arg_types, [])),
        }, ip=ir.InsertionPoint(module.body))
        block = ir.Block.create_at_start(func_op.regions[0], arg_types,
                                         [self.unknown_loc] * len(arg_types))
        for vi, arg in zip(g.input, block.arguments):
            scope.values[vi.name] = arg
        self._graph_body(g, scope, block, initializers.values())
        results, res_attrs = [], []
        for vi in g.output:
            results.append(self._resolve(vi.name, scope, f"graph output '{vi.name}'"))
            _, params = self._value_type(vi, scope, required=False)
            res_attrs.append(ir.DictAttr.get(self._value_attrs(vi, params)))
        ir.Operation.create("func.return", operands=results, ip=ir.InsertionPoint(block))
        fattrs = func_op.attributes
        fattrs["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(arg_types, [v.type for v in results]))
        fattrs["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
        fattrs["res_attrs"] = ir.ArrayAttr.get(res_attrs)
        if g.name:
            fattrs["onnx.graph_name"] = self._str(g.name)
        if g.doc_string:
            fattrs["onnx.doc_string"] = self._str(g.doc_string)
        if g.metadata_props:
            fattrs["onnx.metadata_props"] = self._props(g.metadata_props)

    # ----------------------------------------------------------------- graphs
    def _graph_body(self, g: onnx.GraphProto, scope: _Scope, block: ir.Block,
                    initializers) -> None:
        """Initializers as marked constants, then the nodes in dependency order."""
        ip = ir.InsertionPoint(block)
        unit, values = self._unit, scope.values
        for tensor in initializers:
            name = tensor.name
            value, ttype = typed_tensor_attr(tensor, self.types, self.base_dir)
            values[name] = ir.Operation.create(
                "onnx.Constant", results=[ttype],
                attributes={"value": value, "onnx.initializer": unit},
                loc=_name_loc("", _name_loc(name)), ip=ip).result  # _names_loc's one output
        for sparse in g.sparse_initializer:
            name = sparse.values.name
            value = self._sparse_attr(sparse)
            ttype = self.types.tensor(sparse.values.data_type, tuple(sparse.dims))
            op = ir.Operation.create(
                "onnx.Constant", results=[ttype],
                attributes={"sparse_value": value, "onnx.initializer": self._unit},
                loc=self._names_loc("", [name]), ip=ip)
            scope.values[name] = op.result
        plain = self._plain_node
        if scope.parent is None:
            rows, types, convert = self.main_rows, self.main_types, self.types.from_type_bytes
        else:
            rows, types = node_rows(g, scope.lookup), scope.types
            convert = self.types.from_type_proto
        for row in rows:
            if not plain(row, values, types, convert, ip):
                self._node(row, scope, block, ip)

    def _subgraph(self, g: onnx.GraphProto, parent: _Scope, region: ir.Region,
                  op_type: str, operands: list[ir.Value], node: onnx.NodeProto) -> None:
        scope = _Scope(parent, g)
        arg_types = []
        for i, vi in enumerate(g.input):
            if vi.type.WhichOneof("value") is None:
                arg_types.append(_default_region_arg(op_type, i, operands, node, self))
            else:
                arg_types.append(self._value_type(vi, scope)[0])
        # Loop body argument k >= 2 starts as carried operand k (ONNX's
        # inference checks Scan states against their start, not these)
        if op_type == "Loop":
            for k in range(2, min(len(arg_types), len(operands))):
                _check_carried(node, g.input[k].name, arg_types[k], operands[k].type)
        locs = [ir.Location.name(vi.name, context=self.context) for vi in g.input]
        block = ir.Block.create_at_start(region, arg_types, locs)
        for vi, arg in zip(g.input, block.arguments):
            scope.values[vi.name] = arg
        self._graph_body(g, scope, block, g.initializer)
        results = [self._resolve(vi.name, scope, f"subgraph output '{vi.name}'")
                   for vi in g.output]
        ir.Operation.create("onnx.Yield", operands=results,
                            loc=self._names_loc(g.name, [vi.name for vi in g.output]),
                            ip=ir.InsertionPoint(block))

    # ----------------------------------------------------------------- nodes
    def _plain_node(self, row: NodeRow, values: dict[str, ir.Value], types: dict,
                    convert: Callable, ip: ir.InsertionPoint) -> bool:
        """Builds the common node as `_node` would (same checks, in the same
        order), at a fraction of its cost, which counts at 10**4 nodes: a
        known op without regions whose inputs and one output are single, the
        inputs defined in this graph, the output of a declared ranked type,
        no doc string or metadata. False (nothing built) for any other node."""
        node, op_type, domain, inputs, outputs, node_name, doc, attributes, metadata = row
        info = self._ops.get(op_type) if domain in DEFAULT_DOMAINS else None
        if info is None:  # first of its type: as in _node (which raises the same)
            info = self._op_info(node)
        if not info.plain:
            return False
        if len(inputs) != info.num_inputs or len(outputs) != 1 or doc or metadata:
            return False
        name = outputs[0]
        tp = types.get(name)
        if tp is None or not name or name in values:
            return False
        try:
            operands = [values[n] for n in inputs]
        except KeyError:  # absent, outer-scope or undefined
            return False
        attrs = self._attributes(node, info, attributes, doc, metadata)[0] \
            if info.required or attributes else None
        t = convert(tp, name)[0]
        if t is None or isinstance(t, ir.UnrankedTensorType):  # _node may refine its rank
            return False
        loc = _name_loc(node_name, _name_loc(name))
        if attrs:  # keyword arguments cost in the bindings: only those set
            op = ir.Operation.create(info.op_name, results=[t], operands=operands,
                                     attributes=attrs, loc=loc, ip=ip)
        else:
            op = ir.Operation.create(info.op_name, results=[t], operands=operands,
                                     loc=loc, ip=ip)
        values[name] = op.result
        return True

    def _node(self, row: NodeRow, scope: _Scope, block: ir.Block,
              ip: ir.InsertionPoint) -> None:
        node, op_type, domain, inputs, outputs, node_name, doc, node_attributes, metadata = row
        info = self._ops.get(op_type) if domain in DEFAULT_DOMAINS else None
        if info is None:
            info = self._op_info(node)
        operands = self._operands(node, inputs, info, scope, block)
        if info.required or node_attributes or doc or metadata:
            attributes, graphs = self._attributes(node, info, node_attributes, doc, metadata)
        else:
            attributes, graphs = {}, {}
        outputs = outputs[:]  # _result_types blanks names in it
        if len(outputs) != info.num_outputs or info.variadic_output:
            outputs = _padded_outputs(outputs, info.spec)
            if outputs is None:
                raise ImportFailure(f"{_what(node)}: {len(node.output)} outputs, the schema "
                                    f"has {len(info.spec['outputs'])}")
        result_types, produced = self._result_types(node, outputs, info, scope, operands)
        if len(produced) == 1:  # the common case of _names_loc, inlined
            loc = _name_loc(node_name, _name_loc(produced[0]))
        else:
            loc = self._names_loc(node_name, produced)
        # Keyword arguments cost in the bindings: pass only those that are set.
        if info.regions:
            op = ir.Operation.create(
                info.op_name, results=result_types, operands=operands, attributes=attributes,
                regions=len(info.regions), loc=loc, ip=ip)
        elif attributes:
            op = ir.Operation.create(info.op_name, results=result_types, operands=operands,
                                     attributes=attributes, loc=loc, ip=ip)
        else:
            op = ir.Operation.create(info.op_name, results=result_types, operands=operands,
                                     loc=loc, ip=ip)
        if info.regions:
            for region, region_name in zip(op.regions, info.regions):
                self._subgraph(graphs[region_name], scope, region, op_type, operands, node)
        values = scope.values
        if len(outputs) == 1:  # the common case; op.results costs more
            if outputs[0]:
                values[outputs[0]] = op.result
            return
        for out_name, result in zip(outputs, op.results):
            if out_name:
                values[out_name] = result

    def used_names(self) -> set[str]:
        if self._used_names is None:  # only ops with optional outputs ask
            self._used_names = _used_names(self.model.graph)
        return self._used_names

    def _op_info(self, node: onnx.NodeProto) -> _OpInfo:
        """The dispatch facts of a node's op at this model's opset (cached)."""
        if node.domain not in DEFAULT_DOMAINS:
            raise unsupported(node)
        info = _OpInfo(_mlir_op_name(node.op_type, self.opset, _what(node)))
        self._ops[node.op_type] = info
        return info

    def _operands(self, node: onnx.NodeProto, inputs: list[str], info: _OpInfo, scope: _Scope,
                  block: ir.Block) -> list[ir.Value]:
        if info.all_single and len(inputs) == info.num_inputs:  # the common case
            if scope.parent is None:
                values = scope.values
                try:
                    return [values[name] for name in inputs]
                except KeyError:  # absent or undefined: reported below
                    pass
            else:
                operands = [scope.lookup(name) for name in inputs]
                if all(v is not None for v in operands):
                    return operands
        operands = []
        for i, (in_name, kind) in enumerate(info.spec["inputs"]):
            names = inputs[i:] if kind == "variadic" else inputs[i:i + 1]
            if kind != "variadic" and not (names and names[0]):
                if kind == "single":
                    raise ImportFailure(f"{_what(node)}: required input '{in_name}' is missing")
                operands.append(self._no_value(scope, block))
                continue
            for name in names:
                if not name:
                    raise ImportFailure(f"{_what(node)}: empty name in variadic input "
                                        f"'{in_name}'")
                operands.append(self._resolve(name, scope, f"{_what(node)}: input '{name}'"))
        if len(inputs) > info.num_inputs and not info.variadic_input:
            raise ImportFailure(f"{_what(node)}: {len(inputs)} inputs, the schema has "
                                f"{info.num_inputs}")
        return operands

    def _result_types(self, node: onnx.NodeProto, outputs: list[str], info: _OpInfo,
                      scope: _Scope, operands: list[ir.Value]) -> tuple[list[ir.Type], list[str]]:
        """Result types for the schema-aligned `outputs`; blanks the names of
        outputs that are not materialised."""
        if info.one_single_output and outputs[0] and outputs[0] not in scope.values:
            name = outputs[0]  # the common case, without the loop below
            tp = scope.types.get(name)
            t = self.types.from_type_proto(tp, name)[0] if tp is not None else None
            if t is None:
                t = fallback_result_type(node, 0, self.opset, operands, self.types, _what(node))
            if isinstance(t, ir.UnrankedTensorType):
                t = refine_rank(node, t, operands)
            return [t], outputs
        types, produced = [], []
        optional = info.optional_outputs
        for i, name in enumerate(outputs):
            if not name and i < info.num_outputs and i not in optional \
                    and not info.variadic_output:
                raise ImportFailure(f"{_what(node)}: required output "
                                    f"'{info.spec['outputs'][i][0]}' is missing")
            if not name or i in optional and name not in self.used_names():
                # An optional output nobody reads is not materialised: it
                # simplifies the IR (and old Dropout masks of another type
                # than the dialect's merged schema never reach MLIR).
                outputs[i] = ""
                types.append(self._none_type)
                continue
            if name in scope.values:
                raise ImportFailure(f"{_what(node)}: output '{name}' is already defined "
                                    "(graphs must be in SSA form)")
            tp = scope.types.get(name)
            t = self.types.from_type_proto(tp, name)[0] if tp is not None else None
            if t is None:
                t = fallback_result_type(node, i, self.opset, operands, self.types, _what(node))
            types.append(refine_rank(node, t, operands))
            produced.append(name)
        return types, produced

    def _attributes(self, node: onnx.NodeProto, info: _OpInfo,
                    attributes: list[onnx.AttributeProto], doc: str,
                    metadata: list[onnx.StringStringEntryProto]
                    ) -> tuple[dict[str, ir.Attribute], dict[str, onnx.GraphProto]]:
        """MLIR attributes and graph attributes of a node from its
        node_fields `attributes`, `doc` and `metadata`."""
        attrs: dict[str, ir.Attribute] = {}
        graphs: dict[str, onnx.GraphProto] = {}
        kinds = info.spec["attributes"]
        for a in attributes:
            if a.ref_attr_name:
                raise ImportFailure(f"{_what(node)}: attribute '{a.name}' refers to a "
                                    "function attribute outside a function")
            if a.name in info.regions:
                if a.type != _A.GRAPH:
                    raise ImportFailure(f"{_what(node)}: attribute '{a.name}' must be a graph")
                graphs[a.name] = a.g
                continue
            kind = kinds.get(a.name)
            if kind is None:
                raise ImportFailure(f"{_what(node)}: unknown attribute '{a.name}'")
            if a.type != _KIND_TYPES[kind[0]]:
                raise ImportFailure(
                    f"{_what(node)}: attribute '{a.name}' has type "
                    f"{_A.AttributeType.Name(a.type)}, expected {kind[0].upper()}")
            attrs[a.name] = self._attribute(a, kind[0], node)
        for attr_name in info.required:
            if attr_name not in attrs:
                raise ImportFailure(f"{_what(node)}: required attribute '{attr_name}' "
                                    "is missing")
        for region in info.regions:
            if region not in graphs:
                raise ImportFailure(f"{_what(node)}: graph attribute '{region}' is missing")
        if doc:
            attrs["onnx.doc_string"] = self._str(doc)
        if metadata:
            attrs["onnx.metadata_props"] = self._props(metadata)
        return attrs, graphs

    def _attribute(self, a: onnx.AttributeProto, kind: str, node: onnx.NodeProto
                   ) -> ir.Attribute:
        if kind == "int":
            return self._si64_attr(a.i)
        if kind == "float":
            return ir.FloatAttr.get(self._f32, a.f)
        if kind == "string":
            return self._str(a.s)
        if kind == "ints":
            key = tuple(a.ints)
            attr = self._int_lists.get(key)
            if attr is None:
                attr = self._int_lists[key] = ir.ArrayAttr.get([self._i64_attr(v) for v in key])
            return attr
        if kind == "floats":
            return ir.ArrayAttr.get([ir.FloatAttr.get(self._f32, v) for v in a.floats])
        if kind == "strings":
            return ir.ArrayAttr.get([self._str(s) for s in a.strings])
        if kind == "tensor":
            return tensor_to_attr(a.t, self.types, self.base_dir)
        if kind == "sparse_tensor":
            return self._sparse_attr(a.sparse_tensor)
        t = self.types.from_type_proto(a.tp, a.name)[0]
        if t is None:
            raise ImportFailure(f"{_what(node)}: attribute '{a.name}' holds an empty type")
        return ir.TypeAttr.get(t)

    # ----------------------------------------------------------------- helpers
    def _resolve(self, name: str, scope: _Scope, what: str) -> ir.Value:
        value = scope.lookup(name)
        if value is None:
            raise ImportFailure(f"{what} is not defined by any graph input, initializer "
                                "or earlier node")
        return value

    def _no_value(self, scope: _Scope, block: ir.Block) -> ir.Value:
        """The block's one shared `onnx.NoValue`, created at the block start."""
        if scope.no_value is None:
            op = ir.Operation.create("onnx.NoValue", results=[self._none_type],
                                     attributes={"value": self._unit},
                                     ip=ir.InsertionPoint.at_block_begin(block))
            scope.no_value = op.result
        return scope.no_value

    def _value_type(self, vi: onnx.ValueInfoProto, scope: _Scope, required: bool = True
                    ) -> tuple[ir.Type | None, list[str] | None]:
        tp = vi.type if vi.type.WhichOneof("value") else scope.types.get(vi.name)
        if tp is None or tp.WhichOneof("value") is None:
            if required:
                raise ImportFailure(f"value '{vi.name}' has no type")
            return None, None
        return self.types.from_type_proto(tp, vi.name)

    def _value_attrs(self, vi: onnx.ValueInfoProto, params: list[str] | None
                     ) -> dict[str, ir.Attribute]:
        attrs = {"onnx.name": self._str(vi.name)}
        if params:
            attrs["onnx.dim_params"] = ir.ArrayAttr.get([self._str(p) for p in params])
        if vi.doc_string:
            attrs["onnx.doc_string"] = self._str(vi.doc_string)
        return attrs

    def _names_loc(self, node_name: str, outputs: list[str]) -> ir.Location:
        """NameLoc(node name) whose child names the produced outputs in order.
        Called inside `with self.context`: an explicit context argument
        costs more than the bindings' lookup of the current one."""
        if len(outputs) == 1:
            child = _name_loc(outputs[0])
        elif outputs:
            child = ir.Location.fused([_name_loc(n) for n in outputs])
        else:
            child = self.unknown_loc
        return _name_loc(node_name, child)

    def _sparse_attr(self, sparse: onnx.SparseTensorProto) -> ir.Attribute:
        fields = {
            "values": tensor_to_attr(sparse.values, self.types, self.base_dir),
            "indices": tensor_to_attr(sparse.indices, self.types, self.base_dir),
            "dims": ir.ArrayAttr.get([self._i64_attr(d) for d in sparse.dims]),
        }
        for part in ("values", "indices"):
            if getattr(sparse, part).name:
                fields[f"{part}_name"] = self._str(getattr(sparse, part).name)
        return ir.DictAttr.get(fields)

    def _props(self, props) -> ir.Attribute:
        return ir.ArrayAttr.get([ir.ArrayAttr.get([self._str(p.key), self._str(p.value)])
                                 for p in props])

    def _str(self, s: str | bytes) -> ir.Attribute:
        return _string_attr(s)  # in `with self.context`, like _names_loc

    def _si64_attr(self, v: int) -> ir.Attribute:
        attr = self._int_attrs.get(v)
        if attr is None:
            attr = self._int_attrs[v] = ir.IntegerAttr.get(self._si64, v)
        return attr

    def _i64_attr(self, v: int) -> ir.Attribute:
        attr = self._list_ints.get(v)
        if attr is None:
            attr = self._list_ints[v] = ir.IntegerAttr.get(self._i64, v)
        return attr


_name_loc = ir.Location.name
_string_attr = ir.StringAttr.get


def _default_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return o.version
    return None


def _mlir_op_name(op_type: str, opset: int | None, what: str) -> str:
    if opset is None:
        raise ImportFailure(f"{what}: the model imports no version of the default "
                            "ONNX domain")
    versions = _op_table.VERSIONS.get(op_type)
    if versions is None:
        raise UnsupportedOp(f"{what}: unknown op '{op_type}' in the default domain")
    chosen = None
    for since, name in versions:
        if since > opset:
            break
        chosen = name
    if chosen is None:
        raise UnsupportedOp(f"{what}: op '{op_type}' does not exist at opset {opset} "
                            f"(first version {versions[0][0]})")
    since_versions = _op_table.OPS[chosen]["since_versions"]
    if opset < _op_table.MIN_OPSET and since_versions[-1] > opset:
        # The version in effect at this old opset was not kept by the dialect.
        raise UnsupportedOp(f"{what}: op '{op_type}' at opset {opset} predates the "
                            f"dialect (opsets {_op_table.MIN_OPSET}-{_op_table.MAX_OPSET})")
    return chosen


def _padded_outputs(outputs: list[str], spec: dict) -> list[str] | None:
    """Node output names aligned to the schema outputs ('' = not produced),
    or None when the node has more outputs than the schema allows."""
    schema = spec["outputs"]
    if schema and schema[-1][1] == "variadic":
        fixed = len(schema) - 1
        return outputs[:fixed] + [""] * (fixed - len(outputs)) + outputs[fixed:]
    if len(outputs) > len(schema):
        return None
    return outputs + [""] * (len(schema) - len(outputs))


def _used_names(g: onnx.GraphProto, used: set[str] | None = None) -> set[str]:
    """Every name read by a node or returned by a graph, subgraphs included."""
    used = set() if used is None else used
    used.update(vi.name for vi in g.output)
    for node in g.node:
        used.update(node.input)
        for a in node.attribute:
            if a.type == _A.GRAPH:
                _used_names(a.g, used)
    return used


def _declared_types(g: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    """Types known for a graph's own names; declared outputs win over inferred
    value_info (they carry the user's symbolic dims) unless they lack a shape."""
    types = {vi.name: vi.type for vi in g.value_info}
    for vi in g.input:
        types[vi.name] = vi.type
    for vi in g.output:
        if _has_shape(vi.type) or vi.name not in types:
            types[vi.name] = vi.type
    return types


def _type_bytes(declared: Declared) -> dict[str, bytes]:
    """_declared_types' choices, as serialized TypeProtos, from the main
    graph's validate.declared_types (inputs, outputs, value_info)."""
    types = {name: b for kind, name, b in declared if kind == "value_info"}
    for kind, name, b in declared:
        if kind == "input" or (kind == "output" and
                               (name not in types or _has_shape(onnx.TypeProto.FromString(b)))):
            types[name] = b
    return types


def _has_shape(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") not in ("tensor_type", None) or \
        tp.tensor_type.HasField("shape")


def _check_carried(node: onnx.NodeProto, name: str, declared: ir.Type, initial: ir.Type) -> None:
    """A Loop body's declared argument type against the value it starts
    from: a different rank or static extent is a model whose types do not
    hold at run time (the rules would build for the declared one)."""
    if not (isinstance(declared, ir.RankedTensorType) and isinstance(initial, ir.RankedTensorType)):
        return
    a, b = declared.shape, initial.shape
    dyn = ir.ShapedType.get_dynamic_size()
    if len(a) != len(b) or any(x != y and dyn not in (x, y) for x, y in zip(a, b)):
        raise ImportFailure(f"node '{node.name}' (Loop): the body declares '{name}' as "
                            f"{declared}, but the loop starts it from a value of type {initial}")


def _default_region_arg(op_type: str, index: int, operands: list[ir.Value],
                        node: onnx.NodeProto, importer: _ModelImporter) -> ir.Type:
    """The type of an untyped subgraph input, from its op's operands."""
    tensor = importer.types.tensor
    if op_type == "Loop":
        if index == 0:
            return tensor(onnx.TensorProto.INT64, ())
        if index == 1:
            return tensor(onnx.TensorProto.BOOL, ())
        if index < len(operands):  # body arg k >= 2 is carried operand k
            return operands[index].type
    elif op_type == "Scan" and index < len(operands):
        t = operands[index].type
        if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
            return ir.UnrankedTensorType.get(t.element_type)
        return t
    raise ImportFailure(f"node '{node.name}' ({op_type}): subgraph input {index} has no "
                        "type and none can be derived")
