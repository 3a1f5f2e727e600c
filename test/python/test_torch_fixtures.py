"""Models exported by torch.onnx.export against torch.autograd Jacobians and Hessians.

The fixtures and their Jacobians are made by test/fixtures/make_torch_fixtures.py
(PyTorch is not needed here). Full Jacobians come out of one forward-mode
evaluation (one direction per input entry) and one reverse-mode evaluation
(one direction per output entry).
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx
import pytest

from adcheck import run
from onnx_ad_mlir.api import forward, reverse

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "torch")
NAMES = ["mlp", "gelu_mlp", "mlp_dynamo", "cnn", "transformer_block", "transformer_block_dynamo",
         "attention", "vit", "unet", "pads", "neural_ode", "gru", "lstm",
         "lstm_batch_first_dynamo", "gru_stacked_dynamo", "fpn", "fpn_dynamo", "euler_list",
         "split_list", "while_list", "adams_bashforth", "fno_dynamo", "fno_dynamo_batch",
         "fno_dynamo_hw", "positional_dynamo_seq"]


def load(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    return onnx.load(os.path.join(HERE, f"{name}.onnx")), dict(np.load(os.path.join(HERE, f"{name}.npz")))


def identity_seeds(shape: tuple[int, ...]) -> np.ndarray:
    """Every unit direction at once, in the onnx layout: shape + [numel]."""
    n = int(np.prod(shape))
    return np.eye(n, dtype=np.float32).reshape(shape + (n,))


@pytest.mark.parametrize("name", NAMES)
def test_jacobian_matches_autograd(name):
    """At the export's extents, and for models exported with dynamic axes
    (fpn: Resize to another value's run-time extent) at other extents too."""
    model, ref = load(name)
    fwd = forward(model, inputs=["x"], outputs=["y"], layout="onnx")
    onnx.checker.check_model(fwd, full_check=True)
    adj = reverse(model, inputs=["x"], outputs=["y"], layout="onnx")
    onnx.checker.check_model(adj, full_check=True)
    for suffix in ("", "2") if "x2" in ref else ("",):
        x, jac = ref["x" + suffix], ref["jac" + suffix].astype(np.float64)
        out_shape = ref["y" + suffix].shape
        tol = 2e-5 * max(1.0, np.abs(jac).max())
        got = run(fwd, {"x": x, "fwd_x": identity_seeds(x.shape)})
        np.testing.assert_allclose(got["y"], ref["y" + suffix], rtol=1e-5, atol=1e-6)
        j_fwd = got["fwd_y"].reshape(out_shape + x.shape)
        np.testing.assert_allclose(j_fwd, jac, atol=tol, err_msg="forward mode vs autograd")
        back = run(adj, {"x": x, "adj_y": identity_seeds(out_shape)})
        j_rev = np.moveaxis(back["adj_x"].reshape(x.shape + out_shape), range(x.ndim),
                            range(len(out_shape), len(out_shape) + x.ndim))
        np.testing.assert_allclose(j_rev, jac, atol=tol, err_msg="reverse mode vs autograd")


@pytest.mark.parametrize("name", [n for n in NAMES if "hess" in load(n)[1]])
def test_hessian_matches_autograd(name):
    """forward(reverse(m)): the Hessian of <w, y(x)>, every direction at once,
    against torch.autograd's in float64 (an unrolled neural ODE: the
    sensitivities an optimal-control solver asks for)."""
    model, ref = load(name)
    adj = reverse(model, inputs=["x"], outputs=["y"], layout="onnx")
    hv = forward(adj, inputs=["x"], outputs=["adj_x"], layout="onnx")
    onnx.checker.check_model(hv, full_check=True)
    x = ref["x"]
    got = run(hv, {"x": x, "adj_y": ref["w"][..., None], "fwd_x": identity_seeds(x.shape)})
    hess = ref["hess"]
    np.testing.assert_allclose(got["fwd_adj_x"].reshape(hess.shape), hess,
                               atol=2e-5 * max(1.0, np.abs(hess).max()))


@pytest.mark.parametrize("name", [n for n in NAMES if "third" in load(n)[1]])
def test_third_order_matches_autograd(name):
    """forward(forward(reverse(m))): every third derivative of <w, y(x)> at
    once (two identity seeds), against torch.autograd's in float64."""
    model, ref = load(name)
    o = dict(inputs=["x"], layout="onnx")
    adj = reverse(model, outputs=["y"], **o)
    third = forward(forward(adj, outputs=["adj_x"], **o), outputs=["fwd_adj_x"], **o)
    onnx.checker.check_model(third, full_check=True)
    x, seeds = ref["x"], identity_seeds(ref["x"].shape)
    got = run(third, {"x": x, "adj_y": ref["w"][..., None], "fwd_x": seeds, "fwd2_x": seeds})
    want = ref["third"]  # [x, v1, v2]; ours: x.shape + [v1] + [v2], symmetric in all three
    np.testing.assert_allclose(got["fwd2_fwd_adj_x"].reshape(want.shape), want,
                               atol=2e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("name", [n for n in NAMES if "x2" in load(n)[1]])
def test_second_order_at_run_time_extents(name):
    """forward(reverse(m)) of models exported with dynamic axes, at both
    extents: the Hessian-vector product against central differences of the
    reverse model's gradient (checked against autograd above)."""
    model, ref = load(name)
    adj = reverse(model, inputs=["x"], outputs=["y"], layout="onnx")
    hv = forward(adj, inputs=["x"], outputs=["adj_x"], layout="onnx")
    rng = np.random.default_rng(0)
    for suffix in ("", "2"):
        x = ref["x" + suffix]
        w = rng.standard_normal(ref["y" + suffix].shape).astype(np.float32)[..., None]
        v = rng.standard_normal(x.shape).astype(np.float32)
        got = run(hv, {"x": x, "adj_y": w, "fwd_x": v[..., None]})["fwd_adj_x"][..., 0, 0]
        grad = lambda z: run(adj, {"x": z, "adj_y": w})["adj_x"][..., 0].astype(np.float64)
        fd = (grad(x + 1e-2 * v) - grad(x - 1e-2 * v)) / 2e-2
        np.testing.assert_allclose(got, fd, atol=1e-3 * max(1.0, np.abs(fd).max()))


@pytest.mark.parametrize("name, ops", [
    ("fno_dynamo_batch", ("DFT", "Einsum", "ScatterND", "GatherND", "Transpose", "Unsqueeze",
                          "Slice")),
    ("positional_dynamo_seq", ("MatMul", "Split", "Transpose", "Reshape", "Expand", "ReduceSum",
                               "NonZero", "Mul", "Add")),
    ("fno_dynamo_hw", ("DFT", "Einsum", "ScatterND", "GatherND", "Transpose", "ReduceSum",
                       "NonZero"))])
def test_reverse_at_run_time_extents_holds_the_ops_of_pinned_ones(name, ops):
    """Reverse models of dynamo exports with run-time extents hold the ops
    of the same model with its extents pinned, but for shape reads.
    fno_dynamo_batch: a rule read the direction count off a tangent of the
    linear program reverse mode transposes and kept that program alive (235
    reverse nodes against 173 pinned, 2 DFTs, 2 Einsums, 9 Transposes more).
    positional_dynamo_seq (batch and sequence at run time): positions
    sliced to the sequence length, an arange over it, heads viewed by -1
    and split by sizes, a broadcast against an extent proved 1; each made
    symdims lose the sequence extent, and the transposes unbroadcast at run
    time (85-179 reverse nodes with any one of them undone, 60 pinned, 67 now).
    fno_dynamo_hw (H and W at run time): the DFTs' signal lengths, the
    lowest modes' Slices of them and torch's W // 2 + 1 had no symbols in
    common, so 14 cotangents were unbroadcast at run time and the linear
    program stayed alive (539 reverse nodes, 4 DFTs and 4 Einsums more than
    pinned; 267 now, 157 pinned)."""
    model, _ = load(name)
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    for v in list(pinned.graph.input) + list(pinned.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_value = 4
    a, b = (Counter(n.op_type for n in reverse(m, inputs=["x"], outputs=["y"],
                                                 layout="onnx").graph.node)
            for m in (pinned, model))
    for op in ops:
        assert b[op] == a[op], (op, a[op], b[op])
