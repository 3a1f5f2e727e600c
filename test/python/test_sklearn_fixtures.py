"""scikit-learn models exported by skl2onnx against scikit-learn's own
predictions and central differences of them (float64).

The fixtures are made by test/fixtures/make_sklearn_fixtures.py (neither
scikit-learn nor skl2onnx is needed here): a StandardScaler + MLPRegressor
pipeline (an ai.onnx.ml Scaler), polynomial features + ridge
(ArrayFeatureExtractor, LinearRegressor), a Gaussian process (kernel
distances in a Scan), logistic regressions' probabilities (float64: default
ops; float32: LinearClassifier, two and three classes) and an RBF support
vector regression (SVMRegressor), a PowerTransformer pipeline (Imputers
over NaN branches): the surrogate
models optimal-control users fit and hand to CasADi.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from adcheck import check_hessian, run
from onnx_ad_mlir.api import forward, reverse

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "sklearn")
NAMES = ["scaled_mlp", "poly_ridge", "gp_rbf", "logistic", "svr", "logistic_f32", "softmax_f32",
         "power_ridge"]


def load(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    return onnx.load(os.path.join(HERE, f"{name}.onnx")), dict(np.load(os.path.join(HERE, f"{name}.npz")))


@pytest.mark.parametrize("name", NAMES)
def test_jacobian_matches_scikit_learn(name):
    """Rows are independent: one seed per feature, set in every row, gives
    each row's Jacobian in one forward evaluation; reverse mode against the
    same Jacobian contracted with a random cotangent."""
    model, ref = load(name)
    x_name, y_name = model.graph.input[0].name, model.graph.output[-1].name
    x, jac = ref["x"], ref["jac"]  # jac: [rows, outputs, features]
    float32 = x.dtype == np.float32
    tol = dict(rtol=2e-3, atol=2e-4) if float32 else dict(rtol=1e-6, atol=1e-8)
    fwd = forward(model, inputs=[x_name], outputs=[y_name], layout="onnx")
    adj = reverse(model, inputs=[x_name], outputs=[y_name], layout="onnx")
    for m in (fwd, adj):
        onnx.checker.check_model(m, full_check=True)
        assert not any(n.domain == "ai.onnx.ml" for n in m.graph.node)
    seeds = np.zeros(x.shape + (x.shape[1],), x.dtype)
    for i in range(x.shape[1]):
        seeds[:, i, i] = 1
    got = run(fwd, {x_name: x, f"fwd_{x_name}": seeds})
    np.testing.assert_allclose(got[y_name].reshape(ref["y"].shape), ref["y"],
                               rtol=1e-5 if float32 else 1e-9, atol=1e-5 if float32 else 1e-12)
    np.testing.assert_allclose(got[f"fwd_{y_name}"].reshape(jac.shape), jac, **tol,
                               err_msg="forward mode vs scikit-learn")
    u = np.random.default_rng(0).standard_normal(jac.shape[:2])
    y_shape = got[y_name].shape
    back = run(adj, {x_name: x, f"adj_{y_name}": u.reshape(y_shape + (1,)).astype(x.dtype)})
    np.testing.assert_allclose(back[f"adj_{x_name}"][..., 0], np.einsum("noi,no->ni", jac, u),
                               **tol, err_msg="reverse mode vs scikit-learn")


@pytest.mark.parametrize("name", ["scaled_mlp", "gp_rbf", "svr"])
def test_second_order(name):
    """forward(reverse(m)) against central differences of the gradient."""
    model, ref = load(name)
    check_hessian(model, {model.graph.input[0].name: ref["x"]},
                  output=model.graph.output[-1].name)
