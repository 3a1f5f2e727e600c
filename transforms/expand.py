"""`onnx-ad-expand`: ops the ONNX spec defines by a function body, and ops
with a lowering (lowering.py), are replaced by differentiable primitives.

Per op (an MLIR rewrite of that op):
  1. the op alone becomes a one-node ONNX model (the exporter converts node,
     attributes and types; small constant operands come along as constants);
  2. the node is replaced by its body, at the module's opset: the schema's
     function (`get_function_with_opset_version`) or context-dependent
     function generated for the operands' actual types, or a lowering; and
     to a fixed point, with ONNX shape inference between rounds: nested
     function ops are expanded, nodes whose inputs are all constant are
     evaluated (onnx's reference evaluator), Shape/Size of static shapes
     fold, and an If on a constant condition is replaced by its branch;
  3. the result is imported (import_onnx) and its ops are moved in place of
     the op: operands replace the body's arguments, the body's results
     replace the op's. Body nodes are named `<node>/<inner>`, the op's
     output names stay on the values that now compute them.

Ops with a JVP rule are kept (their hand rule is cheaper), unless the pass
runs with `all=true`. An op without a float operand or result is left alone
(Range over integers would become a Loop). An op that should expand but
cannot (no types for a context-dependent body, a lowering's limits) raises
UnsupportedOp naming the node, the op and the reason.

  onnx-ad-expand{func=main_graph all=false}
"""
from __future__ import annotations

from typing import Callable, Container

import numpy as np
import onnx
from mlir import ir
from onnx import AttributeProto as A
from onnx import TensorProto as TP
from onnx import defs, helper, numpy_helper

from onnx_ad_mlir import _op_table
from onnx_ad_mlir.errors import OnnxAdError, UnsupportedOp
from onnx_ad_mlir.import_prep import long_vectors
from onnx_ad_mlir.passes import register_pass

from .builder import constant_value, is_float, nested_ops, resolve
from .registry import JVP

# op_type -> lowering(node, ctx) -> list of NodeProto writing node.output;
# filled by lowering.py. `ctx` is a _Round (types, constants, fresh names).
LOWERINGS: dict[str, Callable] = {}

_FLOATS = {TP.FLOAT, TP.DOUBLE, TP.FLOAT16, TP.BFLOAT16}
_NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Bernoulli", "Multinomial", "Dropout"}
_NO_EXPAND = {"Bernoulli", "SequenceMap"}  # random / sequence bodies: not worth it
_MAX_FOLD = 1 << 16  # elements of a folded constant
_MAX_ROUNDS = 64


# --------------------------------------------------------------------------- MLIR side
def expand_function(f: ir.Operation, opset: int, keep: Container[str] | None = None,
                    ops: list[ir.Operation] | None = None) -> int:
    """Expands every expandable op of `f` (nested regions too); returns how
    many ops were replaced. `keep`: MLIR op names left alone (default: the
    ops with a JVP rule). `ops`: nested_ops(f), when the caller has it."""
    keep = JVP if keep is None else keep
    if ops is None:
        ops = nested_ops(f.operation if hasattr(f, "operation") else f)
    todo = [op for op in ops if _wanted(op, opset, keep)]
    if not todo:
        return 0
    reached = _reached(ops)
    count = 0
    for op in todo:
        try:
            _expand_op(op, opset, keep)
            count += 1
        except UnsupportedOp:
            if op in reached:
                raise
            # No argument reaches it (its inputs are constants): it is never
            # differentiated, so it may stay as it is.
    return count


def _reached(ops: list[ir.Operation]) -> set:
    """Ops that some block argument reaches (through operands, or values
    their regions capture). `ops` is in _ops order: nested ops before their
    op, both after every op defined earlier."""
    values: set = set()
    reached: set = set()
    for op in ops:
        for region in op.regions:
            for block in region.blocks:
                values.update(block.arguments)
        hit = any(v in values or _is_block_argument(v) for v in op.operands) or \
            any(inner in reached for inner in nested_ops(op))
        if hit:
            reached.add(op)
            values.update(op.results)
    return reached


def _is_block_argument(v: ir.Value) -> bool:
    return isinstance(v, ir.BlockArgument)


def _onnx_type(op: ir.Operation) -> str | None:
    if not op.name.startswith("onnx."):
        return None
    spec = _op_table.OPS.get(op.name[5:])
    return None if spec is None else spec["op_type"]


def _wanted(op: ir.Operation, opset: int, keep: Container[str]) -> bool:
    t = _onnx_type(op)
    if t is None or op.name in keep or t in _NO_EXPAND:
        return False
    if not any(is_float(v) for v in list(op.operands) + list(op.results)):
        return False
    return t in LOWERINGS or _has_body(t, opset)


def _has_body(op_type: str, opset: int) -> bool:
    try:
        schema = defs.get_schema(op_type, opset, "")
    except defs.SchemaError:
        return False
    return any(v <= opset for v in schema.function_opset_versions) or \
        any(v <= opset for v in schema.context_dependent_function_opset_versions)


def expansion_kind(op_type: str, opset: int) -> str | None:
    """How onnx-ad-expand covers an op at an opset, for coverage tables:
    "lowering", "function body" or "context-dependent function body" (the
    version chosen is the newest <= opset), or None."""
    if op_type in LOWERINGS:
        return "lowering"
    try:
        schema = defs.get_schema(op_type, opset, "")
    except defs.SchemaError:
        return None
    if any(v <= opset for v in schema.function_opset_versions):
        return "function body"
    if any(v <= opset for v in schema.context_dependent_function_opset_versions):
        return "context-dependent function body"
    return None


def _node_name(op: ir.Operation) -> str:
    loc = op.location
    return loc.name_str if loc.is_a_name() else ""


def _output_names(op: ir.Operation) -> list[str]:
    loc = op.location
    if not loc.is_a_name():
        return []
    child = loc.child_loc
    if child.is_a_name():
        return [child.name_str]
    if child.is_a_fused():
        return [x.name_str if x.is_a_name() else "" for x in child.locations]
    return []


def _small_constant(v: ir.Value) -> bool:
    if constant_value(v) is None:
        return False
    t = v.type
    return isinstance(t, ir.RankedTensorType) and t.has_static_shape and \
        int(np.prod(t.shape)) <= _MAX_FOLD


def _expand_op(op: ir.Operation, opset: int, keep: Container[str]) -> None:
    from onnx_ad_mlir.exporter import export_onnx
    from onnx_ad_mlir.importer import import_onnx

    name = _node_name(op)
    label = f"{op.name} (node '{name}')"
    prefix = (name or _onnx_type(op)) + "/"
    context = op.context
    with context, ir.Location.unknown():
        tmp = ir.Module.create()
        i64 = ir.IntegerType.get_signless(64)
        tmp.operation.attributes["onnx.opset_import"] = ir.ArrayAttr.get(
            [ir.ArrayAttr.get([ir.StringAttr.get(""), ir.IntegerAttr.get(i64, opset)])])
        actual, arg_types = [], []
        for v in op.operands:
            if not isinstance(v.type, ir.NoneType) and not _small_constant(v) and v not in actual:
                actual.append(v)
                arg_types.append(v.type)
        produced = [r for r in op.results if not isinstance(r.type, ir.NoneType)]
        fop = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get("main_graph"),
            "function_type": ir.TypeAttr.get(
                ir.FunctionType.get(arg_types, [r.type for r in produced]))},
            ip=ir.InsertionPoint(tmp.body))
        block = ir.Block.create_at_start(fop.regions[0], arg_types)
        mapping = dict(zip(actual, block.arguments))
        ip = ir.InsertionPoint(block)
        operands = []
        for v in op.operands:
            if v in mapping:
                operands.append(mapping[v])
            elif isinstance(v.type, ir.NoneType):
                operands.append(ir.Operation.create(
                    "onnx.NoValue", results=[v.type], attributes={"value": ir.UnitAttr.get()},
                    ip=ip).result)
            else:  # a small constant travels with the node
                attrs = {"value": constant_value(v)}
                mapping[v] = ir.Operation.create("onnx.Constant", results=[v.type],
                                                 attributes=attrs, ip=ip).result
                operands.append(mapping[v])
        attrs = {k: op.attributes[k] for k in op.attributes}
        clone = ir.Operation.create(op.name, results=[r.type for r in op.results],
                                    operands=operands, attributes=attrs, loc=op.location, ip=ip)
        outs = [r for r in clone.results if not isinstance(r.type, ir.NoneType)]
        ir.Operation.create("func.return", operands=outs, ip=ip)
        wanted = _output_names(op)
        if len(wanted) != len(produced):
            wanted = [""] * len(produced)
        out_names = [w or f"{prefix}out{i}" for i, w in enumerate(wanted)]
        fop.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(
            {"onnx.name": ir.StringAttr.get(f"{prefix}in{i}")}) for i in range(len(actual))])
        fop.attributes["res_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(
            {"onnx.name": ir.StringAttr.get(n)}) for n in out_names])
        try:
            model = export_onnx(tmp)
            model = expand_model(model, opset, _keep_types(keep, opset), prefix)
            body = import_onnx(model, context=context)
        except UnsupportedOp as e:
            raise UnsupportedOp(f"{label}: cannot expand: {e}") from None
        except OnnxAdError as e:
            raise UnsupportedOp(f"{label}: cannot expand: {e}") from None
        bfunc = next(o.operation for o in body.body.operations
                     if o.operation.name == "func.func")
        bblock = bfunc.regions[0].blocks[0]
        for arg, v in zip(bblock.arguments, actual):
            arg.replace_all_uses_with(v)
        ret = bblock.operations[len(bblock.operations) - 1].operation
        results = list(ret.operands)
        ret.erase()
        for inner in list(bblock.operations):
            inner.operation.move_before(op)
        for r, new in zip(produced, results):
            wanted_type = r.type
            if _conflicting(new.type, r.type):
                # ONNX's own inference of the op was wrong (STFT ignores the
                # default onesided): the body's computed type is right.
                wanted_type = new.type
            if new.type != wanted_type:
                if isinstance(new, ir.OpResult) and new.owner.operation.block == op.block:
                    new.set_type(wanted_type)
                else:
                    new = ir.Operation.create("onnx.Identity", results=[wanted_type],
                                              operands=[new], loc=op.location,
                                              ip=ir.InsertionPoint(op)).result
            r.replace_all_uses_with(new)
            if wanted_type != r.type:
                _retype_users(new)
        op.erase()
        del body


def _conflicting(a: ir.Type, b: ir.Type) -> bool:
    """Ranked types of equal rank with a static extent that differs."""
    if not (isinstance(a, ir.RankedTensorType) and isinstance(b, ir.RankedTensorType)):
        return False
    if a.rank != b.rank:
        return True
    dyn = ir.ShapedType.get_dynamic_size()
    return any(x != y and dyn not in (x, y) for x, y in zip(a.shape, b.shape))


# Ops whose result shape is the broadcast of their operands' (or the single
# operand's): a corrected type flows through them.
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where",
                "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Relu",
                "Sin", "Cos", "Erf", "Softplus", "Identity", "Cast", "CastLike", "Clip",
                "LeakyRelu", "Elu", "Selu", "Gelu", "Softmax", "LogSoftmax"}


def _concat_dims(op: ir.Operation, operands: list[ir.Value]) -> list | None:
    """Concat's extents from its operands': summed along its axis (when all
    are known), the first known one elsewhere; None without equal ranks."""
    from .builder import attribute, dims
    ds = [dims(v) for v in operands]
    if not ds or any(d is None for d in ds) or len({len(d) for d in ds}) != 1:
        return None
    r, a = len(ds[0]), attribute(op, "axis")
    if not -r <= a < r:
        return None
    a %= r
    out = []
    for i, column in enumerate(zip(*ds)):
        known = [e for e in column if e is not None]
        out.append((sum(known) if len(known) == len(column) else None) if i == a else
                   (known[0] if known else None))
    return out


def _slice_dims(op: ir.Operation) -> list | None:
    """A Slice's extents from its data's where its bounds (starts, ends and
    the optional axes, steps) are constants; unknown extents None."""
    from .builder import dims
    from .rules.shape import slice_args
    d = dims(op.operands[0])
    if d is None:
        return None
    try:
        starts, ends, axes, steps = slice_args(op, len(d))
    except UnsupportedOp:
        return None
    if 0 in steps or not len(starts) == len(ends) == len(axes) == len(steps) or \
            any(not 0 <= a < len(d) for a in axes):
        return None
    out = list(d)
    for a, b, e, st in zip(axes, starts, ends, steps):
        out[a] = None if d[a] is None else len(range(d[a])[b:e:st])  # ONNX clamps as NumPy
    return out


def _retype_users(value: ir.Value, depth: int = 0) -> None:
    """After a result's type was corrected: elementwise users get the
    broadcast of their operands' types, a Concat its operands' extents
    (kept where it already knew them), a Slice with constant bounds its
    data's extents sliced, a func.return its function type."""
    from .builder import broadcast_dims, dims, element_type, tensor_type
    for use in list(value.uses):
        user = use.owner
        user = user.operation if hasattr(user, "operation") else user
        if user.name == "func.return":
            f = user.parent
            ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            f.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(list(ftype.inputs), [v.type for v in user.operands]))
            continue
        t = _onnx_type(user)
        if (t not in _ELEMENTWISE and t not in ("Concat", "Slice")) or depth > 64 or \
                len(user.results) != 1:
            continue
        operands = [v for v in user.operands if not isinstance(v.type, ir.NoneType)]
        r = user.results[0]
        if t in ("Concat", "Slice"):
            if t == "Slice" and use.operand_number != 0:
                continue
            shape = _concat_dims(user, operands) if t == "Concat" else _slice_dims(user)
            old = dims(r)
            if shape is None or (old is not None and len(old) != len(shape)):
                continue
            if old is not None:
                shape = [o if o is not None else e for o, e in zip(old, shape)]
        else:
            if t in ("Clip", "CastLike"):
                operands = operands[:1]
            try:
                shape = broadcast_dims(*(dims(v) for v in operands))
            except UnsupportedOp:
                continue
        new_type = tensor_type(shape, element_type(r))
        if new_type != r.type:
            r.set_type(new_type)
            _retype_users(r, depth + 1)


def _keep_types(keep: Container[str], opset: int) -> Callable[[str], bool]:
    def kept(op_type: str) -> bool:
        try:
            return "onnx." + resolve(op_type, opset) in keep
        except (OnnxAdError, KeyError):
            return False
    return kept


# --------------------------------------------------------------------------- ONNX side
def expand_model(model: onnx.ModelProto, opset: int, kept: Callable[[str], bool],
                 prefix: str = "") -> onnx.ModelProto:
    """The model with function ops and lowered ops replaced by their bodies,
    constants folded and constant Ifs inlined, to a fixed point."""
    names = _Names(model, prefix)
    for _ in range(_MAX_ROUNDS):
        for vi in model.graph.output:  # the body's own inference decides
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
        model = _infer(model)
        r = _Round(model, opset, kept, names)
        nodes = r.nodes(list(model.graph.node))
        if not r.changed:
            return model
        graph = model.graph
        graph.ClearField("node")
        graph.node.extend(nodes)
        graph.ClearField("value_info")
    raise UnsupportedOp("expansion does not reach a fixed point")


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=_propagation_safe(model.graph))
    except Exception:
        return model


_HUGE_EXTENT = 10 ** 7


def _propagation_safe(graph: onnx.GraphProto) -> bool:
    """Whether ONNX's data propagation can run: it materializes every 1-D
    value it follows, Range's and ConstantOfShape's included (14 GB and 30 s
    for a [10^8] one), so not when a value's extent is huge (a causal
    Attention's mask Range over a key length of 10^12 was killed for memory,
    fuzz seed 189 case 937), nor over long 1-D values (as at import)."""
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = v.type.tensor_type
        if t.HasField("shape") and any(d.dim_value > _HUGE_EXTENT for d in t.shape.dim):
            return False
    return not long_vectors(graph)


class _Names:
    def __init__(self, model: onnx.ModelProto, prefix: str):
        self.prefix = prefix
        self.taken = {vi.name for vi in model.graph.input} | \
            {vi.name for vi in model.graph.output} | {n for node in model.graph.node
                                                      for n in list(node.output)}
        self.count = 0

    def fresh(self, base: str) -> str:
        while True:
            self.count += 1
            name = f"{self.prefix}{base}_{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                return name


class _Round:
    """One pass over the nodes: folds, inlines constant Ifs, expands."""

    def __init__(self, model: onnx.ModelProto, opset: int, kept, names: _Names):
        self.opset = opset
        self.kept = kept
        self.names = names
        self.changed = False
        g = model.graph
        self.types: dict[str, onnx.TypeProto] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.WhichOneof("value") is not None:
                self.types.setdefault(vi.name, vi.type)
        self.consts: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in g.initializer}

    # ---- queries lowerings use
    def elem(self, name: str) -> int | None:
        t = self.types.get(name)
        if t is None or t.WhichOneof("value") != "tensor_type":
            c = self.consts.get(name)
            return None if c is None else helper.np_dtype_to_tensor_dtype(c.dtype)
        return t.tensor_type.elem_type

    def shape(self, name: str) -> list[int | None] | None:
        if name in self.consts:
            return list(self.consts[name].shape)
        t = self.types.get(name)
        if t is None or t.WhichOneof("value") != "tensor_type" or \
                not t.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim]

    def static(self, name: str) -> list[int] | None:
        s = self.shape(name)
        return s if s is not None and None not in s else None

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    # ---- the walk
    def nodes(self, nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
        out = []
        for node in nodes:
            replaced = self.step(node)
            if replaced is None:
                out.append(node)
            else:
                self.changed = True
                out.extend(replaced)
        return out

    def step(self, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Constant":
            return self._constant(node)
        folded = self.fold(node)
        if folded is not None:
            return folded
        if node.op_type == "If" and node.input[0] in self.consts:
            return self.inline_if(node)
        if node.op_type in ("Scan", "Loop") and self.type_body_inputs(node):
            return [node]
        if self.expandable(node):
            return self.expand(node)
        return None

    def _constant(self, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        """Records the value; `value_int(s)`/`value_float(s)` become a `value`
        tensor (the rules read constant operands from `value`)."""
        value = _constant_value(node)
        if value is None:
            return None
        self.consts[node.output[0]] = value
        if [a.name for a in node.attribute] == ["value"]:
            return None
        return [helper.make_node("Constant", [], list(node.output), name=node.name,
                                 value=numpy_helper.from_array(value))]

    def fold(self, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        if node.op_type in _NONDETERMINISTIC or \
                any(a.type in (A.GRAPH, A.GRAPHS) for a in node.attribute):
            return None
        values = None
        if node.op_type in ("Shape", "Size") and self.static(node.input[0]) is not None:
            s = np.asarray(self.static(node.input[0]), dtype=np.int64)
            if node.op_type == "Size":
                values = [np.asarray(int(np.prod(s)), dtype=np.int64)]
            else:
                start = next((a.i for a in node.attribute if a.name == "start"), 0)
                end = next((a.i for a in node.attribute if a.name == "end"), None)
                values = [s[start:end]]
        elif all(not n or n in self.consts for n in node.input) and \
                not any(self.static(n) is not None and np.prod(self.static(n)) > _MAX_FOLD
                        for n in node.output if n) and \
                _made_size(node, self.consts) <= _MAX_FOLD:
            try:
                values = _evaluate(node, self.consts, self.opset)
            except Exception:
                return None
        if values is None:
            return None
        out = []
        for name, value in zip(node.output, values):
            if not name:
                continue
            value = np.asarray(value)
            elem = self.elem(name)
            if elem is not None and elem != TP.UNDEFINED:
                value = value.astype(helper.tensor_dtype_to_np_dtype(elem))
            if value.size > _MAX_FOLD:
                return None
            self.consts[name] = value
            out.append(helper.make_node("Constant", [], [name], name=node.name,
                                        value=numpy_helper.from_array(value)))
        return out

    def inline_if(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        cond = bool(np.asarray(self.consts[node.input[0]]).reshape(-1)[0])
        branch = next(a.g for a in node.attribute
                      if a.name == ("then_branch" if cond else "else_branch"))
        mapping: dict[str, str] = {}
        out = []
        for t in branch.initializer:
            mapping[t.name] = self.fresh(t.name)
            out.append(helper.make_node("Constant", [], [mapping[t.name]],
                                        value=numpy_helper.from_array(
                                            numpy_helper.to_array(t))))
        for inner in branch.node:
            for o in inner.output:
                if o:
                    mapping[o] = self.fresh(o)
        for inner in branch.node:
            out.append(_renamed(inner, mapping, node.name))
        for formal, actual in zip(branch.output, node.output):
            if actual:
                out.append(helper.make_node("Identity", [mapping.get(formal.name, formal.name)],
                                            [actual], name=f"{node.name}/{actual}"))
        return out

    def type_body_inputs(self, node: onnx.NodeProto) -> bool:
        """Types for a Scan/Loop body's untyped inputs, from the node's
        operands, and local copies of the outer constants it reads (function
        bodies leave inputs untyped and read axes from the outer scope; shape
        inference then cannot type the body or the node's results). True
        when the body changed."""
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if body is None:
            return False
        wanted: list[onnx.TypeProto | None] = []
        if node.op_type == "Loop":
            wanted = [helper.make_tensor_type_proto(TP.INT64, []),
                      helper.make_tensor_type_proto(TP.BOOL, [])]
            wanted += [self.types.get(n) for n in node.input[2:]]
        else:
            k = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
            states = list(node.input[:len(node.input) - k])
            scanned = list(node.input[len(node.input) - k:])
            axes = next((list(a.ints) for a in node.attribute if a.name == "scan_input_axes"),
                        [0] * k)
            wanted = [self.types.get(n) for n in states]
            for n, axis in zip(scanned, axes):
                t = self.types.get(n)
                dims = self.shape(n)
                if t is None or dims is None:
                    wanted.append(None)
                    continue
                dims = dims[:axis % len(dims)] + dims[axis % len(dims) + 1:]
                wanted.append(helper.make_tensor_type_proto(t.tensor_type.elem_type, dims))
        changed = False
        for vi, t in zip(body.input, wanted):
            if t is not None and vi.type.WhichOneof("value") is None:
                vi.type.CopyFrom(t)
                changed = True
        changed = self._localize_constants(body) or changed
        if changed:
            body.ClearField("value_info")  # inferred without these types/values
        return changed

    def _localize_constants(self, body: onnx.GraphProto) -> bool:
        """Outer constants a body reads (Unsqueeze axes, Reshape targets)
        get a copy inside it: shape inference reads values only locally."""
        local = {vi.name for vi in body.input} | {o for n in body.node for o in n.output}
        copies: dict[str, str] = {}
        for n in body.node:
            for i, name in enumerate(n.input):
                if name and name not in local and name in self.consts and \
                        self.consts[name].size <= 64:
                    if name not in copies:
                        copies[name] = self.fresh("local")
                    n.input[i] = copies[name]
        nodes = [helper.make_node("Constant", [], [copy],
                                  value=numpy_helper.from_array(self.consts[name]))
                 for name, copy in copies.items()]
        nodes += list(body.node)
        body.ClearField("node")
        body.node.extend(nodes)
        return bool(copies)

    def expandable(self, node: onnx.NodeProto) -> bool:
        t = node.op_type
        if t in _NO_EXPAND or self.kept(t):
            return False
        names = [n for n in list(node.input) + list(node.output) if n]
        if not any(self.elem(n) in _FLOATS for n in names):
            return False
        return t in LOWERINGS or _has_body(t, self.opset)

    def expand(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        label = f"node '{node.name}' ({node.op_type})"
        if node.op_type in LOWERINGS:
            nodes = LOWERINGS[node.op_type](node, self)
            return [_named(n, node.name, i) for i, n in enumerate(nodes)]
        schema = defs.get_schema(node.op_type, self.opset, "")
        generic = [v for v in schema.function_opset_versions if v <= self.opset]
        if generic:
            fn = _function(schema.get_function_with_opset_version(max(generic)))
        else:
            versions = [v for v in schema.context_dependent_function_opset_versions
                        if v <= self.opset]
            types = []
            for n in node.input:
                if not n:
                    types.append(onnx.TypeProto())
                    continue
                t = self.types.get(n)
                if t is None and n in self.consts:
                    c = self.consts[n]
                    t = helper.make_tensor_type_proto(
                        helper.np_dtype_to_tensor_dtype(c.dtype), list(c.shape))
                if t is None:
                    raise UnsupportedOp(f"{label}: the type of input '{n}' is unknown, "
                                        "its context-dependent body cannot be generated")
                types.append(t)
            try:
                fn = _function(schema.get_context_dependent_function_with_opset_version(
                    max(versions), node.SerializeToString(),
                    [t.SerializeToString() for t in types]))
            except Exception as e:
                raise UnsupportedOp(f"{label}: onnx cannot generate its body: {e}") from None
            if not fn.node:  # its builder declined (RMSNormalization's stash_type=0)
                raise UnsupportedOp(f"{label}: onnx generates no body for its attributes and "
                                    "operand types")
        return self.inline(node, fn, schema, bool(generic))

    def inline(self, node, fn: onnx.FunctionProto, schema, generic: bool):
        mapping: dict[str, str] = {}
        for i, formal in enumerate(fn.input):
            mapping[formal] = node.input[i] if i < len(node.input) else ""
        outputs = dict(zip(fn.output, node.output))
        for inner in fn.node:
            for o in inner.output:
                if o in outputs and outputs[o]:
                    mapping[o] = outputs[o]
                elif o:
                    mapping[o] = self.fresh(o)
        like = None
        if generic:  # a body written once for all types may spell constants in float32
            like = next((self.elem(n) for n in node.input if n and self.elem(n) in _FLOATS), None)
        out = []
        for inner in fn.node:
            copy = _renamed(inner, mapping, node.name,
                            lambda a: _resolve_attr(a, node, fn, schema))
            if like is not None and copy.op_type == "Constant":
                _retype_float_constant(copy, like)
            if node.op_type == "Attention" and copy.op_type == "Constant" and \
                    not _exposes_masked_scores(node):
                _finite_mask_constant(copy)
            out.append(copy)
        for formal, actual in outputs.items():
            if actual and formal in fn.input:
                out.append(helper.make_node("Identity", [mapping[formal]], [actual],
                                            name=f"{node.name}/{actual}"))
        return out


def _function(body) -> onnx.FunctionProto:
    if isinstance(body, bytes):
        fn = onnx.FunctionProto()
        fn.ParseFromString(body)
        return fn
    return body


def _named(node: onnx.NodeProto, parent: str, i: int) -> onnx.NodeProto:
    if not node.name:
        node.name = f"{parent}/{node.op_type}_{i}" if parent else ""
    return node


def _renamed(inner: onnx.NodeProto, mapping: dict[str, str], parent: str,
             resolve_attr=None) -> onnx.NodeProto:
    """A copy of a body node with names mapped, attribute references resolved,
    and subgraphs' captured names mapped too."""
    name = f"{parent}/{inner.name or inner.op_type}" if parent else inner.name
    copy = helper.make_node(inner.op_type, [mapping.get(n, n) for n in inner.input],
                            [mapping.get(n, n) for n in inner.output], name=name,
                            domain=inner.domain)
    for a in inner.attribute:
        if a.ref_attr_name:
            a = resolve_attr(a) if resolve_attr else a
            if a is None:
                continue
        if a.type == A.GRAPH:
            g = onnx.GraphProto()
            g.CopyFrom(a.g)
            _rename_graph(g, mapping, resolve_attr)
            a = helper.make_attribute(a.name, g)
        copy.attribute.append(a)
    return copy


def _rename_graph(g: onnx.GraphProto, mapping: dict[str, str], resolve_attr) -> None:
    local = {vi.name for vi in g.input} | {t.name for t in g.initializer} | \
        {o for n in g.node for o in n.output}
    outer = {k: v for k, v in mapping.items() if k not in local}
    for vi in g.output:
        vi.name = outer.get(vi.name, vi.name)
    nodes = [_renamed(n, outer, "", resolve_attr) for n in g.node]
    for n, old in zip(nodes, g.node):
        n.name = old.name
    g.ClearField("node")
    g.node.extend(nodes)


def _resolve_attr(a: onnx.AttributeProto, caller: onnx.NodeProto, fn: onnx.FunctionProto,
                  schema) -> onnx.AttributeProto | None:
    source = next((x for x in caller.attribute if x.name == a.ref_attr_name), None)
    if source is None:
        source = next((x for x in fn.attribute_proto if x.name == a.ref_attr_name), None)
    if source is None and a.ref_attr_name in schema.attributes:
        default = schema.attributes[a.ref_attr_name].default_value
        if default.type != A.UNDEFINED:
            source = default
    if source is None:
        return None
    copy = onnx.AttributeProto()
    copy.CopyFrom(source)
    copy.name = a.name
    return copy


def _retype_float_constant(node: onnx.NodeProto, elem: int) -> None:
    for a in node.attribute:
        if a.name == "value" and a.t.data_type in _FLOATS and a.t.data_type != elem:
            value = numpy_helper.to_array(a.t).astype(helper.tensor_dtype_to_np_dtype(elem))
            a.t.CopyFrom(numpy_helper.from_array(value))
        elif a.name in ("value_float", "value_floats") and elem != TP.FLOAT:
            value = np.asarray(a.f if a.name == "value_float" else list(a.floats),
                               dtype=helper.tensor_dtype_to_np_dtype(elem))
            node.ClearField("attribute")
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))
            return


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    if len(node.attribute) != 1:
        return None
    a = node.attribute[0]
    if a.name == "value":
        return numpy_helper.to_array(a.t)
    if a.name == "value_int":
        return np.asarray(a.i, dtype=np.int64)
    if a.name == "value_ints":
        return np.asarray(list(a.ints), dtype=np.int64)
    if a.name == "value_float":
        return np.asarray(a.f, dtype=np.float32)
    if a.name == "value_floats":
        return np.asarray(list(a.floats), dtype=np.float32)
    return None  # strings, sparse tensors: left as they are


def _exposes_masked_scores(node: onnx.NodeProto) -> bool:
    """Whether Attention's qk_matmul_output shows scores after masking (mode
    1, 2) or the softmax (3): there -inf and NaN rows are part of the output."""
    mode = next((a.i for a in node.attribute if a.name == "qk_matmul_output_mode"), 0)
    return len(node.output) > 3 and bool(node.output[3]) and mode != 0


def _finite_mask_constant(node: onnx.NodeProto) -> None:
    """Attention's body masks with -inf and then replaces the softmax of a
    fully masked row (NaN) by zeros with a Where. Reverse mode multiplies
    the zero cotangent by that NaN; the lowest finite value masks the same
    (exp underflows to exactly 0) and keeps the discarded row finite.
    Not done when qk_matmul_output exposes the masked scores."""
    for a in node.attribute:
        if a.name == "value" and a.t.data_type in _FLOATS:
            value = numpy_helper.to_array(a.t)
            if np.isneginf(value).any():
                value = np.where(np.isneginf(value), np.finfo(value.dtype).min, value)
                a.t.CopyFrom(numpy_helper.from_array(value.astype(value.dtype)))
        elif a.name == "value_float" and np.isneginf(a.f):
            a.f = float(np.finfo(np.float32).min)


def _made_size(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> float:
    """How many elements a node that makes a tensor of a size its operands'
    values give (ConstantOfShape, Range, Expand, Tile) would make; 0 for the
    others. Asked before folding: a causal Attention's mask over a key
    length of 10^12 filled memory until the process was killed (fuzz seed
    189 case 937)."""
    vals = [None if not n else np.asarray(consts[n]) for n in node.input]
    try:
        if node.op_type == "ConstantOfShape":
            return float(np.prod(vals[0].astype(np.float64)))
        if node.op_type == "Range":
            start, limit, delta = (float(v.reshape(-1)[0]) for v in vals[:3])
            return max(0.0, np.ceil((limit - start) / delta)) if delta else float("inf")
        if node.op_type == "Expand":
            shape = [float(d) for d in vals[1].reshape(-1)]
            x = [float(d) for d in vals[0].shape]
            n = max(len(x), len(shape))
            x, shape = [1.0] * (n - len(x)) + x, [1.0] * (n - len(shape)) + shape
            return float(np.prod([max(a, b) for a, b in zip(x, shape)]))
        if node.op_type == "Tile":
            return float(vals[0].size) * float(np.prod(vals[1].astype(np.float64)))
    except (IndexError, ValueError, TypeError, AttributeError):
        return float("inf")
    return 0.0


def _evaluate(node: onnx.NodeProto, consts: dict[str, np.ndarray], opset: int) -> list:
    from onnx.reference import ReferenceEvaluator
    inputs = [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(consts[n].dtype), list(consts[n].shape))
        for n in dict.fromkeys(node.input) if n]
    outputs = [helper.make_value_info(n, onnx.TypeProto()) for n in node.output if n]
    g = helper.make_graph([node], "fold", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    with np.errstate(all="ignore"):  # IEEE results (x / 0 = inf) are ONNX's, not faults
        results = ReferenceEvaluator(m).run(None, {n: consts[n] for n in node.input if n})
    it = iter(results)
    return [next(it) if n else None for n in node.output]


# --------------------------------------------------------------------------- the pass
@register_pass("onnx-ad-expand", "Replace ops defined by an ONNX function body or a "
               "lowering (LRN, GridSample, DeformConv, STFT, TensorScatter) by primitives")
def expand_pass(module: ir.Operation, options: dict[str, str]) -> None:
    from .passes import check_options, module_opset, target_function
    check_options(options, {"func", "all"})
    f = target_function(module, options.get("func"))
    keep = () if options.get("all", "false") in ("true", "1") else None
    with module.context, module.location:
        expand_function(f, module_opset(module), keep)


from . import lowering  # noqa: E402,F401  (fills LOWERINGS)
