"""Shared by the round-trip tests: import + verify + export + full_check, and
ONNX Runtime output comparison between the original and the exported model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from mlir import ir

from onnx_ad_mlir import export_onnx, import_onnx

RTOL = 1e-6


def round_trip(model: onnx.ModelProto) -> onnx.ModelProto:
    with ir.Context():
        module = import_onnx(model)
        assert module.operation.verify()
        exported = export_onnx(module)
    onnx.checker.check_model(exported, full_check=True)
    return exported


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def run(sess: ort.InferenceSession, feeds: dict) -> list:
    return sess.run(None, feeds)


def assert_same_outputs(expected: list, actual: list, where: str) -> None:
    assert len(expected) == len(actual), f"{where}: {len(actual)} outputs, expected {len(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        _assert_same(e, a, f"{where} output {i}")


def _assert_same(e, a, where: str) -> None:
    if isinstance(e, list):  # sequence outputs
        assert isinstance(a, list) and len(a) == len(e), where
        for x, y in zip(e, a):
            _assert_same(x, y, where)
        return
    if e is None or a is None:
        assert e is None and a is None, where
        return
    e, a = np.asarray(e), np.asarray(a)
    assert e.dtype == a.dtype and e.shape == a.shape, \
        f"{where}: {a.dtype}{a.shape} vs expected {e.dtype}{e.shape}"
    if e.dtype.kind in "fc":
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=0, equal_nan=True, err_msg=where)
    elif e.dtype.kind in "biuUSO":
        assert np.array_equal(a, e), where
    else:  # ml_dtypes (bfloat16, float8...): bit-identical, NaNs included
        assert a.tobytes() == e.tobytes(), where
