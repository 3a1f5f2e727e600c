"""Command-line tools: onnx-ad-opt, onnx-ad-translate, onnx-ad-mlir."""
