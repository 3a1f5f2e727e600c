"""float16 and bfloat16 models: both modes build valid models whose
derivatives agree with central differences of the same model in float64
(to the element type's precision). Run by ONNX's reference evaluator:
ONNX Runtime's CPU provider has no bfloat16 kernels, and 1.32 crashes
creating a session for a float16 Transpose -> MatMul at the default
optimization level (microsoft/onnxruntime#28392; README)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.errors import UnsupportedOp

# Inputs and weights exact in both types, results ~1: the tolerance is the type's.
X = np.array([[0.5, -1.0, 0.25, 2.0], [1.5, -0.5, 0.75, -2.0]])
W = np.array([[0.5, -1.0, 0.25], [1.5, 0.75, -0.5], [-0.25, 1.0, 0.5], [0.5, 0.5, -1.0]])
SCALE = np.array([1.0, 0.5, 2.0, 1.5])
TYPES = {TP.FLOAT16: (np.float16, 2e-2), TP.BFLOAT16: (ml_dtypes.bfloat16, 8e-2)}
CASES = {
    "tanh": ([h.make_node("Tanh", ["x"], ["y"])], {}, [2, 4]),
    "layer_norm": ([h.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1)],
                   {"s": SCALE}, [2, 4]),
    "silu_mlp": ([h.make_node("MatMul", ["x", "W"], ["a"]), h.make_node("Sigmoid", ["a"], ["b"]),
                  h.make_node("Mul", ["b", "a"], ["y"])], {"W": W}, [2, 3]),
}


def _model(case: str, elem: int) -> onnx.ModelProto:
    nodes, weights, out = CASES[case]
    dtype = TYPES[elem][0] if elem in TYPES else np.float64
    inits = [numpy_helper.from_array(w.astype(dtype), n) for n, w in weights.items()]
    g = h.make_graph(nodes, case, [h.make_tensor_value_info("x", elem, [2, 4])],
                     [h.make_tensor_value_info("y", elem, out)], initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def _jacobian(case: str, step: float = 1e-6) -> np.ndarray:
    """dy/dx of the float64 model by central differences: [y..., x...]."""
    run = ReferenceEvaluator(_model(case, TP.DOUBLE))
    cols = []
    for i in range(X.size):
        e = np.zeros(X.size)
        e[i] = step
        plus, minus = (run.run(None, {"x": X + s * e.reshape(X.shape)})[0] for s in (1, -1))
        cols.append(((plus - minus) / (2 * step)).ravel())
    return np.stack(cols, axis=-1)


@pytest.mark.parametrize("elem", sorted(TYPES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_low_precision_derivatives(case: str, elem: int) -> None:
    dtype, tol = TYPES[elem]
    m = _model(case, elem)
    fwd, adj = forward(m, layout="onnx"), reverse(m, layout="onnx")
    for d in (fwd, adj):
        onnx.checker.check_model(d, full_check=True)
    jac = _jacobian(case)
    rng = np.random.default_rng(0)
    v = rng.choice([-1.0, -0.5, 0.5, 1.0], size=X.shape + (2,))
    w = rng.choice([-1.0, -0.5, 0.5, 1.0], size=CASES[case][2] + [2])
    x = X.astype(dtype)
    jv = ReferenceEvaluator(fwd).run(["fwd_y"], {"x": x, "fwd_x": v.astype(dtype)})[0]
    jtw = ReferenceEvaluator(adj).run(["adj_x"], {"x": x, "adj_y": w.astype(dtype)})[0]
    assert jv.dtype == dtype and jtw.dtype == dtype
    want_jv = (jac @ v.reshape(X.size, 2)).reshape(jv.shape)
    want_jtw = (jac.T @ w.reshape(-1, 2)).reshape(jtw.shape)
    np.testing.assert_allclose(jv.astype(np.float64), want_jv, rtol=tol, atol=tol)
    np.testing.assert_allclose(jtw.astype(np.float64), want_jtw, rtol=tol, atol=tol)


def test_bfloat16_before_opset_16():
    """Before opset 16 Where has no bfloat16: Max's tie weights are written
    without it (win + tie / 2; checked against central differences at a tie),
    and a rule that needs it (Div's guard of a zero divisor) is refused,
    naming the node, instead of exporting an invalid model."""
    def model(node, opset):
        g = h.make_graph([node], "g", [h.make_tensor_value_info(n, TP.BFLOAT16, [4])
                                       for n in ("a", "b")],
                         [h.make_tensor_value_info("y", TP.BFLOAT16, [4])])
        return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m = model(h.make_node("Max", ["a", "b"], ["y"], name="max"), 13)
    a, b = np.array([0.5, -1.0, 2.0, 1.5]), np.array([0.5, 1.0, -2.0, 1.5])  # ties at 0, 3
    fwd = forward(m, inputs=["a"], layout="onnx")
    onnx.checker.check_model(fwd, full_check=True)
    bf = ml_dtypes.bfloat16
    jv = ReferenceEvaluator(fwd).run(["fwd_y"], {"a": a.astype(bf), "b": b.astype(bf),
                                                 "fwd_a": np.ones((4, 1), bf)})[0]
    np.testing.assert_array_equal(jv.astype(np.float64).ravel(), [0.5, 0.0, 1.0, 0.5])
    with pytest.raises(UnsupportedOp, match=r"Div \(node 'div'\).*Where on bfloat16, which opset 15"):
        reverse(model(h.make_node("Div", ["a", "b"], ["y"], name="div"), 15))


@pytest.mark.parametrize("elem", sorted(TYPES))
def test_mean_coefficients_fold_in_low_precision(elem: int) -> None:
    """A mean's derivative over 3 elements: the rules' 1/3, rounded to
    float16 (N * fl(1/N) = 0.99976) or bfloat16, folds into a ReduceMean as
    in float32, which divides exactly; multiplying by it put a 2.4e-4
    relative error into each use (found by the fuzzer's float16 check).
    The reverse models of both types hold the same ops."""
    def model(t: int) -> onnx.ModelProto:
        dtype = TYPES[t][0] if t in TYPES else np.float32
        inits = [numpy_helper.from_array(np.array(v, dtype), n)
                 for n, v in (("s", [0.5, -1.5]), ("b", [0.25, 1.0]))]
        g = h.make_graph([h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], "g",
                         [h.make_tensor_value_info("x", t, [2, 2, 3])],
                         [h.make_tensor_value_info("y", t, [2, 2, 3])], initializer=inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", 22)])  # (bfloat16 from 22)

    def ops(m: onnx.ModelProto) -> list[str]:
        return sorted(n.op_type for n in reverse(m, layout="onnx").graph.node)
    assert ops(model(elem)) == ops(model(TP.FLOAT))
    assert "ReduceMean" in ops(model(elem))


def _through_float8(keep_float8: bool) -> onnx.ModelProto:
    """y = DequantizeLinear(QuantizeLinear(x, s)) * x through float8 (e4m3),
    or the float8 values q themselves."""
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"])]
    if not keep_float8:
        nodes += [h.make_node("DequantizeLinear", ["q", "s", "zp"], ["d"]),
                  h.make_node("Mul", ["d", "x"], ["y"])]
    out = h.make_tensor_value_info("q", TP.FLOAT8E4M3FN, [4]) if keep_float8 else \
        h.make_tensor_value_info("y", TP.FLOAT, [4])
    g = h.make_graph(nodes, "f8", [h.make_tensor_value_info("x", TP.FLOAT, [4]),
                                   h.make_tensor_value_info("s", TP.FLOAT, [])], [out],
                     [h.make_tensor("zp", TP.FLOAT8E4M3FN, [], [0])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


def test_a_float8_output_has_no_derivative_to_take():
    # (it built a float8 Expand before, which the dialect's verifier refused
    # in an MLIR error naming no node)
    for transform in (forward, reverse):
        with pytest.raises(UnsupportedOp, match=r"no floating-point output to differentiate "
                                                r"\(float16, bfloat16, float32 or float64\)"):
            transform(_through_float8(keep_float8=True))


def test_float8_values_carry_no_derivative():
    """Quantizing is piecewise constant: through float8, as through an
    integer, the derivative is zero. In y = d * x with d = q * s, q the
    float8 values: dy/dx = d and dy/ds = q * x."""
    import onnxruntime as ort
    m = _through_float8(keep_float8=False)
    x, s = np.array([0.3, -1.2, 2.0, 0.7], np.float32), np.array(0.5, np.float32)
    u, v = np.array([1.0, -2.0, 0.5, 3.0], np.float32), np.array([0.5, 1.0, -1.0, 2.0], np.float32)

    def run(model, **feeds):
        onnx.checker.check_model(model, full_check=True)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    y = run(m, x=x, s=s)["y"]
    d = y / x
    q = d / s
    rev = run(reverse(m, layout="onnx"), x=x, s=s, adj_y=u[:, None])
    np.testing.assert_allclose(rev["adj_x"][:, 0], u * d, rtol=1e-6)
    np.testing.assert_allclose(rev["adj_s"].ravel(), [np.sum(u * q * x)], rtol=1e-6)
    fwd = run(forward(m, layout="onnx"), x=x, s=s, fwd_x=v[:, None], fwd_s=np.array([1.0], np.float32))
    np.testing.assert_allclose(fwd["fwd_y"][:, 0], d * v + q * x, rtol=1e-6)
