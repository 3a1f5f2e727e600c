"""Opsets 7 and 8 (the ONNX model zoo's classic models): the rules' ops that
these opsets lack or restrict are written with the ones they have -- Expand
(opset 8) as an Add of tiled zeros, Sign and OneHot (opset 9) by
comparisons, Sum/Mean/Max/Min of operands of different shapes (opset 8) on
operands brought to one shape, the activations' piecewise coefficients
(Where, opset 9) by mask arithmetic; GatherElements (opset 11) at opsets 9
and 10 by OneHot and Where. Up to opset 13, what else an old opset
changes: Slice-10's shape inference, Reshape without allowzero (before 14)
on extents read at run time. Checked against finite differences (float32:
ONNX Runtime has few float64 kernels at these opsets)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives, check_hessian
from onnx_ad_mlir import forward, reverse
from onnx_ad_mlir.errors import UnsupportedOp

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


def _by_position(case: str, opset: int) -> tuple:
    """TopK's tangent and Scatter's transpose (in its updates) gather by
    position: GatherElements, opset 11. y = z * z, so the Hessian is not 0."""
    idx = {"Scatter": [[0, 3], [4, 1], [2, 0]], "Scatter_fewer_rows": [[0, 3], [4, 1]]}
    if case == "TopK":
        k = [_c("k", [2], np.int64)] if opset >= 10 else []
        node = h.make_node("TopK", ["x"] + ["k"] * bool(k), ["z", "i"], axis=1,
                           **({} if k else {"k": 2}))
        return [node], k, ["x"]
    node = h.make_node("Scatter", ["x", "i", "u"], ["z"], axis=1)
    return [node], [_c("i", idx[case], np.int64)], ["x", "u"]


@pytest.mark.parametrize("opset", [9, 10])
@pytest.mark.parametrize("case", ["TopK", "Scatter", "Scatter_fewer_rows"])
def test_gathers_by_position_before_opset_11(case, opset):
    """Before opset 11 GatherElements is a OneHot mask kept by Where and
    summed; indices with fewer rows than the data cut the data first."""
    nodes, inits, inputs = _by_position(case, opset)
    rows = 2 if case == "Scatter_fewer_rows" else 3
    shapes = {"x": [3, 5], "u": [rows, 2]}
    g = h.make_graph(nodes + [h.make_node("Mul", ["z", "z"], ["y"])], "g",
                     [h.make_tensor_value_info(n, TP.FLOAT, shapes[n]) for n in inputs],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 5
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal(shapes[n]).astype(np.float32) for n in inputs}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


def test_a_slice_with_run_time_bounds_at_opset_10():
    """y = sin(x)[:, 1:W-1]^2 with W read at run time: the Slice's transpose
    places the cotangent at positions 1..W-2, a Range (opset 11) written as
    the positions of ConstantOfShape's ones (NonZero)."""
    one = _c("one", [1], np.int64)
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "one"], ["w"], axis=0),
             h.make_node("Sub", ["w", "one"], ["e"]), h.make_node("Sin", ["x"], ["z"]),
             h.make_node("Slice", ["z", "one", "e", "one"], ["c"]),
             h.make_node("Mul", ["c", "c"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["B", "W"])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)], [one])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 10)])
    m.ir_version = 5
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)}
    produced = []
    check_derivatives(m, feeds, produced=produced)
    check_hessian(m, feeds)
    assert any(n.op_type == "NonZero" for p in produced for n in p.graph.node)


def test_strided_slices_of_a_run_time_extent_at_opset_10():
    """x[0:3:2] and x[1:3:2] along an extent known only at run time (fuzz
    seed 267, case 1811): ONNX's Slice-10 shape inference gives both the
    input's symbolic extent, and ONNX Runtime, reusing one's buffer for the
    other by it, failed to run the derivative models. The exporter names
    these extents apart."""
    c = lambda n, v: _c(n, v, np.int64)
    nodes = [h.make_node("Slice", ["x", "zero", "three", "zero", "two"], ["a"]),
             h.make_node("Neg", ["a"], ["n"]),
             h.make_node("Slice", ["x", "one", "three", "zero", "two"], ["b"]),
             h.make_node("Tanh", ["b"], ["t"]),
             h.make_node("Concat", ["n", "t"], ["y"], axis=0)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["A", "B"])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)],
                     [c("zero", [0]), c("one", [1]), c("two", [2]), c("three", [3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 10)])
    m.ir_version = 5
    feeds = {"x": np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


@pytest.mark.parametrize("shape", [(1, 2, 3), (1, 2, 0)])
def test_a_gather_at_a_scalar_index_over_run_time_extents_at_opset_13(shape):
    """y = tanh(x[:, 1]) with every extent read at run time (fuzz seed 271,
    case 931, x [1, 2, 0]): the transpose put the gathered axis back with a
    Reshape to [k, A, 1, C] read at run time, and before opset 14 (no
    allowzero) C = 0 there meant "copy the operand's extent": ONNX Runtime
    failed the reverse model. An Unsqueeze does it at any extents."""
    nodes = [h.make_node("Gather", ["x", "one"], ["g"], axis=1), h.make_node("Tanh", ["g"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.DOUBLE, ["A", "B", "C"])],
                     [h.make_tensor_value_info("y", TP.DOUBLE, None)],
                     [_c("one", 1, np.int64)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 7
    feeds = {"x": np.random.default_rng(3).standard_normal(shape)}
    check_derivatives(m, feeds)


@pytest.mark.parametrize("opset", [7, 9, 10])
@pytest.mark.parametrize("constant", [True, False])
def test_a_gather_at_negative_positions(opset, constant):
    """Gather's transpose scatters by OneHot before opset 16; OneHot counts
    negative indices from the end only from opset 11 (before: opsets 7 and 8
    put their cotangent nowhere, a wrong gradient; 9 and 10 failed to load
    with constant indices)."""
    i = np.array([-1, 0, -4, 2], np.int64)
    ins = [h.make_tensor_value_info("x", TP.FLOAT, [3, 5])]
    if not constant:
        ins.append(h.make_tensor_value_info("i", TP.INT64, [4]))
    g = h.make_graph([h.make_node("Gather", ["x", "i"], ["z"], axis=1),
                      h.make_node("Mul", ["z", "z"], ["y"])], "g", ins,
                     [h.make_tensor_value_info("y", TP.FLOAT, None)],
                     [_c("i", i, np.int64)] if constant else [])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 4
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)}
    if not constant:
        feeds["i"] = i
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


@pytest.mark.parametrize("opset", [10, 13])
def test_empty_values_before_opset_14(opset):
    """An empty derivative's Reshape to extent 0 needs allowzero (opset 14):
    before, a 0 in the target copies the input's extent. It moves no data,
    so it is written as zeros of the target's extents."""
    g = h.make_graph([h.make_node("Flatten", ["e"], ["f"], axis=1), h.make_node("Sin", ["f"], ["y0"]),
                      h.make_node("Sin", ["x"], ["y1"])], "g",
                     [h.make_tensor_value_info("e", TP.FLOAT, [4, 2, 0]),
                      h.make_tensor_value_info("x", TP.FLOAT, [3])],
                     [h.make_tensor_value_info("y0", TP.FLOAT, [4, 0]),
                      h.make_tensor_value_info("y1", TP.FLOAT, [3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 5
    rng = np.random.default_rng(0)
    feeds = {"e": np.zeros((4, 2, 0), np.float32), "x": rng.standard_normal(3).astype(np.float32)}
    check_derivatives(m, feeds)


def test_zero_derivatives_at_opset_7():
    """y = sin(a) does not depend on b: adj_b is zeros [k] + shape(b), an
    Expand (opset 8) written as an Add of tiled zeros."""
    g = h.make_graph([h.make_node("Sin", ["a"], ["y"]), h.make_node("Cos", ["b"], ["z"])], "g",
                     [h.make_tensor_value_info("a", TP.FLOAT, [2, 3]),
                      h.make_tensor_value_info("b", TP.FLOAT, [4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 3])], [])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 7)])
    m.ir_version = 4
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 3)).astype(np.float32),
             "b": rng.standard_normal(4).astype(np.float32)}
    check_derivatives(m, feeds)


def test_recurrent_ops_before_opset_9_are_refused_by_name():
    """Their derivatives are Scans over time; Scan-8 is batched (it once
    built a Scan-8 with Scan-9's attributes: an MLIR verifier error)."""
    g = h.make_graph([h.make_node("RNN", ["x", "W", "R"], ["y"], hidden_size=2)], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [3, 1, 2])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)],
                     [_c("W", np.full((1, 2, 2), 0.3)), _c("R", np.full((1, 2, 2), 0.1))])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 8)])
    m.ir_version = 4
    for transform in (forward, reverse):
        with pytest.raises(UnsupportedOp, match=r"onnx\.RNNV7 \(node ''\): its derivative is a "
                                                r"Scan over time.*re-export at opset >= 9"):
            transform(m)


def test_a_guard_by_where_before_opset_9_is_refused_by_name():
    """LpNormalization's derivative keeps a zero row's NaN out with Where."""
    g = h.make_graph([h.make_node("LpNormalization", ["x"], ["y"], axis=1)], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 8)])
    m.ir_version = 4
    with pytest.raises(UnsupportedOp, match=r"onnx\.LpNormalization \(node ''\): its derivative "
                                            r"selects with Where \(opset 9\).*re-export"):
        reverse(m)


@pytest.mark.parametrize("opset", [10, 11])
def test_a_rank_shape_inference_leaves_open(opset):
    """ONNX's inference gives Compress-9's result no rank; LogSoftmax after
    it needs one (its axis -1): ranks.py gives it the data's."""
    g = h.make_graph([h.make_node("Compress", ["x", "c"], ["z"], axis=0),
                      h.make_node("LogSoftmax", ["z"], ["y"], axis=-1)], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)],
                     [nh.from_array(np.array([True, False, True, True]), "c")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 5
    feeds = {"x": np.array([0.5, -1.0, 2.0, 0.25], np.float32)}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


def test_a_concat_of_run_time_extents_transposed_at_opset_9():
    """The pieces of a Concat whose extents the linear program knows only at
    run time (behind an empty constant) are cut from its cotangent at
    run-time offsets: Slice-1 takes constant bounds, so a Gather of the
    positions (it built a Slice-1 with operands: an MLIR verifier error)."""
    c = lambda n, v, t=np.int64: _c(n, v, t)
    nodes = [h.make_node("Concat", ["e", "x", "x"], ["c"], axis=-1), h.make_node("Atan", ["c"], ["a"]),
             h.make_node("Gather", ["a", "i0"], ["g0"], axis=0), h.make_node("Sin", ["g0"], ["s0"]),
             h.make_node("Gather", ["a", "i1"], ["g1"], axis=0), h.make_node("Abs", ["g1"], ["s1"]),
             h.make_node("Concat", ["s0", "s1"], ["d"], axis=0),
             h.make_node("Gather", ["d", "i2"], ["y"], axis=0)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)],
                     [c("e", np.zeros(0), np.float32), c("i0", [0, 1]), c("i1", [2, 3, 4]),
                      c("i2", [[-4, -4]])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 4
    feeds = {"x": np.array([0.3, -0.7, 1.1, 0.4], np.float32)}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


def test_slices_at_run_time_bounds_before_opset_10_are_refused_by_name():
    """A strided Conv over run-time extents transposes with a Slice at
    bounds read at run time (Slice-10); at opset 9 it built a Slice-1 with
    operands: an MLIR verifier error."""
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
                     "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, 2, "H", "W"])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)],
                     [_c("w", np.ones((3, 2, 3, 3)))])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 4
    with pytest.raises(UnsupportedOp, match=r"onnx\.Conv \(node ''\): its derivative slices at "
                                            r"bounds read at run time.*opset 10"):
        reverse(m)
