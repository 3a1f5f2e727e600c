"""Sequences: the refusal of a derivative that would flow through one."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.errors import UnsupportedOp

D, I64, B = TP.DOUBLE, TP.INT64, TP.BOOL


def vi(name, t, shape):
    return h.make_tensor_value_info(name, t, shape)


def const(name, value, t=I64):
    arr = np.asarray(value)
    return h.make_node("Constant", [], [name], name=f"c_{name}",
                       value=h.make_tensor(name, t, list(arr.shape), arr.ravel().tolist()))


def model(nodes, inputs, outputs, opset=18):
    g = h.make_graph(nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


# ---- what stays a sequence is refused, never differentiated as a constant ------------

def test_sequence_out_of_an_if_is_refused():
    """An If yielding a sequence built from x: reverse mode returned a zero
    gradient before (the sequence read as a constant)."""
    def branch(tag, op):
        return h.make_graph([h.make_node(op, ["x"], [f"{tag}_v"], name=f"{tag}_op"),
                             h.make_node("SequenceConstruct", [f"{tag}_v", "x"], [f"{tag}_s"],
                                         name=f"{tag}_list")],
                            tag, [], [h.make_tensor_sequence_value_info(f"{tag}_s", D, None)])
    nodes = [h.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
             const("zero", 0.0, D),
             h.make_node("Greater", ["total", "zero"], ["c"], name="gt"),
             h.make_node("If", ["c"], ["s"], name="choose", then_branch=branch("t", "Sin"),
                         else_branch=branch("e", "Cos")),
             h.make_node("ConcatFromSequence", ["s"], ["y"], name="cat", axis=0)]
    m = model(nodes, [("x", D, [2, 3])], [("y", D, [4, 3])])
    with pytest.raises(UnsupportedOp, match=r"onnx\.If \(node 'choose'\).*sequence"):
        reverse(m, inputs=["x"], outputs=["y"])
    with pytest.raises(UnsupportedOp, match=r"SequenceConstruct \(node '[te]_list'\)"):
        forward(m, inputs=["x"], outputs=["y"])


def test_loop_prepending_to_a_sequence_is_refused():
    """SequenceInsert at position 0 is not an append: the list stays a
    sequence, and the Loop carrying it is refused (was a zero gradient)."""
    body = h.make_graph([
        h.make_node("Sin", ["s"], ["s_next"], name="b_sin"),
        h.make_node("SequenceInsert", ["seq", "s_next", "zero"], ["seq_next"], name="b_prepend"),
        h.make_node("Identity", ["cond"], ["cond_out"], name="b_cond")],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("s", D, [3]),
                 h.make_tensor_sequence_value_info("seq", D, None)],
        [vi("cond_out", B, []), vi("s_next", D, [3]),
         h.make_tensor_sequence_value_info("seq_next", D, None)])
    nodes = [const("zero", 0), const("true", True, B),
             h.make_node("SequenceEmpty", [], ["seq0"], name="start", dtype=D),
             h.make_node("Loop", ["n", "true", "x", "seq0"], ["last", "ys"], name="loop",
                         body=body),
             h.make_node("ConcatFromSequence", ["ys"], ["y"], name="cat", axis=0, new_axis=1)]
    m = model(nodes, [("x", D, [3]), ("n", I64, [])], [("y", D, ["T", 3])])
    with pytest.raises(UnsupportedOp, match=r"onnx\.Loop \(node 'loop'\): its result 1 .*"
                                            r"sequence and optional values carry no derivatives"):
        reverse(m, inputs=["x"], outputs=["y"])
    with pytest.raises(UnsupportedOp, match=r"SequenceInsert \(node 'b_prepend'\)"):
        forward(m, inputs=["x"], outputs=["y"])
