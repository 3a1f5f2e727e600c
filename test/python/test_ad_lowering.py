"""Ops defined in prose, lowered to differentiable ops (transforms/lowering.py):
the lowering matches ONNX Runtime's kernel, and its derivatives check out
against finite differences and the forward/reverse identity."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from adcheck import check_derivatives, run
from test_ad_expand import expanded, model, op_types

D, F, I64 = TP.DOUBLE, TP.FLOAT, TP.INT64
R = np.random.default_rng(1)


def lowered(m, feeds, op, rtol=1e-5, atol=1e-6):
    onnx.checker.check_model(m, full_check=True)
    e, n = expanded(m)
    assert n == 1 and op not in op_types(e), op_types(e)
    onnx.checker.check_model(e, full_check=True)
    want, got = run(m, feeds), run(e, feeds)
    err = 0.0
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)
        err = max(err, float(np.abs(got[k] - want[k]).max(initial=0)))
    return e, err


@pytest.mark.parametrize("size", [1, 3, 5, 13, 101])  # ONNX Runtime: odd sizes only
def test_lrn(size):
    """Windows wider than the channels (13 and 101 over 6) sum the channels
    they reach: one term per reachable channel."""
    m = model([h.make_node("LRN", ["x"], ["y"], name="lrn", size=size, alpha=0.3, beta=0.6,
                           bias=1.5)], [("x", F, [2, 6, 3, 2])], [("y", F, [2, 6, 3, 2])], 13)
    feeds = {"x": R.standard_normal((2, 6, 3, 2)).astype(np.float32)}
    e, err = lowered(m, feeds, "LRN")
    print("LRN", size, err, check_derivatives(e, feeds))


def test_lrn_window_far_wider_than_the_channels():
    """size 2**62 (fuzz seed 83: the lowering built one Slice per window
    position and never finished; ONNX Runtime cannot run it either) against
    LRN's formula in numpy."""
    from adcheck import run
    from onnx_ad_mlir.api import forward
    size = 2**62
    m = model([h.make_node("LRN", ["x"], ["y"], name="lrn", size=size, alpha=0.3, beta=0.6,
                           bias=1.5)], [("x", F, [2, 6, 3, 2])], [("y", F, [2, 6, 3, 2])], 13)
    x = R.standard_normal((2, 6, 3, 2)).astype(np.float32)
    got = run(forward(m, layout="onnx"), {"x": x, "fwd_x": np.zeros(x.shape + (1,), x.dtype)})["y"]
    window = (x.astype(np.float64) ** 2).sum(1, keepdims=True)  # every channel in reach
    np.testing.assert_allclose(got, x / (1.5 + 0.3 / size * window) ** 0.6, rtol=1e-5)


GRID = [(mode, pad, align, 20) for mode in ("linear", "nearest", "cubic")
        for pad in ("zeros", "border", "reflection") for align in (0, 1)]
# GridSample-16 spells the modes bilinear/bicubic; ONNX Runtime runs it in float only.
GRID += [("bilinear", "reflection", 0, 16), ("bicubic", "border", 1, 16)]


@pytest.mark.parametrize("mode,pad,align,opset", GRID,
                         ids=[f"{m}-{p}-{a}-{o}" for m, p, a, o in GRID])
def test_grid_sample(mode, pad, align, opset):
    t, dtype = (D, np.float64) if opset == 20 else (F, np.float32)
    m = model([h.make_node("GridSample", ["x", "g"], ["y"], name="gs", mode=mode,
                           padding_mode=pad, align_corners=align)],
              [("x", t, [1, 2, 3, 4]), ("g", t, [1, 5, 3, 2])], [("y", t, [1, 2, 5, 3])], opset)
    rng = np.random.default_rng(7)
    # coordinates well outside [-1, 1] exercise the padding
    grid = rng.uniform(-1.8, 1.8, (1, 5, 3, 2)).astype(dtype)
    feeds = {"x": rng.standard_normal((1, 2, 3, 4)).astype(dtype), "g": grid}
    tol = 1e-9 if opset == 20 else 1e-5
    e, err = lowered(m, feeds, "GridSample", rtol=tol, atol=tol)
    # float32 finite differences (step 1e-2) straddle the taps' kinks: the
    # grid is differentiated in the float64 cases
    inputs = ["x"] if mode == "nearest" or opset == 16 else None
    print("GridSample", mode, pad, align, err, check_derivatives(e, feeds, inputs=inputs))


@pytest.mark.parametrize("with_mask,group", [(True, 1), (False, 2)])
def test_deform_conv(with_mask, group):
    n, c, hh, ww, oc, k = 1, 4, 5, 4, 4, 2
    oh, ow = hh - k + 1, ww - k + 1
    ins = [("x", D, [n, c, hh, ww]), ("w", D, [oc, c // group, k, k]),
           ("off", D, [n, 2 * 2 * k * k, oh, ow]), ("b", D, [oc])]
    names = ["x", "w", "off", "b"]
    if with_mask:
        ins.append(("mask", D, [n, 2 * k * k, oh, ow]))
        names.append("mask")
    m = model([h.make_node("DeformConv", names, ["y"], name="dc", group=group, offset_group=2,
                           kernel_shape=[k, k])], ins, [("y", D, [n, oc, oh, ow])], 19)
    rng = np.random.default_rng(3)
    feeds = {nm: rng.standard_normal(shape) for nm, _, shape in ins}
    feeds["off"] = rng.uniform(-1.6, 1.6, feeds["off"].shape)
    e, err = lowered(m, feeds, "DeformConv", rtol=1e-9, atol=1e-9)
    print("DeformConv", with_mask, group, err, check_derivatives(e, feeds))


@pytest.mark.parametrize("complex_,onesided,window", [(False, 1, True), (False, 0, False),
                                                      (True, 0, True)])
def test_stft(complex_, onesided, window):
    b, length, fl, step = 2, 16, 6, 3
    ch = 2 if complex_ else 1
    step_t = h.make_tensor("step", I64, [], [step])
    fl_t = h.make_tensor("fl", I64, [], [fl])
    bins = fl // 2 + 1 if onesided else fl
    frames = (length - fl) // step + 1
    ins = [("s", D, [b, length, ch])] + ([("w", D, [fl])] if window else [])
    m = model([h.make_node("STFT", ["s", "step", "w" if window else "", "fl"], ["y"], name="stft",
                           onesided=onesided)],
              ins, [("y", D, [b, frames, bins, 2])], 17, [step_t, fl_t])
    rng = np.random.default_rng(5)
    feeds = {"s": rng.standard_normal((b, length, ch))}
    if window:
        feeds["w"] = np.hanning(fl)
    e, err = lowered(m, feeds, "STFT", rtol=1e-9, atol=1e-9)
    print("STFT", complex_, onesided, err, check_derivatives(e, feeds))


@pytest.mark.parametrize("mode,batch", [("linear", 2), ("circular", 2), ("circular", "B")])
def test_tensor_scatter(mode, batch):
    m = model([h.make_node("TensorScatter", ["past", "upd", "idx"], ["y"], name="ts",
                           mode=mode, axis=2)],
              [("past", F, [batch, 3, 5, 2]), ("upd", F, [batch, 3, 2, 2]), ("idx", I64, [batch])],
              [("y", F, [batch, 3, 5, 2])], 24)
    rng = np.random.default_rng(2)
    feeds = {"past": rng.standard_normal((2, 3, 5, 2)).astype(np.float32),
             "upd": rng.standard_normal((2, 3, 2, 2)).astype(np.float32),
             "idx": np.array([1, 4 if mode == "circular" else 3], dtype=np.int64)}
    e, err = lowered(m, feeds, "TensorScatter", rtol=0, atol=0)
    print("TensorScatter", mode, err, check_derivatives(e, feeds))


def test_modes_lower_by_themselves():
    """forward/reverse on the original model (LRN has no rule); Hessians of
    the lowering in float64 (ONNX Runtime's LRN is float only)."""
    from adcheck import check_hessian
    make = lambda t: model([h.make_node("LRN", ["x"], ["t"], name="lrn", size=3),
                            h.make_node("ReduceSumSquare", ["t"], ["y"], keepdims=0)],
                           [("x", t, [1, 4, 2, 2])], [("y", t, [])], 13)
    x = R.standard_normal((1, 4, 2, 2))
    check_derivatives(make(F), {"x": x.astype(np.float32)})
    e, _ = expanded(make(D))
    print("LRN hessian", check_hessian(e, {"x": x}))


def test_refusal_names_node_op_and_reason():
    from onnx_ad_mlir.api import forward
    from onnx_ad_mlir.errors import UnsupportedOp
    m = model([h.make_node("GridSample", ["x", "g"], ["y"], name="gsdyn")],
              [("x", D, [1, 1, "H", 2]), ("g", D, [1, 2, 2, 2])], [("y", D, [1, 1, 2, 2])], 20)
    with pytest.raises(UnsupportedOp, match=r"gsdyn.*GridSample.*static shape"):
        forward(m)


@pytest.mark.parametrize("mode,pad,align", [("linear", "zeros", 0), ("linear", "reflection", 1),
                                            ("nearest", "border", 0)])
def test_grid_sample_3d(mode, pad, align):
    m = model([h.make_node("GridSample", ["x", "g"], ["y"], name="gs", mode=mode,
                           padding_mode=pad, align_corners=align)],
              [("x", D, [1, 2, 2, 3, 4]), ("g", D, [1, 2, 2, 3, 3])], [("y", D, [1, 2, 2, 2, 3])],
              20)
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((1, 2, 2, 3, 4)),
             "g": rng.uniform(-1.6, 1.6, (1, 2, 2, 3, 3))}
    e, err = lowered(m, feeds, "GridSample", rtol=1e-9, atol=1e-9)
    inputs = ["x"] if mode == "nearest" else None
    print("GridSample 3-D", mode, pad, align, err, check_derivatives(e, feeds, inputs=inputs))


def test_stft_run_time_frame_step():
    """frame_step fed at run time (ONNX's own test case): frames are gathered
    with indices computed in the graph."""
    b, length, fl = 1, 20, 8
    fl_t = h.make_tensor("fl", I64, [], [fl])
    m = model([h.make_node("STFT", ["s", "step", "", "fl"], ["y"], name="stft")],
              [("s", D, [b, "L", 1]), ("step", I64, [])], [("y", D, [b, None, fl // 2 + 1, 2])],
              17, [fl_t])
    rng = np.random.default_rng(6)
    feeds = {"s": rng.standard_normal((b, length, 1)), "step": np.array(4, dtype=np.int64)}
    e, err = lowered(m, feeds, "STFT", rtol=1e-9, atol=1e-9)
    print("STFT run-time step", err, check_derivatives(e, feeds))


def test_lowerings_emit_only_ops_with_rules():
    """Closure: what a lowering emits is differentiable by the rule table."""
    from onnx_ad_mlir.transforms.builder import resolve
    from onnx_ad_mlir.transforms.registry import JVP
    cases = [
        (model([h.make_node("LRN", ["x"], ["y"], size=3)], [("x", D, [1, 4, 2, 2])],
               [("y", D, [1, 4, 2, 2])], 13), 13),
        (model([h.make_node("DeformConv", ["x", "w", "off", "b", "m"], ["y"], kernel_shape=[2, 2])],
               [("x", D, [1, 2, 3, 3]), ("w", D, [2, 2, 2, 2]), ("off", D, [1, 8, 2, 2]),
                ("b", D, [2]), ("m", D, [1, 4, 2, 2])], [("y", D, [1, 2, 2, 2])], 19), 19),
        (model([h.make_node("STFT", ["s", "step", "w"], ["y"])],
               [("s", D, [1, "L", 2]), ("step", I64, []), ("w", D, [4])], [("y", D, None)],
               17), 17),
        (model([h.make_node("TensorScatter", ["p", "u", "i"], ["y"], mode="circular")],
               [("p", D, [2, 4, 3]), ("u", D, [2, 2, 3]), ("i", I64, [2])], [("y", D, [2, 4, 3])],
               24), 24),
    ]
    for mode in ("linear", "nearest", "cubic"):
        for pad in ("zeros", "border", "reflection"):
            cases.append((model([h.make_node("GridSample", ["x", "g"], ["y"], mode=mode,
                                             padding_mode=pad)],
                                [("x", D, [1, 1, 3, 3]), ("g", D, [1, 2, 2, 2])],
                                [("y", D, [1, 1, 2, 2])], 20), 20))
    for m, opset in cases:
        e, _ = expanded(m)
        missing = {t for t in op_types(e) if "onnx." + resolve(t, opset) not in JVP}
        assert not missing, (m.graph.node[0].op_type, missing)


def test_dynamic_batch():
    """GridSample and DeformConv with a symbolic batch: the lowering reads it at run time."""
    gs = model([h.make_node("GridSample", ["x", "g"], ["y"], mode="cubic")],
               [("x", D, ["N", 2, 3, 4]), ("g", D, ["N", 2, 3, 2])], [("y", D, ["N", 2, 2, 3])], 20)
    dc = model([h.make_node("DeformConv", ["x", "w", "off"], ["y"], kernel_shape=[2, 2])],
               [("x", D, ["N", 2, 3, 3]), ("w", D, [2, 2, 2, 2]), ("off", D, ["N", 8, 2, 2])],
               [("y", D, ["N", 2, 2, 2])], 19)
    rng = np.random.default_rng(4)
    for m, feeds in ((gs, {"x": rng.standard_normal((2, 2, 3, 4)),
                           "g": rng.uniform(-1.1, 1.1, (2, 2, 3, 2))}),
                     (dc, {"x": rng.standard_normal((3, 2, 3, 3)),
                           "w": rng.standard_normal((2, 2, 2, 2)),
                           "off": rng.uniform(-0.9, 0.9, (3, 8, 2, 2))})):
        e, err = lowered(m, feeds, m.graph.node[0].op_type, rtol=1e-9, atol=1e-9)
        assert e.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
        print(m.graph.node[0].op_type, "dynamic batch", err, check_derivatives(m, feeds))


@pytest.mark.parametrize("op", ["GridSample", "DeformConv", "STFT"])
def test_lowering_hessians(op):
    """forward(reverse) through the lowered ops, against finite differences of the gradient."""
    from adcheck import check_hessian
    rng = np.random.default_rng(8)
    if op == "GridSample":
        node = h.make_node("GridSample", ["x", "g"], ["t"], mode="cubic", padding_mode="border")
        ins = [("x", D, [1, 1, 3, 3]), ("g", D, [1, 2, 2, 2])]
        feeds = {"x": rng.standard_normal((1, 1, 3, 3)), "g": rng.uniform(-0.9, 0.9, (1, 2, 2, 2))}
        opset = 20
    elif op == "DeformConv":
        node = h.make_node("DeformConv", ["x", "w", "off"], ["t"], kernel_shape=[2, 2])
        ins = [("x", D, [1, 1, 3, 3]), ("w", D, [1, 1, 2, 2]), ("off", D, [1, 8, 2, 2])]
        feeds = {"x": rng.standard_normal((1, 1, 3, 3)), "w": rng.standard_normal((1, 1, 2, 2)),
                 "off": rng.uniform(-0.4, 0.4, (1, 8, 2, 2))}
        opset = 19
    else:
        node = h.make_node("STFT", ["x", "step", "w"], ["t"])
        ins = [("x", D, [1, 8, 1]), ("w", D, [4])]
        feeds = {"x": rng.standard_normal((1, 8, 1)), "w": rng.uniform(0.5, 1, 4)}
        opset = 17
    inits = [h.make_tensor("step", I64, [], [2])] if op == "STFT" else []
    m = model([node, h.make_node("ReduceSumSquare", ["t"], ["y"], keepdims=0)], ins,
              [("y", D, [])], opset, inits)
    if op == "STFT":  # ONNX infers 4 bins here (it ignores the default onesided)
        m.graph.value_info.append(h.make_tensor_value_info("t", D, [1, 3, 3, 2]))
    e, _ = expanded(m)
    print(op, "hessian", check_hessian(e, feeds))


def test_stft_wrong_inferred_shape():
    """ONNX's inference gives STFT 4 bins for a window of 4 (ignoring the
    default onesided): the lowering's computed type wins, and flows through
    the elementwise ops after it."""
    m = model([h.make_node("STFT", ["x", "step", "w"], ["t"]),
               h.make_node("Mul", ["t", "t"], ["y"])],
              [("x", D, [1, 8, 1]), ("w", D, [4])], [("y", D, None)], 17,
              [h.make_tensor("step", I64, [], [2])])
    e, _ = expanded(m)
    dims = [d.dim_value for d in e.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 3, 2]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 8, 1)), "w": rng.uniform(0.5, 1, 4)}
    np.testing.assert_allclose(run(e, feeds)["y"], run(m, feeds)["y"], rtol=1e-12, atol=1e-12)
    check_derivatives(m, feeds)
