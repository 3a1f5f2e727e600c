"""Loads the onnx dialect library and registers it with the MLIR bindings.

The library shares the bindings' MLIR (libMLIRPythonCAPI.so), so the C API
handle it exports can be inserted into the bindings' global DialectRegistry:
every `mlir.ir.Context` created afterwards knows the dialect.
"""
from __future__ import annotations

import ctypes
import os
import sys

from mlir import ir
from mlir._mlir_libs import _mlir, get_dialect_registry



def _lib_dir() -> str:
    """The installed `_lib` folder: beside this file in a normal install, in
    site-packages when the Python sources are an editable checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    for root in [os.path.dirname(here)] + sys.path:
        candidate = os.path.join(root, "onnx_ad_mlir", "_lib")
        if os.path.exists(os.path.join(candidate, "libONNXAD.so")):
            return candidate
    return os.path.join(here, "_lib")


LIB_DIR = _lib_dir()
LIBRARY = os.path.join(LIB_DIR, "libONNXAD.so")
PLUGIN = os.path.join(LIB_DIR, "libONNXADPlugin.so")


class _Handle(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


def _capsule_pointer(obj: object, name: bytes) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(obj._CAPIPtr, name)


def _load() -> tuple[ctypes.CDLL, _Handle]:
    if not os.path.exists(LIBRARY):
        raise ImportError(f"onnx_ad_mlir: dialect library missing at {LIBRARY}; "
                          "reinstall the package (pip install .)")
    lib = ctypes.CDLL(LIBRARY, mode=ctypes.RTLD_GLOBAL)
    lib.mlirGetDialectHandle__onnx__.restype = _Handle
    return lib, lib.mlirGetDialectHandle__onnx__()


_LIB, _HANDLE = _load()
_LIB.mlirDialectHandleInsertDialect.argtypes = [_Handle, ctypes.c_void_p]
_LIB.mlirDialectHandleRegisterDialect.argtypes = [_Handle, ctypes.c_void_p]
_LIB.mlirDialectHandleLoadDialect.argtypes = [_Handle, ctypes.c_void_p]
_LIB.mlirDialectHandleLoadDialect.restype = ctypes.c_void_p


def _capsule_name(obj: object) -> bytes | None:
    capsule = getattr(obj, "_CAPIPtr", None)
    if capsule is None:
        return None
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    return get_name(capsule)


def new_context() -> ir.Context:
    """A Context that loads only the dialects our modules start with. A
    default one loads every registered dialect (~3.5 ms, a third of a small
    model's transform); others still load from the registry on demand."""
    return ir.Context(load_on_create_dialects=["func", "onnx"])


_CONTEXT = b"mlir.ir.Context._CAPIPtr"
_REGISTRY = b"mlir.ir.DialectRegistry._CAPIPtr"


def register_dialect(target: ir.Context | ir.DialectRegistry | None = None) -> None:
    """Registers the onnx dialect into a context, a registry, or (None) the
    bindings' global registry used by every new Context."""
    if target is None:
        target = get_dialect_registry()
    # Dispatch on the C API capsule, not the Python class: contexts made
    # through the C API (`Context._CAPICreate`) are instances of the bindings'
    # base class, not of the `mlir.ir.Context` subclass.
    name = _capsule_name(target)
    if name == _CONTEXT:
        # Loaded too, so that ops can be built before any parse loads it.
        ctx = _capsule_pointer(target, name)
        _LIB.mlirDialectHandleRegisterDialect(_HANDLE, ctx)
        _LIB.mlirDialectHandleLoadDialect(_HANDLE, ctx)
    elif name == _REGISTRY:
        _LIB.mlirDialectHandleInsertDialect(_HANDLE, _capsule_pointer(target, name))
    else:
        raise TypeError(f"register_dialect: expected mlir.ir.Context or "
                        f"DialectRegistry, got {type(target).__name__}")


register_dialect()
# `op.opview` finds the generated op classes under onnx_ad_mlir.dialects.
_mlir.globals.append_dialect_search_prefix("onnx_ad_mlir.dialects")
