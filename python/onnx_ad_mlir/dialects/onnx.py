"""`from onnx_ad_mlir.dialects import onnx`: one class per onnx op."""
from ._onnx_ops_gen import *  # noqa: F401,F403
