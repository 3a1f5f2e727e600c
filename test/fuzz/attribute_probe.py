"""Attribute-mutation probe over ONNX's own node test cases.

Each integer attribute (and each integer-list attribute's first entry) of
each floating-point node case is set to each of a few values; a mutant that
ONNX Runtime refuses to run (at load or on the case's inputs) is then given
to `forward` (and to `reverse` when `forward` refuses it). Printed, one JSON
line each: mutants we differentiate anyway ("ACCEPTED") and those that fail
inside a rule or with a non-OnnxAdError exception. Where ONNX Runtime's
refusal depends on the data (Scatter/GatherElements indices, ignore_index,
shape arithmetic read at run time) or on its kernel coverage (bfloat16,
float8), an ACCEPTED line is expected; the rest are bugs.

    python test/fuzz/attribute_probe.py [--values 7,-7,0] [--start 0] [--stop N]
        [--save DIR]

In-process (an abort would end the run: the fuzzer, run.py, isolates cases);
not part of the test suite. Its first run (session 24) found ~40 invalid
attribute kinds, all refused by name now.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from node_case_sweep import float_cases  # noqa: E402

from onnx_ad_mlir import forward, reverse  # noqa: E402
from onnx_ad_mlir.errors import OnnxAdError, RuleError  # noqa: E402

_INTS = (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)


def runs_in_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> bool:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), so,
                             providers=["CPUExecutionProvider"]).run(None, feeds)
        return True
    except Exception:  # noqa: BLE001 - any refusal counts
        return False


def mutants(model: onnx.ModelProto, values: list[int]):
    """(node, attribute, value, mutated model) for each applicable mutation."""
    for ni, node in enumerate(model.graph.node):
        for ai, a in enumerate(node.attribute):
            if a.type not in _INTS:
                continue
            for v in values:
                current = a.i if a.type == onnx.AttributeProto.INT else \
                    (a.ints[0] if a.ints else v)
                if current == v:
                    continue
                m = onnx.ModelProto()
                m.CopyFrom(model)
                target = m.graph.node[ni].attribute[ai]
                if a.type == onnx.AttributeProto.INT:
                    target.i = v
                else:
                    target.ints[0] = v
                yield node, a.name, v, m


def verdict(model: onnx.ModelProto) -> tuple[str, str] | None:
    """(mode, outcome) when a mode differentiates the model or fails
    inside; None when both refuse it by name."""
    for fn in (forward, reverse):
        try:
            fn(model, layout="onnx")
            return fn.__name__, "ACCEPTED"
        except RuleError as e:
            return fn.__name__, f"RULE-ERROR {str(e)[:200]}"
        except OnnxAdError:
            continue
        except Exception as e:  # noqa: BLE001 - reported
            return fn.__name__, f"EXCEPTION {type(e).__name__}: {str(e)[:200]}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--values", default="7,-7,0")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--stop", type=int, default=10**9)
    ap.add_argument("--save", default="", help="folder for the reported mutants")
    a = ap.parse_args()
    values = [int(v) for v in a.values.split(",")]
    ort.set_default_logger_severity(4)
    seen: set[tuple[str, str, int]] = set()  # one report per (op, attribute, value)
    for index, (name, model, feeds) in enumerate(float_cases()):
        if not a.start <= index < a.stop:
            continue
        for node, attr, v, m in mutants(model, values):
            key = (node.op_type, attr, v)
            if key in seen or runs_in_ort(m, feeds):
                continue
            found = verdict(m)
            if found is None:
                continue
            seen.add(key)
            if a.save:
                os.makedirs(a.save, exist_ok=True)
                onnx.save(m, os.path.join(a.save, f"{name}.{node.op_type}.{attr}.{v}.onnx"))
            print(json.dumps({"case": name, "op": node.op_type, "attribute": attr, "value": v,
                              "mode": found[0], "outcome": found[1]}), flush=True)


if __name__ == "__main__":
    main()
