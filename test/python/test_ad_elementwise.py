"""Elementwise rules against finite differences, both modes, and Hessians."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from adcheck import check_derivatives, check_hessian, run, session
from onnx_ad_mlir.api import forward, reverse

D = TP.DOUBLE


def model(nodes, inputs, outputs, opset=18, initializers=()):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(initializers))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def runs_in_double(m: onnx.ModelProto) -> bool:
    """ONNX Runtime lacks double kernels for many ops (and Celu's schema is
    float-only): those are checked in float32 with looser tolerances."""
    try:
        onnx.checker.check_model(m, full_check=True)
        session(m)
        return True
    except Exception:
        return False


def unary(op, low=-2.0, high=2.0, dtype=None, **attrs):
    make = lambda t: model([h.make_node(op, ["x"], ["y"], **attrs)], [("x", t, [2, 3])],
                           [("y", t, [2, 3])], opset=20)
    if dtype is None:
        dtype = D if runs_in_double(make(D)) else TP.FLOAT
    m = make(dtype)
    rng = np.random.default_rng(42)
    x = rng.uniform(low, high, (2, 3))
    return m, {"x": x.astype(np.float64 if dtype == D else np.float32)}


UNARY = [("Exp", {}), ("Sin", {}), ("Cos", {}), ("Tan", dict(low=-1, high=1)), ("Sinh", {}),
         ("Cosh", {}), ("Asin", dict(low=-0.9, high=0.9)), ("Acos", dict(low=-0.9, high=0.9)),
         ("Atan", {}), ("Asinh", {}), ("Acosh", dict(low=1.2, high=3)),
         ("Atanh", dict(low=-0.9, high=0.9)), ("Tanh", {}), ("Sigmoid", {}),
         ("Log", dict(low=0.2, high=3)), ("Sqrt", dict(low=0.2, high=3)),
         ("Reciprocal", dict(low=0.5, high=3)), ("Abs", {}), ("Neg", {}), ("Relu", {}),
         ("Softplus", {}), ("Softsign", {}), ("Identity", {}),
         ("LeakyRelu", dict(alpha=0.3)), ("Elu", dict(alpha=0.7)), ("Selu", {}),
         ("Celu", dict(alpha=1.5)), ("ThresholdedRelu", dict(alpha=0.4)),
         ("HardSigmoid", {}), ("HardSwish", dict(low=-5, high=5)), ("Mish", {}),
         ("Gelu", {}), ("Gelu", dict(approximate="tanh")), ("Erf", {})]


@pytest.mark.parametrize("op,kw", UNARY, ids=[f"{o}-{k.get('approximate', '')}" for o, k in UNARY])
def test_unary(op, kw):
    kw = dict(kw)
    low, high = kw.pop("low", -2.0), kw.pop("high", 2.0)
    m, feeds = unary(op, low, high, **kw)
    check_derivatives(m, feeds)
    if op not in ("Relu", "Abs", "ThresholdedRelu", "HardSigmoid", "HardSwish", "LeakyRelu"):
        check_hessian(m, feeds)


@pytest.mark.parametrize("dtype", [D, TP.FLOAT])
def test_mish_over_the_whole_line(dtype):
    """Mish's derivative takes tanh(softplus(x)) from one Exp (ONNX
    Runtime's Softplus costs as much as the Mish itself): against the
    closed form in float64 at x from -100 to 100, 0 and the clamp at 20
    included; finite everywhere."""
    x = np.array([-100, -30, -5, -1e-3, 0, 1e-3, 0.5, 5, 19.9, 20, 21, 50, 100], dtype=np.float64)
    m = model([h.make_node("Mish", ["x"], ["y"])], [("x", dtype, [13])], [("y", dtype, [13])])
    npt = np.float64 if dtype == D else np.float32
    got = run(forward(m, layout="onnx"), {"x": x.astype(npt), "fwd_x": np.ones((13, 1), npt)})
    th = np.tanh(np.logaddexp(0.0, x))
    want = th + x / (1 + np.exp(-x)) * (1 - th * th)
    assert np.isfinite(got["fwd_y"]).all()
    # (atol: ONNX Runtime's Sigmoid is relatively inexact far out on the
    # negative side, where the derivative is below 1e-11)
    np.testing.assert_allclose(got["fwd_y"][:, 0], want, rtol=1e-12 if dtype == D else 1e-5,
                               atol=1e-11 if dtype == D else 1e-7)


def test_hard_swish_slope_without_where():
    """HardSwish's slope (0 below -3, x/3 + 1/2 up to 3, 1 above) as Clip
    and masks, no Where (ONNX Runtime's costs ~6x a Cast and a Mul with an
    irregular mask): the closed form at the kinks, at +-inf, and NaN at
    NaN; in both modes."""
    x = np.array([-np.inf, -7, -3, -2.5, 0, 1e-3, 2.9, 3, 3.5, np.inf, np.nan])
    m = model([h.make_node("HardSwish", ["x"], ["y"])], [("x", D, [11])], [("y", D, [11])])
    want = np.where(x > 3, 1.0, np.where(x < -3, 0.0, x / 3 + 0.5))
    fwd, rev = forward(m, layout="onnx"), reverse(m, layout="onnx")
    for derived, seed in ((fwd, "fwd_x"), (rev, "adj_y")):
        assert "Where" not in {n.op_type for n in derived.graph.node}
        got = run(derived, {"x": x, seed: np.ones((11, 1))})
        np.testing.assert_array_equal(got["fwd_y" if seed == "fwd_x" else "adj_x"][:, 0], want)


@pytest.mark.parametrize("lambd,bias", [(0.5, 0.3), (1.5, 0.0)])
def test_shrink(lambd, bias):
    # float32: ONNX Runtime 1.32's float64 Shrink rounds through float32, so
    # float64 finite differences of it are noise
    m, feeds = unary("Shrink", dtype=TP.FLOAT, lambd=lambd, bias=bias)
    errors = check_derivatives(m, feeds)
    assert errors["kinks"] < feeds["x"].size  # some entries were compared


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"])
def test_binary_broadcast(op):
    m = model([h.make_node(op, ["a", "b"], ["y"])], [("a", D, [2, 3]), ("b", D, [3])],
              [("y", D, [2, 3])])
    rng = np.random.default_rng(1)
    feeds = {"a": rng.uniform(0.5, 2, (2, 3)), "b": rng.uniform(0.5, 2, (3,))}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


def test_broadcast_both_ways():
    m = model([h.make_node("Mul", ["a", "b"], ["y"])], [("a", D, [2, 1]), ("b", D, [1, 3])],
              [("y", D, [2, 3])])
    rng = np.random.default_rng(2)
    check_derivatives(m, {"a": rng.standard_normal((2, 1)), "b": rng.standard_normal((1, 3))})


def test_dynamic_batch_broadcast():
    m = model([h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Mul", ["s", "a"], ["y"])],
              [("a", D, ["batch", 3]), ("b", D, [1, 3])], [("y", D, ["batch", 3])])
    rng = np.random.default_rng(3)
    check_derivatives(m, {"a": rng.standard_normal((4, 3)), "b": rng.standard_normal((1, 3))})


@pytest.mark.parametrize("opset", [10, 11, 13])
def test_broadcast_decided_at_run_time(opset):
    """x * reshape(w, S), S fed at run time: whether the product broadcasts
    reshape(w) on an axis is known only then, and reverse mode sums its
    cotangent there. Before opset 13 ReduceSum takes its axes as an
    attribute: each candidate axis is summed, and the sum kept where the
    extent is 1 at run time; opset 9 (Slice's ends an attribute) refuses."""
    nodes = [h.make_node("Reshape", ["w", "S"], ["b"]), h.make_node("Mul", ["x", "b"], ["p"]),
             h.make_node("Sin", ["p"], ["y"])]
    m = model(nodes, [("x", D, [3, 4]), ("w", D, ["n"]), ("S", TP.INT64, [2])],
              [("y", D, [3, 4])], opset=opset)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 4))
    for shape in ([1, 4], [3, 4], [3, 1], [1, 1]):
        feeds = {"x": x, "w": rng.standard_normal(int(np.prod(shape))), "S": np.array(shape)}
        errors = check_derivatives(m, feeds, inputs=["x", "w"])
        assert errors["fd"] < 1e-7 and errors["dot"] < 1e-12
    if opset == 10:
        from onnx_ad_mlir.api import reverse
        from onnx_ad_mlir.errors import UnsupportedOp
        m.opset_import[0].version = 9
        with pytest.raises(UnsupportedOp, match=r"run time needs opset >= 13 \(or >= 10"):
            reverse(m, inputs=["w"])


def test_where_clip_sum_mean():
    nodes = [h.make_node("Greater", ["a", "b"], ["c"]), h.make_node("Where", ["c", "a", "b"], ["w"]),
             h.make_node("Clip", ["w", "lo", "hi"], ["k"]), h.make_node("Sum", ["k", "a", "b"], ["s"]),
             h.make_node("Max", ["s", "a"], ["y"])]
    m = model(nodes, [("a", D, [2, 3]), ("b", D, [2, 3]), ("lo", D, []), ("hi", D, [])],
              [("y", D, [2, 3])])
    rng = np.random.default_rng(4)
    feeds = {"a": rng.standard_normal((2, 3)), "b": rng.standard_normal((2, 3)),
             "lo": np.array(-0.5), "hi": np.array(0.6)}
    check_derivatives(m, feeds)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_ties_share_the_derivative(op):
    """At a tie the operands equal to the result share its derivative
    evenly: at a tie of two the mean of their tangents, which central
    differences give, as do JAX's and PyTorch's maximum/minimum
    (torch.maximum(a, b) at a == b: 1/2 each). Three operands, ties of two
    and of three, a broadcast constant; the Jacobian from forward and from
    reverse mode against weights by hand (it was all to the first operand)."""
    a = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.5]])
    b = np.array([[1.0, 0.0, 3.0], [0.5, 2.0, -4.0]])
    c = np.array([1.0, 2.0, 3.0])  # a constant operand: no tangent
    m = model([h.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c, "c")),
               h.make_node(op, ["a", "b", "c"], ["y"])],
              [("a", D, [2, 3]), ("b", D, [2, 3])], [("y", D, [2, 3])])
    stack = np.stack([a, b, np.broadcast_to(c, a.shape)])
    y = stack.max(0) if op == "Max" else stack.min(0)
    hits = (stack == y).astype(float)
    weights = hits / hits.sum(0)  # [3, 2, 3]; ties at (0, 0) of three, (0, 1), (0, 2), (1, 0)
    eye = np.eye(6).reshape(2, 3, 6)
    fwd = run(forward(m, layout="onnx"), {"a": a, "b": b, "fwd_a": eye, "fwd_b": 2 * eye})
    np.testing.assert_allclose(fwd["fwd_y"].reshape(6, 6),
                               np.diag((weights[0] + 2 * weights[1]).ravel()), atol=1e-15)
    adj = run(reverse(m, layout="onnx"), {"a": a, "b": b, "adj_y": eye})
    np.testing.assert_allclose(adj["adj_a"].reshape(6, 6), np.diag(weights[0].ravel()), atol=1e-15)
    np.testing.assert_allclose(adj["adj_b"].reshape(6, 6), np.diag(weights[1].ravel()), atol=1e-15)
    step = 1e-6  # central differences along a and b together (at the tie of three by luck)
    f = lambda s_: run(m, {"a": a + s_, "b": b + 2 * s_})["y"]
    fd = (f(step) - f(-step)) / (2 * step)
    np.testing.assert_allclose(fd, weights[0] + 2 * weights[1], atol=1e-8)


@pytest.mark.parametrize("opset", [8, 10])
@pytest.mark.parametrize("op", ["Max", "Min", "Clip", "ReduceMax"])
def test_masks_before_opset_11(op, opset):
    """Equal has no float types before opset 11 (Where none before 9): the
    masks of Max/Min, Clip and ReduceMax were float Equals there, and the
    derivative models failed ONNX's checker. Float32 (ONNX Runtime's old
    Clip and ReduceMax kernels), a tie of two in Max/Min."""
    F = TP.FLOAT
    if op in ("Max", "Min"):
        node, ins, out = h.make_node(op, ["a", "b"], ["y"]), [("a", F, [2, 3]), ("b", F, [2, 3])], [2, 3]
    elif op == "Clip":
        node, ins, out = h.make_node(op, ["a"], ["y"], min=-0.5, max=0.5), [("a", F, [2, 3])], [2, 3]
    else:
        node, ins, out = h.make_node(op, ["a"], ["y"], axes=[1], keepdims=0), [("a", F, [2, 3])], [2]
    m = model([node], ins, [("y", F, out)], opset=opset)
    m.ir_version = 7
    rng = np.random.default_rng(6)
    feeds = {n: rng.standard_normal((2, 3)).astype(np.float32) for n, _, _ in ins}
    if "b" in feeds:
        feeds["b"][0, 0] = feeds["a"][0, 0]
    for d in (forward(m, layout="onnx"), reverse(m, layout="onnx")):
        onnx.checker.check_model(d, full_check=True)
    errors = check_derivatives(m, feeds)
    assert errors["fd"] < 1e-4 and errors["dot"] < 1e-5


def test_mean_float32():
    m = model([h.make_node("Mean", ["a", "b"], ["y"])], [("a", TP.FLOAT, [2, 3]), ("b", TP.FLOAT, [3])],
              [("y", TP.FLOAT, [2, 3])])
    rng = np.random.default_rng(5)
    check_derivatives(m, {"a": rng.standard_normal((2, 3)).astype(np.float32),
                          "b": rng.standard_normal(3).astype(np.float32)})


def test_float32_model():
    m, feeds = unary("Tanh", dtype=TP.FLOAT)
    check_derivatives(m, feeds)


@pytest.mark.parametrize("p", [np.array(2.0), np.array([3.0]), np.array(3, np.int64),
                               np.array(4.0), np.array(1.0), np.array(0.5), np.array(1.5),
                               np.array(-1.0), np.array(-0.5), np.array(2.5)])
def test_powers_without_slow_pows(p):
    """x ** c: ONNX Runtime runs Pow fast for the exponents 2 and 3 only
    (others take ~15x a Mul), so the coefficient c * x ** (c - 1) is
    written with products, Sqrt or the primal's own power for the common
    exponents (RMSNorm's square, GPT-2's GELU cube); a general one (2.5)
    keeps its Pow. Against differences and the Hessian."""
    m = model([h.make_node("Pow", ["x", "p"], ["q"]), h.make_node("Sin", ["q"], ["y"])],
              [("x", D, [2, 3])], [("y", D, [2, 3])],
              initializers=[numpy_helper.from_array(p, "p")])
    x = np.random.default_rng(3).uniform(0.5, 1.5, (2, 3))
    check_derivatives(m, {"x": x})
    check_hessian(m, {"x": x})
    for derived in (forward(m, layout="onnx"), reverse(m, layout="onnx")):
        consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in derived.graph.node
                  if n.op_type == "Constant" and n.attribute[0].name == "value"}
        consts.update({t.name: numpy_helper.to_array(t) for t in derived.graph.initializer})
        # (the primal's Pow has the exponent c)
        slow = [n for n in derived.graph.node if n.op_type == "Pow" and not (
            n.input[1] in consts and float(consts[n.input[1]].reshape(-1)[0]) in (2, 3, p))]
        assert bool(slow) == (float(p.reshape(-1)[0]) == 2.5), [n.input for n in slow]


@pytest.mark.parametrize("root", [h.make_node("Pow", ["x", "p"], ["q"]),
                                  h.make_node("Pow", ["x", "half"], ["q"]),
                                  h.make_node("Sqrt", ["x"], ["q"])])
def test_fractional_power_of_a_masked_negative_base(root):
    """Where(x > 0, x ** 0.75, 0) and Where(x > 0, sqrt(x), 0): the
    discarded branch is NaN for x < 0 in the primal and in the root's
    coefficient. Forward mode drops its tangent; reverse mode must not turn
    the zero cotangent the Where sends back into 0 * NaN. Finite
    differences away from 0, and the two modes against each other
    (<J v, w> = <v, J^T w>) at every entry."""
    nodes = [root, h.make_node("Greater", ["x", "zero"], ["pos"]),
             h.make_node("Where", ["pos", "q", "zero"], ["y"])]
    consts = [numpy_helper.from_array(np.array(0.75), "p"), numpy_helper.from_array(np.array(0.0), "zero"),
              numpy_helper.from_array(np.array(0.5), "half")]
    m = model(nodes, [("x", D, [2, 3])], [("y", D, [2, 3])], initializers=consts)
    x = np.array([[-1.5, 0.5, 2.0], [-0.2, 1.3, -3.0]])
    check_derivatives(m, {"x": x})
    rng = np.random.default_rng(0)
    v, w = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2))
    jv = run(forward(m, inputs=["x"], outputs=["y"], layout="onnx"), {"x": x, "fwd_x": v})["fwd_y"]
    jtw = run(reverse(m, inputs=["x"], outputs=["y"], layout="onnx"), {"x": x, "adj_y": w})["adj_x"]
    assert np.isfinite(jtw).all()
    np.testing.assert_allclose(np.einsum("abk,abk->k", jv, w), np.einsum("abk,abk->k", v, jtw))
    check_hessian(m, {"x": x})


@pytest.mark.parametrize("square,root", [
    (h.make_node("Mul", ["x", "x"], ["s"]), h.make_node("Pow", ["b", "p"], ["y"])),
    (h.make_node("Pow", ["x", "two"], ["s"]), h.make_node("Sqrt", ["b"], ["y"]))])
def test_root_of_a_nonnegative_base_is_not_guarded(square, root):
    """(x * x + 1) ** 0.75 (as LRN's lowering builds its denominator) and
    sqrt(x ** 2 + 1) (a legacy LayerNorm's deviation): the base cannot be
    negative, so no NaN guard is emitted."""
    nodes = [square, h.make_node("Add", ["s", "one"], ["b"]), root]
    consts = [numpy_helper.from_array(np.array(0.75), "p"), numpy_helper.from_array(np.array(1.0), "one"),
              numpy_helper.from_array(np.array(2.0), "two")]
    m = model(nodes, [("x", D, [2, 3])], [("y", D, [2, 3])], initializers=consts)
    check_derivatives(m, {"x": np.random.default_rng(1).standard_normal((2, 3))})
    assert not any(n.op_type == "IsNaN" for n in reverse(m, inputs=["x"], outputs=["y"]).graph.node)


@pytest.mark.parametrize("opset", [9, 10, 18])
def test_safe_division(opset):
    """Where(n > 0, x / n, 0) with n = Relu(z) exactly 0 for z < 0: reverse
    mode must not turn the zero cotangent the Where sends back into 0 / 0
    (both operands differentiated), nor forward mode's discarded tangent
    into NaN; finite differences, <J v, w> = <v, J^T w>, Hessian. Also
    before opset 11, which has no float Equal for the zero test."""
    nodes = [h.make_node("Relu", ["z"], ["n"]), h.make_node("Div", ["x", "n"], ["q"]),
             h.make_node("Greater", ["n", "zero"], ["pos"]),
             h.make_node("Where", ["pos", "q", "zero"], ["y"])]
    m = model(nodes, [("x", D, [2, 3]), ("z", D, [2, 3])], [("y", D, [2, 3])], opset=opset,
              initializers=[numpy_helper.from_array(np.array(0.0), "zero")])
    feeds = {"x": np.array([[1.0, 2.0, -1.0], [0.5, 3.0, -2.0]]),
             "z": np.array([[0.5, -1.0, 2.0], [-0.3, 1.5, -2.0]])}
    errors = check_derivatives(m, feeds)
    assert errors["dot"] < 1e-12
    adj = run(reverse(m, inputs=["x", "z"], outputs=["y"], layout="onnx"),
              {**feeds, "adj_y": np.ones((2, 3, 1))})
    assert np.isfinite(adj["adj_x"]).all() and np.isfinite(adj["adj_z"]).all()
    check_hessian(m, feeds)


def test_division_by_a_provably_nonzero_value_is_not_guarded():
    """x / sqrt(s * s + eps) and x / 4: no zero test is emitted."""
    nodes = [h.make_node("Mul", ["s", "s"], ["ss"]), h.make_node("Add", ["ss", "eps"], ["v"]),
             h.make_node("Sqrt", ["v"], ["d"]), h.make_node("Div", ["x", "d"], ["q"]),
             h.make_node("Div", ["q", "four"], ["y"])]
    m = model(nodes, [("x", D, [2, 3]), ("s", D, [2, 3])], [("y", D, [2, 3])],
              initializers=[numpy_helper.from_array(np.array(1e-5), "eps"),
                            numpy_helper.from_array(np.array(4.0), "four")])
    rng = np.random.default_rng(2)
    check_derivatives(m, {"x": rng.standard_normal((2, 3)), "s": rng.standard_normal((2, 3))})
    ops = {n.op_type for n in reverse(m, inputs=["x", "s"], outputs=["y"]).graph.node}
    assert not {"Equal", "Where", "IsNaN"} & ops, ops


@pytest.mark.parametrize("opset", [9, 18])
@pytest.mark.parametrize("op", ["Log", "Reciprocal"])
def test_masked_singularity_at_zero(op, opset):
    """Where(n > 0, log(n), 0) and Where(n > 0, 1 / n, 0), n = Relu(z)
    exactly 0 for z < 0: the coefficient is inf there, and reverse mode must
    not multiply the zero cotangent by it (at opset 9 too)."""
    nodes = [h.make_node("Relu", ["z"], ["n"]), h.make_node(op, ["n"], ["q"]),
             h.make_node("Greater", ["n", "zero"], ["pos"]),
             h.make_node("Where", ["pos", "q", "zero"], ["y"])]
    m = model(nodes, [("z", D, [2, 3])], [("y", D, [2, 3])], opset=opset,
              initializers=[numpy_helper.from_array(np.array(0.0), "zero")])
    feeds = {"z": np.array([[0.5, -1.0, 2.0], [-0.3, 1.5, -2.0]])}
    assert check_derivatives(m, feeds)["dot"] < 1e-12
    adj = run(reverse(m, inputs=["z"], outputs=["y"], layout="onnx"),
              {**feeds, "adj_y": np.ones((2, 3, 1))})["adj_z"]
    assert np.isfinite(adj).all()
