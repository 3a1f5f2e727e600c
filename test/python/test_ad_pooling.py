"""Pooling and resampling rules: finite differences, the forward/reverse
identity, Hessians where smooth (ONNX Runtime pools are float32 only)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives, check_hessian
from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.errors import ImportFailure, UnsupportedOp

F, I = TP.FLOAT, TP.INT64


def model(nodes, inputs, outputs, opset=19):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def const(name, value):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(value), name))


def case(op, x_shape, outputs=("y",), extra=(), opset=19, seed=5, distinct=True, **attrs):
    nodes = list(extra) + [h.make_node(op, ["x"] + [e.output[0] for e in extra], list(outputs), **attrs)]
    m = model(nodes, [("x", F, list(x_shape))], [(o, F if o == "y" else I, None) for o in outputs],
              opset=opset)
    rng = np.random.default_rng(seed)
    if distinct:  # well-separated values: no ties for max pools
        x = rng.permutation(np.prod(x_shape)).reshape(x_shape).astype(np.float32) * 0.1
    else:
        x = rng.standard_normal(x_shape).astype(np.float32)
    return m, {"x": x}


MAXPOOL = [
    ("basic", (1, 2, 4, 4), {"kernel_shape": [2, 2]}),
    ("strided-padded", (2, 1, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("ceil-dilated", (1, 2, 6, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1,
                                    "dilations": [1, 2]}),
    ("1d-same", (1, 2, 7), {"kernel_shape": [3], "auto_pad": "SAME_UPPER", "strides": [2]}),
    ("3d", (1, 1, 3, 4, 4), {"kernel_shape": [2, 2, 2]}),
]


@pytest.mark.parametrize("name,shape,attrs", MAXPOOL, ids=[c[0] for c in MAXPOOL])
def test_max_pool(name, shape, attrs):
    m, feeds = case("MaxPool", shape, **attrs)
    check_derivatives(m, feeds)


def test_max_pool_with_indices_output():
    m, feeds = case("MaxPool", (1, 2, 4, 4), outputs=("y", "i"), kernel_shape=[2, 2], strides=[2, 2])
    check_derivatives(m, feeds, outputs=["y"])


AVG = [
    ("basic", (1, 2, 4, 4), {"kernel_shape": [2, 2]}),
    ("pads-exclude", (2, 1, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("pads-include", (1, 2, 5, 4), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1],
                                    "count_include_pad": 1}),
    ("ceil", (1, 1, 6, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("ceil-include", (1, 1, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1,
                                    "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("same-lower", (1, 2, 5, 5), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
    ("1d", (2, 2, 7), {"kernel_shape": [3], "strides": [2]}),
    ("3d", (1, 1, 4, 3, 4), {"kernel_shape": [2, 2, 2], "pads": [1, 0, 0, 0, 1, 1]}),
    # a stride longer than the window: SAME's padding is negative, windows skip input
    ("same-upper-skip", (2, 2, 2, 6), {"kernel_shape": [2, 1], "strides": [1, 3],
                                       "auto_pad": "SAME_UPPER"}),
    ("same-lower-skip", (1, 2, 7, 6), {"kernel_shape": [1, 2], "strides": [4, 5],
                                       "auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize("name,shape,attrs", AVG, ids=[c[0] for c in AVG])
def test_average_pool(name, shape, attrs):
    m, feeds = case("AveragePool", shape, distinct=False, **attrs)
    check_derivatives(m, feeds)


def test_lp_pool_negative_same_padding():
    m, feeds = case("LpPool", (1, 2, 3, 8), distinct=False, kernel_shape=[1, 2], strides=[2, 5],
                    auto_pad="SAME_UPPER", p=2)
    feeds["x"] = np.abs(feeds["x"]) + 0.5
    check_derivatives(m, feeds)


@pytest.mark.parametrize("relu", [False, True])
def test_max_pool_negative_same_padding(relu):
    """ONNX Runtime runs a MaxPool with negative SAME padding when it has
    dilations (its dilated kernel crops; the plain one refuses): windows
    skip input, after a Relu too (fuzz: the tangent was NaN there)."""
    extra = [h.make_node("Relu", ["x"], ["r"])] if relu else []
    nodes = extra + [h.make_node("MaxPool", ["r" if relu else "x"], ["y"], kernel_shape=[2, 1],
                                 strides=[1, 4], dilations=[1, 2], auto_pad="SAME_UPPER")]
    m = model(nodes, [("x", F, [1, 2, 4, 7])], [("y", F, None)])
    x = (np.random.default_rng(6).permutation(56).reshape(1, 2, 4, 7).astype(np.float32) - 20) * 0.1
    check_derivatives(m, {"x": x})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_ceil_mode_last_window_in_padding(op):
    """ceil_mode with a last window that would start in the end padding:
    ONNX Runtime drops it, ONNX shape inference before opset 22 does not
    (declared 3 where 2 run): refused there, differentiated at opset 22."""
    attrs = dict(kernel_shape=[1, 2], strides=[1, 4], ceil_mode=1)
    m, feeds = case(op, (2, 1, 3, 8), opset=19, distinct=op == "MaxPool", **attrs)
    with pytest.raises(UnsupportedOp, match=r"the output extent on spatial axis 1 is "
                                            r"3 by ONNX shape inference but 2 in ONNX Runtime"):
        forward(m)
    m, feeds = case(op, (2, 1, 3, 8), opset=22, distinct=op == "MaxPool", **attrs)
    check_derivatives(m, feeds)


def test_same_padding_with_dilations_refused():
    """ONNX Runtime pads SAME pools for the undilated window, ONNX's
    inference for the dilated one: 3 against 4 here (fuzz seed 308 case 14)."""
    m, _ = case("MaxPool", (1, 1, 4, 4), kernel_shape=[2, 1], dilations=[2, 1],
                auto_pad="SAME_LOWER")
    with pytest.raises(UnsupportedOp, match=r"axis 0 is 4 by ONNX shape inference but 3 in "
                                            r"ONNX Runtime \(auto_pad SAME_LOWER with dilations"):
        forward(m)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    m, feeds = case("LpPool", (1, 2, 5, 5), distinct=False, kernel_shape=[2, 3], strides=[1, 2],
                    pads=[1, 0, 0, 1], p=p)
    feeds["x"] = np.abs(feeds["x"]) + 0.5  # away from the kink at 0
    check_derivatives(m, feeds)
    if p == 2:
        check_hessian(m, feeds)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools(op):
    m, feeds = case(op, (2, 3, 4, 3), distinct=op == "GlobalMaxPool")
    check_derivatives(m, feeds)
    if op != "GlobalMaxPool":
        check_hessian(m, feeds)


def test_max_unpool():
    idx = np.array([[[[0, 7], [9, 14]]]], dtype=np.int64)
    m, feeds = case("MaxUnpool", (1, 1, 2, 2), extra=[const("i", idx)], distinct=False,
                    kernel_shape=[2, 2], strides=[2, 2])
    check_derivatives(m, feeds)


def test_max_unpool_to_an_output_shape_then_reverse_sequence():
    """MaxUnpool with an output_shape operand: ONNX's inference leaves its
    result unranked, and the ReverseSequence rule after it failed (a
    TypeError, fuzz seed 278 case 1864). The result has its input's rank."""
    nodes = [h.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[1, 2], strides=[1, 2]),
             const("shape", np.array([2, 3, 2, 4])),
             h.make_node("MaxUnpool", ["p", "i", "shape"], ["u"], kernel_shape=[1, 2],
                         strides=[1, 2]),
             const("lens", np.array([3, 1])),
             h.make_node("ReverseSequence", ["u", "lens"], ["y"], batch_axis=0, time_axis=1)]
    m = model(nodes, [("x", F, [2, 3, 2, 4])], [("y", F, [2, 3, 2, 4])])
    x = np.random.default_rng(8).permutation(48).reshape(2, 3, 2, 4).astype(np.float32)
    check_derivatives(m, {"x": x})


RESIZE = [
    ("nearest-up", (1, 2, 3, 4), [1, 1, 2, 1.5], {"mode": "nearest"}),
    ("linear-up", (1, 2, 3, 4), [1, 1, 2, 2], {"mode": "linear"}),
    ("linear-down-aa", (1, 1, 6, 5), [1, 1, 0.5, 0.6], {"mode": "linear", "antialias": 1}),
    ("linear-align", (2, 1, 3, 3), [1, 1, 1.5, 2], {"mode": "linear",
                                                   "coordinate_transformation_mode": "align_corners"}),
    ("cubic", (1, 1, 4, 4), [1, 1, 1.5, 2], {"mode": "cubic"}),
]


@pytest.mark.parametrize("name,shape,scales,attrs", RESIZE, ids=[c[0] for c in RESIZE])
def test_resize(name, shape, scales, attrs):
    extra = [const("roi", np.zeros(0, np.float32)), const("sc", np.asarray(scales, np.float32))]
    m, feeds = case("Resize", shape, extra=extra, distinct=False, **attrs)
    check_derivatives(m, feeds)


def test_resize_sizes():
    extra = [const("roi", np.zeros(0, np.float32)), const("sc", np.zeros(0, np.float32)),
             const("sz", np.array([1, 2, 5, 7]))]
    m, feeds = case("Resize", (1, 2, 3, 4), extra=extra, distinct=False, mode="linear")
    check_derivatives(m, feeds)


# (scales or sizes, axes, roi of tf_crop_and_resize: starts then ends of its axes, attributes)
RESIZE_18 = [
    ("axes-scales-linear", [2.0, 1.5], [2, 3], None, {"mode": "linear"}),
    ("axes-reversed-cubic", [1.5, 2.0], [3, 2], None, {"mode": "cubic"}),
    ("axes-sizes-nearest", np.array([7, 5]), [3, -2], None, {"mode": "nearest"}),
    ("crop-sizes", np.array([1, 2, 3, 3]), None, [0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8],
     {"mode": "linear"}),
    ("crop-outside", [1, 1, 2.0, 1.5], None, [0, 0, -0.3, 0.2, 1, 1, 1.2, 0.9],
     {"mode": "linear", "extrapolation_value": 10.0}),
    ("crop-axes-cubic", np.array([3, 4]), [3, 2], [0.1, 0.2, 0.9, 0.7], {"mode": "cubic"}),
]


@pytest.mark.parametrize("name,values,axes,roi,attrs", RESIZE_18, ids=[c[0] for c in RESIZE_18])
def test_resize_axes_and_crop(name, values, axes, roi, attrs):
    """Resize's `axes` (opset 18: scales or sizes for the listed axes only)
    and tf_crop_and_resize (samples of a constant roi; those outside the
    input take extrapolation_value, a constant: their derivative is 0)."""
    by_sizes = isinstance(values, np.ndarray)
    extra = [const("roi", np.asarray(roi if roi is not None else [], np.float32)),
             const("sc", np.asarray([] if by_sizes else values, np.float32))]
    if by_sizes:
        extra.append(const("sz", values.astype(np.int64)))
    if axes is not None:
        attrs = {**attrs, "axes": axes}
    if roi is not None:
        attrs = {**attrs, "coordinate_transformation_mode": "tf_crop_and_resize"}
    m, feeds = case("Resize", (1, 2, 4, 5), extra=extra, distinct=False, **attrs)
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


def test_upsample_opset9():
    m, feeds = case("Upsample", (1, 1, 2, 3), extra=[const("sc", np.asarray([1, 1, 2, 2], np.float32))],
                    distinct=False, opset=9, mode="nearest")
    check_derivatives(m, feeds)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset10(mode):
    """Resize-10 takes (X, scales): the scales are its second operand."""
    m, feeds = case("Resize", (2, 1, 3, 4), extra=[const("sc", np.asarray([1, 1, 2, 1.5], np.float32))],
                    distinct=False, opset=10, mode=mode)
    check_derivatives(m, feeds)


def test_roi_align_double():
    rois = np.array([[0.5, 0.3, 3.2, 2.9], [1.0, 1.5, 2.5, 3.5], [0.0, 0.0, 1.5, 1.0]], np.float64)
    nodes = [const("r", rois), const("bi", np.array([1, 0, 1])),
             h.make_node("RoiAlign", ["x", "r", "bi"], ["y"], output_height=2, output_width=3,
                         sampling_ratio=2, spatial_scale=1.0)]
    m = model(nodes, [("x", TP.DOUBLE, [2, 3, 4, 5])], [("y", TP.DOUBLE, None)])
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5))
    check_derivatives(m, {"x": x})


ROI_ALIGN = [({"sampling_ratio": 2}, 16), ({"sampling_ratio": 0}, 16),
             ({"coordinate_transformation_mode": "output_half_pixel"}, 16),
             ({"sampling_ratio": 2}, 10)]


@pytest.mark.parametrize("attrs, opset", ROI_ALIGN,
                         ids=["ratio-2", "adaptive", "output-half-pixel", "opset-10"])
def test_roi_align_over_run_time_extents(attrs, opset):
    """H and W known only at run time (a detector exported for any image
    size; refused before): the bilinear weights factor into rows and
    columns, read off the node run on row, column and ones images. A roi
    outside the image has no weights at all (0 / 0 there must give 0). At
    two image sizes, with the Hessian of y * y."""
    rois = np.array([[0.5, 0.3, 3.2, 2.9], [1.0, 1.5, 2.5, 3.5], [0.0, 0.0, 1.5, 1.0],
                     [6.0, 7.0, 9.0, 9.5]], np.float64)
    nodes = [const("r", rois), const("bi", np.array([1, 0, 1, 0])),
             h.make_node("RoiAlign", ["x", "r", "bi"], ["y"], output_height=2, output_width=3,
                         spatial_scale=1.0, **attrs),
             h.make_node("Mul", ["y", "y"], ["z"])]
    m = model(nodes, [("x", TP.DOUBLE, ["n", 3, "h", "w"])],
              [("y", TP.DOUBLE, None), ("z", TP.DOUBLE, None)], opset=opset)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5))
    check_derivatives(m, {"x": x})
    check_hessian(m, {"x": x}, output="z")
    check_derivatives(m, {"x": rng.standard_normal((2, 3, 7, 3))})


def test_roi_align_over_huge_images_is_refused_by_name():
    """Its derivative runs the node on H*W basis images: over a [4, 10**12]
    image (a fuzz mutation, seed 273 case 1327) numpy's allocation failed
    inside the rule (a RuleError)."""
    rois = np.array([[0.5, 0.3, 3.2, 2.9]], np.float32)
    nodes = [const("r", rois), const("bi", np.array([0])),
             h.make_node("RoiAlign", ["x", "r", "bi"], ["y"], output_height=2, output_width=2)]
    m = model(nodes, [("x", F, [1, 1, 4, 10**12])], [("y", F, None)])
    with pytest.raises(UnsupportedOp, match=r"RoiAlign over 4 x 1000000000000 images: its "
                                            r"derivative's .* too large"):
        forward(m)


def test_col2im():
    nodes = [const("img", np.array([4, 5])), const("blk", np.array([2, 3])),
             h.make_node("Col2Im", ["x", "img", "blk"], ["y"], strides=[1, 2], pads=[1, 0, 0, 1])]
    # L = ((4+1+0-2)//1+1) * ((5+0+1-3)//2+1) = 4 * 2
    m = model(nodes, [("x", F, [2, 2 * 6, 8])], [("y", F, None)])
    x = np.random.default_rng(4).standard_normal((2, 12, 8)).astype(np.float32)
    check_derivatives(m, {"x": x})


DFT = [("complex", 17, (2, 5, 2), {}, None), ("real-onesided", 17, (2, 6, 1), {"onesided": 1}, None),
       ("inverse", 17, (3, 4, 2), {"inverse": 1}, None), ("length-pad", 17, (2, 4, 1), {}, 6),
       ("length-trunc-onesided", 20, (2, 7, 1), {"onesided": 1}, 5), ("axis-opset20", 20, (4, 3, 2), {}, None),
       ("inverse-onesided", 17, (2, 4, 2), {"inverse": 1, "onesided": 1}, 6)]


def _dft_model(name, opset, attrs, x_dims, length_nodes):
    """y = DFT(x) and z = y * y, its length "n" made by length_nodes (none:
    no length operand); opset 20 with its axis operand."""
    ins = ["x", "n" if length_nodes else ""] if length_nodes or opset >= 20 else ["x"]
    nodes = list(length_nodes)
    if opset >= 20:
        nodes.append(const("ax", np.array(0 if name == "axis-opset20" else 1)))
        ins.append("ax")
    nodes.append(h.make_node("DFT", ins, ["y"], **attrs))
    nodes.append(h.make_node("Mul", ["y", "y"], ["z"]))
    return model(nodes, [("x", TP.DOUBLE, x_dims)],
                 [("y", TP.DOUBLE, None), ("z", TP.DOUBLE, None)], opset=opset)


@pytest.mark.parametrize("name,opset,shape,attrs,length", DFT, ids=[c[0] for c in DFT])
def test_dft(name, opset, shape, attrs, length):
    n = [const("n", np.array(length if length is not None else shape[1]))] \
        if length is not None or opset >= 20 else []
    m = _dft_model(name, opset, attrs, list(shape), n)
    x = np.random.default_rng(6).standard_normal(shape)
    check_derivatives(m, {"x": x})
    check_hessian(m, {"x": x}, output="z")


@pytest.mark.parametrize("name,opset,shape,attrs,length", DFT, ids=[c[0] for c in DFT])
def test_dft_run_time_lengths(name, opset, shape, attrs, length):
    """The same DFTs with the batch and signal extents named (a Fourier layer
    exported for any resolution): the signal length is read at run time
    (was refused); at two lengths, with a Hessian."""
    n = []
    if length is not None:  # read off x's extent m at run time, as a * m + c
        # (m bins to 2m - 2 samples for the inverse onesided one: ONNX Runtime's
        # irfft departs from ONNX's reference where m is not n // 2 + 1)
        a, c = (2, -2) if attrs.get("inverse") and attrs.get("onesided") else (1, length - shape[1])
        n = [h.make_node("Shape", ["x"], ["s"], start=1, end=2), const("a", np.array([a])),
             const("c", np.array([c])), h.make_node("Mul", ["s", "a"], ["am"]),
             h.make_node("Add", ["am", "c"], ["l1"]), h.make_node("Squeeze", ["l1"], ["n"])]
    m = _dft_model(name, opset, attrs, ["a", "b", shape[2]], n)
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape)
    check_derivatives(m, {"x": x})
    check_hessian(m, {"x": x}, output="z")
    longer = (shape[0], shape[1] + 3, shape[2])
    check_derivatives(m, {"x": rng.standard_normal(longer)})


@pytest.mark.parametrize("name,shape,attrs", MAXPOOL[:3], ids=[c[0] for c in MAXPOOL[:3]])
def test_max_pool_before_opset16(name, shape, attrs):
    """Overlapping windows, no scatter-add: window masks instead of Indices."""
    attrs = dict(attrs)
    if "dilations" in attrs:
        attrs.pop("ceil_mode")
    m, feeds = case("MaxPool", shape, opset=13, **attrs)
    check_derivatives(m, feeds)


@pytest.mark.parametrize("opset", [11, 13, 15])
@pytest.mark.parametrize("name,shape,attrs", MAXPOOL[1:3], ids=[c[0] for c in MAXPOOL[1:3]])
def test_max_pool_before_opset16_run_time_extents(name, shape, attrs, opset):
    """The window masks with the spatial extents named (a ResNet stem
    exported with dynamic H and W at opset 13): the window Slices end at
    run-time extents (was refused); at two input sizes, with a Hessian."""
    attrs = dict(attrs)
    attrs.pop("ceil_mode", None)  # (auto_pad and ceil_mode need static extents)
    m, feeds = case("MaxPool", shape, opset=opset, **attrs)
    for i, d in enumerate(m.graph.input[0].type.tensor_type.shape.dim):
        d.dim_param = "nchw"[i]
    m.graph.output[0].type.tensor_type.ClearField("shape")
    check_derivatives(m, feeds)
    check_hessian(m, feeds)
    bigger = np.random.default_rng(2).permutation(3 * 7 * 8).reshape(1, 3, 7, 8) * 0.1
    check_derivatives(m, {"x": bigger.astype(np.float32)})


def test_max_pool_before_opset11_run_time_extents_refused():
    m, _ = case("MaxPool", (1, 1, 5, 5), opset=10, kernel_shape=[3, 3], strides=[2, 2])
    for i, d in enumerate(m.graph.input[0].type.tensor_type.shape.dim):
        d.dim_param = "nchw"[i]
    with pytest.raises(UnsupportedOp, match="MaxPool before opset 11 needs static output"):
        reverse(m)


def test_closure_second_order():
    builders = [
        lambda: case("MaxPool", (1, 2, 4, 4), kernel_shape=[2, 2])[0],
        lambda: case("MaxPool", (1, 1, 4, 4), opset=13, kernel_shape=[3, 3])[0],
        lambda: case("AveragePool", (1, 2, 5, 5), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)[0],
        lambda: case("LpPool", (1, 1, 4, 4), kernel_shape=[2, 2])[0],
        lambda: case("Resize", (1, 1, 3, 3), extra=[const("roi", np.zeros(0, np.float32)),
                                                    const("sc", np.asarray([1, 1, 2, 2], np.float32))],
                     mode="linear")[0],
    ]
    for make in builders:
        m = make()
        reverse(reverse(m))
        reverse(forward(m))
        forward(forward(m))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("opset", [13, 19])
def test_tiling_windows(op, opset):
    """strides == kernel: the reshape path (a remainder row is cut off)."""
    m, feeds = case(op, (2, 2, 5, 6), opset=opset, distinct=op == "MaxPool", kernel_shape=[2, 3],
                    strides=[2, 3])
    check_derivatives(m, feeds)


@pytest.mark.parametrize("opset", [8, 9, 10, 11, 13, 19])
def test_average_pool_exact_tiles(opset):
    """Windows tiling x exactly: the tangent is the pool itself, its transpose
    a nearest upsample (Upsample before opset 10, its scales an attribute
    before 9). Second derivatives go through the upsample's own rules.
    Constants of the derivative models before opset 9 are initializers
    (Constant holds floats only there), which the checker verifies."""
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("AveragePool", ["t"], ["p"], kernel_shape=[2, 3], strides=[2, 3]),
             h.make_node("Tanh", ["p"], ["y"])]
    m = model(nodes, [("x", F, [2, 3, 4, 6])], [("y", F, None)], opset=opset)
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 6)).astype(np.float32)
    check_derivatives(m, {"x": x})
    check_hessian(m, {"x": x})
    fwd, adj = forward(m, layout="onnx"), reverse(m, layout="onnx")
    assert [n.op_type for n in fwd.graph.node].count("AveragePool") == 2
    assert {"Upsample" if opset < 10 else "Resize"} <= {n.op_type for n in adj.graph.node}
    if opset >= 13:  # (before, reversing the reverse model's broadcasts needs run-time axes)
        u = np.random.default_rng(4).standard_normal((2, 3, 2, 2, 1)).astype(np.float32)
        check_derivatives(adj, {"x": x, "adj_y": u})  # reverse(reverse(m)), forward(reverse(m))


@pytest.mark.parametrize("opset", [13, 19])
def test_max_pool_reverse_of_reverse(opset):
    """Overlapping windows (MaxUnpool per phase in reverse): reverse(reverse(m))
    against forward(reverse(m)) by <J v, w> == <v, J^T w>."""
    from adcheck import run as ort_run
    m, feeds = case("MaxPool", (1, 2, 5, 5), opset=opset, kernel_shape=[3, 3], strides=[2, 2],
                    pads=[1, 1, 1, 1])
    r = reverse(m, layout="onnx")
    rng = np.random.default_rng(2)
    feeds["adj_y"] = rng.standard_normal(ort_run(m, feeds)["y"].shape + (1,)).astype(np.float32)
    fr = forward(r, inputs=["x", "adj_y"], outputs=["adj_x"], layout="onnx")
    rr = reverse(r, inputs=["x", "adj_y"], outputs=["adj_x"], layout="onnx")
    n = len(r.graph.input)
    sf, sr = [i.name for i in fr.graph.input][n:], [i.name for i in rr.graph.input][n:]
    v = {s: rng.standard_normal(feeds[i].shape + (1,)).astype(np.float32)
         for s, i in zip(sf, ["x", "adj_y"])}
    got = ort_run(fr, {**feeds, **v})
    jv = [o.name for o in fr.graph.output][-1]
    w = rng.standard_normal(got[jv].shape).astype(np.float32)
    back = ort_run(rr, {**feeds, sr[0]: w})
    outs = [o.name for o in rr.graph.output][-2:]
    lhs = float((got[jv].astype(float) * w).sum())
    rhs = sum(float((back[o].astype(float) * v[s]).sum()) for o, s in zip(outs, sf))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))


def test_max_pool_of_relu():
    """MaxPool(Relu(x)) with tiling windows: the Relu's full-size mask is
    folded into a pooled-size one (pooling._through_relu). Against finite
    differences, and the reverse result against a NumPy reference with ties
    (all-negative windows, equal positive maxima shared among them)."""
    from adcheck import run
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    m = model(nodes, [("x", F, [2, 3, 4, 6])], [("y", F, None)])
    rng = np.random.default_rng(11)
    x = (rng.permutation(2 * 3 * 4 * 6).reshape(2, 3, 4, 6).astype(np.float32) - 60.0) * 0.1
    check_derivatives(m, {"x": x})
    x[0, 0, :2, :2] = -1.0                       # an all-negative window
    x[0, 1, :2, :2] = [[2.0, 2.0], [-1.0, 2.0]]  # a three-way tie
    x[1, 2, 2:, 4:] = [[0.0, -3.0], [0.0, -1.0]]  # a tie at zero
    u = rng.standard_normal((2, 3, 2, 3)).astype(np.float32)
    got = run(reverse(m, layout="onnx"), {"x": x, "adj_y": u[..., None]})["adj_x"][..., 0]
    r = np.maximum(x, 0).reshape(2, 3, 2, 2, 3, 2)
    hit = (r == r.max(axis=(3, 5), keepdims=True)) & (r > 0)
    share = hit / np.maximum(hit.sum(axis=(3, 5), keepdims=True), 1)
    want = (share * u[:, :, :, None, :, None]).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_max_pool_of_relu_dynamic_batch_ties():
    """The tie mask upsamples the pooled value through a Reshape to its own
    extents ([-1, C, ...]: ONNX Runtime then upsamples in NCHW instead of
    converting the full-size result out of its blocked layout); with a
    dynamic batch the derivatives stay exact at ties, in both modes."""
    from adcheck import run
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    m = model(nodes, [("x", F, ["n", 8, 4, 6])], [("y", F, ["n", 8, 2, 3])])
    rng = np.random.default_rng(12)
    x = (rng.permutation(2 * 8 * 4 * 6).reshape(2, 8, 4, 6).astype(np.float32) - 190.0) * 0.1
    check_derivatives(m, {"x": x})
    x[0, 0, :2, :2] = -1.0
    x[0, 1, :2, :2] = [[2.0, 2.0], [-1.0, 2.0]]
    x[1, 7, 2:, 4:] = [[0.0, -3.0], [0.0, -1.0]]
    r = np.maximum(x, 0).reshape(2, 8, 2, 2, 3, 2)
    hit = (r == r.max(axis=(3, 5), keepdims=True)) & (r > 0)
    share = hit / np.maximum(hit.sum(axis=(3, 5), keepdims=True), 1)
    u = rng.standard_normal((2, 8, 2, 3)).astype(np.float32)
    rev = reverse(m, layout="onnx")
    got = run(rev, {"x": x, "adj_y": u[..., None]})["adj_x"][..., 0]
    np.testing.assert_allclose(got, (share * u[:, :, :, None, :, None]).reshape(x.shape),
                               rtol=1e-6, atol=1e-6)
    v = rng.standard_normal(x.shape).astype(np.float32)
    jv = run(forward(m, layout="onnx"), {"x": x, "fwd_x": v[..., None]})["fwd_y"][..., 0]
    want = (share * v.reshape(share.shape)).sum(axis=(3, 5))
    np.testing.assert_allclose(jv, want, rtol=1e-6, atol=1e-6)
    producer = {o: n for n in rev.graph.node for o in n.output}
    reads = [producer.get(n.input[0]) for n in rev.graph.node if n.op_type == "Resize"]
    assert any(p is not None and p.op_type == "Reshape" and p.input[0] == "y" for p in reads), \
        [p.op_type if p else None for p in reads]


def test_dynamic_batch_second_order():
    """forward(reverse(m)) with a dynamic batch: the reverse model upsamples
    pooled values with Resize on [n, C, ...] (tiling MaxPool), and the Resize
    rule needs static extents only on the axes it resizes (it refused the
    reverse model of every CNN with a dynamic batch before)."""
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("MaxPool", ["t"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             const("roi", np.zeros(0, np.float32)),
             const("sc", np.asarray([1, 1, 2, 2], np.float32)),
             h.make_node("Resize", ["p", "roi", "sc"], ["r"], mode="linear"),
             h.make_node("Mul", ["r", "x"], ["y"])]
    m = model(nodes, [("x", F, ["n", 2, 4, 6])], [("y", F, ["n", 2, 4, 6])])
    rng = np.random.default_rng(13)
    x = (rng.permutation(2 * 2 * 4 * 6).reshape(2, 2, 4, 6).astype(np.float32) - 48.0) * 0.05
    check_hessian(m, {"x": x})


@pytest.mark.parametrize("mode,opset", [(mode, opset) for opset in (10, 13, 18)
                                        for mode in ("nearest", "linear", "cubic")
                                        if opset >= 11 or mode != "cubic"])  # (new in 11)
def test_resize_of_run_time_extents(mode, opset):
    """Resized axes whose extents are known only at run time: forward mode
    resizes the tangent itself, k merged into the batch (a batch of 0
    included); reverse mode multiplies by interpolation matrices built at
    run time by resizing an identity (was refused). Against central
    differences, the forward/reverse identity and a Hessian; Resize-10's
    (X, scales), Resize-13's optional roi."""
    from adcheck import run as ort_run
    sc = const("sc", np.asarray([1, 1, 2, 1.5], np.float32))
    if opset < 11:
        resize = [sc, h.make_node("Resize", ["t", "sc"], ["r"], mode=mode, name="up")]
    else:
        resize = [const("roi", np.zeros(0, np.float32)), sc,
                  h.make_node("Resize", ["t", "" if opset >= 13 else "roi", "sc"], ["r"], mode=mode,
                              name="up")]
    nodes = [h.make_node("Tanh", ["x"], ["t"])] + resize + [h.make_node("Sin", ["r"], ["y"])]
    m = model(nodes, [("x", F, ["n", 2, "h", "w"])], [("y", F, None)], opset=opset)
    x = np.random.default_rng(14).standard_normal((2, 2, 4, 6)).astype(np.float32)
    check_derivatives(m, {"x": x}, rtol=2e-3, atol=2e-3)
    check_hessian(m, {"x": x})
    if opset < 14:
        return  # (a batch of 0 needs Reshape-14's allowzero)
    empty = ort_run(forward(m, layout="onnx"), {"x": np.zeros((0, 2, 4, 6), np.float32),
                          "fwd_x": np.zeros((0, 2, 4, 6, 2), np.float32)})["fwd_y"]
    assert empty.shape == (0, 2, 8, 9, 2)


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_to_run_time_sizes(mode, opset):
    """Resize to another value's extents (sizes = Concat of Shape slices, as
    feature pyramids upsample a coarse map to a lateral one): symbolic
    extents prove the batch and channels unchanged, the tangent is the node
    itself with the merged batch in its sizes, the cotangent goes through
    interpolation matrices built at run time. Was refused in both modes."""
    roi = "" if opset >= 13 else "roi"
    empty = "" if opset >= 13 else "empty"
    nodes = [const("roi", np.zeros(0, np.float32)), const("empty", np.zeros(0, np.float32)),
             h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("Shape", ["x"], ["sx"]), h.make_node("Shape", ["lat"], ["sl"]),
             const("i01", np.asarray([0, 1])), const("i23", np.asarray([2, 3])),
             h.make_node("Gather", ["sx", "i01"], ["nc"]), h.make_node("Gather", ["sl", "i23"], ["hw"]),
             h.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             h.make_node("Resize", ["t", roi, empty, "sizes"], ["r"], mode=mode, name="up"),
             h.make_node("Mul", ["r", "lat"], ["y"])]
    m = model(nodes, [("x", F, ["n", 2, "h", "w"]), ("lat", F, ["n", 2, "H", "W"])],
              [("y", F, ["n", 2, "H", "W"])], opset=opset)
    rng = np.random.default_rng(16)
    for xs, ls in [((2, 2, 3, 4), (2, 2, 6, 7)), ((1, 2, 5, 2), (1, 2, 3, 4))]:
        f = {"x": rng.standard_normal(xs).astype(np.float32),
             "lat": rng.standard_normal(ls).astype(np.float32)}
        check_derivatives(m, f, rtol=2e-3, atol=2e-3)
    check_hessian(m, f, inputs=["x"])


@pytest.mark.parametrize("batch", [2, "n"])
def test_resize_to_computed_spatial_sizes(batch):
    """torchvision's detection transform: sizes = Concat(Shape(x)[:2],
    Cast(Floor(Cast(Shape(x)[2:]) * s))), whose float half no fold reads.
    The batch and channel entries alone prove those axes unchanged (was:
    reverse mode refused, "Resize of the batch axis needs static extents";
    torchvision's retinanet)."""
    nodes = [const("zero", np.asarray([0])), const("two", np.asarray([2])),
             const("four", np.asarray([4])), const("s", np.asarray(1.5, np.float32)),
             h.make_node("Tanh", ["x"], ["t"]), h.make_node("Shape", ["x"], ["sx"]),
             h.make_node("Slice", ["sx", "zero", "two"], ["nc"]),
             h.make_node("Slice", ["sx", "two", "four"], ["hw"]),
             h.make_node("Cast", ["hw"], ["hwf"], to=TP.FLOAT),
             h.make_node("Mul", ["hwf", "s"], ["scaled"]),
             h.make_node("Floor", ["scaled"], ["fl"]),
             h.make_node("Cast", ["fl"], ["hw2"], to=TP.INT64),
             h.make_node("Concat", ["nc", "hw2"], ["sizes"], axis=0),
             h.make_node("Resize", ["t", "", "", "sizes"], ["y"], mode="linear")]
    m = model(nodes, [("x", F, [batch, 2, 4, 5])], [("y", F, None)])
    x = np.random.default_rng(3).standard_normal((2, 2, 4, 5)).astype(np.float32)
    check_derivatives(m, {"x": x}, rtol=2e-3, atol=2e-3)
    check_hessian(m, {"x": x})


@pytest.mark.parametrize("opset", [10, 13])
def test_resize_by_run_time_scales(opset):
    """Scales computed at run time (from an input here, even with a
    constant 1 for the batch): the batch axis is not proved unresized, and
    a resized batch cannot be merged with the directions: refused naming
    the node, not a wrong number."""
    nodes = [const("one", np.ones(1, np.float32)), h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("Concat", ["one", "s"], ["sc"], axis=0),
             h.make_node("Resize", ["t", "sc"] if opset < 11 else ["t", "", "sc"], ["y"],
                         mode="linear", name="up")]
    m = model(nodes, [("x", F, ["n", 2, 4, 3]), ("s", F, [3])], [("y", F, None)], opset=opset)
    f = {"x": np.random.default_rng(17).standard_normal((2, 2, 4, 3)).astype(np.float32),
         "s": np.asarray([1.0, 1.5, 2.0], np.float32)}
    with pytest.raises(UnsupportedOp, match=r"node 'up'.*of the batch axis"):
        check_derivatives(m, f, inputs=["x"])


RUN_TIME_WINDOWS = [
    dict(kernel_shape=[3, 2], ceil_mode=1, strides=[2, 2]),
    dict(kernel_shape=[3, 2], ceil_mode=1, strides=[2, 3], pads=[1, 1, 1, 0], count_include_pad=1),
    dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER", strides=[2, 1]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER", strides=[2, 2], count_include_pad=1),
    dict(kernel_shape=[2, 1], auto_pad="SAME_UPPER", strides=[3, 3]),  # windows skip input
    dict(kernel_shape=[2, 2], ceil_mode=1, strides=[2, 2], dilations=[2, 1]),
]


@pytest.mark.parametrize("op", ["AveragePool", "LpPool"])
@pytest.mark.parametrize("attrs", RUN_TIME_WINDOWS)
def test_pool_of_run_time_extents(op, attrs):
    """auto_pad or ceil_mode windows on extents known only at run time: the
    window sums are a Pad by pads read from the run-time extents and an
    unpadded ones-kernel Conv, so reverse mode works (was refused; LpPool
    was refused in both modes). Against central differences, the
    forward/reverse identity, a Hessian, and the same model with static
    extents (whose rules place the windows at transform time)."""
    from adcheck import run as ort_run
    if op == "LpPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    nodes = [h.make_node("Tanh", ["x"], ["t"]), h.make_node(op, ["t"], ["p"], name="pool", **attrs),
             h.make_node("Mul", ["p", "p"], ["y"])]
    dyn = model(nodes, [("x", F, ["n", 2, "h", "w"])], [("y", F, None)])
    rng = np.random.default_rng(15)
    for shape in [(2, 2, 7, 6), (1, 2, 4, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        check_derivatives(dyn, {"x": x}, rtol=2e-3, atol=2e-3)
        static = model(nodes, [("x", F, list(shape))], [("y", F, None)])
        y_shape = ort_run(static, {"x": x})["y"].shape
        u = rng.standard_normal(y_shape + (2,)).astype(np.float32)
        got, want = (ort_run(reverse(m, layout="onnx"), {"x": x, "adj_y": u})["adj_x"]
                     for m in (dyn, static))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    check_hessian(dyn, {"x": x})


def test_average_pool_of_run_time_extents_before_opset_11():
    """Before Pad-11 no pads are read at run time: forward mode pools the
    tangent itself; reverse mode is refused naming the node."""
    from adcheck import check_forward
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("AveragePool", ["t"], ["p"], kernel_shape=[3, 2], ceil_mode=1,
                         strides=[2, 2], name="pool"),
             h.make_node("Mul", ["p", "p"], ["y"])]
    m = model(nodes, [("x", F, ["n", 2, "h", "w"])], [("y", F, None)], opset=10)
    x = np.random.default_rng(15).standard_normal((2, 2, 7, 6)).astype(np.float32)
    check_forward(m, {"x": x}, "x", "y", 1e-3, 2e-3, 2e-3)
    with pytest.raises(UnsupportedOp, match=r"node 'pool'.*run-time extents needs opset >= 11"):
        reverse(m)


@pytest.mark.parametrize("op", ["AveragePool", "LpPool"])
def test_same_pool_with_dilations_on_run_time_extents_refused(op):
    """auto_pad SAME with dilations: ONNX Runtime places the windows for the
    undilated kernel, the ONNX spec for the dilated one (at h = 7 below they
    start at rows 1 and 0); with the extents unknown when transforming
    neither can be checked, so both modes refuse naming the node (was a
    wrong derivative)."""
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node(op, ["t"], ["y"], name="pool", kernel_shape=[3, 1], strides=[3, 1],
                         dilations=[2, 1], auto_pad="SAME_UPPER")]
    m = model(nodes, [("x", F, ["n", 2, "h", "w"])], [("y", F, None)])
    for transform in (forward, reverse):
        with pytest.raises(UnsupportedOp, match=r"node 'pool'.*SAME with dilations"):
            transform(m)


def test_overlapping_max_pool_taps_in_3d():
    """A 2-D pool's primal window taps come from a 3-D Conv (ONNX Runtime
    keeps it out of its blocked layout, whose reorder cost twice the Conv);
    the derivatives are the same against finite differences."""
    m, feeds = case("MaxPool", (2, 3, 7, 6), kernel_shape=[3, 3], strides=[2, 2],
                    pads=[1, 1, 1, 1])
    check_derivatives(m, feeds)
    convs = [n for n in reverse(m, layout="onnx").graph.node if n.op_type == "Conv"]
    shapes = [list(next(a.ints for a in n.attribute if a.name == "kernel_shape")) for n in convs]
    assert [1, 3, 3] in shapes, shapes


@pytest.mark.parametrize("transform", [forward, reverse])
def test_resize_with_scales_for_another_rank_refused(transform):
    """Three scales for a rank-2 input (fuzz seed 87, case 1245: an internal
    error in the rule): refused, naming the node; ONNX Runtime refuses the
    model when it runs. Import refuses it now (ONNX's strict inference); the
    rule's own check remains for scales it cannot see."""
    nodes = [h.make_node("Constant", [], ["roi"], value=h.make_tensor("roi", TP.FLOAT, [0], [])),
             h.make_node("Constant", [], ["scales"],
                         value=h.make_tensor("scales", TP.FLOAT, [3], [1.0, 1.0, 0.5])),
             h.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest", name="rs")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, 2])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 2, 1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    with pytest.raises(ImportFailure, match="node 'rs'.*'scales' must be same as rank of input"):
        transform(m, inputs=["x"], outputs=["y"])


AFFINE = [("2d", [2, 1, 3, 4], 0), ("2d-aligned", [2, 1, 3, 4], 1), ("3d", [2, 1, 2, 3, 4], 0)]


@pytest.mark.parametrize("size_from", ["constant", "input", "batch of theta"])
@pytest.mark.parametrize("name,size,align", AFFINE, ids=[c[0] for c in AFFINE])
def test_affine_grid(name, size, align, size_from):
    """AffineGrid is linear in theta: forward mode runs the node on the
    tangent (directions merged into the batch), reverse mode contracts the
    cotangent with the grid of an identity theta. Its size given as a
    constant, as an input read at run time (ONNX's test_affine_grid_2d was
    refused), and as torch exports a dynamic batch: Concat(Shape(theta)[:1],
    C, H, W)."""
    s = len(size) - 2
    theta_dims = ["n" if size_from == "batch of theta" else 2, s, s + 1]
    nodes = [h.make_node("Tanh", ["theta"], ["t"])]
    inputs = [("theta", TP.DOUBLE, theta_dims)]
    if size_from == "constant":
        nodes.insert(0, const("size", np.asarray(size)))
    elif size_from == "input":
        inputs.append(("size", I, [len(size)]))
    else:
        nodes[:0] = [const("chw", np.asarray(size[1:])), h.make_node("Shape", ["theta"], ["n"], end=1),
                     h.make_node("Concat", ["n", "chw"], ["size"], axis=0)]
    nodes += [h.make_node("AffineGrid", ["t", "size"], ["g"], align_corners=align),
              h.make_node("Sin", ["g"], ["y"]), h.make_node("Mul", ["y", "y"], ["z"])]
    m = model(nodes, inputs, [("y", TP.DOUBLE, None), ("z", TP.DOUBLE, None)], opset=20)
    feeds = {"theta": np.random.default_rng(4).standard_normal((2, s, s + 1)),
             "size": np.asarray(size, np.int64)}
    if size_from != "input":
        del feeds["size"]
    check_derivatives(m, feeds, inputs=["theta"])
    check_hessian(m, feeds, inputs=["theta"], output="z")
    assert "AffineGrid" in {n.op_type for n in reverse(m, layout="onnx").graph.node}


def test_affine_grid_into_grid_sample():
    """A spatial transformer: GridSample(image, AffineGrid(theta)), with
    respect to both the image and theta."""
    nodes = [const("size", np.asarray([2, 1, 4, 5])),
             h.make_node("AffineGrid", ["theta", "size"], ["g"]),
             h.make_node("GridSample", ["img", "g"], ["y"], mode="linear"),
             h.make_node("Tanh", ["y"], ["z"])]
    m = model(nodes, [("theta", TP.DOUBLE, [2, 2, 3]), ("img", TP.DOUBLE, [2, 1, 6, 7])],
              [("y", TP.DOUBLE, None), ("z", TP.DOUBLE, None)], opset=20)
    rng = np.random.default_rng(8)
    feeds = {"theta": np.asarray([[0.8, 0.1, 0.05], [-0.1, 0.9, 0.02]]) +
             0.05 * rng.standard_normal((2, 2, 3)), "img": rng.standard_normal((2, 1, 6, 7))}
    check_derivatives(m, feeds)
    check_hessian(m, feeds, output="z")


def test_affine_grid_of_unknown_spatial_rank_refused():
    """theta [N, ?, ?]: no rank for its grid's spatial axes, refused naming
    the node (not a crash in the transpose)."""
    m = model([h.make_node("AffineGrid", ["theta", "size"], ["y"], name="grid")],
              [("theta", TP.DOUBLE, ["n", "s", "t"]), ("size", I, [4])],
              [("y", TP.DOUBLE, None)], opset=20)
    with pytest.raises(UnsupportedOp, match="grid.*spatial rank"):
        reverse(m)


@pytest.mark.parametrize("opset,op,operands", [(19, "Resize", ["x", "", "s"]),
                                               (9, "Upsample", ["x", "s"])])
def test_resize_scales_are_refused_as_differentiated_inputs(opset, op, operands):
    """The samples move with the scales, so does a linear resize's output
    (d y / d scale about 3.5 here); forward mode read it as 0 (a silent
    zero). Refused in both modes, naming the operand; with respect to x
    alone the scales stay an input."""
    m = model([h.make_node(op, operands, ["y"], mode="linear")],
              [("x", TP.FLOAT, [1, 1, 4, 4]), ("s", TP.FLOAT, [4])],
              [("y", TP.FLOAT, [1, 1, 6, 6])], opset=opset)
    for mode in (forward, reverse):
        with pytest.raises(UnsupportedOp, match=rf"onnx\.{op}\w* \(node ''\): the derivative with "
                                                 r"respect to its operand \d \(the roi or scales"):
            mode(m, inputs=["x", "s"], layout="onnx")
    assert forward(m, inputs=["x"], layout="onnx").graph.output[-1].name == "fwd_y"
