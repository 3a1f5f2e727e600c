"""Models exported by jax2onnx (fori_loop Euler, while_loop with a
data-dependent stop, two lax.cond, diffrax Euler / Tsit5 / Tsit5 with a PID
controller) and by tf2onnx (Keras Dense/Conv/LSTM/GRU/SimpleRNN/attention
layers, tf.while_loop to a final time, tf.cond) differentiated in both modes
and as Hessian-vector products (forward(reverse)), against the frameworks'
own derivatives stored beside them (test/fixtures/make_jax_fixtures.py,
make_tf_fixtures.py; neither framework is needed here)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from adcheck import assert_unique_node_names, run
from onnx_ad_mlir.api import forward, reverse

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
NAMES = [("jax", name) for name in ("fori_euler", "while_stop", "two_conds", "diffrax_euler",
                                     "diffrax_tsit5", "diffrax_tsit5_pid")] + \
    [("tf", name) for name in ("keras_mlp", "keras_cnn", "keras_tcn", "keras_recurrent",
                               "keras_attention", "keras_unet", "keras_bidirectional",
                               "while_ode", "cond_model", "rk4_trajectory")]
# The float64 exports (diffrax's run thousands of ops per step) against the
# frameworks' own float64 derivatives: same math, different op order. The
# float32 ones (Keras' default) against a float64 twin's, relative to the
# reference's largest entry, as the torch fixtures.
TOL64 = {0: (1e-12, 1e-14), 1: (1e-9, 1e-11), 2: (1e-8, 1e-10)}  # (rtol, atol) by order
TOL32 = 3e-5


def _load(framework: str, name: str):
    model = onnx.load(os.path.join(FIXTURES, framework, f"{name}.onnx"))
    data = dict(np.load(os.path.join(FIXTURES, framework, f"{name}.npz")))
    dtypes = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
              for i in model.graph.input}
    feeds = {x: data[f"in_{x}"].astype(t) for x, t in dtypes.items()}
    return model, data, feeds, [o.name for o in model.graph.output]


def _like(feeds: dict[str, np.ndarray], a: np.ndarray) -> np.ndarray:
    """a in the fixture's float type (every input of a fixture has the same)."""
    return a.astype(next(iter(feeds.values())).dtype)


def _assert_close(got: np.ndarray, ref: np.ndarray, order: int, msg: str) -> None:
    if got.dtype == np.float64:
        rtol, atol = TOL64[order]
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=msg)
    else:
        np.testing.assert_allclose(got, ref, rtol=0, atol=TOL32 * max(1.0, np.abs(ref).max()),
                                   err_msg=msg)


def _check(m: onnx.ModelProto) -> None:
    onnx.checker.check_model(m, full_check=True)
    assert_unique_node_names(m)


def _identity_seeds(x: np.ndarray) -> np.ndarray:
    """Every unit direction at once (onnx layout: shape + [k])."""
    n = x.size
    return np.eye(n, dtype=x.dtype).reshape(x.shape + (n,))


@pytest.fixture(scope="module", params=NAMES, ids=["/".join(p) for p in NAMES])
def fixture(request):
    return (request.param[1],) + _load(*request.param)


def test_primal_matches_framework(fixture):
    """The exports with Where on bool tensors (diffrax's Tsit5 step logic) do
    not run in ONNX Runtime (no bool Where kernel); the derivative models do
    (legalize.bool_where) and carry the primal outputs: checked there."""
    name, model, data, feeds, ys = fixture
    try:
        got = run(model, feeds)
    except Exception as e:  # noqa: BLE001
        assert "Where" in str(e), e
        got = run(forward(model, layout="onnx"),
                  {**feeds, **{f"fwd_{x}": np.zeros(v.shape + (1,), v.dtype)
                               for x, v in feeds.items()}})
    for y in ys:
        _assert_close(got[y], data[f"out_{y}"], 0, f"{name}: {y}")


def test_forward_jacobian(fixture):
    name, model, data, feeds, ys = fixture
    fwd = forward(model, layout="onnx")
    _check(fwd)
    for x, v in feeds.items():  # one input seeded at a time, all its unit directions
        seeds = {f"fwd_{z}": (_identity_seeds(w) if z == x else
                              np.zeros(w.shape + (v.size,), w.dtype)) for z, w in feeds.items()}
        got = run(fwd, {**feeds, **seeds})
        for y in ys:
            jac = data[f"jac_{y}__{x}"].reshape(data[f"out_{y}"].shape + (-1,))
            _assert_close(got[f"fwd_{y}"], jac, 1, f"{name}: d{y}/d{x} forward")


def test_reverse_jacobian(fixture):
    name, model, data, feeds, ys = fixture
    adj = reverse(model, layout="onnx")
    _check(adj)
    for y in ys:
        out = _like(feeds, data[f"out_{y}"])
        seeds = {f"adj_{z}": (_identity_seeds(out) if z == y else
                              _like(feeds, np.zeros(data[f"out_{z}"].shape + (out.size,))))
                 for z in ys}
        got = run(adj, {**feeds, **seeds})
        for x, v in feeds.items():
            # adj_x[..., i] = row i of d y / d x
            jac = data[f"jac_{y}__{x}"].reshape((out.size,) + v.shape)
            _assert_close(np.moveaxis(got[f"adj_{x}"], -1, 0), jac, 1,
                          f"{name}: d{y}/d{x} reverse")


def test_hessian_vector_product(fixture):
    name, model, data, feeds, ys = fixture
    adj = reverse(model, outputs=ys[:1], layout="onnx")
    hess = forward(adj, inputs=list(feeds), outputs=[f"adj_{x}" for x in feeds], layout="onnx")
    _check(hess)
    got = run(hess, {**feeds, f"adj_{ys[0]}": _like(feeds, data["w"][..., None]),
                     **{f"fwd_{x}": _like(feeds, data[f"v_{x}"][..., None]) for x in feeds}})
    for x in feeds:
        _assert_close(got[f"fwd_adj_{x}"][..., 0, 0], data[f"hvp_{x}"], 2,
                      f"{name}: Hessian-vector product")
