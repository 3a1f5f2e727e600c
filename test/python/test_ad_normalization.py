"""Normalization rules against finite differences, both modes, and Hessians."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives, check_hessian, run
from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.errors import OnnxAdError

D, F = TP.DOUBLE, TP.FLOAT
ERRORS: dict[str, float] = {}


def model(nodes, inputs, outputs, opset=18, initializers=()):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(initializers))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def feeds_for(inputs, seed=0, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(low, high, s).astype(np.float64 if t == D else np.float32)
            for n, t, s in inputs}


def check(name, m, feeds, hessian=True, **kw):
    e = check_derivatives(m, feeds, **kw)
    if hessian:
        e["hess"] = check_hessian(m, feeds, inputs=kw.get("inputs"))
    ERRORS[name] = max(e.values())


def single(op, shape, opset=18, dtype=D, out_shape=None, **attrs):
    ins = [("x", dtype, shape)]
    return model([h.make_node(op, ["x"], ["y"], **attrs)], ins,
                 [("y", dtype, out_shape or shape)], opset), feeds_for(ins)


@pytest.mark.parametrize("op,opset,axis", [
    ("Softmax", 18, -1), ("Softmax", 18, 1), ("Softmax", 11, 1), ("Softmax", 11, 0),
    ("LogSoftmax", 18, 0), ("LogSoftmax", 11, 1), ("LogSoftmax", 13, -1)])
def test_softmax(op, opset, axis):
    m, feeds = single(op, [2, 3, 4], opset, axis=axis)
    check(f"{op}-{opset}-{axis}", m, feeds)


def test_softmax_dynamic_batch():
    ins = [("x", D, ["n", 5])]
    m = model([h.make_node("Softmax", ["x"], ["s"]), h.make_node("Mul", ["s", "x"], ["y"])],
              ins, [("y", D, ["n", 5])])
    check("Softmax-dyn", m, feeds_for([("x", D, [3, 5])]))


@pytest.mark.parametrize("axis,outputs", [(-1, 1), (1, 1)])
def test_layer_norm(axis, outputs):
    ins = [("x", D, [2, 3, 4]), ("s", D, [3, 4] if axis == 1 else [4]), ("b", D, [4])]
    names = ["y", "mean", "istd"][:outputs]
    stats = [2, 1, 1] if axis == 1 else [2, 3, 1]
    outs = [("y", D, [2, 3, 4]), ("mean", D, stats), ("istd", D, stats)][:outputs]
    m = model([h.make_node("LayerNormalization", ["x", "s", "b"], names, axis=axis,
                           epsilon=1e-3, stash_type=11)], ins, outs, opset=18)
    check(f"LayerNorm-{axis}-{outputs}", m, feeds_for(ins))


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm_statistics(axis):
    # Mean and InvStdDev are differentiated too (their type is float32 by the schema)
    ins = [("x", F, [2, 3, 4]), ("s", F, [3, 4] if axis == 1 else [4])]
    stats = [2, 1, 1] if axis == 1 else [2, 3, 1]
    outs = [("y", F, [2, 3, 4]), ("mean", F, stats), ("istd", F, stats)]
    m = model([h.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "istd"], axis=axis)],
              ins, outs)
    check(f"LayerNorm-stats-{axis}-f32", m, feeds_for(ins))
    ERRORS[f"LayerNorm-stats-{axis}-hess-istd"] = check_hessian(m, feeds_for(ins), output="istd")


def test_layer_norm_reuses_statistics():
    # float32, Y only: the rule switches to the kernel that also reports Mean
    # and InvStdDev, so the reverse model recomputes no moments.
    ins = [("x", F, [2, 3, 4]), ("s", F, [4]), ("b", F, [4])]
    m = model([h.make_node("LayerNormalization", ["x", "s", "b"], ["n"]),
               h.make_node("Tanh", ["n"], ["y"])], ins, [("y", F, [2, 3, 4])])
    check("LayerNorm-reuse-f32", m, feeds_for(ins))
    nodes = reverse(m).graph.node
    ops = [n.op_type for n in nodes]
    # (the cotangent's means are ReduceMeans, onnx-ad-simplify; none reads x;
    # the normalized input the rule reads is one more LayerNormalization of x
    # with unit scale: one kernel instead of Sub and Mul by the statistics)
    lns = [n for n in nodes if n.op_type == "LayerNormalization"]
    assert len(lns) == 2 and len(lns[0].output) == 3 and lns[1].input[1:] != ["s", "b"] and \
        "Sqrt" not in ops and not any(n.op_type == "ReduceMean" and n.input[0] == "x"
                                      for n in nodes), ops


@pytest.mark.parametrize("logits, guarded", [("tanh", False), ("input", True), ("mask", True),
                                             ("where_inf", True), ("where_min", False),
                                             ("projected", False)])
def test_softmax_mask_guard(logits, guarded):
    # The NaN-row guard (IsNaN, Where) stays only where a row of logits can be
    # -inf on purpose: a function input, an infinite constant (a mask), also
    # selected by a Where; not for Hugging Face's causal masks, a Where of the
    # finite float32 minimum (GPT-J's reverse model: the guard's IsNaN and
    # Where were 2.4% of its time), nor for an input times a weight matrix
    # (Llama's logits reach the input only through such products).
    ins = [("x", F, [2, 3, 4])]
    w = h.make_tensor("w", F, [4, 4], np.random.default_rng(1).uniform(-1, 1, 16).tolist())
    m_ = h.make_tensor("m", F, [4], [0.0, 0.0, -np.inf, 0.0])
    keep = h.make_tensor("keep", TP.BOOL, [4], [True, True, False, True])
    lows = {"where_inf": -np.inf, "where_min": float(np.finfo(np.float32).min)}
    low = h.make_tensor("low", F, [], [lows.get(logits, 0.0)])
    pre = {"tanh": [h.make_node("Tanh", ["x"], ["t"]), h.make_node("MatMul", ["t", "w"], ["z"])],
           "input": [h.make_node("Identity", ["x"], ["z"])],
           "projected": [h.make_node("MatMul", ["x", "w"], ["z"])],
           "mask": [h.make_node("MatMul", ["x", "w"], ["s"]), h.make_node("Add", ["s", "m"], ["z"])],
           **{k: [h.make_node("Tanh", ["x"], ["t"]), h.make_node("MatMul", ["t", "w"], ["s"]),
                  h.make_node("Where", ["keep", "s", "low"], ["z"])] for k in lows}}
    m = model(pre[logits] + [h.make_node("Softmax", ["z"], ["y"], axis=-1)], ins,
              [("y", F, [2, 3, 4])], initializers=[w, m_, keep, low])
    check(f"Softmax-guard-{logits}", m, feeds_for(ins))
    for derived in (forward(m), reverse(m)):
        ops = [n.op_type for n in derived.graph.node]
        assert ("IsNaN" in ops) == guarded, ops


@pytest.mark.parametrize("bias", [0.0, 0.5])
@pytest.mark.parametrize("width", [4, 512])
def test_layer_norm_unit_scale(bias, width):
    # Constant unit scale, aliased by Identity as torch exports shared
    # initializers (512 wide: imported as a blob, not a dense attribute): the
    # rule multiplies by no scale, and with a zero bias reads the normalized
    # input from y itself (no second LayerNormalization).
    ins = [("x", F, [2, 3, width])]
    inits = [h.make_tensor("s0", F, [width], [1.0] * width),
             h.make_tensor("b0", F, [width], [bias] * width)]
    m = model([h.make_node("Identity", ["s0"], ["s"]), h.make_node("Identity", ["b0"], ["b"]),
               h.make_node("LayerNormalization", ["x", "s", "b"], ["n"]),
               h.make_node("Tanh", ["n"], ["y"])], ins, [("y", F, [2, 3, width])],
              initializers=inits)
    check(f"LayerNorm-unit-scale-{bias}-{width}", m, feeds_for(ins))
    for derived in (forward(m), reverse(m)):
        lns = [n for n in derived.graph.node if n.op_type == "LayerNormalization"]
        assert len(lns) == (1 if bias == 0.0 else 2), [n.op_type for n in derived.graph.node]


@pytest.mark.parametrize("opset", [9, 15])
def test_batch_norm(opset):
    ins = [("x", D, [2, 3, 2]), ("s", D, [3]), ("b", D, [3]), ("m", D, [3]), ("v", D, [3])]
    feeds = feeds_for(ins)
    feeds["v"] = np.abs(feeds["v"]) + 0.5
    m = model([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], ins,
              [("y", D, [2, 3, 2])], opset)
    check(f"BatchNorm-{opset}", m, feeds)


def test_batch_norm_training_refused():
    ins = [("x", D, [2, 3]), ("s", D, [3]), ("b", D, [3]), ("m", D, [3]), ("v", D, [3])]
    m = model([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                           training_mode=1)], ins,
              [("y", D, [2, 3]), ("rm", D, [3]), ("rv", D, [3])], 15)
    with pytest.raises(OnnxAdError, match="training mode"):
        reverse(m, inputs=["x"], outputs=["y"])


def test_instance_norm():
    ins = [("x", F, [2, 3, 5]), ("s", F, [3]), ("b", F, [3])]
    m = model([h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-2)],
              ins, [("y", F, [2, 3, 5])])
    check("InstanceNorm-f32", m, feeds_for(ins))


def test_mvn():
    # float32: ONNX Runtime has no double kernel.
    m, feeds = single("MeanVarianceNormalization", [2, 3, 2, 2], opset=12, dtype=F)
    check("MVN-f32", m, feeds)
    # Default axes from opset 13: onnx's checker rejects the op's function body
    # unless `axes` is written, so the derivative models must write it.
    m, feeds = single("MeanVarianceNormalization", [2, 3, 2, 2], dtype=F)
    check("MVN-default-axes-f32", m, feeds)
    m, feeds = single("MeanVarianceNormalization", [2, 3, 4], opset=12, dtype=F, axes=[2])
    check("MVN-axes-f32", m, feeds, hessian=False)


def test_mvn_of_near_equal_values():
    # Pairs 0.006 apart near 1: E[x^2] - E[x]^2 loses most of the variance's
    # digits in float32 (the rule's 0.1 where the derivative is ~1e-4, fuzz
    # seed 195 case 501). ONNX Runtime has no float64 MVN: the reference is
    # ONNX's formula in NumPy, float64 central differences.
    m, _ = single("MeanVarianceNormalization", [2, 2, 3], dtype=F, axes=[1])
    rng = np.random.default_rng(3)
    base = rng.uniform(0.5, 1.5, [2, 1, 3])
    x = np.concatenate([base, base + rng.uniform(0.004, 0.008, base.shape)], 1)
    x = x.astype(np.float32).astype(np.float64)
    v = rng.standard_normal(x.shape)

    def mvn(x):
        mean = x.mean(1, keepdims=True)
        return (x - mean) / (np.sqrt((x * x).mean(1, keepdims=True) - mean ** 2) + 1e-9)
    want = (mvn(x + 1e-7 * v) - mvn(x - 1e-7 * v)) / 2e-7
    got = run(forward(m, layout="onnx"),
              {"x": x.astype(np.float32), "fwd_x": v[..., None].astype(np.float32)})["fwd_y"]
    # its two terms, ~1/sd = 300 times the tangent each, cancel: float32
    # leaves ~1e-2 of them (the variance's cancellation left 5)
    np.testing.assert_allclose(got[..., 0], want, atol=0.05)


@pytest.mark.parametrize("p,axis", [(2, -1), (2, 0), (1, 1)])
def test_lp_norm(p, axis):
    m, feeds = single("LpNormalization", [3, 4], p=p, axis=axis)
    check(f"LpNorm-{p}-{axis}", m, feeds)


def test_lp_norm_bad_p():
    m, _ = single("LpNormalization", [3, 4], p=3)
    with pytest.raises(OnnxAdError, match="p = 3"):
        forward(m)


def test_dropout_inference():
    ins = [("x", D, [2, 3])]
    m = model([h.make_node("Dropout", ["x"], ["d"]), h.make_node("Tanh", ["d"], ["y"])], ins,
              [("y", D, [2, 3])])
    check("Dropout", m, feeds_for(ins))
    m = model([h.make_node("Dropout", ["x"], ["y"], ratio=0.3)], ins, [("y", D, [2, 3])], 10)
    check("Dropout-10", m, feeds_for(ins), hessian=False)


def test_dropout_training_refused():
    ins = [("x", D, [2, 3]), ("r", D, []), ("t", TP.BOOL, [])]
    m = model([h.make_node("Dropout", ["x", "r", "t"], ["y"])], ins, [("y", D, [2, 3])])
    with pytest.raises(OnnxAdError, match="training mode"):
        forward(m, inputs=["x"])


def test_transformer_like_block():
    # LayerNorm -> MatMul -> Softmax, one model, both modes and the Hessian.
    ins = [("x", D, [2, 4]), ("w", D, [4, 4]), ("s", D, [4])]
    m = model([h.make_node("LayerNormalization", ["x", "s"], ["n"]),
               h.make_node("MatMul", ["n", "w"], ["z"]), h.make_node("Softmax", ["z"], ["y"])],
              ins, [("y", D, [2, 4])])
    check("block", m, feeds_for(ins))


def teardown_module(module):
    print("\nmax errors:", {k: f"{v:.1e}" for k, v in ERRORS.items()})


@pytest.mark.parametrize("scale,ok", [((1,), True), ((4,), True), ((3, 1), True), ((3,), False),
                                      ((2, 4), False)])
def test_layer_norm_affine_shapes(scale, ok):
    """Scale and B must broadcast to X.shape[axis:] = [3, 4] without growing
    it (ONNX Runtime fails such a model only when it runs it): checked
    against finite differences where valid, refused naming the node else."""
    rng = np.random.default_rng(8)
    inits = [nh.from_array(rng.standard_normal(scale).astype(np.float32), "s"),
             nh.from_array(rng.standard_normal(scale).astype(np.float32), "b")]
    m = model([h.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=1, name="ln")],
              [("x", TP.FLOAT, [2, 3, 4])], [("y", TP.FLOAT, [2, 3, 4])], initializers=inits)
    x = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    if ok:
        check_derivatives(m, x)
        return
    with pytest.raises(OnnxAdError, match=r"\(node 'ln'\): Scale of shape \[.*\] does not "
                                          r"broadcast to X.shape\[axis:\] = \[3, 4\]"):
        reverse(m)


def test_layer_norm_reporting_only_inv_std_dev():
    """A LayerNormalization that reports InvStdDev but not Mean (reverse
    models have them): the rule's statistics-reporting replacement takes
    over its InvStdDev too, so one LayerNormalization is left. Two were left
    before, with the same operands: ONNX Runtime's CSE merged them and
    failed to load the model (fuzz: forward(reverse(m)))."""
    from adcheck import session
    m = model([h.make_node("LayerNormalization", ["x", "s"], ["n", "", "inv"], axis=1),
               h.make_node("Mul", ["n", "inv"], ["y"])],
              [("x", TP.FLOAT, [2, 3, 4])], [("y", TP.FLOAT, [2, 3, 4])],
              initializers=[nh.from_array(np.linspace(0.5, 2, 12, dtype=np.float32).reshape(3, 4), "s")])
    x = {"x": np.random.default_rng(9).standard_normal((2, 3, 4)).astype(np.float32)}
    check_derivatives(m, x)
    for d in (forward(m, layout="onnx"), forward(reverse(m, layout="onnx"), layout="onnx")):
        same = [tuple(n.input) for n in d.graph.node if n.op_type == "LayerNormalization"]
        assert len(same) == len(set(same))
        session(d)  # ONNX Runtime's default optimizations, CSE included
