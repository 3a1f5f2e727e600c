"""Shape arithmetic on statically known extents folded at import
(index_constants.py): exporters' run-time bounds become constants, inference
types what they cut, and the rules take the cheap static paths."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives, check_hessian, run
from onnx_ad_mlir import forward, reverse

D = TP.DOUBLE
rng = np.random.default_rng(5)


def const(name, value, dtype=np.int64):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(value, dtype), name))


def model(nodes, x_shape, inits=(), opset=17, elem=D):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", elem, x_shape)],
                     [h.make_tensor_value_info("y", elem, None)], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def chunk_model() -> onnx.ModelProto:
    """torch's TorchScript export of `a, b = conv(x).chunk(2, 1)`, then a
    channel shuffle and a second Conv: the chunk bounds are computed from
    Shape, and ONNX's inference (no data propagation through Div) leaves
    everything after the Slices untyped. float32: ONNX Runtime has no
    double Conv."""
    w1 = nh.from_array((rng.standard_normal((6, 4, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = nh.from_array((rng.standard_normal((3, 6, 3, 3)) * 0.3).astype(np.float32), "w2")
    nodes = [
        h.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Shape", ["c"], ["s"]),
        const("one", 1), const("two", 2), const("zero", [0]), const("axis", [1]),
        h.make_node("Gather", ["s", "one"], ["n"], axis=0),
        h.make_node("Add", ["n", "one"], ["n1"]),
        h.make_node("Div", ["n1", "two"], ["half"]),
        h.make_node("Mul", ["half", "one"], ["m1"]),
        h.make_node("Mul", ["half", "two"], ["m2"]),
        h.make_node("Unsqueeze", ["m1", "zero"], ["e1"]),
        h.make_node("Unsqueeze", ["m2", "zero"], ["e2"]),
        h.make_node("Slice", ["c", "zero", "e1", "axis"], ["a"]),
        h.make_node("Slice", ["c", "e1", "e2", "axis"], ["b"]),
        h.make_node("Tanh", ["b"], ["tb"]),
        h.make_node("Concat", ["a", "tb"], ["cat"], axis=1),
        const("s5", [2, 2, 3, 5, 5]), const("s4", [2, 6, 5, 5]),
        h.make_node("Reshape", ["cat", "s5"], ["r5"]),
        h.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
        h.make_node("Reshape", ["t5", "s4"], ["shuffled"]),
        h.make_node("Conv", ["shuffled", "w2"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER"),
    ]
    return model(nodes, [2, 4, 5, 5], [w1, w2], elem=TP.FLOAT)


def test_chunk_bounds_fold_to_constants():
    m = chunk_model()
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    check_derivatives(m, {"x": x})
    check_hessian(m, {"x": x}, output="y")
    ops = {n.op_type for n in reverse(m, layout="onnx").graph.node}
    # constant bounds: the Slices' transposes are Pads, which meet end to end
    # and so become one Concat; nothing placed at run time
    assert "Concat" in ops and "Pad" not in ops
    assert not ops & {"Shape", "ScatterElements", "NonZero", "Range", "Expand"}, ops


def half_width_model() -> onnx.ModelProto:
    """y = tanh(reshape(x[:, :n / 2], [Shape(x)[0], n / 2])), n = Shape(x)[1],
    of a [batch, 6] x: n is 6 (inference then types y [batch, 3]), the batch
    extent stays a run-time read."""
    nodes = [const("one", 1), const("zero", 0), const("two", 2), const("ax", [0]),
             const("one_v", [1]),
             h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Gather", ["s", "one"], ["n"], axis=0),
             h.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             h.make_node("Div", ["n", "two"], ["half"]),
             h.make_node("Unsqueeze", ["half", "ax"], ["end"]),
             h.make_node("Unsqueeze", ["b", "ax"], ["bv"]),
             h.make_node("Concat", ["bv", "end"], ["target"], axis=0),
             h.make_node("Slice", ["x", "ax", "end", "one_v"], ["t"]),
             h.make_node("Reshape", ["t", "target"], ["r"]),
             h.make_node("Tanh", ["r"], ["y"])]
    return model(nodes, ["batch", 6])


def test_static_extents_of_a_dynamic_shape_fold():
    m = half_width_model()
    for x in (rng.standard_normal((3, 6)), rng.standard_normal((1, 6))):
        check_derivatives(m, {"x": x})
    for derived in (forward(m, layout="onnx"), reverse(m, layout="onnx")):
        ops = [n.op_type for n in derived.graph.node]
        assert ops.count("Gather") == 1, ops  # the batch extent's, not the 6's
        assert not {"ScatterElements", "NonZero"} & set(ops), ops


def test_integer_div_truncates_toward_zero():
    # start = (0 - 6) / 4 = -1 in ONNX (C's division), not Python's -2
    nodes = [h.make_node("Shape", ["x"], ["s"]), const("one", [1]), const("four", [4]),
             const("zero", [0]), const("big", [100]),
             h.make_node("Gather", ["s", "one"], ["n"], axis=0),
             h.make_node("Sub", ["zero", "n"], ["neg"]),
             h.make_node("Div", ["neg", "four"], ["start"]),
             h.make_node("Slice", ["x", "start", "big", "one"], ["t"]),
             h.make_node("Mul", ["t", "t"], ["y"])]
    m = model(nodes, [2, 6])
    x = rng.standard_normal((2, 6))
    check_derivatives(m, {"x": x})
    got = run(reverse(m, layout="onnx"), {"x": x, "adj_y": np.ones((2, 1, 1))})
    np.testing.assert_allclose(got["y"], x[:, -1:] ** 2)


def test_torch_expand_target_folds():
    """TorchScript's expand(2, -1): Expand(x, Where(Equal(s, -s'), 1, s));
    folded, the Expand's result is typed and its transpose reduces over a
    known axis (no run-time unbroadcasting)."""
    ones = h.make_tensor("one", TP.INT64, [1], [1])
    nodes = [const("s", [2, -1]), const("two", [2]), const("minus", -1),
             h.make_node("ConstantOfShape", ["two"], ["ones"], value=ones),
             h.make_node("Mul", ["ones", "minus"], ["negs"]),
             h.make_node("Equal", ["s", "negs"], ["is_neg"]),
             h.make_node("Where", ["is_neg", "ones", "s"], ["target"]),
             h.make_node("Expand", ["x", "target"], ["e"]),
             h.make_node("Tanh", ["e"], ["y"])]
    m = model(nodes, [1, 3])
    x = rng.standard_normal((1, 3))
    check_derivatives(m, {"x": x})
    check_hessian(m, {"x": x}, output="y")
    ops = {n.op_type for n in reverse(m, layout="onnx").graph.node}
    assert not ops & {"Where", "Equal", "NonZero"}, ops
