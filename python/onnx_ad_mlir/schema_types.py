"""Result types that shape inference could not provide, from the op schema:
a type constraint with a single allowed type, or one shared with an input.
The shape is then unknown (unranked tensor)."""
from __future__ import annotations

import onnx
from mlir import ir

from .errors import ImportFailure
from .onnx_types import TypeConverter

_ELEMENT_NAMES = {  # ONNX type-string element names -> TensorProto types
    "float": onnx.TensorProto.FLOAT, "double": onnx.TensorProto.DOUBLE,
    "float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16,
    "bool": onnx.TensorProto.BOOL, "int8": onnx.TensorProto.INT8,
    "int16": onnx.TensorProto.INT16, "int32": onnx.TensorProto.INT32,
    "int64": onnx.TensorProto.INT64, "uint8": onnx.TensorProto.UINT8,
    "uint16": onnx.TensorProto.UINT16, "uint32": onnx.TensorProto.UINT32,
    "uint64": onnx.TensorProto.UINT64, "string": onnx.TensorProto.STRING,
}


def fallback_result_type(node: onnx.NodeProto, index: int, opset: int,
                         operands: list[ir.Value], types: TypeConverter, what: str) -> ir.Type:
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError as e:
        raise ImportFailure(f"{what}: no schema ({e})") from e
    formal = schema.outputs[min(index, len(schema.outputs) - 1)]
    type_str = formal.type_str
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    if type_str in allowed:
        if len(allowed[type_str]) == 1:
            return _parse(allowed[type_str][0], types, what)
        for i, formal_in in enumerate(schema.inputs):
            if formal_in.type_str == type_str and i < len(operands):
                t = operands[i].type
                if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
                    return ir.UnrankedTensorType.get(t.element_type)
                if not isinstance(t, ir.NoneType):
                    return t
    else:
        return _parse(type_str, types, what)
    raise ImportFailure(f"{what}: the type of output '{node.output[index]}' is unknown "
                        "(shape inference gave none and the schema does not fix it)")


def _parse(type_str: str, types: TypeConverter, what: str) -> ir.Type:
    if type_str.startswith("tensor(") and type_str[7:-1] in _ELEMENT_NAMES:
        return types.tensor(_ELEMENT_NAMES[type_str[7:-1]], None)
    if type_str.startswith("seq(") and type_str.endswith(")"):
        inner = _parse(type_str[4:-1], types, what)
        return ir.Type.parse(f"!onnx.Seq<{inner}>", types.context)
    raise ImportFailure(f"{what}: cannot derive a type from '{type_str}'")
