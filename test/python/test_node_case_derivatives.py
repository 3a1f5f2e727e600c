"""ONNX's node test cases, differentiated in both modes (issue 4's sweep),
and closure of the rule table over everything the derivatives contain."""
from __future__ import annotations

import onnx

from node_case_sweep import report, sweep
from onnx_ad_mlir import _op_table
from onnx_ad_mlir.transforms.linearize import REGION_RULES
from onnx_ad_mlir.transforms.registry import JVP, mlir_names

# Ops a derivative model may contain without a JVP rule of their own: they
# produce no floating-point value a tangent could flow through.
STRUCTURAL = {"Constant", "Shape", "Size", "NonZero", "ConstantOfShape"}


def op_types(graph: onnx.GraphProto) -> set[str]:
    """Default-domain op types of a graph and its subgraphs."""
    found = set()
    for n in graph.node:
        if n.domain in ("", "ai.onnx"):
            found.add(n.op_type)
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                found |= op_types(g)
    return found


def test_node_cases_differentiate(capsys):
    produced: list[onnx.ModelProto] = []
    outcomes = sweep(produced)
    with capsys.disabled():
        print("\n" + report(outcomes))
    failures = [o for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(f"{o.name} [{o.op}]: {o.detail}" for o in failures)
    assert sum(o.status == "pass" for o in outcomes) > 0

    # Closure: every op in every derivative model has a JVP rule (or a region
    # rule: If/Loop/Scan, RNN/GRU/LSTM), so the derivative models can be
    # differentiated again.
    emitted = {t for m in produced for t in op_types(m.graph)}
    missing = sorted(t for t in emitted - STRUCTURAL
                     if t in _op_table.VERSIONS and
                     not any(n in JVP or n in REGION_RULES for n in mlir_names(t)))
    assert not missing, f"ops emitted by derivative rules without rules of their own: {missing}"
