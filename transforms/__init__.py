"""Automatic differentiation passes and derivative rules over the onnx dialect."""
