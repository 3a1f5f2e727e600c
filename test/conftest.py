"""Shared pytest fixtures.  Importing onnx_ad_mlir registers the onnx dialect
in every new MLIR context."""
from __future__ import annotations

import pytest
from mlir import ir

import onnx_ad_mlir  # noqa: F401


@pytest.fixture
def ctx() -> ir.Context:
    """A fresh context with the onnx dialect, entered for the test."""
    with ir.Context() as context, ir.Location.unknown():
        yield context
