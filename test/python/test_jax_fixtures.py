"""Models exported by jax2onnx (fori_loop Euler, while_loop with a
data-dependent stop, two lax.cond, diffrax Euler / Tsit5 / Tsit5 with a PID
controller) differentiated in both modes and as Hessian-vector products
(forward(reverse)), against jax.jacfwd / jvp-of-grad references stored
beside them (test/fixtures/make_jax_fixtures.py; no JAX needed here)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from adcheck import assert_unique_node_names, run
from onnx_ad_mlir.api import forward, reverse

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "jax")
NAMES = ["fori_euler", "while_stop", "two_conds", "diffrax_euler", "diffrax_tsit5",
         "diffrax_tsit5_pid"]
# float64 exports; the diffrax graphs run thousands of ops per step, the
# references are JAX's own derivatives (same math, different op order)
RTOL, ATOL = 1e-9, 1e-11


def _load(name):
    model = onnx.load(os.path.join(FIXTURES, f"{name}.onnx"))
    data = dict(np.load(os.path.join(FIXTURES, f"{name}.npz")))
    xs = [i.name for i in model.graph.input]
    ys = [o.name for o in model.graph.output]
    return model, data, xs, ys


def _check(m: onnx.ModelProto) -> None:
    onnx.checker.check_model(m, full_check=True)
    assert_unique_node_names(m)


def _identity_seeds(x: np.ndarray) -> np.ndarray:
    """Every unit direction at once (onnx layout: shape + [k])."""
    n = x.size
    return np.eye(n).reshape(x.shape + (n,))


@pytest.fixture(scope="module", params=NAMES)
def fixture(request):
    return (request.param,) + _load(request.param)


def test_primal_matches_jax(fixture):
    """The exports with Where on bool tensors (diffrax's Tsit5 step logic) do
    not run in ONNX Runtime (no bool Where kernel); the derivative models do
    (legalize.bool_where) and carry the primal outputs: checked there."""
    name, model, data, xs, ys = fixture
    feeds = {x: data[f"in_{x}"] for x in xs}
    try:
        got = run(model, feeds)
    except Exception as e:  # noqa: BLE001
        assert "Where" in str(e), e
        got = run(forward(model, layout="onnx"),
                  {**feeds, **{f"fwd_{x}": np.zeros(feeds[x].shape + (1,)) for x in xs}})
    for y in ys:
        np.testing.assert_allclose(got[y], data[f"out_{y}"], rtol=1e-12, atol=1e-14)


def test_forward_jacobian(fixture):
    name, model, data, xs, ys = fixture
    feeds = {x: data[f"in_{x}"] for x in xs}
    fwd = forward(model, layout="onnx")
    _check(fwd)
    for x in xs:  # one input seeded at a time, all its unit directions
        seeds = {f"fwd_{z}": (_identity_seeds(feeds[z]) if z == x else
                              np.zeros(feeds[z].shape + (feeds[x].size,))) for z in xs}
        got = run(fwd, {**feeds, **seeds})
        for y in ys:
            jac = data[f"jac_{y}__{x}"].reshape(data[f"out_{y}"].shape + (-1,))
            np.testing.assert_allclose(got[f"fwd_{y}"], jac, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name}: d{y}/d{x} forward")


def test_reverse_jacobian(fixture):
    name, model, data, xs, ys = fixture
    feeds = {x: data[f"in_{x}"] for x in xs}
    adj = reverse(model, layout="onnx")
    _check(adj)
    for y in ys:
        out = data[f"out_{y}"]
        seeds = {f"adj_{z}": (_identity_seeds(out) if z == y else
                              np.zeros(data[f"out_{z}"].shape + (out.size,))) for z in ys}
        got = run(adj, {**feeds, **seeds})
        for x in xs:
            # adj_x[..., i] = row i of d y / d x
            jac = data[f"jac_{y}__{x}"].reshape((out.size,) + feeds[x].shape)
            np.testing.assert_allclose(np.moveaxis(got[f"adj_{x}"], -1, 0), jac, rtol=RTOL,
                                       atol=ATOL, err_msg=f"{name}: d{y}/d{x} reverse")


def test_hessian_vector_product(fixture):
    name, model, data, xs, ys = fixture
    feeds = {x: data[f"in_{x}"] for x in xs}
    adj = reverse(model, outputs=ys[:1], layout="onnx")
    hess = forward(adj, inputs=xs, outputs=[f"adj_{x}" for x in xs], layout="onnx")
    _check(hess)
    got = run(hess, {**feeds, f"adj_{ys[0]}": data["w"][..., None],
                     **{f"fwd_{x}": data[f"v_{x}"][..., None] for x in xs}})
    for x in xs:
        np.testing.assert_allclose(got[f"fwd_adj_{x}"][..., 0, 0], data[f"hvp_{x}"], rtol=1e-8,
                                   atol=1e-10, err_msg=f"{name}: Hessian-vector product")
