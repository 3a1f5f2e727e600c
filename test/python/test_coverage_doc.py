"""docs/COVERAGE.md is what docs/gen_coverage.py generates from the rule tables."""
from __future__ import annotations

import importlib.util
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_coverage_table_is_current():
    spec = importlib.util.spec_from_file_location("gen_coverage",
                                                  os.path.join(ROOT, "docs", "gen_coverage.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with open(gen.PATH) as f:
        assert f.read() == gen.generate(), "run: python docs/gen_coverage.py"
    assert "| Conv | rule |" in gen.generate()


def test_second_rule_for_an_op_is_refused():
    """One rule per op: a second registration would win or lose by import order."""
    import pytest
    from onnx_ad_mlir.transforms.registry import JVP, jvp, zero_derivative
    before = JVP["onnx.Tanh"]
    with pytest.raises(ValueError, match="two rules for onnx.Tanh"):
        jvp("Tanh")(lambda b, op, tangents: [None])
    with pytest.raises(ValueError, match="two rules for onnx.Det"):
        zero_derivative("Det")
    assert JVP["onnx.Tanh"] is before
