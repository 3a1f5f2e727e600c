"""Integration: CasADi's ONNX backend consumes a `family` and its gradient,
Jacobian and Hessian agree with finite differences of the primal model."""
from __future__ import annotations

import os

import casadi
import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from onnx_ad_mlir import family

def _ort_library() -> str:
    capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
    return os.path.join(capi, next(f for f in os.listdir(capi)
                                   if f.startswith("libonnxruntime.so.")))


def two_layer(rng: np.random.Generator) -> onnx.ModelProto:
    """y[2] = W2 tanh(W1 x + B1) + sum(P * P) with x[3] and a matrix input P[2, 2]."""
    nodes = [h.make_node("MatMul", ["W1", "x"], ["a"]), h.make_node("Add", ["a", "B1"], ["b"]),
             h.make_node("Tanh", ["b"], ["t"]), h.make_node("MatMul", ["W2", "t"], ["u"]),
             h.make_node("Mul", ["P", "P"], ["pp"]),
             h.make_node("ReduceSum", ["pp"], ["s"], keepdims=0),
             h.make_node("Add", ["u", "s"], ["y"])]
    inits = [nh.from_array(rng.standard_normal((4, 3)), "W1"), nh.from_array(rng.standard_normal(4), "B1"),
             nh.from_array(rng.standard_normal((2, 4)), "W2")]
    g = h.make_graph(nodes, "two_layer", [h.make_tensor_value_info("x", TP.DOUBLE, [3]),
                                          h.make_tensor_value_info("P", TP.DOUBLE, [2, 2])],
                     [h.make_tensor_value_info("y", TP.DOUBLE, [2])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def test_casadi_gradient_jacobian_hessian(tmp_path, monkeypatch):
    monkeypatch.setenv("CASADI_ONNXRUNTIME_LIB", _ort_library())
    rng = np.random.default_rng(0)
    model = two_layer(rng)
    written = family(model, tmp_path / "f.onnx")
    assert [os.path.basename(p) for p in written] == ["f.onnx", "adj_f.onnx", "fwd_adj_f.onnx"]

    f = casadi.GraphBuilder(str(tmp_path / "f.onnx")).create("f")
    x, P = casadi.MX.sym("x", 3), casadi.MX.sym("P", 2, 2)
    w = casadi.DM([0.7, -1.3])
    objective = casadi.dot(f(x, P), w)
    F = casadi.Function("F", [x, P], [f(x, P), casadi.jacobian(f(x, P), x),
                                      casadi.gradient(objective, P),
                                      casadi.hessian(objective, x)[0]])
    x0, P0 = rng.standard_normal(3), rng.standard_normal((2, 2))
    y, J, gP, H = (np.array(v) for v in F(x0, P0))

    session = onnxruntime.InferenceSession(model.SerializeToString())
    primal = lambda xv, Pv: session.run(None, {"x": xv, "P": Pv})[0]
    eps = 1e-6
    np.testing.assert_allclose(y.ravel(), primal(x0, P0), rtol=1e-12)
    J_fd = np.stack([(primal(x0 + eps * e, P0) - primal(x0 - eps * e, P0)) / (2 * eps)
                     for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(J, J_fd, atol=1e-7)
    wv = w.full().ravel()
    units = [np.eye(4)[i].reshape(2, 2) for i in range(4)]
    g_fd = np.array([wv @ (primal(x0, P0 + eps * E) - primal(x0, P0 - eps * E)) / (2 * eps)
                     for E in units]).reshape(2, 2)
    np.testing.assert_allclose(gP, g_fd, atol=1e-7)
    # Hessian: central differences of the finite-difference gradient in x.
    grad = lambda xv: np.array([wv @ (primal(xv + eps * e, P0) - primal(xv - eps * e, P0)) / (2 * eps)
                                for e in np.eye(3)])
    H_fd = np.stack([(grad(x0 + 1e-4 * e) - grad(x0 - 1e-4 * e)) / 2e-4 for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(H, H_fd, atol=1e-5)
    np.testing.assert_allclose(H, H.T, atol=1e-12)


def test_casadi_with_scikit_learn_surrogates(tmp_path, monkeypatch):
    """Surrogates fitted in scikit-learn (a StandardScaler + MLPRegressor
    pipeline with its ai.onnx.ml Scaler, an RBF SVR, a Gaussian process)
    at one sample: CasADi's Jacobian against central differences of
    scikit-learn's predictions, its Hessian symmetric and against
    differences of the Jacobian. skl2onnx declares the MLP's output [?, 1]
    (it is [2, 1]): `family` writes the primal with the shape it computes."""
    monkeypatch.setenv("CASADI_ONNXRUNTIME_LIB", _ort_library())
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "sklearn")
    for name in ("scaled_mlp", "svr", "gp_rbf"):
        model = onnx.load(os.path.join(here, f"{name}.onnx"))
        ref = np.load(os.path.join(here, f"{name}.npz"))
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # CasADi: static shapes
        family(model, tmp_path / name / "f.onnx")
        f = casadi.GraphBuilder(str(tmp_path / name / "f.onnx")).create("f")
        x = casadi.MX.sym("x", 1, 4)
        y = casadi.vec(f(x))
        F = casadi.Function("F", [x], [y, casadi.jacobian(y, x),
                                       casadi.hessian(casadi.sum1(y), x)[0]])
        J_of = casadi.Function("J", [x], [casadi.jacobian(y, x)])
        x0 = ref["x"][:1].astype(np.float64)
        y0, J, H = (np.array(v) for v in F(x0))
        tol = 1e-5 if ref["x"].dtype == np.float32 else 1e-8
        np.testing.assert_allclose(y0.ravel(), ref["y"][0].ravel(), rtol=tol, atol=tol)
        np.testing.assert_allclose(J, ref["jac"][0], rtol=100 * tol, atol=100 * tol,
                                   err_msg=f"{name}: CasADi's Jacobian vs scikit-learn")
        H_fd = np.stack([(np.array(J_of(x0 + 1e-3 * e)).sum(0) - np.array(J_of(x0 - 1e-3 * e)).sum(0))
                         / 2e-3 for e in np.eye(4)], axis=1)
        np.testing.assert_allclose(H, H.T, atol=1e-6)
        np.testing.assert_allclose(H, H_fd, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(H).max()),
                                   err_msg=f"{name}: CasADi's Hessian vs its Jacobian")


def test_casadi_with_keras_recurrent_model(tmp_path, monkeypatch):
    """A Keras LSTM + SimpleRNN + GRU model exported by tf2onnx in float32
    (test/fixtures/tf): CasADi flattens its [2, 5, 3] input to a column in
    C order; its Jacobian and its Hessian of <w, y> applied to v against
    TensorFlow's float64 derivatives (the fixture's references)."""
    monkeypatch.setenv("CASADI_ONNXRUNTIME_LIB", _ort_library())
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tf")
    model = onnx.load(os.path.join(here, "keras_recurrent.onnx"))
    ref = np.load(os.path.join(here, "keras_recurrent.npz"))
    family(model, tmp_path / "f.onnx")
    f = casadi.GraphBuilder(str(tmp_path / "f.onnx")).create("f")
    assert f.size_in(0) == (30, 1) and f.size_out(0) == (2, 2)
    x = casadi.MX.sym("x", 30)
    y = f(x)
    w = ref["w"]
    F = casadi.Function("F", [x], [y, casadi.jacobian(casadi.vec(y), x),
                                   casadi.hessian(casadi.sum1(casadi.sum2(y * casadi.DM(w))),
                                                  x)[0]])
    y0, J, H = (np.array(v) for v in F(ref["in_x"].reshape(30)))
    scale = lambda a: 3e-5 * max(1.0, np.abs(a).max())  # noqa: E731 (a float32 model)
    np.testing.assert_allclose(y0, ref["out_Identity:0"], atol=scale(y0))
    jac = ref["jac_Identity:0__x"].reshape(2, 2, 30)
    rows = np.stack([jac[r, c] for c in range(2) for r in range(2)])  # vec: column-major
    np.testing.assert_allclose(J, rows, atol=scale(rows), err_msg="CasADi's Jacobian vs TensorFlow")
    hv = ref["hvp_x"].reshape(30)
    np.testing.assert_allclose(H @ ref["v_x"].reshape(30), hv, atol=scale(hv),
                               err_msg="CasADi's Hessian vs TensorFlow")
