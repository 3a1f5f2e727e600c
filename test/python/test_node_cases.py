"""Every ONNX node test case (onnx.backend.test.case.node) round-trips:
import, verify, export, full_check, and ONNX Runtime gives the original's
outputs; where ORT cannot run the original, ONNX's reference evaluator
compares them instead."""
from __future__ import annotations

import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from roundtrip_helpers import assert_same_outputs, round_trip, run, session
from onnx_ad_mlir.errors import UnsupportedOp

# Cases outside the product, by reason. Anything else failing is a bug.
_OTHER_DOMAIN = "op of another domain than the default ONNX one (refused by design)"
EXPECTED_FAILURES: dict[str, str] = {
    **{name: _OTHER_DOMAIN + ": ai.onnx.preview.training" for name in (
        "test_adagrad", "test_adagrad_multiple", "test_adam", "test_adam_multiple",
        "test_momentum", "test_momentum_multiple", "test_nesterov_momentum")},
    **{name: _OTHER_DOMAIN + ": ai.onnx.ml" for name in (
        "test_ai_onnx_ml_array_feature_extractor", "test_ai_onnx_ml_binarizer",
        "test_ai_onnx_ml_label_encoder_string_int",
        "test_ai_onnx_ml_label_encoder_string_int_no_default",
        "test_ai_onnx_ml_label_encoder_tensor_mapping",
        "test_ai_onnx_ml_label_encoder_tensor_value_only_mapping",
        "test_ai_onnx_ml_tree_ensemble_set_membership",
        "test_ai_onnx_ml_tree_ensemble_single_tree")},
    **{name: _OTHER_DOMAIN + ": ai.onnx.preview (FlexAttention)" for name in (
        "test_flexattention", "test_flexattention_causal_mask",
        "test_flexattention_diff_head_sizes", "test_flexattention_double",
        "test_flexattention_fp16", "test_flexattention_gqa", "test_flexattention_prob_mod",
        "test_flexattention_relative_positional", "test_flexattention_scaled",
        "test_flexattention_score_mod", "test_flexattention_soft_cap")},
    "test_loop16_seq_none": "Loop carries optional(seq) into a seq result; the "
                            "dialect's Loop verifier requires identical types "
                            "(needs Opt<T>~T in areTypesCompatible, a dialect change)",
}

_RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
               "Bernoulli", "Multinomial"}


def _cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases
        return collect_testcases(None)


def _is_random(model: onnx.ModelProto) -> bool:
    return any(n.op_type in _RANDOM_OPS and not any(a.name == "seed" for a in n.attribute)
               for n in model.graph.node)


def _feed(value):
    # Numpy scalars become 0-d arrays; types numpy lacks (float8, int4...)
    # come as TensorProtos and become ml_dtypes arrays.
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return value


def check_case(case) -> str:
    """How the case passed ('ORT', 'reference' or 'no runtime': which
    runtime compared the original's and the export's outputs); raises on
    failure."""
    model = case.model
    exported = round_trip(model)
    inputs = case.data_sets[0][0] if case.data_sets else []
    feeds = {vi.name: _feed(v) for vi, v in zip(model.graph.input, inputs)}
    try:
        expected = run(session(model), feeds)
        runtime = "ORT"
    except Exception:
        # ONNX's reference evaluator runs what ORT lacks (float8, new opsets).
        try:
            expected = ReferenceEvaluator(model).run(None, feeds)
        except Exception:
            return "no runtime"
        runtime = "reference"
        actual = ReferenceEvaluator(exported).run(None, feeds)
    if runtime == "ORT":
        actual = run(session(exported), feeds)
    if _is_random(model):
        expected = [np.asarray(e).shape for e in expected]
        actual = [np.asarray(a).shape for a in actual]
        assert expected == actual
    else:
        assert_same_outputs(expected, actual, case.name)
    return runtime


def test_all_node_cases():
    results: dict[str, str] = {}
    failures: dict[str, str] = {}
    for case in _cases():
        try:
            results[case.name] = check_case(case)
        except UnsupportedOp as e:
            failures[case.name] = f"UnsupportedOp: {e}"
        except Exception as e:  # report every failure, not just the first
            failures[case.name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    unexpected = {k: v for k, v in failures.items() if k not in EXPECTED_FAILURES}
    fixed = sorted(k for k in EXPECTED_FAILURES if k in results)
    by = {r: sum(1 for v in results.values() if v == r) for r in ("ORT", "reference",
                                                                   "no runtime")}
    print(f"\nnode cases: {len(results)} passed (outputs compared in ORT: {by['ORT']}, in "
          f"the ONNX reference evaluator: {by['reference']}, neither runs the original: "
          f"{by['no runtime']}), {len(failures)} failed "
          f"({len(failures) - len(unexpected)} expected), of {len(results) + len(failures)}")
    for name, why in sorted(unexpected.items()):
        print(f"  UNEXPECTED {name}: {why}", file=sys.stderr)
    assert not unexpected, f"{len(unexpected)} unexpected failures, first: " \
        + "; ".join(f"{k}: {v}" for k, v in list(sorted(unexpected.items()))[:5])
    assert not fixed, f"expected failures that now pass (remove them): {fixed}"


if __name__ == "__main__":
    pytest.main([__file__, "-q", "-s"])
