"""onnx-ad-mlir: automatic differentiation of ONNX models as an MLIR pipeline.

Importing the package registers the onnx dialect in every new
`mlir.ir.Context`; `register_dialect(ctx)` registers it into a given one.

    from onnx_ad_mlir import forward, reverse, family
    adjoint = reverse(onnx.load("f.onnx"))          # + adj_y -> + adj_x
"""
from ._dialect import register_dialect
from .api import family, forward, reverse, unroll
from .exporter import export_onnx
from .importer import import_onnx

__all__ = ["export_onnx", "family", "forward", "import_onnx", "register_dialect", "reverse",
           "unroll"]
