"""Exported loops in the forms every runtime runs alike (portable.py): Scans
with their default axes and directions, Loops that run their constant trip
count as Scans, small outer constants copied into the bodies that read
them; what the model computes is unchanged (ONNX Runtime, bit for bit)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper as h

from adcheck import check_derivatives, run
from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.exporter import export_onnx
from onnx_ad_mlir.importer import import_onnx

D, I64, B = TP.DOUBLE, TP.INT64, TP.BOOL
rng = np.random.default_rng(31)


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def exported(m: onnx.ModelProto) -> onnx.ModelProto:
    with ir.Context():
        return export_onnx(import_onnx(m))


def ops(g: onnx.GraphProto) -> list[onnx.NodeProto]:
    found = []
    for n in g.node:
        found.append(n)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                found += ops(a.g)
    return found


def same_values(m: onnx.ModelProto, out: onnx.ModelProto, feeds: dict) -> None:
    want, got = run(m, feeds), run(out, feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def scan_model() -> onnx.ModelProto:
    """h_t = tanh(h W + x_t), x read backwards along axis 1, the states
    stacked on axis 1 and the inputs' tanh stacked backwards."""
    body = h.make_graph([h.make_node("MatMul", ["h", "W"], ["hw"]),
                         h.make_node("Add", ["hw", "xt"], ["a"]),
                         h.make_node("Tanh", ["a"], ["hn"]),
                         h.make_node("Tanh", ["xt"], ["tx"]),
                         h.make_node("Identity", ["hn"], ["hs"])],
                        "body", [vi("h", D, [2, 3]), vi("xt", D, [2, 3])],
                        [vi("hn", D, [2, 3]), vi("hs", D, [2, 3]), vi("tx", D, [2, 3])])
    scan = h.make_node("Scan", ["h0", "X"], ["hT", "H", "TX"], body=body, num_scan_inputs=1,
                       scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1, 0],
                       scan_output_directions=[0, 1])
    g = h.make_graph([scan], "g", [vi("h0", D, [2, 3]), vi("X", D, [2, 5, 3]), vi("W", D, [3, 3])],
                     [vi("hT", D, [2, 3]), vi("H", D, [2, 5, 3]), vi("TX", D, [5, 2, 3])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_scan_axes_and_directions_move_outside():
    """IREE (3.13) scans axis 0 forwards whatever the attributes say: they
    become a Transpose and Slices of step -1 outside a default Scan. The
    reverse model of the same Scan is exported so too, and agrees with
    differences."""
    m = scan_model()
    feeds = {"h0": rng.standard_normal((2, 3)), "X": rng.standard_normal((2, 5, 3)),
             "W": rng.standard_normal((3, 3)) * 0.5}
    out = exported(m)
    scans = [n for n in ops(out.graph) if n.op_type == "Scan"]
    assert len(scans) == 1 and not [a for a in scans[0].attribute if a.name.startswith("scan_")]
    kinds = [n.op_type for n in out.graph.node]
    assert kinds.count("Transpose") == 2 and kinds.count("Slice") == 2, kinds
    same_values(m, out, feeds)
    rev = reverse(m, layout="onnx")
    assert not [a for n in ops(rev.graph) if n.op_type == "Scan" for a in n.attribute
                if a.name.startswith("scan_")]
    errors = check_derivatives(m, feeds)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9


def loop_model(trips: int | None, grow: bool = False, cond: str = "") -> onnx.ModelProto:
    """v <- v * w + i (or that with its column sums below, growing), the
    column sums stacked; the trip count a constant or an input."""
    step = [h.make_node("Cast", ["i"], ["fi"], to=D), h.make_node("Mul", ["v", "w"], ["vw"]),
            h.make_node("Add", ["vw", "fi"], ["vn0"]),
            h.make_node("ReduceSum", ["vn0", "zero"], ["out"], keepdims=1)]
    step += [h.make_node("Concat", ["vn0", "out"], ["vn"], axis=0)] if grow else \
        [h.make_node("Identity", ["vn0"], ["vn"])]
    rows = None if grow else 2
    body = h.make_graph(step + [h.make_node("Identity", ["cin"], ["cout"])],
                        "body", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [rows, 3])],
                        [vi("cout", B, []), vi("vn", D, [rows, 3]), vi("out", D, [1, 3])])
    nodes = [h.make_node("Constant", [], ["zero"], value=h.make_tensor("z", I64, [1], [0]))]
    inputs = [vi("v0", D, [2, 3]), vi("w", D, [1, 3])]
    if trips is None:
        inputs.append(vi("M", I64, []))
    else:
        nodes.append(h.make_node("Constant", [], ["M"], value=h.make_tensor("M", I64, [],
                                                                             [trips])))
    if cond:
        nodes.append(h.make_node("Constant", [], [cond], value=h.make_tensor("c", B, [], [True])))
    nodes.append(h.make_node("Loop", ["M", cond, "v0"], ["vT", "vs"], body=body))
    g = h.make_graph(nodes, "g", inputs, [vi("vT", D, None), vi("vs", D, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("trips,grow,cond,becomes", [
    (4, False, "", "Scan"), (4, False, "go", "Scan"),  # runs its trip count: a Scan
    (0, False, "", "Loop"),  # (ONNX Runtime's Scan fails on zero steps)
    (None, False, "", "Loop"),  # a run-time count may be 0
    (4, True, "", "Loop")])  # a growing state: a Scan's may not grow
def test_loops_running_their_trip_count_become_scans(trips, grow, cond, becomes):
    """IREE refuses Loops with scan outputs (the reverse rules store states
    so) and Loops without a cond operand: in a derivative model, a Loop
    that runs a constant trip count of 1 or more, its states provably
    keeping their shapes, becomes a Scan over Range(0, M) (loops_as_scans:
    ONNX Runtime runs those faster too); any other Loop whose body yields
    true gets a constant true cond operand. Derivatives against
    differences."""
    m = loop_model(trips, grow, cond)
    feeds = {"v0": rng.standard_normal((2, 3)), "w": rng.standard_normal((1, 3))}
    if trips is None:
        feeds["M"] = np.asarray(3, np.int64)
    plain = exported(m)  # (export alone keeps the Loop)
    assert [n.op_type for n in plain.graph.node if n.op_type in ("Loop", "Scan")] == ["Loop"]
    assert all(n.input[1] for n in plain.graph.node if n.op_type == "Loop")
    same_values(m, plain, feeds)
    for d in (forward(m, inputs=["v0", "w"], layout="onnx"),
              reverse(m, inputs=["v0", "w"], layout="onnx")):
        loops = [n for n in d.graph.node if n.op_type in ("Loop", "Scan")]
        assert {n.op_type for n in loops} == {becomes}, [n.op_type for n in loops]
        assert all(n.input[1] for n in loops if n.op_type == "Loop")
    errors = check_derivatives(m, feeds, inputs=["v0", "w"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9


def test_a_loop_honouring_no_cond_keeps_none():
    """A Loop given no cond operand ignores the cond its body computes (a
    for loop): it keeps no cond operand (a true one would stop the loop
    where the body's turns false)."""
    body = h.make_graph([h.make_node("Add", ["v", "v"], ["vn"]),
                         h.make_node("ReduceSum", ["vn"], ["s"], keepdims=0),
                         h.make_node("Constant", [], ["lim"], value=h.make_tensor("l", D, [], [1.0])),
                         h.make_node("Less", ["s", "lim"], ["cout"])],
                        "body", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [3])],
                        [vi("cout", B, []), vi("vn", D, [3])])
    g = h.make_graph([h.make_node("Constant", [], ["M"], value=h.make_tensor("M", I64, [], [5])),
                      h.make_node("Loop", ["M", "", "v0"], ["vT"], body=body)],
                     "g", [vi("v0", D, [3])], [vi("vT", D, [3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    out = exported(m)
    assert not next(n for n in out.graph.node if n.op_type == "Loop").input[1]
    same_values(m, out, {"v0": np.asarray([1.0, 2.0, 3.0])})  # (the body's cond is false)


def test_small_outer_constants_are_copied_into_bodies():
    """A Slice in a Scan body whose starts/ends/axes are constants of the
    main graph: they are copied into the body (IREE's import and ONNX's
    shape inference read constant operands of the same graph only), so the
    body's Slice has a static shape once inferred; a large constant stays
    outside. The outer copies nothing else reads are dropped (ONNX Runtime
    warns of each unused constant at every session's creation)."""
    big = np.arange(100, dtype=np.float64).reshape(100)[:3]
    body = h.make_graph([h.make_node("Slice", ["xt", "st", "en", "ax"], ["part"]),
                         h.make_node("Add", ["s", "part"], ["sn"]),
                         h.make_node("Mul", ["sn", "big"], ["o"])],
                        "body", [vi("s", D, [2]), vi("xt", D, [4])],
                        [vi("sn", D, [2]), vi("o", D, [2])])
    consts = [h.make_node("Constant", [], [n], value=h.make_tensor(n, I64, [1], [v]))
              for n, v in (("st", 1), ("en", 3), ("ax", 0))]
    consts.append(h.make_node("Constant", [], ["big"], value=h.make_tensor(
        "big", D, [2], list(big[:2]))))
    weights = h.make_node("Constant", [], ["heavy"], value=h.make_tensor(
        "heavy", D, [100], list(np.arange(100.0))))
    g = h.make_graph(consts + [weights, h.make_node("ReduceSum", ["heavy"], ["hs"]),
                               h.make_node("Scan", ["s0", "X"], ["sT", "os"], body=body,
                                           num_scan_inputs=1),
                               h.make_node("Add", ["sT", "hs"], ["y"])],
                     "g", [vi("s0", D, [2]), vi("X", D, [5, 4])],
                     [vi("y", D, [2]), vi("os", D, [5, 2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    out = exported(m)
    scan = next(n for n in out.graph.node if n.op_type == "Scan")
    sub = next(a.g for a in scan.attribute if a.name == "body")
    local = [n for n in sub.node if n.op_type == "Constant"]
    assert len(local) == 4  # starts, ends, axes and the 2-element factor
    read = {i for n in ops(out.graph) for i in n.input} | {o.name for o in out.graph.output}
    assert all(n.output[0] in read for n in ops(out.graph) if n.op_type == "Constant")
    assert "heavy" in {n.output[0] for n in out.graph.node if n.op_type == "Constant"}
    inferred = onnx.shape_inference.infer_shapes(out)
    isub = next(a.g for n in inferred.graph.node if n.op_type == "Scan" for a in n.attribute
                if a.name == "body")
    slice_out = next(n.output[0] for n in isub.node if n.op_type == "Slice")
    info = next(v for v in isub.value_info if v.name == slice_out)
    assert [d.dim_value for d in info.type.tensor_type.shape.dim] == [2]
    same_values(m, out, {"s0": rng.standard_normal(2), "X": rng.standard_normal((5, 4))})
