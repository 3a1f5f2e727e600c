"""ONNX TensorProto <-> MLIR ElementsAttr.

Small tensors of numpy-native element types become DenseElementsAttr, so
folders and patterns can read them.  Large ones, and element types numpy and
the MLIR bindings cannot exchange as buffers (bf16, float8/6/4, int4/2,
complex), become DenseResourceElementsAttr blobs that wrap the numpy buffer
without copying it.  Sub-byte types are stored one element per byte.

The bindings cannot read a blob back, so every blob made here is remembered
by its resource name (weakly: MLIR owns the buffer for the blob's lifetime).
Blobs that came from parsed MLIR text are read from the module's printed
`dialect_resources` section instead (`ResourceReader`).
"""
from __future__ import annotations

import itertools
import os
import re
import sys
import weakref

import numpy as np
import onnx
from mlir import ir
from onnx import helper, numpy_helper

from .errors import ExportFailure, ImportFailure
from .onnx_types import TypeConverter, element_of

# Above this many bytes a tensor becomes a resource blob: printing, parsing and
# uniquing dense attributes gets expensive, and folders rarely want big data.
DENSE_LIMIT_BYTES = 1024
# Element types DenseElementsAttr can hand back as a numpy buffer.
_BUFFER_ELEMENTS = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.INT16,
    onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
}
_BLOBS: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()
_BLOB_IDS = itertools.count()
_RESOURCE_NAME = re.compile(r"dense_resource<([^>]+)>")
_NON_IDENT = re.compile(r"[^A-Za-z0-9_]")
_LITTLE_ENDIAN = sys.byteorder == "little"


def tensor_to_attr(tensor: onnx.TensorProto, types: TypeConverter, base_dir: str = "") -> ir.Attribute:
    """The ElementsAttr holding `tensor`'s data (type = its MLIR tensor type)."""
    return typed_tensor_attr(tensor, types, base_dir)[0]


def typed_tensor_attr(tensor: onnx.TensorProto, types: TypeConverter, base_dir: str = ""
                      ) -> tuple[ir.Attribute, ir.Type]:
    """tensor_to_attr's attribute and its type (known here: asking the
    attribute costs a bindings call)."""
    elem = tensor.data_type
    dims = tuple(tensor.dims[:])  # a slice: cheaper than iterating the field
    ttype = types.tensor(elem, dims)
    if elem == onnx.TensorProto.STRING:
        return _string_attr(tensor, ttype, types.context), ttype
    array = None
    if elem in _BUFFER_ELEMENTS and _LITTLE_ENDIAN:  # ONNX stores little-endian
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            array = _external_array(tensor, base_dir)
        else:
            raw = tensor.raw_data  # each read copies the bytes
            if raw and len(raw) <= DENSE_LIMIT_BYTES and elem != onnx.TensorProto.BOOL \
                    and len(raw) == _count(dims) * _np_dtype(elem).itemsize:
                # the common small constant: its bytes are the attribute's, as
                # they are, without a numpy array in between
                return ir.DenseElementsAttr.get(raw, type=types.element(elem), shape=list(dims),
                                                context=types.context), ttype
            array = _raw_array(tensor, raw, dims)
    if array is None:
        try:
            array = numpy_helper.to_array(tensor, base_dir)
        except Exception as e:  # onnx raises many kinds on malformed data
            raise ImportFailure(f"tensor '{tensor.name}': unreadable data ({e})") from e
        array = np.ascontiguousarray(array)
    if elem in _BUFFER_ELEMENTS and array.nbytes <= DENSE_LIMIT_BYTES:
        element = types.element(elem)  # cached, unlike ttype.element_type
        if elem == onnx.TensorProto.BOOL:
            packed = np.packbits(array.reshape(-1), bitorder="little")
            return ir.DenseElementsAttr.get(packed, type=element, shape=list(dims),
                                            context=types.context), ttype
        return ir.DenseElementsAttr.get(array, type=element, shape=list(dims),
                                        context=types.context), ttype
    return _blob_attr(array, tensor.name, ttype, types.context), ttype


def _raw_array(tensor: onnx.TensorProto, raw: bytes, dims: tuple[int, ...]
               ) -> np.ndarray | None:
    """The data of a tensor stored as little-endian `raw` bytes (its
    raw_data), without numpy_helper's generality (the common case, and worth
    the speed)."""
    if not raw:
        return None
    array = np.frombuffer(raw, dtype=_np_dtype(tensor.data_type))
    if array.size != _count(dims):
        raise ImportFailure(f"tensor '{tensor.name}': {array.size} elements of raw data for "
                            f"shape {list(dims)}")
    return array.reshape(dims)


def _count(dims: tuple[int, ...]) -> int:
    count = 1
    for d in dims:
        count *= d
    return count


def _np_dtype(elem: int) -> np.dtype:
    dtype = _NP_DTYPES.get(elem)
    if dtype is None:
        dtype = _NP_DTYPES[elem] = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    return dtype


_NP_DTYPES: dict[int, np.dtype] = {}


def _external_array(tensor: onnx.TensorProto, base_dir: str) -> np.ndarray:
    """External data memory-mapped, not read: a big model's weights reach
    MLIR blobs without a copy and are paged in only when used."""
    info = {e.key: e.value for e in tensor.external_data}
    root = os.path.abspath(base_dir or ".")
    path = os.path.normpath(os.path.join(root, info.get("location", "")))
    if not path.startswith(root + os.sep):
        raise ImportFailure(f"tensor '{tensor.name}': external data location "
                            f"'{info.get('location')}' is outside the model's folder")
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    shape = tuple(tensor.dims)
    count = int(np.prod(shape, dtype=np.int64))
    offset = int(info.get("offset", 0))
    size = count * np.dtype(dtype).itemsize
    if "length" in info and int(info["length"]) != size:
        raise ImportFailure(f"tensor '{tensor.name}': external data length {info['length']} "
                            f"does not fit shape {list(shape)}")
    try:
        if offset + size > os.path.getsize(path):
            raise ImportFailure(f"tensor '{tensor.name}': external data file "
                                f"'{info.get('location')}' is too short")
        if count == 0:
            return np.zeros(shape, dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
    except OSError as e:
        raise ImportFailure(f"tensor '{tensor.name}': cannot read external data: {e}") from e


def _blob_attr(array: np.ndarray, hint: str, ttype: ir.Type, context: ir.Context) -> ir.Attribute:
    # A process-unique name: MLIR would otherwise rename on collision and the
    # registry key would no longer match.
    name = f"{_NON_IDENT.sub('_', hint)[:40]}_{next(_BLOB_IDS)}"
    raw = array.reshape(-1).view(np.uint8)
    _BLOBS[name] = raw
    return ir.DenseResourceElementsAttr.get_from_buffer(
        raw, name, ttype, alignment=max(1, array.dtype.itemsize), context=context)


def _string_attr(tensor: onnx.TensorProto, ttype: ir.Type, context: ir.Context) -> ir.Attribute:
    values = list(tensor.string_data)
    if len(values) != int(np.prod(tensor.dims, dtype=np.int64)):
        raise ImportFailure(f"tensor '{tensor.name}': {len(values)} strings for shape "
                            f"{list(tensor.dims)}")
    literal = _nest([_escape(v) for v in values], list(tensor.dims))
    return ir.Attribute.parse(f"dense<{literal}> : {ttype}", context)


def _escape(value: bytes) -> str:
    # MLIR string literals: printable ASCII as is, everything else as \XX.
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}"
                         for b in value) + '"'


def _nest(flat: list[str], dims: list[int]) -> str:
    if not dims:
        return flat[0]
    if len(dims) == 1:
        return "[" + ", ".join(flat) + "]"
    step = len(flat) // dims[0] if dims[0] else 0
    return "[" + ", ".join(_nest(flat[i * step:(i + 1) * step], dims[1:])
                           for i in range(dims[0])) + "]"


class ResourceReader:
    """Reads ElementsAttrs back as numpy arrays for one module."""

    def __init__(self, module: ir.Module):
        self._module = module
        self._printed: dict[str, bytes] | None = None
        # Tensor type -> (ONNX element type, shape, numpy dtype): the same
        # few types recur on many constants, and each query costs.
        self._types: dict[ir.Type, tuple[int, list[int], np.dtype]] = {}

    def array(self, attr: ir.Attribute) -> np.ndarray:
        return self.array_and_element(attr)[0]

    def array_and_element(self, attr: ir.Attribute) -> tuple[np.ndarray, int]:
        """The data of `attr` and its ONNX element type."""
        elem, shape, dtype = self._type_info(attr.type)
        return self._array(attr, elem, shape, dtype), elem

    def raw_and_element(self, attr: ir.Attribute) -> tuple[bytes, list[int], int] | None:
        """The common constant's data as TensorProto.raw_data holds it
        (little-endian bytes), its shape and ONNX element type, without a
        numpy array in between; None unless `attr` is a dense, non-splat
        attribute of a numpy-native element type other than bool (packed
        differently) on a little-endian host."""
        if not _LITTLE_ENDIAN or not isinstance(attr, ir.DenseElementsAttr) or attr.is_splat:
            return None
        elem, shape, _ = self._type_info(attr.type)
        if elem not in _BUFFER_ELEMENTS or elem == onnx.TensorProto.BOOL:
            return None
        return bytes(attr), shape, elem  # (its buffer)

    def _type_info(self, ttype: ir.Type) -> tuple[int, list[int], np.dtype]:
        info = self._types.get(ttype)
        if info is None:
            elem = element_of(ttype.element_type)
            info = self._types[ttype] = (elem, list(ttype.shape),
                                         helper.tensor_dtype_to_np_dtype(elem))
        return info

    def _array(self, attr: ir.Attribute, elem: int, shape: list[int], dtype: np.dtype
               ) -> np.ndarray:
        # Attributes read back from ops are not always downcast by the
        # bindings (dense_resource never is): test the cheap cases first.
        dense = attr if isinstance(attr, ir.DenseElementsAttr) else None
        if dense is None and elem != onnx.TensorProto.STRING:
            if _cast(ir.DenseResourceElementsAttr, attr) is not None:
                return self._blob(attr).view(dtype).reshape(shape)
            dense = _cast(ir.DenseElementsAttr, attr)
        if elem == onnx.TensorProto.STRING:
            return _parse_strings(str(attr), shape)
        if dense is None:
            raise ExportFailure(f"constant of type {attr.type} is neither dense nor "
                                "dense_resource")
        if elem in _BUFFER_ELEMENTS:
            if dense.is_splat:
                return np.full(shape, _splat(dense, dtype), dtype=dtype)
            return np.array(dense).reshape(shape)
        fp = _cast(ir.DenseFPElementsAttr, dense)
        if fp is not None and (fp.is_splat or len(fp) <= _TEXT_ELEMENTS):
            return dense_floats(fp).astype(dtype)  # (exact: the values are dtype's)
        return _parse_hex(str(attr), dtype, shape)

    def _blob(self, attr: ir.Attribute) -> np.ndarray:
        name = _RESOURCE_NAME.search(str(attr)).group(1)
        raw = _BLOBS.get(name)
        if raw is not None:
            return raw
        if self._printed is None:
            self._printed = _printed_resources(self._module)
        data = self._printed.get(name)
        if data is None:
            raise ExportFailure(f"resource blob '{name}' has no data")
        return np.frombuffer(data, dtype=np.uint8)


_FLOAT_DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def imported_array(attr: ir.Attribute) -> np.ndarray | None:
    """A float constant's data for a rule to inspect: dense attributes, and
    the blobs this process imported (by name); None otherwise (a blob parsed
    from text: reading it means printing the module)."""
    dense = attr if isinstance(attr, ir.DenseElementsAttr) else _cast(ir.DenseElementsAttr, attr)
    if dense is not None:
        try:
            return np.asarray(dense)
        except Exception:  # noqa: BLE001 - an element type numpy cannot view
            return None
    if _cast(ir.DenseResourceElementsAttr, attr) is None:
        return None
    dtype = _FLOAT_DTYPES.get(str(ir.ShapedType(attr.type).element_type))
    raw = _BLOBS.get(_RESOURCE_NAME.search(str(attr)).group(1))
    return None if dtype is None or raw is None else raw.view(dtype)


def dense_floats(attr: ir.DenseFPElementsAttr) -> np.ndarray:
    """A dense float attribute's values as float64, whatever its element
    type: numpy has no buffer view of bf16, f8 ... (the bindings raise
    TypeError), whose values convert exactly one by one."""
    try:
        return np.asarray(attr, dtype=np.float64)
    except TypeError:
        shape = list(ir.ShapedType(attr.type).shape)
        if attr.is_splat:
            return np.full(shape, ir.FloatAttr(attr.get_splat_value()).value)
        return np.array([attr[i] for i in range(len(attr))], dtype=np.float64).reshape(shape)


def _cast(cls: type, attr: ir.Attribute) -> ir.Attribute | None:
    """`attr` as `cls`, or None; the cast tells an attribute's kind without
    printing it."""
    try:
        return cls(attr)
    except ValueError:
        return None


def _splat(attr: ir.Attribute, dtype: np.dtype) -> object:
    # A splat DenseElementsAttr exposes its one value as an attribute.
    value = attr.get_splat_value()
    if dtype == np.bool_:
        return bool(ir.BoolAttr(value).value) if isinstance(value, ir.BoolAttr) \
            else bool(ir.IntegerAttr(value).value)
    if np.issubdtype(dtype, np.floating):
        return ir.FloatAttr(value).value
    return ir.IntegerAttr(value).value


def _printed_resources(module: ir.Module) -> dict[str, bytes]:
    """Blob data from the module's printed `dialect_resources` section:
    `name: "0x<4-byte alignment><hex data>"`."""
    text = module.operation.get_asm(large_elements_limit=None)
    start = text.rfind("dialect_resources")
    blobs = {}
    if start >= 0:
        for name, hexdata in re.findall(r'(\S+?):\s*"0x([0-9A-Fa-f]*)"', text[start:]):
            blobs[name.strip('"')] = bytes.fromhex(hexdata)[4:]
    return blobs


# Up to this many elements, a constant of an element type numpy cannot view
# is read value by value (larger ones print as hex, read from the text).
_TEXT_ELEMENTS = 4096


def _parse_hex(text: str, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    # Element types without buffer access print as hex when large; small ones
    # need the bindings' textual form which is not exact for all types.
    match = re.match(r'dense<"0x([0-9A-Fa-f]*)">', text)
    if not match:
        raise ExportFailure(f"cannot read constant data of {text[:80]}: use a "
                            "dense_resource or a numpy-native element type")
    data = np.frombuffer(bytes.fromhex(match.group(1)), dtype=np.uint8)
    count = int(np.prod(shape, dtype=np.int64))
    if data.size == np.dtype(dtype).itemsize:  # splat
        data = np.tile(data, count)
    return data.view(dtype).reshape(shape)


_STRING_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _parse_strings(text: str, shape: list[int]) -> np.ndarray:
    body = text[: text.rfind(":")]
    values = [_unescape(s) for s in _STRING_LITERAL.findall(body)]
    count = int(np.prod(shape, dtype=np.int64))
    if len(values) == 1 and count != 1:  # splat
        values = values * count
    out = np.empty(count, dtype=object)
    out[:] = values
    return out.reshape(shape)


def _unescape(s: str) -> bytes:
    out = bytearray()
    i = 0
    while i < len(s):
        if s[i] == "\\":
            nxt = s[i + 1]
            if nxt in "\\\"":
                out.append(ord(nxt))
                i += 2
            elif nxt == "n":
                out.append(10)
                i += 2
            elif nxt == "t":
                out.append(9)
                i += 2
            else:
                out.append(int(s[i + 1:i + 3], 16))
                i += 3
        else:
            out.extend(s[i].encode())
            i += 1
    return bytes(out)


def array_to_tensor(array: np.ndarray, elem: int, name: str, into=None) -> onnx.TensorProto:
    """A TensorProto of ONNX element type `elem` (array's dtype must match),
    appended to the repeated field `into` when given (built in place there,
    which saves a copy)."""
    if elem in _BUFFER_ELEMENTS and _LITTLE_ENDIAN:  # raw bytes, no per-type logic
        make = onnx.TensorProto if into is None else into.add
        return make(name=name, data_type=elem, dims=array.shape, raw_data=array.tobytes())
    if elem == onnx.TensorProto.STRING:
        tensor = helper.make_tensor(name, elem, array.shape, array.reshape(-1).tolist())
    else:
        tensor = numpy_helper.from_array(array, name)
    if into is not None:
        into.append(tensor)
    return tensor
