"""scikit-learn models exported by skl2onnx against scikit-learn's own
predictions and central differences of them (float64).

The fixtures are made by test/fixtures/make_sklearn_fixtures.py (neither
scikit-learn nor skl2onnx is needed here): a StandardScaler + MLPRegressor
pipeline (an ai.onnx.ml Scaler), polynomial features + ridge
(ArrayFeatureExtractor, LinearRegressor), a Gaussian process (kernel
distances in a Scan), logistic regressions' probabilities (float64: default
ops; float32: LinearClassifier, two and three classes) and an RBF support
vector regression (SVMRegressor), a PowerTransformer pipeline (Imputers
over NaN branches): the surrogate models optimal-control users fit and hand
to CasADi. And pipelines over a DataFrame of numeric and categorical
columns (an operating mode, a site): OneHotEncoder, OrdinalEncoder and
TargetEncoder, whose ai.onnx.ml OneHotEncoders and LabelEncoders read the
int64 and string inputs, differentiated w.r.t. the float columns; and a
pipeline over the float columns alone, whose inputs an ai.onnx.ml
FeatureVectorizer joins.
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


MIXED = ["onehot_mlp", "onehot_drop_ridge", "ordinal_ridge", "target_ridge", "columns_mlp"]


@pytest.mark.parametrize("name", MIXED)
def test_mixed_columns_jacobian_matches_scikit_learn(name):
    """One input per column: a direction per float column (the int64 and
    string columns are not differentiated), in both modes."""
    model, ref = load(name)
    jac = ref.pop("jac")
    want = ref.pop("y")
    floats = [i.name for i in model.graph.input
              if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT]
    assert floats == ["a", "b"]
    y_name = model.graph.output[0].name
    fwd = forward(model, outputs=[y_name], layout="onnx")
    adj = reverse(model, outputs=[y_name], layout="onnx")
    for m in (fwd, adj):
        onnx.checker.check_model(m, full_check=True)
        assert not any(n.domain == "ai.onnx.ml" for n in m.graph.node)
        assert {i.name for i in m.graph.input} >= set(ref)  # (int64, string columns too)
    feeds = {k: v.astype(object) if v.dtype.kind == "U" else v for k, v in ref.items()}
    seeds = {f"fwd_{c}": np.zeros(feeds[c].shape + (2,), np.float32) for c in floats}
    for j, c in enumerate(floats):
        seeds[f"fwd_{c}"][..., j] = 1
    got = run(fwd, {**feeds, **seeds})
    np.testing.assert_allclose(got[y_name].reshape(want.shape), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[f"fwd_{y_name}"].reshape(jac.shape), jac, rtol=2e-3, atol=2e-4,
                               err_msg="forward mode vs scikit-learn")
    u = np.random.default_rng(0).standard_normal(jac.shape[:2])
    seed = u.reshape(got[y_name].shape + (1,)).astype(np.float32)
    back = run(adj, {**feeds, f"adj_{y_name}": seed})
    vjp = np.einsum("noi,no->ni", jac, u)
    for j, c in enumerate(floats):
        np.testing.assert_allclose(back[f"adj_{c}"][..., 0].reshape(-1), vjp[:, j], rtol=2e-3,
                                   atol=2e-4, err_msg=f"reverse mode vs scikit-learn ({c})")


def test_mixed_columns_second_order():
    """forward(reverse(m)) of the one-hot MLP w.r.t. both float columns, the
    categorical columns fed as they are."""
    model, ref = load("onehot_mlp")
    feeds = {k: v.astype(object) if v.dtype.kind == "U" else v for k, v in ref.items()
             if k in ("a", "b", "mode", "site")}
    check_hessian(model, feeds, inputs=["a", "b"], output=model.graph.output[0].name)
