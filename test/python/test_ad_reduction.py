"""Reduction, scan, selection, Det and Einsum rules against finite
differences, both modes, and Hessians."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h, numpy_helper as nh

from adcheck import check_derivatives, check_hessian, run
from onnx_ad_mlir.api import forward, reverse

D, F, I = TP.DOUBLE, TP.FLOAT, TP.INT64
ERRORS: dict[str, float] = {}


def model(nodes, inputs, outputs, opset=18, initializers=(), value_info=()):
    vi = lambda specs: [h.make_tensor_value_info(n, t, s) for n, t, s in specs]  # noqa: E731
    g = h.make_graph(nodes, "g", vi(inputs), vi(outputs), list(initializers),
                     value_info=vi(value_info))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def rand(shape, seed=0, dtype=np.float64, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def check(name, m, feeds, hessian=True, inputs=None, **kw):
    e = check_derivatives(m, feeds, inputs=inputs, **kw)
    if hessian:
        e["hess"] = check_hessian(m, feeds, inputs=inputs)
    ERRORS[name] = max(e.values())


def const(name, values):
    return nh.from_array(np.asarray(values, dtype=np.int64), name)


def test_expanded_cotangent_contributed_twice():
    """Add(t, t) hands ReduceSum's expanded cotangent to t twice; the Sum of
    t's contributions drops that Expand (Max's contribution already has the
    full shape) once, and reads its operand for both (a RuntimeError on the
    erased op before; fuzz seed 50 case 1370)."""
    m = model([h.make_node("Transpose", ["x"], ["t"], perm=[1, 2, 0]),
               h.make_node("Add", ["t", "t"], ["a"]),
               h.make_node("ReduceSum", ["a"], ["r"], keepdims=0),
               h.make_node("Max", ["r", "t"], ["y"])],
              [("x", D, [2, 2, 2])], [("y", D, [2, 2, 2])])
    # r = 2 sum(x) = 0.1: Max takes r at four positions, t at the others
    x = np.array([0.9, -0.8, 0.5, -0.45, 0.3, -0.2, 0.7, -0.9]).reshape(2, 2, 2)
    check("expanded_twice", m, {"x": x}, hessian=False)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_prod(keepdims):
    out = [2, 1, 4] if keepdims else [2, 4]
    m = model([h.make_node("ReduceProd", ["x", "axes"], ["y"], keepdims=keepdims)],
              [("x", D, [2, 3, 4])], [("y", D, out)], initializers=[const("axes", [1])])
    x = rand((2, 3, 4), low=0.5, high=1.5)
    check(f"ReduceProd-k{keepdims}", m, {"x": x})
    # zeros: one zero in a slice, two zeros in a slice (forward/reverse exact)
    x[0, 1, 0] = 0.0
    x[1, 0, 2] = x[1, 2, 2] = 0.0
    check(f"ReduceProd-zeros-k{keepdims}", m, {"x": x}, hessian=False)


def test_normalize_zero_rows():
    """F.normalize, x / max(||x||, eps), at rows of zeros (swin_v2's padded
    windows): the derivative is x's tangent / eps there, not the NaN of
    ReduceL2's 0 / 0 (torchvision's swin_v2_t, forward mode)."""
    eps = nh.from_array(np.asarray(1e-3), "eps")
    m = model([h.make_node("ReduceL2", ["x", "axes"], ["n"], keepdims=1),
               h.make_node("Max", ["n", "eps"], ["m"]),
               h.make_node("Div", ["x", "m"], ["y"])],
              [("x", D, [3, 4])], [("y", D, [3, 4])], initializers=[const("axes", [1]), eps])
    x = rand((3, 4))
    x[1] = 0.0
    check("normalize-zero-row", m, {"x": x})
    v = rand((3, 4), seed=1)[..., None]
    t = run(forward(m, layout="onnx"), {"x": x, "fwd_x": v})["fwd_y"]
    np.testing.assert_allclose(t[1], v[1] / 1e-3)


def test_reduce_prod_all_axes_opset13():
    m = model([h.make_node("ReduceProd", ["x"], ["y"], keepdims=0)], [("x", D, [2, 3])],
              [("y", D, [])], opset=13)
    check("ReduceProd-all-13", m, {"x": rand((2, 3), low=0.5, high=1.5)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2",
                                "ReduceLogSumExp", "ReduceProd", "ReduceSumSquare"])
def test_runtime_axes(op):
    # The axes are a graph input: the rules reduce over axes computed at run time.
    feeds = {"x": rand((2, 3, 4), low=0.5, high=1.5), "axes": np.array([-2], np.int64)}
    m = model([h.make_node(op, ["x", "axes"], ["r"], keepdims=1),
               h.make_node("Mul", ["r", "r"], ["y"])],
              [("x", D, [2, 3, 4]), ("axes", I, [1])], [("y", D, [2, 1, 4])],
              value_info=[("r", D, [2, 1, 4])])
    check(f"{op}-runtime-axes-keep", m, feeds, inputs=["x"], hessian=False)
    # Hessians go through an exported reverse model; the exporter writes no
    # value_info, so a primal intermediate of a run-time-axes reduction loses
    # its rank there: the Hessian model reduces straight to an output.
    m = model([h.make_node(op, ["x", "axes"], ["z"], keepdims=0)],
              [("x", D, [2, 3, 4]), ("axes", I, [1])], [("z", D, [2, 4])])
    check(f"{op}-runtime-axes", m, feeds, inputs=["x"], hessian=op != "ReduceMax")


def test_runtime_axes_empty():
    # Empty axes at run time: all axes (noop_with_empty_axes=0), or none (=1).
    for noop in (0, 1):
        m = model([h.make_node("ReduceSumSquare", ["x", "axes"], ["y"], keepdims=1,
                               noop_with_empty_axes=noop)],
                  [("x", D, [2, 3]), ("axes", I, [None])],
                  [("y", D, [2, 3] if noop else [1, 1])])
        feeds = {"x": rand((2, 3)), "axes": np.zeros((0,), np.int64)}
        # (no Hessian: ONNX inference loses the rank of a run-time-axes
        # reduction in the exported reverse model, which has no value_info)
        check(f"runtime-empty-noop{noop}", m, feeds, inputs=["x"], hessian=False)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax",
                                "ReduceMin", "ReduceLogSum", "ReduceLogSumExp",
                                "ReduceSumSquare", "ReduceL1", "ReduceL2"])
def test_nothing_reduced_is_pointwise(op):
    """With no axis to reduce (a rank-0 input, or empty axes with
    noop_with_empty_axes) a reduction is its pointwise form in ONNX Runtime
    and ONNX's reference: log x for ReduceLogSum (its derivative was taken as
    the identity's, fuzz seed 189 case 156), x^2, |x| for the squares and
    norms, x for the rest."""
    x = rand([2, 3], low=0.5, high=2.0)
    for shape, noop, feed in (([], 0, np.asarray(x[0, 0])), ([2, 3], 1, x)):
        attrs = {"noop_with_empty_axes": 1} if noop else {}
        m = model([h.make_node(op, ["x", "ax"], ["y"], keepdims=0, **attrs)],
                  [("x", D, shape)], [("y", D, shape)], initializers=[const("ax", [])])
        check(f"{op}-nothing-reduced-{shape}", m, {"x": feed})


def test_dynamic_batch_mean_twice_differentiated():
    # Unbroadcasting over a symbolic batch emits ReduceSum with run-time axes;
    # forward(reverse) must differentiate it again.
    m = model([h.make_node("Mul", ["x", "b"], ["p"]), h.make_node("ReduceMean", ["p"], ["y"],
                                                                     axes=[1], keepdims=0)],
              [("x", D, ["n", 3]), ("b", D, [3])], [("y", D, ["n"])], opset=13)
    check("dyn-batch", m, {"x": rand((4, 3)), "b": rand(3, 1)}, hessian=False)
    # forward(reverse) without the export in between (it keeps every type)
    hvp = _fwd_rev_in_mlir(m)
    adj = reverse(m, inputs=["x"], outputs=["y"], layout="onnx")
    x, bb = rand((4, 3)), rand(3, 1)
    w, v = rand((4, 1), 2), rand((4, 3, 1), 3)
    got = run(hvp, {"x": x, "b": bb, "adj_y": w, "fwd_x": v})["fwd_adj_x"][..., 0, 0]
    eps = 1e-6
    g = lambda xx: run(adj, {"x": xx, "b": bb, "adj_y": w})["adj_x"][..., 0]  # noqa: E731
    fd = (g(x + eps * v[..., 0]) - g(x - eps * v[..., 0])) / (2 * eps)
    np.testing.assert_allclose(got, fd, atol=1e-6)


def _fwd_rev_in_mlir(m):
    from mlir import ir
    from onnx_ad_mlir import transforms  # noqa: F401
    from onnx_ad_mlir.exporter import export_onnx
    from onnx_ad_mlir.importer import import_onnx
    from onnx_ad_mlir.transforms import passes
    with ir.Context() as ctx:
        module = import_onnx(m, context=ctx)
        passes.reverse_pass(module.operation, {"layout": "onnx", "inputs": "x", "outputs": "y"})
        passes.forward_pass(module.operation, {"layout": "onnx", "inputs": "x",
                                               "outputs": "adj_x"})
        return export_onnx(module)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    m = model([h.make_node("CumSum", ["x", "axis"], ["c"], exclusive=exclusive, reverse=reverse),
               h.make_node("Mul", ["c", "c"], ["y"])],
              [("x", D, [2, 4])], [("y", D, [2, 4])], initializers=[const("axis", 1)])
    check(f"CumSum-e{exclusive}r{reverse}", m, {"x": rand((2, 4))})


def test_cumsum_runtime_axis():
    m = model([h.make_node("CumSum", ["x", "axis"], ["c"]), h.make_node("Sin", ["c"], ["y"])],
              [("x", D, [2, 3]), ("axis", I, [])], [("y", D, [2, 3])])
    for a in (0, -1):
        check(f"CumSum-runtime-axis{a}", m, {"x": rand((2, 3)), "axis": np.array(a)},
              inputs=["x"])


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumprod(exclusive, reverse):
    m = model([h.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
              [("x", D, [2, 5])], [("y", D, [2, 5])], opset=26,
              initializers=[const("axis", -1)])
    x = rand((2, 5), low=0.5, high=1.5)
    check(f"CumProd-e{exclusive}r{reverse}", m, {"x": x})
    x[0, 2] = 0.0
    x[1, 1] = x[1, 3] = 0.0
    check(f"CumProd-zeros-e{exclusive}r{reverse}", m, {"x": x}, hessian=False)


@pytest.mark.parametrize("opset,axis,largest", [(18, -1, 1), (16, 0, 0), (13, 1, 1)])
def test_topk(opset, axis, largest):
    m = model([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest),
               h.make_node("Mul", ["v", "v"], ["y"])],
              [("x", D, [3, 4])], [("y", D, None), ("i", I, None)], opset,
              initializers=[const("k", [2])])
    check(f"TopK-{opset}-{axis}-{largest}", m, {"x": rand((3, 4))})


def test_argmax_hardmax_zero():
    m = model([h.make_node("ArgMax", ["x"], ["a"], axis=1), h.make_node("Hardmax", ["x"], ["hm"]),
               h.make_node("Mul", ["x", "hm"], ["y"])],
              [("x", F, [2, 3])], [("y", F, [2, 3]), ("a", I, None)])
    check("ArgMax-Hardmax-f32", m, {"x": rand((2, 3), dtype=np.float32)}, hessian=False)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_det(n):
    # ONNX Runtime has Det in float32 only.
    m = model([h.make_node("Det", ["a"], ["y"])], [("a", F, [2, n, n])], [("y", F, [2])])
    a = rand((2, n, n), 3, np.float32) + 2 * np.eye(n, dtype=np.float32)
    check(f"Det-{n}-f32", m, {"a": a})


def test_det_singular():
    m = model([h.make_node("Det", ["a"], ["y"])], [("a", F, [3, 3])], [("y", F, [])])
    a = np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1]], np.float32)  # rank 2: gradient = cof != 0
    check("Det-singular-f32", m, {"a": a}, hessian=False)


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [[2, 3], [3, 4]]), ("ij,jk", [[2, 3], [3, 2]]),
    ("bij,bjk->bik", [[2, 2, 3], [2, 3, 2]]), ("i,i->", [[4], [4]]),
    ("ij->j", [[3, 4]]), ("ij,k->ijk", [[2, 3], [2]]), ("...ij,jk->...ik", [[2, 2, 3], [3, 2]]),
    ("ii->i", [[3, 3]]), ("ii", [[3, 3]]), ("iji,j->ij", [[2, 3, 2], [3]]),
    ("ijk,ik->j", [[2, 3, 2], [2, 2]])])
def test_einsum(eq, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    m = model([h.make_node("Einsum", names, ["e"], equation=eq), h.make_node("Sin", ["e"], ["y"])],
              [(n, D, s) for n, s in zip(names, shapes)], [("y", D, None)])
    feeds = {n: rand(s, i) for i, (n, s) in enumerate(zip(names, shapes))}
    check(f"Einsum-{eq}", m, feeds)


SECOND_ORDER = {
    "Softmax": (["x"], "Softmax", {}), "LogSoftmax": (["x"], "LogSoftmax", {}),
    "LayerNorm": (["x", "s"], "LayerNormalization", {}),
    "BatchNorm": (["x", "s", "b", "m", "v"], "BatchNormalization", {}),
    "LpNorm": (["x"], "LpNormalization", {}), "ReduceProd": (["x", "a"], "ReduceProd", {}),
    "CumSum": (["x", "a"], "CumSum", {"exclusive": 1}), "CumProd": (["x", "a"], "CumProd", {}),
    "Einsum": (["x", "w"], "Einsum", {"equation": "ij,jk->ik"}), "Det": (["d"], "Det", {}),
    "TopK": (["x", "k"], "TopK", {})}


@pytest.mark.parametrize("name", list(SECOND_ORDER))
def test_second_order_closure(name):
    # Every op these rules emit has rules itself: derivative models differentiate again.
    names, op, attrs = SECOND_ORDER[name]
    shapes = {"x": [3, 3], "s": [3], "b": [3], "m": [3], "v": [3], "w": [3, 3], "d": [3, 3]}
    t = F if name == "Det" else D
    inits = {"a": const("a", 1 if "Cum" in op else [1]), "k": const("k", [2])}
    outs = ["y", "i"] if op == "TopK" else ["y"]
    m = model([h.make_node(op, names, outs, **attrs)],
              [(n, t, shapes[n]) for n in names if n not in inits],
              [(o, t if o == "y" else I, None) for o in outs], 26 if op == "CumProd" else 18,
              [inits[n] for n in names if n in inits])
    reverse(reverse(m))
    reverse(forward(m))
    forward(forward(m))


def teardown_module(module):
    print("\nmax errors:", {k: f"{v:.1e}" for k, v in ERRORS.items()})
