"""Opsets 7 and 8 (the ONNX model zoo's classic models): the rules' ops that
these opsets lack or restrict are written with the ones they have -- Expand
(opset 8) as an Add of tiled zeros, Sign and OneHot (opset 9) by
comparisons, Sum/Mean/Max/Min of operands of different shapes (opset 8) on
operands brought to one shape, the activations' piecewise coefficients
(Where, opset 9) by mask arithmetic. Checked against finite differences
(float32: ONNX Runtime has few float64 kernels at these opsets)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives

X4 = [2, 4, 6, 6]


def _c(name, value, dtype=np.float32):
    return nh.from_array(np.asarray(value, dtype), name)


CASES = {
    "LeakyRelu": ([h.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], []),
    "PRelu": ([h.make_node("PRelu", ["x", "s"], ["y"])], [_c("s", np.full((4, 1, 1), 0.2))]),
    "Elu": ([h.make_node("Elu", ["x"], ["y"])], []),
    "Selu": ([h.make_node("Selu", ["x"], ["y"])], []),
    "Abs": ([h.make_node("Abs", ["x"], ["y"])], []),
    "GlobalAveragePool": ([h.make_node("GlobalAveragePool", ["x"], ["y"])], []),
    "AveragePool": ([h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
                                 strides=[1, 1], pads=[1, 1, 0, 0])], []),
    "ReduceMean": ([h.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3])], []),
    "ReduceSum": ([h.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)], []),
    "Softmax": ([h.make_node("Softmax", ["x"], ["y"], axis=1)], []),
    "Gather": ([h.make_node("Gather", ["x", "i"], ["y"], axis=1)], [_c("i", [2, 0, 0], np.int64)]),
    "Split": ([h.make_node("Split", ["x"], ["a", "y"], axis=1, split=[1, 3])], []),
    "Max": ([h.make_node("Sin", ["x"], ["s"]), h.make_node("Max", ["x", "s"], ["y"])], []),
}


@pytest.mark.parametrize("opset", [7, 8])
@pytest.mark.parametrize("case", sorted(CASES))
def test_classic_ops_at_opsets_7_and_8(case, opset):
    nodes, inits = CASES[case]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, X4)],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 4
    x = np.random.default_rng(1).standard_normal(X4).astype(np.float32)
    check_derivatives(m, {"x": x})
