"""Differentiates ONNX's own node test cases and classifies each outcome.

Every case from `onnx.backend.test.case.node.collect_testcases()` whose model
has a floating-point input and output is differentiated in both modes and
checked by adcheck (central finite differences, <J v, w> = <v, J^T w>).
Float32 models are promoted to float64 first when ONNX Runtime runs them so.

    python test/python/node_case_sweep.py     # prints the table of outcomes
"""
from __future__ import annotations

import dataclasses
import re
import sys
from typing import Iterator

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import numpy_helper as nh
from onnx.backend.test.case.node import collect_testcases

from adcheck import NoReference, check_derivatives, session
from onnx_ad_mlir.errors import OnnxAdError, RuleError

FLOATS = {TP.FLOAT, TP.DOUBLE, TP.FLOAT16, TP.BFLOAT16}
NARROW = {TP.FLOAT, TP.FLOAT16}  # promoted to double when ORT runs the result


@dataclasses.dataclass
class Outcome:
    name: str
    op: str
    status: str  # "pass", "refused", "fail", or "no reference" (see classify)
    detail: str = ""


def float_cases() -> Iterator[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    for case in collect_testcases():
        if case.kind != "node" or not case.data_sets:
            continue
        m = case.model
        ins = [i for i in m.graph.input if i.type.HasField("tensor_type")]
        if len(ins) != len(m.graph.input) or not any(
                i.type.tensor_type.elem_type in FLOATS for i in ins) or not any(
                o.type.HasField("tensor_type") and o.type.tensor_type.elem_type in FLOATS
                for o in m.graph.output):
            continue
        feeds = {i.name: np.asarray(v) for i, v in zip(m.graph.input, case.data_sets[0][0])}
        yield case.name, m, feeds


# ONNX Runtime 1.32's float64 kernels that compute in float32 (Shrink(2 +
# 1e-9) = 2): float64 finite differences of them are noise, so their cases
# are judged in float32
FLOAT32_INSIDE = {"Shrink"}


def promoted(model: onnx.ModelProto, feeds: dict[str, np.ndarray], to: int = TP.DOUBLE
             ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with float32/float16 tensors as float64 (or `to`), when ONNX
    Runtime runs it: finite differences need the precision."""
    if to == TP.DOUBLE and any(n.op_type in FLOAT32_INSIDE for n in model.graph.node):
        return model, feeds
    narrow = NARROW if to == TP.DOUBLE else {TP.FLOAT16}
    np_to = {TP.DOUBLE: np.float64, TP.FLOAT: np.float32}[to]
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type in narrow:
            vi.type.tensor_type.elem_type = to
    for i, t in enumerate(g.initializer):
        if t.data_type in narrow:
            g.initializer[i].CopyFrom(nh.from_array(nh.to_array(t).astype(np_to), t.name))
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
                 onnx.defs.onnx_opset_version())
    for n in g.node:
        # data types of internal computation too (Attention's softmax and
        # GroupNormalization's statistics in float32, stash_type's default,
        # would leave the promoted model float32-accurate)
        if to == TP.DOUBLE and n.domain in ("", "ai.onnx") and \
                "stash_type" in onnx.defs.get_schema(n.op_type, opset).attributes and \
                not any(a.name == "stash_type" for a in n.attribute):
            n.attribute.append(onnx.helper.make_attribute("stash_type", TP.FLOAT))
        for a in n.attribute:
            if a.name in ("to", "softmax_precision", "stash_type") and a.i in narrow:
                a.i = to
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in narrow:
                a.t.CopyFrom(nh.from_array(nh.to_array(a.t).astype(np_to), a.t.name))
    f = {k: v.astype(np_to) if v.dtype in (np.float32, np.float16) else v
         for k, v in feeds.items()}
    try:
        onnx.checker.check_model(m, full_check=True)
        session(m).run(None, f)
    except Exception:
        return model, feeds
    return m, f


RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
          "Bernoulli", "Multinomial", "Dropout"}


def no_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], inputs: list[str]) -> str:
    """Why finite differences cannot judge this case, or '' when they can:
    ONNX Runtime cannot run the primal, the outputs are random, or a small
    perturbation of the inputs changes the output shapes."""
    if any(n.op_type in RANDOM for n in model.graph.node):
        return "random outputs"
    try:
        s = session(model)
        base = s.run(None, feeds)
        nudged = s.run(None, {**feeds, **{x: _nudged(feeds[x]) for x in inputs}})
    except Exception as e:
        return f"ONNX Runtime cannot run the primal: {_short(str(e))[:80]}"
    if [a.shape for a in base] != [b.shape for b in nudged]:
        return "output shapes depend on the input values"
    return ""


def _nudged(v: np.ndarray) -> np.ndarray:
    return np.asarray(v * (1 + 1e-3) + 1e-3, dtype=v.dtype)  # (0-d stays an array)


def _unperturbable(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                   inputs: list[str]) -> list[str]:
    """The inputs that, nudged alone, stop ONNX Runtime running the model or
    change its output shapes (Resize's scales: ONNX Runtime resizes the
    batch and channel axes by exactly 1 only) while it runs the model as
    given; finite differences cannot judge derivatives with respect to them."""
    try:
        s = session(model)
        base = [a.shape for a in s.run(None, feeds)]
    except Exception:
        return []
    found = []
    for x in inputs:
        try:
            if [a.shape for a in s.run(None, {**feeds, x: _nudged(feeds[x])})] != base:
                found.append(x)
        except Exception:
            found.append(x)
    return found


def classify(name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray],
             produced: list[onnx.ModelProto] | None = None) -> Outcome:
    op = model.graph.node[0].op_type if model.graph.node else "?"
    model, feeds = promoted(model, feeds)
    float_inputs = [i.name for i in model.graph.input
                    if i.type.tensor_type.elem_type in FLOATS and feeds[i.name].size > 0]
    refused = ""  # inputs left out (refused by design, or not judged) and why
    while True:
        reference = None
        if any(i.type.tensor_type.elem_type == TP.FLOAT16 for i in model.graph.input):
            # ONNX Runtime cannot run it in float64: float16 finite differences
            # cannot resolve small changes, so take them from a float32 copy.
            wide, _ = promoted(model, feeds, TP.FLOAT)
            reference = None if wide is model else wide
        if not float_inputs:
            return Outcome(name, op, "no reference", "no non-empty floating-point input")
        why = no_reference(model, feeds, float_inputs)
        unjudged = _unperturbable(model, feeds, float_inputs) if why else []
        if why and 0 < len(unjudged) < len(float_inputs):
            float_inputs = [x for x in float_inputs if x not in unjudged]
            model, feeds = _constant(model, feeds, unjudged)
            refused += f"; w.r.t. {', '.join(unjudged)} not judged: {why}"
            continue
        if why:
            return Outcome(name, op, "no reference", why + refused)
        try:
            check_derivatives(model, feeds, inputs=float_inputs, k=2, produced=produced,
                              reference=reference)
            return Outcome(name, op, "pass", refused.lstrip("; "))
        except NoReference as e:
            return Outcome(name, op, "no reference", str(e) + refused)
        except RuleError as e:  # a rule crashed: a bug, not a refusal
            return Outcome(name, op, "fail", _short(str(e)))
        except OnnxAdError as e:
            dropped = _refused_operand(model, str(e), float_inputs)
            if dropped is None:
                return Outcome(name, op, "refused", _short(str(e)) + refused)
            float_inputs.remove(dropped)
            model, feeds = _constant(model, feeds, [dropped])
            refused += f"; w.r.t. '{dropped}' refused: {_short(str(e))}"
        except AssertionError as e:
            return Outcome(name, op, "fail", _short(str(e)))
        except Exception as e:  # ORT or checker rejecting a derivative model is a failure
            return Outcome(name, op, "fail", f"{type(e).__name__}: {_short(str(e))}")


def _constant(model: onnx.ModelProto, feeds: dict[str, np.ndarray], names: list[str]
              ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with the inputs `names` as initializers of their fed values:
    what a model whose derivative with respect to them is not asked holds
    (Resize's scales are constants in real models)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    kept = [i for i in m.graph.input if i.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(kept)
    m.graph.initializer.extend(nh.from_array(feeds[n], n) for n in names)
    return m, {k: v for k, v in feeds.items() if k not in names}


def _refused_operand(model: onnx.ModelProto, error: str, inputs: list[str]) -> str | None:
    """The input a refusal names as the single node's operand (Resize's
    scales or roi, which place the samples) when the model has others to
    check the rule with; None otherwise."""
    found = re.search(r"with respect to its operand (\d+)", error)
    if not found or len(model.graph.node) != 1 or len(inputs) < 2:
        return None
    node_inputs = list(model.graph.node[0].input)
    k = int(found.group(1))
    return node_inputs[k] if k < len(node_inputs) and node_inputs[k] in inputs else None


def _short(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text[:200]


def sweep(produced: list[onnx.ModelProto] | None = None) -> list[Outcome]:
    return [classify(*case, produced=produced) for case in float_cases()]


def report(outcomes: list[Outcome]) -> str:
    by = {s: [o for o in outcomes if o.status == s]
          for s in ("pass", "refused", "fail", "no reference")}
    lines = [f"{status:12s} {o.name} [{o.op}]: {o.detail}"
             for status in ("fail", "refused", "no reference") for o in by[status]]
    partial = sum(bool(o.detail) for o in by["pass"])
    lines.append(f"{len(by['pass'])} passed ({partial} w.r.t. some inputs only: the others "
                 "refused by design or not judged by differences), "
                 f"{len(by['fail'])} failed, {len(by['refused'])} refused, "
                 f"{len(by['no reference'])} without a finite-difference reference, "
                 f"of {len(outcomes)} floating-point node cases")
    return "\n".join(lines)


def main() -> int:
    outcomes = sweep()
    print(report(outcomes))
    return 0 if not any(o.status == "fail" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
