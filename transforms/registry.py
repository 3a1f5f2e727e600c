"""The rule tables, keyed by MLIR op name (`onnx.Tanh`, `onnx.ReduceSumV11`).

JAX's contract keeps the table small: every differentiable op has a JVP rule,
and only the ops that JVP rules emit linearly in tangents need a transpose
rule. Forward mode applies the JVP rules; reverse mode applies them too
(linearization) and then transposes the linear ops it produced.

  JVP rule:        rule(b, op, tangents) -> tangents of op's results
                   (a tangent is None when it is symbolically zero)
  transpose rule:  rule(b, op, cotangents, linear) -> cotangent contributions
                   for op's operands (None where the operand is not linear)

Derivatives carry one leading direction axis (see builder.py).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from mlir import ir

from onnx_ad_mlir import _op_table

from .builder import Builder

Tangents = Sequence[Optional[ir.Value]]
JvpRule = Callable[[Builder, ir.Operation, Tangents], list]
TransposeRule = Callable[[Builder, ir.Operation, Tangents, Sequence[bool]], list]

JVP: dict[str, JvpRule] = {}
TRANSPOSE: dict[str, TransposeRule] = {}
ZERO: set[str] = set()  # MLIR names whose JVP rule is zero_derivative's


def mlir_names(op_type: str) -> list[str]:
    """Every MLIR op implementing an ONNX op type, all kept versions."""
    return ["onnx." + name for _, name in _op_table.VERSIONS[op_type]]


def _registrar(table: dict, op_types: tuple[str, ...]):
    def register(rule):
        for t in op_types:
            for name in mlir_names(t):
                # a second rule would win or lose by import order (Det was
                # listed as zero-derivative and had a rule)
                if name in table:
                    raise ValueError(f"two rules for {name}: {table[name].__module__}."
                                     f"{table[name].__qualname__} and {rule.__module__}."
                                     f"{rule.__qualname__}")
                table[name] = rule
        return rule
    return register


def jvp(*op_types: str):
    """Registers a JVP rule for every version of the given ONNX op types; the
    rule reads version differences (attribute vs input) through builder helpers."""
    return _registrar(JVP, op_types)


def transpose(*op_types: str):
    """Registers a transpose rule for every version of the given ONNX op types."""
    return _registrar(TRANSPOSE, op_types)



def zero_derivative(*op_types: str) -> None:
    """Ops whose results have no derivative (piecewise constant, integer or bool)."""
    def rule(b: Builder, op: ir.Operation, tangents: Tangents) -> list:
        return [None] * len(op.results)
    jvp(*op_types)(rule)
    ZERO.update(name for t in op_types for name in mlir_names(t))
