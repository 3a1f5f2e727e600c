"""Exceptions raised by onnx-ad-mlir on bad input or unsupported content.

Every user-facing failure derives from `OnnxAdError`, so tools can report it
in one line and other code can catch the whole family.
"""


class OnnxAdError(Exception):
    """Base of every error onnx-ad-mlir raises on purpose."""


class ImportFailure(OnnxAdError):
    """An ONNX model cannot be imported (malformed, invalid or unsupported)."""


class ExportFailure(OnnxAdError):
    """An MLIR module cannot be expressed as a valid ONNX model."""


class UnsupportedOp(ImportFailure):
    """A node uses an op (or domain, or opset) outside what the dialect covers."""


class RuleError(OnnxAdError):
    """A derivative rule failed unexpectedly: a bug, reported with the node
    and op instead of a traceback (and never through MLIR's C++ frames,
    where a Python exception would abort the process)."""
