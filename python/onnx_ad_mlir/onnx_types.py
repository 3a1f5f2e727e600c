"""ONNX element and value types <-> MLIR types (DESIGN.md, "Element types").

Unknown dimensions are `?`; a symbolic dimension (`dim_param`) is also `?` in
the MLIR type, its name travels beside it (see `onnx.dim_params` in DESIGN.md).
"""
from __future__ import annotations

import onnx
from mlir import ir

from .errors import ExportFailure, ImportFailure

_T = onnx.TensorProto
# ONNX element type -> MLIR type spelling; parsed once per context.
ELEMENT_SPELLING: dict[int, str] = {
    _T.FLOAT: "f32", _T.DOUBLE: "f64", _T.FLOAT16: "f16", _T.BFLOAT16: "bf16",
    _T.BOOL: "i1", _T.INT8: "i8", _T.INT16: "i16", _T.INT32: "i32",
    _T.INT64: "i64", _T.UINT8: "ui8", _T.UINT16: "ui16", _T.UINT32: "ui32",
    _T.UINT64: "ui64", _T.INT4: "i4", _T.UINT4: "ui4", _T.INT2: "i2",
    _T.UINT2: "ui2", _T.COMPLEX64: "complex<f32>", _T.COMPLEX128: "complex<f64>",
    _T.STRING: "!onnx.String", _T.FLOAT8E4M3FN: "f8E4M3FN",
    _T.FLOAT8E4M3FNUZ: "f8E4M3FNUZ", _T.FLOAT8E5M2: "f8E5M2",
    _T.FLOAT8E5M2FNUZ: "f8E5M2FNUZ", _T.FLOAT8E8M0: "f8E8M0FNU",
    _T.FLOAT4E2M1: "f4E2M1FN", _T.FLOAT6E2M3: "f6E2M3FN", _T.FLOAT6E3M2: "f6E3M2FN",
}
_SPELLING_TO_ELEMENT = {v: k for k, v in ELEMENT_SPELLING.items()}


class TypeConverter:
    """Converts types in one context, caching the MLIR objects: the same few
    types recur on thousands of values, and parsing one costs microseconds."""

    def __init__(self, context: ir.Context):
        self.context = context
        self._elements: dict[int, ir.Type] = {}
        self._tensors: dict[tuple, ir.Type] = {}
        self._protos: dict[bytes, tuple[ir.Type, list[str] | None]] = {}
        self._loc = ir.Location.unknown(context)

    def element(self, elem_type: int) -> ir.Type:
        cached = self._elements.get(elem_type)
        if cached is None:
            spelling = ELEMENT_SPELLING.get(elem_type)
            if spelling is None:
                raise ImportFailure(f"unsupported tensor element type {elem_type} "
                                    f"({_elem_name(elem_type)})")
            cached = self._elements[elem_type] = ir.Type.parse(spelling, self.context)
        return cached

    def tensor(self, elem_type: int, dims: tuple[int, ...] | None) -> ir.Type:
        """A ranked tensor (dims, -1 for unknown) or, for dims None, unranked."""
        key = (elem_type, dims)
        cached = self._tensors.get(key)
        if cached is None:
            element = self.element(elem_type)
            if dims is None:
                cached = ir.UnrankedTensorType.get(element, loc=self._loc)
            else:
                shape = [ir.ShapedType.get_dynamic_size() if d < 0 else d for d in dims]
                cached = ir.RankedTensorType.get(shape, element, loc=self._loc)
            self._tensors[key] = cached
        return cached

    def from_type_proto(self, tp: onnx.TypeProto, name: str
                        ) -> tuple[ir.Type | None, list[str] | None]:
        """The MLIR type of `tp` (None for an empty TypeProto) and its
        dim_param names (None when it has none); `name` is the value's name,
        for error messages."""
        key = tp.SerializeToString()  # cheaper than walking the proto in Python
        cached = self._protos.get(key)
        if cached is None:
            cached = (None, None) if not key else self._convert(tp, f"value '{name}'")
            self._protos[key] = cached
        return cached

    def from_type_bytes(self, key: bytes, name: str) -> tuple[ir.Type | None, list[str] | None]:
        """from_type_proto of a serialized TypeProto."""
        cached = self._protos.get(key)
        if cached is None:
            cached = self.from_type_proto(onnx.TypeProto.FromString(key), name)
        return cached

    def _convert(self, tp: onnx.TypeProto, what: str) -> tuple[ir.Type, list[str] | None]:
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            tt = tp.tensor_type
            if not tt.elem_type:
                raise ImportFailure(f"{what}: tensor type without element type")
            if not tt.HasField("shape"):
                return self.tensor(tt.elem_type, None), None
            dims, params, symbolic = [], [], False
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value >= 0:
                    dims.append(d.dim_value)
                    params.append("")
                else:
                    dims.append(-1)
                    params.append(d.dim_param)
                    symbolic = symbolic or bool(d.dim_param)
            return self.tensor(tt.elem_type, tuple(dims)), (params if symbolic else None)
        if kind == "sequence_type":
            # Element shapes are dropped: the dialect compares loop-carried
            # sequence types exactly, and elements of one sequence vary anyway.
            inner, _ = self._convert(_shapeless(tp.sequence_type.elem_type), what)
            return ir.Type.parse(f"!onnx.Seq<{inner}>", self.context), None
        if kind == "optional_type":
            inner, _ = self._convert(tp.optional_type.elem_type, what)
            return ir.Type.parse(f"!onnx.Opt<{inner}>", self.context), None
        raise ImportFailure(f"{what}: unsupported value type {kind or 'missing'}")


def _shapeless(tp: onnx.TypeProto) -> onnx.TypeProto:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return tp
    bare = onnx.TypeProto()
    bare.tensor_type.elem_type = tp.tensor_type.elem_type
    return bare


def _elem_name(elem_type: int) -> str:
    try:
        return _T.DataType.Name(elem_type)
    except ValueError:
        return "unknown"


_SIGNLESS = {1: _T.BOOL, 2: _T.INT2, 4: _T.INT4, 8: _T.INT8, 16: _T.INT16, 32: _T.INT32,
             64: _T.INT64}
_UNSIGNED = {2: _T.UINT2, 4: _T.UINT4, 8: _T.UINT8, 16: _T.UINT16, 32: _T.UINT32,
             64: _T.UINT64}


def element_of(t: ir.Type) -> int:
    """The ONNX element type of an MLIR element type."""
    # Common types by class (printing a type costs far more).
    if isinstance(t, ir.F32Type):
        return _T.FLOAT
    if isinstance(t, ir.IntegerType):
        table = _SIGNLESS if t.is_signless else _UNSIGNED if t.is_unsigned else {}
        if t.width in table:
            return table[t.width]
    elem = _SPELLING_TO_ELEMENT.get(str(t))
    if elem is None:
        raise ExportFailure(f"element type {t} has no ONNX equivalent")
    return elem


def fill_type_proto(tp: onnx.TypeProto, t: ir.Type, dim_params: list[str] | None = None) -> None:
    """Writes the ONNX type of MLIR value type `t` into `tp`; `dim_params`
    names its `?` dims."""
    if isinstance(t, ir.RankedTensorType):
        tt = tp.tensor_type
        tt.elem_type = element_of(t.element_type)
        shape = tt.shape
        shape.SetInParent()  # rank 0 must still carry an (empty) shape
        for i, size in enumerate(t.shape):
            dim = shape.dim.add()
            if not ir.ShapedType.is_dynamic_size(size):
                dim.dim_value = size
            elif dim_params and i < len(dim_params) and dim_params[i]:
                dim.dim_param = dim_params[i]
        return
    if isinstance(t, ir.UnrankedTensorType):
        tp.tensor_type.elem_type = element_of(t.element_type)
        return
    spelling = str(t)
    for prefix, field in (("!onnx.Seq<", "sequence_type"), ("!onnx.Opt<", "optional_type")):
        if spelling.startswith(prefix):
            inner = ir.Type.parse(spelling[len(prefix):-1], t.context)
            fill_type_proto(getattr(tp, field).elem_type, inner)
            return
    raise ExportFailure(f"type {t} has no ONNX equivalent")
