"""Automatic differentiation passes and derivative rules over the onnx dialect.

Importing this package registers the rules and the passes
(`onnx-ad-forward`, `onnx-ad-reverse`).
"""
from . import passes  # noqa: F401
from . import expand  # noqa: F401  (onnx-ad-expand)
from .modes import forward, reverse

__all__ = ["forward", "reverse"]
