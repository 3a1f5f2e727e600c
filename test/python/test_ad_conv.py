"""Conv and ConvTranspose rules: finite differences, the forward/reverse
identity and Hessians (ONNX Runtime has no double kernels: float32)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from adcheck import check_derivatives, check_hessian
from onnx_ad_mlir import forward, reverse
from onnx_ad_mlir.errors import UnsupportedOp

F = TP.FLOAT


def model(nodes, inputs, outputs, opset=18):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def conv_case(kind, x_shape, w_shape, bias=True, **attrs):
    ins = [("x", F, list(x_shape)), ("w", F, list(w_shape))]
    names = ["x", "w"]
    if bias:
        m_out = w_shape[0] if kind == "Conv" else w_shape[1] * attrs.get("group", 1)
        ins.append(("b", F, [m_out]))
        names.append("b")
    m = model([h.make_node(kind, names, ["y"], **attrs)], ins, [("y", F, None)])
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, _, s in ins}
    return m, feeds


CONV = [
    ("2d", (2, 3, 5, 5), (4, 3, 3, 3), {}),
    ("2d-stride-pad", (1, 2, 6, 7), (3, 2, 3, 2), dict(strides=[2, 2], pads=[1, 0, 1, 1])),
    ("2d-dilation", (1, 2, 7, 7), (2, 2, 2, 3), dict(dilations=[2, 1], strides=[1, 2])),
    ("2d-group", (2, 4, 5, 5), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    ("depthwise", (1, 3, 5, 4), (3, 1, 3, 3), dict(group=3)),
    ("same-upper", (1, 2, 5, 6), (2, 2, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ("same-lower", (1, 2, 5, 6), (2, 2, 2, 3), dict(auto_pad="SAME_LOWER")),
    ("valid", (1, 2, 5, 6), (2, 2, 3, 3), dict(auto_pad="VALID", strides=[2, 1])),
    ("1d", (2, 2, 9), (3, 2, 3), dict(strides=[2], pads=[1, 2], dilations=[2])),
    ("3d", (1, 2, 4, 4, 3), (2, 2, 2, 3, 2), dict(pads=[1, 0, 1, 0, 1, 0])),
]


@pytest.mark.parametrize("name,xs,ws,attrs", CONV, ids=[c[0] for c in CONV])
def test_conv(name, xs, ws, attrs):
    m, feeds = conv_case("Conv", xs, ws, **attrs)
    check_derivatives(m, feeds)


@pytest.mark.parametrize("auto", ["SAME_UPPER", "SAME_LOWER"])
def test_dilated_conv_with_auto_pad_same(auto):
    """torch's padding="same" with dilation, as TorchScript exports it:
    ONNX Runtime refuses a dilated Conv with auto_pad SAME, even in the
    model itself. The derivative models give the Conv the pads ONNX defines
    and run; they agree with those of the same Conv with explicit pads,
    whose derivatives are checked against finite differences."""
    from adcheck import run
    same, feeds = conv_case("Conv", (1, 2, 5, 6), (3, 2, 3, 4), auto_pad=auto,
                            dilations=[1, 2], strides=[1, 2])
    total = [2, 5]  # (out - 1) * stride + (kernel - 1) * dilation + 1 - in
    lo = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    explicit, _ = conv_case("Conv", (1, 2, 5, 6), (3, 2, 3, 4), dilations=[1, 2], strides=[1, 2],
                            pads=lo + [t - a for t, a in zip(total, lo)])
    check_derivatives(explicit, feeds)
    rng = np.random.default_rng(3)
    seeds = {**{f"fwd_{n}": rng.standard_normal(v.shape + (2,)).astype(np.float32)
                for n, v in feeds.items()},
             "adj_y": rng.standard_normal((1, 3, 5, 3, 2)).astype(np.float32)}
    for mode in (forward, reverse):
        a, b = (mode(m, layout="onnx") for m in (same, explicit))
        f = {i.name: {**feeds, **seeds}[i.name] for i in a.graph.input}
        got, want = run(a, f), run(b, f)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)


def test_conv_hessian():
    m, feeds = conv_case("Conv", (1, 4, 5, 5), (4, 2, 3, 3), group=2, strides=[2, 1],
                         pads=[1, 1, 0, 1])
    check_hessian(m, feeds)


CONVT = [
    ("2d", (2, 3, 4, 4), (3, 2, 3, 3), {}),
    ("stride-pad-opad", (1, 2, 3, 4), (2, 3, 3, 2),
     dict(strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2])),
    ("group-dilation", (1, 4, 4, 3), (4, 2, 2, 3), dict(group=2, dilations=[2, 1])),
    ("output-shape", (1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_shape=[6, 7])),
    ("same-upper", (1, 2, 3, 4), (2, 1, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ("1d", (2, 2, 5), (2, 3, 3), dict(strides=[2])),
]


@pytest.mark.parametrize("name,xs,ws,attrs", CONVT, ids=[c[0] for c in CONVT])
def test_conv_transpose(name, xs, ws, attrs):
    m, feeds = conv_case("ConvTranspose", xs, ws, **attrs)
    check_derivatives(m, feeds)


def test_conv_transpose_hessian():
    m, feeds = conv_case("ConvTranspose", (1, 4, 3, 3), (4, 1, 2, 3), group=2, strides=[2, 1])
    check_hessian(m, feeds)


def test_conv_dynamic_batch_forward_and_reverse():
    m = model([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               h.make_node("Tanh", ["c"], ["y"])],
              [("x", F, ["n", 2, 4, 4]), ("w", F, [3, 2, 3, 3])], [("y", F, ["n", 3, 4, 4])])
    rng = np.random.default_rng(3)
    check_derivatives(m, {"x": rng.standard_normal((3, 2, 4, 4)).astype(np.float32),
                          "w": 0.3 * rng.standard_normal((3, 2, 3, 3)).astype(np.float32)})


def _empty_batch_models():
    """Dynamic-batch models whose derivative programs reshape through the
    batch: Conv/Relu/MaxPool/Flatten/Gemm, and split attention heads."""
    rng = np.random.default_rng(8)
    w = lambda *s: onnx.numpy_helper.from_array((0.3 * rng.standard_normal(s)).astype(np.float32),
                                                f"w{len(s)}_{s[0]}")
    cw, fw = w(4, 2, 3, 3), w(5, 16)
    cnn = h.make_model(h.make_graph(
        [h.make_node("Conv", ["x", cw.name], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
         h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node("Flatten", ["p"], ["f"]), h.make_node("Gemm", ["f", fw.name], ["y"], transB=1)],
        "cnn", [h.make_tensor_value_info("x", F, ["N", 2, 4, 4])],
        [h.make_tensor_value_info("y", F, ["N", 5])], [cw, fw]),
        opset_imports=[h.make_opsetid("", 18)])
    qw = w(8, 8)
    heads = onnx.numpy_helper.from_array(np.array([0, 3, 2, 4], np.int64), "heads")
    back = onnx.numpy_helper.from_array(np.array([0, 3, 8], np.int64), "back")
    att = h.make_model(h.make_graph(
        [h.make_node("MatMul", ["x", qw.name], ["q"]), h.make_node("Reshape", ["q", "heads"], ["qh"]),
         h.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
         h.make_node("Transpose", ["qh"], ["kt"], perm=[0, 2, 3, 1]),
         h.make_node("MatMul", ["qt", "kt"], ["s"]), h.make_node("Softmax", ["s"], ["a"], axis=-1),
         h.make_node("MatMul", ["a", "qt"], ["o"]),
         h.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
         h.make_node("Reshape", ["ot", "back"], ["y"])],
        "att", [h.make_tensor_value_info("x", F, ["N", 3, 8])],
        [h.make_tensor_value_info("y", F, ["N", 3, 8])], [qw, heads, back]),
        opset_imports=[h.make_opsetid("", 18)])
    return {"cnn": (cnn, (2, 4, 4)), "attention": (att, (3, 8))}


@pytest.mark.parametrize("name", ["cnn", "attention"])
def test_empty_batch(name):
    """A batch of 0 runs through both derivative models (extents written
    -1 beside a 0, or a 0 read into a Reshape target without allowzero,
    fail in ONNX Runtime), and the same models are exact at batch 2."""
    from adcheck import run
    m, tail = _empty_batch_models()[name]
    rng = np.random.default_rng(9)
    check_derivatives(m, {"x": rng.standard_normal((2,) + tail).astype(np.float32)})
    x = np.zeros((0,) + tail, np.float32)
    y = run(m, {"x": x})["y"]
    fwd = run(forward(m, layout="onnx"), {"x": x, "fwd_x": np.zeros(x.shape + (2,), np.float32)})
    adj = run(reverse(m, layout="onnx"), {"x": x, "adj_y": np.zeros(y.shape + (2,), np.float32)})
    assert fwd["fwd_y"].shape == y.shape + (2,) and adj["adj_x"].shape == x.shape + (2,)


def test_conv_chain_dynamic_batch_shares_shape_reads():
    """Each tangent Conv merges k into the batch and splits it again by a
    run-time shape [k, N, ...]: the simplify pass reads k once (one Shape of
    a derivative) and builds each distinct target by one Concat (CSE merges
    the equal ones), instead of a Shape and two Concats per Conv."""
    import onnx_ad_mlir
    nodes = [h.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("Tanh", ["c1"], ["t1"]),
             h.make_node("Conv", ["t1", "w"], ["c2"], pads=[1, 1, 1, 1]),
             h.make_node("Tanh", ["c2"], ["t2"]),
             h.make_node("Conv", ["t2", "w"], ["y"], pads=[1, 1, 1, 1])]
    m = model(nodes, [("x", F, ["n", 3, 4, 4]), ("w", F, [3, 3, 3, 3])],
              [("y", F, ["n", 3, 4, 4])])
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 3, 4, 4)).astype(np.float32),
             "w": 0.2 * rng.standard_normal((3, 3, 3, 3)).astype(np.float32)}
    check_derivatives(m, feeds, inputs=["x"])
    fwd = onnx_ad_mlir.forward(m, inputs=["x"], outputs=["y"], layout="onnx")
    ops = [n.op_type for n in fwd.graph.node]
    assert ops.count("Conv") == 6, ops
    assert ops.count("Shape") <= 2 and ops.count("Concat") <= 1, ops


@pytest.mark.parametrize("kind,xs,ws,attrs", [
    ("Conv", (1, 4, 5, 5), (4, 2, 3, 3), dict(group=2, strides=[2, 1], pads=[1, 1, 0, 1])),
    ("ConvTranspose", (1, 4, 3, 3), (4, 1, 2, 3), dict(group=2, strides=[2, 1]))])
def test_reverse_of_reverse(kind, xs, ws, attrs):
    """reverse(reverse(m)) against forward(reverse(m)): <J v, w> == <v, J^T w>."""
    from adcheck import run
    m, feeds = conv_case(kind, xs, ws, **attrs)
    r = reverse(m, inputs=["x", "w"], layout="onnx")
    rng = np.random.default_rng(0)
    feeds["adj_y"] = rng.standard_normal(run(m, feeds)["y"].shape + (1,)).astype(np.float32)
    ins, outs = ["x", "w", "adj_y"], ["adj_x", "adj_w"]
    fr = forward(r, inputs=ins, outputs=outs, layout="onnx")
    rr = reverse(r, inputs=ins, outputs=outs, layout="onnx")
    n = len(r.graph.input)
    seeds_f = [i.name for i in fr.graph.input][n:]
    seeds_r = [i.name for i in rr.graph.input][n:]
    v = {s: rng.standard_normal(feeds[i].shape + (1,)).astype(np.float32) for s, i in zip(seeds_f, ins)}
    got = run(fr, {**feeds, **v})
    jv = [o.name for o in fr.graph.output][-2:]
    w = {s: rng.standard_normal(got[o].shape).astype(np.float32) for s, o in zip(seeds_r, jv)}
    back = run(rr, {**feeds, **w})
    jtw = [o.name for o in rr.graph.output][-3:]
    lhs = sum((got[o].astype(float) * w[s]).sum() for o, s in zip(jv, seeds_r))
    rhs = sum((back[o].astype(float) * v[s]).sum() for o, s in zip(jtw, seeds_f))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))


@pytest.mark.parametrize("attrs,ws", [(dict(pads=[1, 0, 1, 1], strides=[2, 1]), [3, 2, 3, 2]),
                                      (dict(pads=[1, 1, 1, 1], group=2, strides=[2, 2]), [4, 1, 3, 3])])
@pytest.mark.parametrize("channels", [2, "c"])
def test_conv_dynamic_spatial(attrs, ws, channels):
    """Spatial extents known only at run time: ConvTranspose with the largest
    output_padding, cut to x's extents. A grouped weight tangent is one Conv
    per group, x's channel count then taken from W where x's type lacks it."""
    m = model([h.make_node("Conv", ["x", "w"], ["y"], **attrs)],
              [("x", F, ["n", channels, "h", "w"]), ("w", F, ws)], [("y", F, None)])
    rng = np.random.default_rng(9)
    check_derivatives(m, {"x": rng.standard_normal((2, 2, 6, 5)).astype(np.float32),
                          "w": rng.standard_normal(ws).astype(np.float32)})


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_grouped_conv_of_weights_with_unknown_channels(opset):
    """A grouped Conv whose weight is an input of unknown extents (channel
    counts too): the weight tangent is one Conv per group on equal Splits,
    which need no extent (Split's forms before and after opsets 13 and 18).
    Was refused ("needs static channel counts")."""
    m = model([h.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 0, 1, 1], strides=[2, 1],
                           kernel_shape=[2, 1])],
              [("x", F, ["n", "c", "h", "w"]), ("w", F, ["m", "cg", "kh", "kw"])],
              [("y", F, ["n", "m", "oh", "ow"])], opset=opset)
    rng = np.random.default_rng(11)
    check_derivatives(m, {"x": rng.standard_normal((2, 4, 6, 5)).astype(np.float32),
                          "w": rng.standard_normal((6, 2, 2, 1)).astype(np.float32)})


SAME_RUN_TIME = [
    ("Conv", [3, 2, 3, 2], dict(auto_pad="SAME_UPPER", strides=[2, 1])),
    ("Conv", [3, 2, 3, 3], dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    ("Conv", [4, 1, 2, 2], dict(auto_pad="SAME_UPPER", group=2, strides=[3, 1])),
    ("Conv", [3, 2, 1, 1], dict(auto_pad="SAME_LOWER", strides=[3, 2])),  # windows skip input
    ("ConvTranspose", [2, 3, 3, 2], dict(auto_pad="SAME_UPPER", strides=[2, 1])),
    ("ConvTranspose", [2, 3, 2, 3], dict(auto_pad="SAME_LOWER", strides=[2, 2])),
]


@pytest.mark.parametrize("kind,ws,attrs", SAME_RUN_TIME)
def test_same_pads_on_run_time_extents(kind, ws, attrs):
    """auto_pad SAME on spatial extents known only at run time (tf2onnx
    writes it for dynamic images): Conv's transpose slices the unpadded
    transpose at pads computed from the run-time extents, its weight
    gradient pads x by them; ConvTranspose's SAME pads do not depend on the
    extent. Both were refused in reverse mode. Against central differences,
    the forward/reverse identity, and the same model with static extents."""
    from adcheck import run
    m = model([h.make_node(kind, ["x", "w"], ["y"], **attrs)],
              [("x", F, ["n", 2, "h", "w"]), ("w", F, ws)], [("y", F, None)])
    rng = np.random.default_rng(10)
    w = rng.standard_normal(ws).astype(np.float32)
    for shape in [(2, 2, 6, 5), (1, 2, 7, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        check_derivatives(m, {"x": x, "w": w})
        static = model([h.make_node(kind, ["x", "w"], ["y"], **attrs)],
                       [("x", F, list(shape)), ("w", F, ws)], [("y", F, None)])
        u = rng.standard_normal(run(static, {"x": x, "w": w})["y"].shape + (1,)).astype(np.float32)
        got, want = (run(reverse(mm, layout="onnx"), {"x": x, "w": w, "adj_y": u})
                     for mm in (m, static))
        for name in ("adj_x", "adj_w"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


# X-cotangents that conv_fast.py turns into a Conv with the flipped kernel
# (unit strides: dilations, groups, asymmetric pads, >= 16 result channels
# when ungrouped) and strided ones that stay ConvTranspose.
FLIP = [
    ("group-dilation-asym", (1, 16, 7, 6), (8, 4, 3, 2),
     dict(group=4, dilations=[2, 1], pads=[2, 0, 1, 1])),
    ("wide-dilation-asym", (1, 16, 5, 6), (4, 16, 3, 3), dict(dilations=[1, 2], pads=[0, 2, 1, 1])),
    ("depthwise-dilation", (2, 16, 6, 5), (16, 1, 3, 3), dict(group=16, dilations=[2, 2], pads=[2] * 4)),
    ("1d-group", (1, 16, 9), (8, 8, 3), dict(group=2, dilations=[3], pads=[1, 3])),
    ("3d-group", (1, 16, 4, 4, 3), (4, 4, 2, 3, 2), dict(group=4, pads=[1, 0, 1, 0, 1, 0])),
    ("stride-dilation-group-asym", (1, 4, 9, 8), (6, 2, 3, 2),
     dict(strides=[2, 2], dilations=[2, 1], group=2, pads=[1, 0, 2, 1])),
]


@pytest.mark.parametrize("name,xs,ws,attrs", FLIP, ids=[c[0] for c in FLIP])
def test_conv_input_cotangent_forms(name, xs, ws, attrs):
    m, feeds = conv_case("Conv", xs, ws, **attrs)
    check_derivatives(m, feeds)
    # x alone, with the weight a constant (the form the runtime folds)
    from onnx import numpy_helper as nh
    g = m.graph
    w = feeds.pop("w")
    g.initializer.append(nh.from_array(w, "w"))
    del g.input[1]
    check_derivatives(m, feeds, inputs=["x"])


def test_conv_pool_opset9():
    """Opset 9 (the light model zoo's): no Slice steps, Pad attributes, no
    float Equal, no Range -- flipped kernels by Gather, strided patches by
    Gather, MaxUnpool phases indexed through NonZero."""
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(4)
    w = (0.2 * rng.standard_normal((16, 16, 3, 3))).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Conv", ["p", "w"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             h.make_node("MaxPool", ["c2"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F, [1, 16, 8, 8])],
                     [h.make_tensor_value_info("y", F, None)], [nh.from_array(w, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 4
    x = rng.permutation(16 * 64).reshape(1, 16, 8, 8).astype(np.float32) * 0.01 - 5.0
    check_derivatives(m, {"x": x})


def _bn_relu_conv(extra_use: bool = False, affine: bool = True, relu: bool = True, group: int = 1):
    """x -> BatchNormalization (eval) [-> Mul, Add per channel: Caffe2's
    affine] [-> Relu] -> Conv, dynamic batch; `extra_use`: the Conv's input
    also feeds a later Add (a second reader of its tangent)."""
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(11)
    c = 16
    inits = [nh.from_array(a.astype(np.float32), n) for n, a in [
        ("scale", rng.uniform(0.5, 2.0, c)), ("bias", rng.standard_normal(c)),
        ("mean", rng.standard_normal(c)), ("var", rng.uniform(0.5, 2.0, c)),
        ("aw", rng.uniform(0.5, 2.0, (c, 1, 1))), ("ab", rng.standard_normal((c, 1, 1))),
        ("w", 0.2 * rng.standard_normal((c, c // group, 3, 3)))]]
    nodes = [h.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["bn"])]
    last = "bn"
    if affine:
        nodes += [h.make_node("Mul", ["bn", "aw"], ["bw"]), h.make_node("Add", ["bw", "ab"], ["bb"])]
        last = "bb"
    if relu:
        nodes.append(h.make_node("Relu", [last], ["r"]))
        last = "r"
    nodes.append(h.make_node("Conv", [last, "w"], ["y"], pads=[1, 1, 1, 1], group=group))
    if extra_use:
        nodes[-1].output[0] = "cv"
        nodes.append(h.make_node("Add", ["cv", last], ["y"]))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F, ["n", c, 5, 5])],
                     [h.make_tensor_value_info("y", F, ["n", c, 5, 5])], inits)
    # x such that the Relu's input is >= 0.3 away from its kink (differences step over none)
    target = rng.choice([-1.0, 1.0], (2, c, 5, 5)) * rng.uniform(0.3, 2.0, (2, c, 5, 5))
    arr = {t.name: nh.to_array(t).astype(np.float64) for t in inits}
    gain = arr["scale"] / np.sqrt(arr["var"] + 1e-5)
    pre = (target - arr["ab"].reshape(c, 1, 1)) / arr["aw"].reshape(c, 1, 1) if affine else target
    x = (pre - arr["bias"].reshape(c, 1, 1)) / gain.reshape(c, 1, 1) + arr["mean"].reshape(c, 1, 1)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), {"x": x.astype(np.float32)}


@pytest.mark.parametrize("extra_use,affine,relu,group,folded", [
    (False, True, True, 1, True), (False, False, True, 1, True), (False, False, False, 1, True),
    (True, True, True, 1, False), (False, True, True, 2, False)],
    ids=["bn-affine-relu", "bn-relu", "bn", "second-reader", "grouped"])
def test_channel_scale_into_conv_weights(extra_use, affine, relu, group, folded):
    """BatchNormalization's per-channel gains (and a Caffe2 affine Mul's)
    move into the next Conv's weights through a Relu mask: the tangent Conv
    reads the masked tangent directly (no pass multiplying it by the gains).
    Not when the Conv's input has another reader, nor for grouped Convs.
    Derivatives checked by finite differences in both modes."""
    import onnx_ad_mlir
    m, feeds = _bn_relu_conv(extra_use, affine, relu, group)
    check_derivatives(m, feeds)
    fwd = onnx_ad_mlir.forward(m, inputs=["x"], outputs=["y"], layout="onnx")
    convs = [n for n in fwd.graph.node if n.op_type == "Conv"]
    assert len(convs) == 2 and (convs[1].input[1] != "w") == folded
    # full-size products (reading x or the seed): the affine's and the
    # tangent's Relu mask; one more (the gains times the tangent or mask) unfolded
    data = {i.name for i in fwd.graph.input}
    muls = 0
    for n in fwd.graph.node:
        if data & set(n.input):
            data |= set(n.output)
            muls += n.op_type == "Mul"
    assert muls == int(affine) + int(relu) + (not folded), muls


@pytest.mark.parametrize("kind,xs,ws,group,fault", [
    ("Conv", (1, 1, 5, 5), (99, 1, 3, 3), 99, "input channels 1 and group 99"),  # fuzz seed 55 case 457
    ("Conv", (1, 2, 5, 5), (3, 1, 3, 3), 2, "input channels 2 and group 2"),      # M not a multiple
    ("ConvTranspose", (1, 3, 5, 5), (2, 3, 3, 3), 1, "input channels 3 and group 1"),
])
def test_channels_contradicting_group_refused(kind, xs, ws, group, fault):
    """Static channel counts that do not fit the group: ONNX shape inference
    accepts them and ONNX Runtime fails only when running; both modes refuse,
    naming the node."""
    m, _ = conv_case(kind, xs, ws, bias=False, group=group)
    m.graph.node[0].name = "conv0"
    for mode in (forward, reverse):
        with pytest.raises(UnsupportedOp, match=f"node 'conv0'.*{fault}"):
            mode(m)
