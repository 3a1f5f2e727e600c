"""onnx-ad-mlir: automatic differentiation of ONNX models as an MLIR pipeline.

Importing the package registers the onnx dialect in every new
`mlir.ir.Context`; `register_dialect(ctx)` registers it into a given one.
"""
from ._dialect import register_dialect

__all__ = ["register_dialect"]
