"""Indexing and data-movement rules (indexing.py, shape.py): finite differences in float64,
the forward/reverse identity, and Hessians where the model is nonlinear."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives, check_hessian, stand_ins

D, I = TP.DOUBLE, TP.INT64


def model(nodes, inputs, outputs, opset=18, inits=()):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def const(name, value):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(value), name))


rng = np.random.default_rng(11)


def run(nodes, x_shape, extra_inputs=(), feeds=None, hessian=True, opset=18, square=True):
    """y = op(...)(x); z = y*y (nonlinear, for Hessians) as a second output."""
    nodes = list(nodes) + ([h.make_node("Mul", ["y", "y"], ["z"])] if square else [])
    outs = [("y", D, None)] + ([("z", D, None)] if square else [])
    m = model(nodes, [("x", D, list(x_shape))] + list(extra_inputs), outs, opset=opset)
    f = {"x": rng.standard_normal(x_shape)}
    f.update(feeds or {})
    errs = check_derivatives(m, f)
    if hessian and square:
        check_hessian(m, f, output="z")
    return errs


def test_gather_duplicates():
    run([const("i", [[2, 0], [2, 1]]), h.make_node("Gather", ["x", "i"], ["y"], axis=1)], (3, 4))


def test_gather_negative_axis0():
    run([const("i", [-1, 0, 0]), h.make_node("Gather", ["x", "i"], ["y"], axis=0)], (3, 2))


def test_gather_scalar_index():
    run([const("i", 1), h.make_node("Gather", ["x", "i"], ["y"], axis=-1)], (2, 3))


def test_gather_elements():
    run([const("i", [[0, 0, 1], [2, 2, 2]]), h.make_node("GatherElements", ["x", "i"], ["y"], axis=0)],
        (3, 3))


def test_gather_nd():
    run([const("i", [[0, 1], [2, 0], [0, 1]]), h.make_node("GatherND", ["x", "i"], ["y"])], (3, 2, 2))


def test_gather_nd_opset11():
    """GatherND-11 has no batch_dims: the tangent's GatherND carried
    batch_dims=0, which the export refused (found by a probe of empty
    indices)."""
    run([const("i", [[0, 1], [2, 0], [0, 1]]), h.make_node("GatherND", ["x", "i"], ["y"])],
        (3, 2, 2), opset=11)


def test_gather_nd_batch_forward():
    m = model([const("i", [[1], [0]]), h.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)],
              [("x", D, [2, 3])], [("y", D, None)])
    from onnx_ad_mlir.api import forward
    from adcheck import run as ort_run
    x = rng.standard_normal((2, 3))
    fx = rng.standard_normal((2, 3, 2))
    got = ort_run(forward(m, layout="onnx"), {"x": x, "fwd_x": fx})["fwd_y"]
    np.testing.assert_allclose(got, fx[[0, 1], [1, 0]])


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_elements(reduction):
    idx = [[1, 0, 2], [0, 2, 1]] if reduction == "none" else [[1, 1, 2], [0, 1, 1]]
    run([const("i", idx),
         h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=reduction)],
        (2, 4), [("u", D, [2, 3])], {"u": rng.standard_normal((2, 3))})


@pytest.mark.parametrize("case", ["elements", "elements_expanded", "elements_broadcast_line",
                                  "nd"])
def test_scatter_writing_a_position_twice_is_refused(case):
    """Without a reduction, ONNX asks for distinct positions: with
    duplicates the result depends on the order of the updates (ONNX
    Runtime's last one wins), and the transpose gave every duplicate the
    cotangent, so reverse mode disagreed with forward mode. Found on
    torch's index_add exported by TorchScript with a dynamic batch: its
    constant indices, expanded over the batch, wrote a row twice (forward
    mode 0.48 off torch's sum, which the ONNX model does not compute). The
    same indices with reduction add are differentiated."""
    from onnx_ad_mlir.api import forward, reverse
    from onnx_ad_mlir.errors import ImportFailure
    if case == "nd":
        nodes = [const("i", [[1], [1]]), h.make_node("ScatterND", ["x", "i", "u"], ["y"])]
        ins = [("x", D, [4, 3]), ("u", D, [2, 3])]
    else:
        line = {"elements": [[1, 0, 1], [0, 2, 1]], "elements_expanded": [[1, 0, 1]],
                "elements_broadcast_line": [[2]]}[case]
        nodes = [const("i", line), h.make_node("Shape", ["u"], ["s"]),
                 h.make_node("Expand", ["i", "s"], ["e"]),
                 h.make_node("ScatterElements", ["x", "e", "u"], ["y"], axis=1)]
        ins = [("x", D, ["n", 4]), ("u", D, ["n", 3])]
    m = model(nodes, ins, [("y", D, None)])
    for mode in (forward, reverse):
        with pytest.raises(ImportFailure, match="write one position twice"):
            mode(m, layout="onnx")
    for n in m.graph.node:
        if n.op_type.startswith("Scatter"):
            n.attribute.append(h.make_attribute("reduction", "add"))
    feeds = {"x": rng.standard_normal((2, 4) if case != "nd" else (4, 3)),
             "u": rng.standard_normal((2, 3))}
    check_derivatives(m, feeds, inputs=["x", "u"])


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reduction", ["max", "min", "mul"])
def test_scatter_elements_nonlinear(reduction, axis):
    """torch's scatter_reduce(amax/amin/prod), GNN max pooling: was refused."""
    idx = [[1, 0, 2], [0, 2, 1], [1, 1, 0]] if axis == 0 else [[1, 1], [2, 0], [0, 0], [2, 2]]
    shape = (3, 3) if axis == 0 else (4, 2)
    run([const("i", idx), h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis,
                                      reduction=reduction)],
        (4, 3), [("u", D, list(shape))], {"u": rng.standard_normal(shape)}, opset=18)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_scatter_mul_with_zeros(op):
    # row 0 meets one zero (an update's) in column 0, row 1 two in column 0
    # (the data's and an update's) and one in column 1, row 2 none: each
    # factor's derivative is the product of its co-factors
    idx = [[0], [1], [1], [2]] if op == "ScatterND" else [[0, 0], [1, 1], [1, 1], [2, 2]]
    x = np.array([[2.0, -1.5], [0.0, 3.0], [1.5, 0.5]])
    u = np.array([[0.0, 2.0], [0.0, 0.0], [1.25, -2.0], [0.75, 1.5]])
    attrs = {} if op == "ScatterND" else {"axis": 0}
    run([const("i", idx), h.make_node(op, ["x", "i", "u"], ["y"], reduction="mul", **attrs)],
        x.shape, [("u", D, list(u.shape))], {"x": x, "u": u}, opset=18)


def test_scatter_elements_max_ties_share():
    # every value ties at 0: a position's tangent is the mean of the tangents
    # of the data and the updates it meets (as Max and ReduceMax share them)
    from adcheck import run as ort_run
    from onnx_ad_mlir.api import forward
    idx = np.array([[1, 1, 0], [1, 0, 0]])
    m = model([const("i", idx), h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1,
                                            reduction="max")],
              [("x", D, [2, 3]), ("u", D, [2, 3])], [("y", D, [2, 3])])
    fx, fu = rng.standard_normal((2, 3, 1)), rng.standard_normal((2, 3, 1))
    got = ort_run(forward(m, layout="onnx"), {"x": np.zeros((2, 3)), "u": np.zeros((2, 3)),
                                              "fwd_x": fx, "fwd_u": fu})["fwd_y"][..., 0]
    total, count = fx[..., 0].copy(), np.ones((2, 3))
    for r, c in np.ndindex(2, 3):
        total[r, idx[r, c]] += fu[r, c, 0]
        count[r, idx[r, c]] += 1
    np.testing.assert_allclose(got, total / count)


@pytest.mark.parametrize("reduction", ["none", "add", "max", "min", "mul"])
def test_scatter_nd(reduction):
    idx = [[1], [3]] if reduction == "none" else [[1], [1]]
    run([const("i", idx), h.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)],
        (4, 3), [("u", D, [2, 3])], {"u": rng.standard_normal((2, 3))})


def test_tile():
    run([const("r", [2, 1, 3]), h.make_node("Tile", ["x", "r"], ["y"])], (2, 3, 2))


@pytest.mark.parametrize("shape", [(2, 3, 4), (0, 3, 2), (2, 1, 0)])
def test_tile_of_run_time_extents(shape):
    """Repeated axes whose extents are known only at run time (0 included):
    the cotangent is split to [repeats, extent] by a target read at run time
    and summed over the repeats (was refused)."""
    m = model([const("r", [2, 1, 3]), h.make_node("Tile", ["x", "r"], ["t"]),
               h.make_node("Sin", ["t"], ["y"])], [("x", D, ["a", "b", "c"])], [("y", D, None)])
    check_derivatives(m, {"x": rng.standard_normal(shape)})


@pytest.mark.parametrize("x_shape", [(2, 3, 2), ("a", 3, "c")])
@pytest.mark.parametrize("reps", [[2, 1, 3], [1, 1, 1], [0, 2, 1]])
def test_tile_of_run_time_repeats(x_shape, reps):
    """Repeats given as an input (ONNX's test_tile): every axis may be tiled,
    so the cotangent is split to [count, extent] per axis by a target read
    at run time and summed over the counts (was refused)."""
    m = model([h.make_node("Tile", ["x", "r"], ["t"]), h.make_node("Sin", ["t"], ["y"]),
               h.make_node("Mul", ["y", "y"], ["z"])],
              [("x", D, list(x_shape)), ("r", I, [3])], [("y", D, None), ("z", D, None)])
    f = {"x": rng.standard_normal((2, 3, 2)), "r": np.asarray(reps, np.int64)}
    check_derivatives(m, f, inputs=["x"])
    check_hessian(m, f, output="z", inputs=["x"])
    # the tangent's Tile has exactly [k] + the primal's extents: no run-time
    # unbroadcasting, and no part of the linear program kept for a shape read
    from onnx_ad_mlir.api import reverse
    rev = reverse(m, inputs=["x"], outputs=["y"], layout="onnx")
    assert not stand_ins(rev) and "NonZero" not in {n.op_type for n in rev.graph.node}


@pytest.mark.parametrize("opset", [13, 18])
def test_tile_of_empty_tensor(opset):
    """Repeating an axis of an empty tensor: its cotangent is empty too, not
    a Reshape to a shape with a literal 0 (fuzz: ONNX Runtime refused the
    reverse model, 'Invalid position of 0')."""
    from onnx_ad_mlir.api import reverse
    from adcheck import run as ort_run
    m = model([const("r", [1, 2]), h.make_node("Tile", ["x", "r"], ["y"])],
              [("x", D, [2, 0])], [("y", D, [2, 0])], opset=opset)
    got = ort_run(reverse(m, layout="onnx"), {"x": np.zeros((2, 0)), "adj_y": np.zeros((2, 0, 3))})
    assert got["adj_x"].shape == (2, 0, 3)


@pytest.mark.parametrize("mode,opset,shape,pads", [
    (mode, opset, shape, pads) for opset in (13, 19) for mode in ("reflect", "edge", "wrap")
    for shape, pads in (((3, 4), [1, 0, 2, 3]), ((2, 5), [0, -1, 1, 2]), ((4, 1), [2, 0, 1, 0]))
    if mode != "wrap" or opset >= 19])  # (wrap is new in Pad-19)
def test_pad_of_run_time_extents(mode, opset, shape, pads):
    """Edge/reflect/wrap Pad on axes whose extents are known only at run
    time (crops and extents of 1 included): forward mode pads the tangent
    itself; reverse mode scatter-adds at source indices computed from the
    run-time extents (ScatterElements, or a OneHot product before opset
    16); was refused. Against central differences, and a Hessian."""
    m = model([const("p", pads), h.make_node("Pad", ["x", "p"], ["t"], mode=mode, name="pad"),
               h.make_node("Sin", ["t"], ["y"])], [("x", D, ["a", "b"])], [("y", D, None)],
              opset=opset)
    f = {"x": rng.standard_normal(shape)}
    check_derivatives(m, f)
    check_hessian(m, f, output="y")
    # the padded tangent has exactly [k] + the primal's extents: no run-time
    # unbroadcasting, no part of the linear program kept for a shape read
    from onnx_ad_mlir.api import reverse
    rev = reverse(m, layout="onnx")
    assert not stand_ins(rev) and "NonZero" not in {n.op_type for n in rev.graph.node}


def test_pads_of_static_axes_read_the_direction_count_once():
    """Constant pads of static axes under a dynamic batch (swin's window
    padding): the padded tangents keep the direction count of the tangent
    they pad, so the Reshapes after two Pads read it from one value (a
    registered tangent got a fresh count read off itself: swin_t's forward
    model had 37 more Shape/Concat nodes); against differences too."""
    nodes = [const("p", [0, 0, 1, 0, 0, 1]), const("q", [0, 1, 0, 0, 1, 0]),
             h.make_node("Shape", ["x"], ["n"], start=0, end=1),
             const("t1", [4, 8]), h.make_node("Concat", ["n", "t1"], ["s1"], axis=0),
             const("t2", [6, 6]), h.make_node("Concat", ["n", "t2"], ["s2"], axis=0)]
    for i, (pads, shape) in enumerate((("p", "s1"), ("q", "s2"))):
        nodes += [h.make_node("Pad", ["x", pads], [f"xp{i}"]),
                  h.make_node("Sin", [f"xp{i}"], [f"sin{i}"]),
                  h.make_node("Reshape", [f"sin{i}", shape], [f"r{i}"]),
                  h.make_node("ReduceSum", [f"r{i}"], [f"sum{i}"], keepdims=0)]
    nodes.append(h.make_node("Add", ["sum0", "sum1"], ["y"]))
    m = model(nodes, [("x", D, ["n", 4, 6])], [("y", D, None)], opset=19)
    from onnx_ad_mlir.api import forward
    fwd = forward(m, layout="onnx")
    made = {o: n for n in fwd.graph.node for o in n.output}
    read = [n.input[0] for n in fwd.graph.node if n.op_type == "Shape" and n.input[0] in made]
    assert len(read) <= 1, read
    check_derivatives(m, {"x": rng.standard_normal((2, 4, 6))})


def _unrolled(steps, read: str, opset: int = 18):
    """h <- tanh(x[:, t] w + h) for t in `steps`, x [2, T, 3] read at each
    step by Gather of a scalar (dynamo's select), of a one-element range, or
    by Slice + Squeeze (TorchScript)."""
    nodes = [const("w", rng.standard_normal((3, 3))), const("h0", np.zeros((2, 3))),
             const("ax", [1])]

    def squeeze(j):
        if opset >= 13:
            return h.make_node("Squeeze", [f"xs{j}", "ax"], [f"xt{j}"])
        return h.make_node("Squeeze", [f"xs{j}"], [f"xt{j}"], axes=[1])
    h_prev = "h0"
    for j, t in enumerate(steps):
        if read == "gather":
            nodes += [const(f"i{j}", t), h.make_node("Gather", ["x", f"i{j}"], [f"xt{j}"], axis=1)]
        elif read == "gather_range":
            nodes += [const(f"i{j}", [t]), h.make_node("Gather", ["x", f"i{j}"], [f"xs{j}"], axis=1),
                      squeeze(j)]
        else:
            nodes += [const(f"s{j}", [t]), const(f"e{j}", [t + 1]),
                      h.make_node("Slice", ["x", f"s{j}", f"e{j}", "ax"], [f"xs{j}"]), squeeze(j)]
        nodes += [h.make_node("MatMul", [f"xt{j}", "w"], [f"a{j}"]),
                  h.make_node("Add", [f"a{j}", h_prev], [f"b{j}"]),
                  h.make_node("Tanh", [f"b{j}"], [f"st{j}"])]
        h_prev = f"st{j}"
    nodes.append(h.make_node("Identity", [h_prev], ["y"]))
    return model(nodes, [("x", D, [2, 6, 3])], [("y", D, None)], opset=opset)


@pytest.mark.parametrize("read", ["gather", "gather_range", "slice"])
def test_unrolled_reads_concatenate_their_cotangents(read):
    """A recurrence unrolled over T steps, reading x[:, t] at each: the T
    cotangents, each zero-padded to x's extent, summed cost T full-size
    tensors (bench/unrolled.py: reverse/primal 11.9-13.3 at T = 256);
    pieces that meet end to end are one Concat instead (4.0-4.2)."""
    from onnx_ad_mlir.api import reverse
    m = _unrolled(range(6), read)
    ops = [n.op_type for n in reverse(m, layout="onnx").graph.node]
    assert "Pad" not in ops and "ScatterElements" not in ops and ops.count("Concat") == 1, ops
    f = {"x": rng.standard_normal((2, 6, 3))}
    check_derivatives(m, f)
    check_hessian(m, f)


def test_unrolled_reads_with_a_gap_and_a_repeat():
    """Steps 4, 0, 1, 1, 5 (none at 2 and 3, one read twice): the runs 0-1
    and 4-5 become one padded Concat each, the repeat stays a term of its own."""
    from onnx_ad_mlir.api import reverse
    m = _unrolled([4, 0, 1, 1, 5], "slice", opset=10)
    ops = [n.op_type for n in reverse(m, layout="onnx").graph.node]
    assert ops.count("Concat") == 2 and ops.count("Pad") == 3, ops
    f = {"x": rng.standard_normal((2, 6, 3))}
    check_derivatives(m, f)
    check_hessian(m, f)


def test_rotated_halves_concatenate_their_cotangents():
    """Rotary embeddings' rotate_half, cat(-x[..., 2:], x[..., :2]) * sin + x * cos:
    the halves' cotangents are one Concat, not two Pads summed."""
    from onnx_ad_mlir.api import reverse
    nodes = [const("lo", [0]), const("mid", [2]), const("hi", [4]), const("ax", [-1]),
             const("sin", rng.standard_normal(4)), const("cos", rng.standard_normal(4)),
             h.make_node("Slice", ["x", "lo", "mid", "ax"], ["x1"]),
             h.make_node("Slice", ["x", "mid", "hi", "ax"], ["x2"]),
             h.make_node("Neg", ["x2"], ["nx2"]),
             h.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
             h.make_node("Mul", ["rot", "sin"], ["a"]), h.make_node("Mul", ["x", "cos"], ["b"]),
             h.make_node("Add", ["a", "b"], ["y"])]
    m = model(nodes, [("x", D, ["n", 3, 4])], [("y", D, None)])
    ops = [n.op_type for n in reverse(m, layout="onnx").graph.node]
    assert "Pad" not in ops, ops
    run_feeds = {"x": rng.standard_normal((2, 3, 4))}
    check_derivatives(m, run_feeds)


@pytest.mark.parametrize("n,step,opset", [(8, 2, 18), (9, 3, 18), (8, 2, 10), (7, 2, 18)])
def test_interleaved_pieces_concatenate_their_cotangents(n, step, opset):
    """x[..., j::step] for every j (GPT-J's rotary pairs): each piece's
    cotangent is placed on a grid of n / step rows of `step` and merged
    back, so the sum over j is one Concat along the grid's columns and one
    Reshape, not `step` zero-filled full-width tensors (GPT-J's reverse
    model, 2 layers of width 256: 0.90 of its time). An extent that `step`
    does not divide (7) keeps its sum; all against differences and the
    Hessian."""
    from onnx_ad_mlir.api import reverse
    nodes = [const("ax", [-1]), const("st", [step]), const("end", [n])]
    for j in range(step):
        nodes += [const(f"b{j}", [j]), const(f"c{j}", rng.standard_normal(len(range(j, n, step)))),
                  h.make_node("Slice", ["x", f"b{j}", "end", "ax", "st"], [f"p{j}"]),
                  h.make_node("Sin", [f"p{j}"], [f"s{j}"]),
                  h.make_node("Mul", [f"s{j}", f"c{j}"], [f"y{j}"])]
    nodes.append(h.make_node("Concat", [f"y{j}" for j in range(step)], ["y"], axis=-1))
    m = model(nodes, [("x", D, ["n", 3, n])], [("y", D, None)], opset=opset)
    ops = [n.op_type for n in reverse(m, layout="onnx").graph.node]
    assert ("Pad" in ops) == (n % step != 0), ops
    f = {"x": rng.standard_normal((2, 3, n))}
    check_derivatives(m, f)
    check_hessian(m, f)


@pytest.mark.parametrize("opset", [13, 18])
def test_strided_quarters_concatenate_their_cotangents(opset):
    """Swin's patch merging (and YOLOv5's Focus): x[:, i::2, j::2] for the
    four (i, j), concatenated along the channels. Each quarter's cotangent
    is one grid placement; the four join pairwise along one inserted axis,
    then the pairs along the other: three Concats (besides the primal's),
    one Reshape, no Pad (it was two interleaving Pads and Reshapes per
    quarter, summed)."""
    from onnx_ad_mlir.api import reverse
    nodes = [const("axes", [1, 2]), const("st", [2, 2]), const("end", [4, 6])]
    for i, j in ((0, 0), (1, 0), (0, 1), (1, 1)):
        nodes += [const(f"b{i}{j}", [i, j]),
                  h.make_node("Slice", ["x", f"b{i}{j}", "end", "axes", "st"], [f"q{i}{j}"])]
    nodes += [h.make_node("Concat", ["q00", "q10", "q01", "q11"], ["c"], axis=-1),
              const("w", rng.standard_normal((12, 5))),
              h.make_node("MatMul", ["c", "w"], ["m"]), h.make_node("Tanh", ["m"], ["y"])]
    m = model(nodes, [("x", D, ["n", 4, 6, 3])], [("y", D, None)], opset=opset)
    ops = [n.op_type for n in reverse(m, layout="onnx").graph.node]
    assert "Pad" not in ops and ops.count("Concat") == 4 and ops.count("Reshape") == 1, ops
    f = {"x": rng.standard_normal((2, 4, 6, 3))}
    check_derivatives(m, f)
    check_hessian(m, f)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 0, 2, 3], [0, -1, 1, 2], [-1, 2, 1, -2]])
def test_pad(mode, pads):
    """Crops and pads on one axis (negative and positive pads): the wrap
    period is that of the cropped axis, as ONNX Runtime runs it (a crop
    once read the uncropped input)."""
    run([const("p", pads), h.make_node("Pad", ["x", "p"], ["y"], mode=mode)], (3, 5), opset=19)


def test_pad_constant_value():
    run([const("p", [0, 1, 1, 0]), h.make_node("Pad", ["x", "p", "c"], ["y"])], (2, 3),
        [("c", D, [])], {"c": np.array(0.7)})


def test_trilu():
    run([h.make_node("Trilu", ["x"], ["y"], upper=0)], (2, 3, 3))


def test_range():
    m = model([h.make_node("Range", ["s", "l", "d"], ["r"]), h.make_node("Mul", ["r", "r"], ["y"])],
              [("s", D, []), ("l", D, []), ("d", D, [])], [("y", D, None)])
    check_derivatives(m, {"s": np.array(0.3), "l": np.array(4.1), "d": np.array(0.7)})


def test_reverse_sequence():
    run([const("l", [3, 1, 2]),
         h.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0)], (3, 3, 2))


@pytest.mark.parametrize("op,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"),
                                     ("SpaceToDepth", None)])
def test_space_depth(op, mode):
    attrs = {"blocksize": 2} | ({"mode": mode} if mode else {})
    shape = (1, 8, 2, 3) if op == "DepthToSpace" else (2, 2, 4, 2)
    run([h.make_node(op, ["x"], ["y"], **attrs)], shape, hessian=False)


@pytest.mark.parametrize("axis", [None, 1])
def test_compress(axis):
    attrs = {} if axis is None else {"axis": axis}
    run([const("c", np.array([True, False, True])), h.make_node("Compress", ["x", "c"], ["y"], **attrs)],
        (2, 3))


def test_unique_values():
    m = model([h.make_node("Unique", ["x"], ["y"], sorted=1)], [("x", D, [5])], [("y", D, None)])
    check_derivatives(m, {"x": np.array([0.5, -1.0, 2.0, 0.25, 3.0])})


def test_center_crop_pad():
    run([const("s", [2, 5]), h.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[0, 2])], (4, 2, 3))


def test_dequantize_scale():
    m = model([const("q", np.array([[3, -2], [5, 1]], dtype=np.int8)),
               const("zp", np.array([1, -1], dtype=np.int8)),
               h.make_node("DequantizeLinear", ["q", "x", "zp"], ["y"], axis=1),
               h.make_node("Mul", ["y", "y"], ["z"])], [("x", TP.FLOAT, [2])],
              [("z", TP.FLOAT, None)], opset=19)
    check_derivatives(m, {"x": np.array([0.5, 0.25], dtype=np.float32)})


@pytest.mark.parametrize("steps", [[2], [-1], [-2]])
def test_slice_steps_reverse(steps):
    run([const("s", [-1 if steps[0] < 0 else 0]), const("e", [-100 if steps[0] < 0 else 100]),
         const("a", [1]), const("st", steps),
         h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], (2, 5))


def test_slice_empty_along_one_axis():
    """x[:, :, 0:-1:-2, 2::2] is empty (axis 2 has extent 1): its cotangent
    reaches x nowhere. At opset 13 the Hessian's reversed axis scattered by
    an empty index list reshaped by -1, which ONNX Runtime refuses (a fuzz
    of strided reads)."""
    nodes = [const("s", [0, 2]), const("e", [-1, 6]), const("a", [2, 3]), const("st", [-2, 2]),
             h.make_node("Slice", ["x", "s", "e", "a", "st"], ["p"]),
             h.make_node("Tanh", ["p"], ["pt"]), h.make_node("Mul", ["pt", "pt"], ["pp"]),
             h.make_node("ReduceSum", ["pp"], ["ps"], keepdims=0),
             h.make_node("Sin", ["x"], ["q"]), h.make_node("ReduceSum", ["q"], ["qs"], keepdims=0),
             h.make_node("Add", ["ps", "qs"], ["y"])]
    run(nodes, (2, 3, 1, 5), opset=13)


def test_slice_of_huge_extent_builds():
    """A reversed first element of a 10^12-extent input: both modes build a
    valid model without listing every position of the axis (the Slice
    transpose did: MemoryError, fuzz seed 39 case 257); the adjoint's index
    constant holds the one kept position."""
    import onnx
    from onnx_ad_mlir.api import forward, reverse
    nodes = [const("s", [0]), const("e", [-2 ** 62]), const("a", [0]), const("st", [-1]),
             h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [10 ** 12])],
                                  [h.make_tensor_value_info("y", TP.FLOAT, [1])]),
                     opset_imports=[h.make_opsetid("", 18)])
    for mode in (forward, reverse):
        d = mode(m, layout="onnx")
        onnx.checker.check_model(d, full_check=True)
        assert all(t.ByteSize() < 10 ** 4 for t in d.graph.initializer)


def test_slice_runtime_starts():
    run([h.make_node("Shape", ["x"], ["sh"], start=1, end=2), const("two", [2]),
         h.make_node("Div", ["sh", "two"], ["s"]), const("a", [1]),
         h.make_node("Slice", ["x", "s", "sh", "a"], ["y"])], (2, 5))


@pytest.mark.parametrize("op,attrs,idx", [
    ("Gather", {"axis": 1}, [[2, 0], [2, 1]]),
    ("Gather", {"axis": 1}, np.array([[2, 0], [-1, 1]], np.int32)),
    ("GatherElements", {"axis": 0}, [[0, 0, 1], [2, 2, 2]]),
    ("GatherElements", {"axis": 0}, np.array([[0, 0, 1], [2, -1, 2]], np.int32)),
    ("GatherND", {}, [[0, 1], [2, 0], [0, 1]])])
def test_gathers_before_opset16(op, attrs, idx):
    """No scatter reduction before opset 16: OneHot products, duplicates
    accumulate; int32 indices too (ONNX Runtime's OneHot has no kernel for
    them with an int64 depth: they are cast)."""
    shape = (3, 2, 2) if op == "GatherND" else (3, 4)
    errs = run([const("i", idx), h.make_node(op, ["x", "i"], ["y"], **attrs)], shape, opset=13)
    assert errs["dot"] < 1e-9


@pytest.mark.parametrize("axis,idx", [(0, [[2, 0], [-1, 2]]), (1, [3, 0, 3, -4])])
def test_gather_before_opset16_over_a_run_time_extent(axis, idx):
    """Gather's transpose before opset 16 on an axis whose extent is known
    only at run time: the OneHot product reads its depth from the data's
    shape (was refused). Duplicate and negative indices accumulate; two
    input sizes, a Hessian."""
    m = model([const("i", idx), h.make_node("Gather", ["x", "i"], ["g"], axis=axis),
               h.make_node("Sin", ["g"], ["y"])], [("x", D, ["a", "b"])], [("y", D, None)],
              opset=13)
    for shape in ((4, 5), (5, 4)):
        f = {"x": rng.standard_normal(shape)}
        assert check_derivatives(m, f)["dot"] < 1e-9
        check_hessian(m, f, output="y")


@pytest.mark.parametrize("extents", [[3, 4], ["a", "b"]])
def test_onehot_scatter_runs_in_the_reference_evaluator(extents):
    """Gather's reverse model before opset 16 (a OneHot product) gives ONNX
    Runtime's results in ONNX's reference evaluator too, with a static depth
    and one read at run time: the depth is a scalar (the evaluator refused
    a one-element rank-1 depth, which ONNX also allows; found by the
    fuzzer's float16 check)."""
    from onnx.reference import ReferenceEvaluator
    from onnx_ad_mlir.api import reverse
    from adcheck import run as ort_run
    m = model([const("i", [[2, 0], [-1, 2]]), h.make_node("Gather", ["x", "i"], ["y"], axis=1)],
              [("x", D, extents)], [("y", D, None)], opset=13)
    rev = reverse(m, layout="onnx")
    assert "OneHot" in {n.op_type for n in rev.graph.node}
    f = {"x": rng.standard_normal((3, 4)), "adj_y": rng.standard_normal((3, 2, 2, 2))}
    ev = ReferenceEvaluator(rev)
    got = dict(zip(ev.output_names, ev.run(None, f)))
    np.testing.assert_allclose(got["adj_x"], ort_run(rev, f)["adj_x"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch_dims,idx", [(0, [[0, 1], [2, 0], [0, 1], [-1, -2]]),
                                             (0, [[1], [-3], [1]]), (1, [[1], [0], [1]])])
def test_gather_nd_before_opset16_over_run_time_extents(batch_dims, idx):
    """GatherND's transpose before opset 16 over indexed axes whose extents
    are known only at run time: linear indices from strides and a OneHot
    depth read off the data's shape (was refused). Duplicates accumulate."""
    m = model([const("i", idx), h.make_node("GatherND", ["x", "i"], ["g"], batch_dims=batch_dims),
               h.make_node("Sin", ["g"], ["y"])], [("x", D, ["a", "b", "c"])],
              [("y", D, None)], opset=13)
    for shape in ((3, 3, 2), (3, 4, 5)):
        f = {"x": rng.standard_normal(shape)}
        assert check_derivatives(m, f)["dot"] < 1e-9
        check_hessian(m, f, output="y")


@pytest.mark.parametrize("opset", [10, 11])
@pytest.mark.parametrize("start, end, step", [(1, 6, 2), (4, 0, -2)])
def test_strided_slice_before_opset11(opset, start, end, step):
    """A strided Slice's transpose interleaves the cotangent with zeros by
    Pads (a step > 0) or places it by a scatter (< 0): at opset 10 Pad
    takes its pads as an attribute (an input made onnx.PadV2 fail
    verification), and the scatter is Scatter, ScatterElements' name there."""
    run([const("s", [start]), const("e", [end]), const("a", [1]), const("st", [step]),
         h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], (2, 6), opset=opset)


def test_slice_steps_opset13():
    run([const("s", [0]), const("e", [100]), const("a", [1]), const("st", [2]),
         h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], (2, 5), opset=13)


@pytest.mark.parametrize("opset", [13, 18])
def test_gather_nd_batch_dims(opset):
    run([const("i", [[[1], [0], [1]], [[2], [2], [0]]]),
         h.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)], (2, 3, 2), opset=opset)


def test_pad_negative():
    run([const("p", [-1, 2, 1, -2]), h.make_node("Pad", ["x", "p"], ["y"])], (3, 5))


def test_closure_second_order():
    """Every op these rules emit has rules itself: differentiate twice, all ways."""
    from onnx_ad_mlir.api import forward, reverse
    cases = [
        ([const("i", [[2, 0], [2, 1]]), h.make_node("Gather", ["x", "i"], ["y"], axis=1)], (3, 4), 18),
        ([const("i", [[0, 1], [2, 0]]), h.make_node("GatherND", ["x", "i"], ["y"])], (3, 2, 2), 13),
        ([const("i", [[0, 0, 1]]), h.make_node("GatherElements", ["x", "i"], ["y"], axis=0)], (3, 3), 13),
        ([const("r", [2, 1]), h.make_node("Tile", ["x", "r"], ["y"])], (2, 3), 18),
        ([const("p", [1, 0, 2, 3]), h.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], (3, 4), 18),
        ([const("s", [0]), const("e", [100]), const("a", [1]), const("st", [2]),
          h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], (2, 5), 18),
    ]
    for nodes, shape, opset in cases:
        m = model(nodes, [("x", D, list(shape))], [("y", D, None)], opset=opset)
        reverse(reverse(m))
        reverse(forward(m))
        forward(forward(m))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_is_linear_in_its_values(axis):
    """OneHot puts values[1] on the hot positions and values[0] elsewhere:
    its derivative in `values` was taken as zero (listed with the piecewise
    constant ops), a silent zero."""
    m = model([h.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=axis),
               h.make_node("Mul", ["y", "w"], ["z"])],
              [("i", TP.INT64, [2, 3]), ("v", TP.FLOAT, [2]), ("w", TP.FLOAT, [])],
              [("z", TP.FLOAT, None)], inits=[nh.from_array(np.array(4, np.int64), "depth")])
    feeds = {"i": np.array([[0, 3, 1], [2, -1, 0]]), "v": np.array([-0.5, 2.0], np.float32),
             "w": np.array(1.5, np.float32)}  # (ONNX Runtime has no float64 OneHot)
    check_derivatives(m, feeds, inputs=["v", "w"])


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("batch", [3, 0])
def test_reshape_of_unit_axes_over_run_time_extents(opset, batch):
    """A Flatten of [B, C, 1, 1] (after a global pool) and a Reshape of [B, 4]
    to [B, 1, 4] over run-time extents: the tangents and cotangents are
    Squeeze/Unsqueeze, no shape read at run time and no -1, which has no
    value beside a 0 extent (B = 0 failed at opset 13: no allowzero)."""
    import onnx
    from onnx_ad_mlir import forward, reverse
    nodes = [h.make_node("Flatten", ["x"], ["f"], axis=1), h.make_node("Tanh", ["f"], ["t"]),
             const("s", [0, 1, 4]), h.make_node("Reshape", ["t", "s"], ["y"]),
             h.make_node("Mul", ["y", "y"], ["z"])]
    m = model(nodes, [("x", D, ["B", 4, 1, 1])], [("y", D, None), ("z", D, None)], opset=opset)
    m = onnx.shape_inference.infer_shapes(m)
    for mode in (forward, reverse):
        ops = {n.op_type for n in mode(m, inputs=["x"], outputs=["y"], layout="onnx").graph.node}
        assert "Shape" not in ops, (mode.__name__, ops)
    f = {"x": rng.standard_normal((batch, 4, 1, 1))}
    if batch:
        check_derivatives(m, f, inputs=["x"])
        check_hessian(m, f, output="z")
    else:  # nothing to difference: the derivative models run and give empty results
        from adcheck import run as ort_run
        got = ort_run(reverse(m, inputs=["x"], outputs=["y"], layout="onnx"),
                      {**f, "adj_y": np.zeros((0, 1, 4, 2))})
        assert got["adj_x"].shape == (0, 4, 1, 1, 2)
