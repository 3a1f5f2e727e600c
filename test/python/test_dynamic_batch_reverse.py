"""Reverse mode of models with a dynamic batch (or run-time image extents)
keeps no part of the linear forward program: every run-time shape the
transposes read comes from primal values, so the reverse model holds each
primal op once and its transpose once, as with static extents. (A shape
read off a linear value kept the forward tangent chain up to it alive:
googlenet, deeplabv3, maxvit and Llama exported with a dynamic batch had
1.1-2.4x the reverse nodes of their static exports.) Each model is checked
against finite differences too."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives, stand_ins
from onnx_ad_mlir.api import reverse

F = TP.FLOAT
rng = np.random.default_rng(23)


def weight(name: str, *shape: int) -> object:
    return nh.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def ints(name: str, values) -> object:
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(values, np.int64)))


def model(nodes, x_shape, inits=(), opset=17, elem=F):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", elem, x_shape)],
                     [h.make_tensor_value_info("y", elem, None)], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def check(nodes, shape, inits=(), counted=(), opset=17, elem=F):
    """Same counts of `counted` ops in the reverse models with a static and
    a dynamic batch, and no stand-in for x left (the linear program's
    start: Unsqueeze(x)); derivatives of the dynamic one checked."""
    static = reverse(model(nodes, list(shape), inits, opset, elem), layout="onnx")
    dynamic = model(nodes, ["batch"] + list(shape[1:]), inits, opset, elem)
    rev = reverse(dynamic, layout="onnx")
    a, b = (Counter(n.op_type for n in m.graph.node) for m in (static, rev))
    for op in counted:
        assert b[op] == a[op], (op, a[op], b[op])
    assert not stand_ins(rev)
    dtype = np.float64 if elem == TP.DOUBLE else np.float32
    check_derivatives(dynamic, {"x": rng.standard_normal(shape).astype(dtype)})


def test_overlapping_max_pool():
    """googlenet's 3x3 stride-1 pools: the window taps' N*C extent was read
    off the tangent's taps (Conv of the tangent kept alive, 1,576 reverse
    nodes instead of 981)."""
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("Conv", ["p", "w2"], ["y"])]
    check(nodes, (2, 3, 6, 6), [weight("w", 4, 3, 3, 3), weight("w2", 2, 4, 1, 1)],
          counted=("Conv", "ConvTranspose"))


def test_resize_to_a_run_time_size():
    """deeplabv3's head: upsampled to Shape(x)[2:]; the interpolation
    matrix's extent was sliced out of sizes that also held the linear k*N."""
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Shape", ["x"], ["s"]),
             ints("two", [2]), ints("four", [4]), ints("nc", [0, 2]),
             h.make_node("Slice", ["s", "two", "four"], ["hw"]),
             h.make_node("Shape", ["c"], ["sc"]), ints("zero", [0]),
             h.make_node("Slice", ["sc", "zero", "two"], ["nc2"]),
             h.make_node("Concat", ["nc2", "hw"], ["sizes"], axis=0),
             h.make_node("Resize", ["c", "", "", "sizes"], ["y"], mode="linear")]
    check(nodes, (2, 3, 6, 6), [weight("w", 2, 3, 3, 3)], counted=("Conv", "ConvTranspose"))


def test_expand_to_a_torch_target():
    """torch's expand(b, -1, ...) target Where(Equal(t, -1), 1, t) under a
    MatMul (Llama's repeat_kv and causal mask): its extents were not read,
    so the MatMul's transpose unbroadcast at run time against the linear
    Expand's shape."""
    nodes = [h.make_node("MatMul", ["x", "w"], ["a"]),
             h.make_node("Unsqueeze", ["a", "one"], ["u"]),
             h.make_node("Shape", ["x"], ["s"]), ints("zero", [0]), ints("one", [1]),
             h.make_node("Slice", ["s", "zero", "one"], ["n"]),
             ints("rest", [-1, 2, -1, -1]), h.make_node("Concat", ["n", "rest"], ["t"], axis=0),
             ints("neg", [-1, -1, -1, -1, -1]),
             h.make_node("Equal", ["t", "neg"], ["is_neg"]), ints("ones", [1, 1, 1, 1, 1]),
             h.make_node("Where", ["is_neg", "ones", "t"], ["target"]),
             h.make_node("Expand", ["u", "target"], ["e"]),
             h.make_node("MatMul", ["e", "v"], ["y"])]
    check(nodes, (2, 3, 4), [weight("w", 4, 4), weight("v", 4, 3)],
          counted=("MatMul", "Expand"))


def test_einsum_attention():
    """maxvit's attention as Einsums: no symbolic extents came out of an
    Einsum (8,235 reverse nodes with a dynamic batch, 3,380 without)."""
    nodes = [h.make_node("Einsum", ["x", "x"], ["s"], equation="bhid,bhjd->bhij"),
             h.make_node("Softmax", ["s"], ["p"], axis=-1),
             h.make_node("Einsum", ["p", "x"], ["o"], equation="bhij,bhjd->bhid"),
             h.make_node("Add", ["o", "bias"], ["y"])]
    check(nodes, (2, 2, 3, 4), [weight("bias", 1, 3, 4)], counted=("Einsum", "Softmax"),
          elem=F)


def test_einsum_ellipsis():
    """torch.einsum("...ij,...jk->...ik") with a dynamic batch: its
    transpose was refused ("needs static shapes"; the ellipsis extents are
    proved equal symbolically now), and the '...' of its result had fresh
    symbols, so the Add after it unbroadcast at run time (83 reverse nodes
    instead of 20)."""
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("Einsum", ["x", "t"], ["e"], equation="...ij,...jk->...ik"),
             h.make_node("Einsum", ["x"], ["d"], equation="bcij->bji"),
             ints("one", [1]), h.make_node("Unsqueeze", ["d", "one"], ["u"]),
             h.make_node("Add", ["e", "u"], ["y"])]
    check(nodes, (2, 3, 4, 4), counted=("Einsum", "Tanh", "ReduceSum", "Reshape"))


def test_sort_and_topk():
    """torch.sort (TopK with k read off x's shape) and topk: TopK's and the
    tangent's GatherElements' extents were fresh symbols, so their
    transposes read shapes off the linear program (which kept its
    GatherElements alive) and unbroadcast at run time (93 reverse nodes
    instead of 32)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), ints("three", [3]),
             h.make_node("Gather", ["s", "three"], ["n"]),
             h.make_node("TopK", ["x", "n"], ["sorted", "i"], axis=3, largest=0),
             ints("k", [2]), h.make_node("TopK", ["x", "k"], ["top", "j"], axis=2),
             ints("two", [2]), h.make_node("ReduceSum", ["top", "two"], ["r"]),
             h.make_node("Mul", ["sorted", "r"], ["y"])]
    check(nodes, (2, 3, 4, 5), counted=("TopK", "ScatterElements", "GatherElements", "ReduceSum",
                                        "NonZero"))


def test_scatter_add_of_a_source_sliced_to_its_index():
    """torch's scatter_add as TorchScript exports it with a dynamic batch:
    the source sliced from 0 to its index's shape, read at run time (a
    Slice that keeps it whole). The Slice's transpose scattered the
    cotangent back axis by axis (four ScatterElements, Ranges and run-time
    unbroadcasts: 112 reverse nodes against 23 static)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), ints("first", [0]),
             h.make_node("Gather", ["s", "first"], ["n"]), ints("rest", [3, 4, 5]),
             h.make_node("Concat", ["n", "rest"], ["target"], axis=0),
             h.make_node("Expand", ["row", "target"], ["index"]),
             h.make_node("Sin", ["x"], ["src"]), ints("zeros", [0, 0, 0, 0]),
             h.make_node("Shape", ["index"], ["ends"]),
             h.make_node("Slice", ["src", "zeros", "ends"], ["part"]),
             h.make_node("ScatterElements", ["base", "index", "part"], ["y"], axis=2,
                         reduction="add")]
    row = nh.from_array(np.array([0, 1, 1, 2]).reshape(1, 1, 4, 1), "row")
    base = nh.from_array(np.zeros((1, 3, 3, 5), np.float32), "base")
    check(nodes, (1, 3, 4, 5), [row, base], counted=("ScatterElements", "GatherElements",
                                                      "NonZero", "Range"), opset=18)


def test_slice_to_a_run_time_end_keeps_the_other_axes():
    """A Slice whose end along axis 1 is known only at run time keeps axis
    0 whole, and its tangent's Slice by the same bounds has the same
    extent: the product with a per-row sum needs no run-time unbroadcast,
    and the transpose reads the sliced extent off the primal (was: every
    axis of such a Slice's result a fresh extent, the tangent's another;
    74 reverse nodes, 34 now; with the batch static 61, 33 now)."""
    nodes = [h.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
             h.make_node("ReduceMax", ["am"], ["mx"], keepdims=1), ints("one", [1]),
             ints("zero", [0]), h.make_node("Add", ["mx", "one"], ["ends"]),
             h.make_node("Slice", ["x", "zero", "ends", "one"], ["part"]),
             h.make_node("ReduceSum", ["x", "one"], ["s"], keepdims=1),
             h.make_node("Mul", ["part", "s"], ["y"])]
    check(nodes, (3, 6), counted=("Equal", "NonZero", "Reshape", "Expand"))


def test_concat_after_an_empty_part():
    """TorchScript's GPT-2 concatenates its empty past keys with the
    present ones: the result has the present's run-time extent, not a sum
    symbol of its own, and its product with a value of that extent needs
    no run-time unbroadcast (GPT-2 exported with a dynamic sequence:
    reverse 468 -> 388 nodes)."""
    empty = nh.from_array(np.zeros((0, 3), np.float32), "empty")
    nodes = [h.make_node("Concat", ["empty", "x"], ["c"], axis=0),
             h.make_node("Sin", ["x"], ["s"]), h.make_node("Mul", ["c", "s"], ["y"])]
    check(nodes, (2, 3), [empty], counted=("NonZero", "Equal", "ReduceSum"))


def test_direction_count_read_off_the_seed():
    """The transposes read the seed count off the seed (the rules' own
    reads of it, one Shape), not off the argument adj_y it was transposed
    from: a second Shape and a Concat per read otherwise (torchvision's
    swin_t with a dynamic batch: 5 nodes)."""
    nodes = [ints("idx", [0, 2, 2, 5]), h.make_node("Sin", ["x"], ["s"]),
             h.make_node("Gather", ["s", "idx"], ["y"], axis=1)]
    rev = reverse(model(nodes, ["batch", 6, 4]), layout="onnx")
    assert not [n for n in rev.graph.node if n.op_type == "Shape" and "adj_y" in n.input]
    check(nodes, (2, 6, 4), counted=("ScatterElements", "NonZero"))


def test_batch_flattened_into_rows_and_back():
    """torch's dynamo exporter with a dynamic batch (GPT-2, Bloom, DeBERTa):
    a Linear flattens [B, 4, 6] to [-1, 6] rows and views them back by
    [-1, 4, 6]; heads are tiled over the batch (Tile by Shape(x)[0]:
    Bloom's ALiBi, B*4 rows) and shapes are built from Shape(x)[0] * 4. The
    row extent B*4 had no symbol, so every -1 got a fresh one and the
    transposes unbroadcast at run time (GPT-2 397 reverse nodes against 232
    static, Bloom 480 against 272, DeBERTa 624 against 311)."""
    nodes = [ints("rows", [-1, 6]), h.make_node("Reshape", ["x", "rows"], ["r"]),
             h.make_node("MatMul", ["r", "w"], ["m"]), ints("back", [-1, 4, 6]),
             h.make_node("Reshape", ["m", "back"], ["b"]),
             h.make_node("Shape", ["x"], ["s"], end=1), ints("ones", [1, 1]),
             h.make_node("Concat", ["s", "ones"], ["reps"], axis=0),
             h.make_node("Tile", ["bias", "reps"], ["t"]),
             h.make_node("Reshape", ["t", "back"], ["tb"]),
             h.make_node("Squeeze", ["s"], ["n"]), h.make_node("Constant", [], ["four"],
                                                            value=nh.from_array(np.array(4))),
             h.make_node("Mul", ["four", "n"], ["n4"]), ints("flat", [-1]),
             h.make_node("Reshape", ["n4", "flat"], ["n4v"]), ints("six", [1, 6]),
             h.make_node("Concat", ["n4v", "six"], ["target"], axis=0),
             h.make_node("Expand", ["row", "target"], ["e"]),
             h.make_node("Reshape", ["e", "back"], ["eb"]),
             h.make_node("Mul", ["b", "tb"], ["p"]), h.make_node("Add", ["p", "eb"], ["q"]),
             h.make_node("Add", ["q", "x"], ["y"])]
    check(nodes, (2, 4, 6), [weight("w", 6, 6), weight("bias", 4, 1, 6), weight("row", 1, 6)],
          counted=("MatMul", "Tile", "Expand", "ReduceSum", "NonZero"))


def test_dft_and_gather_nd_over_a_run_time_batch():
    """A Fourier layer (DFT keeps the batch axis) and a GatherND of rows
    (a trilinear resize's gathers) exported by dynamo with a dynamic batch:
    their results had fresh batch symbols, so the ops after them
    unbroadcast at run time (an FNO layer: 401 reverse nodes against 258
    static, now 249)."""
    nodes = [ints("last", [2]), ints("column", [0, 8, 1]),
             h.make_node("Reshape", ["x", "column"], ["xu"]),
             h.make_node("DFT", ["xu"], ["f"], axis=1),
             h.make_node("Add", ["f", "xu"], ["a"]),
             h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
             h.make_node("GatherND", ["xt", "rows"], ["g"]),
             h.make_node("Transpose", ["g"], ["gt"], perm=[1, 0]),
             h.make_node("Unsqueeze", ["gt", "last"], ["gu"]),
             h.make_node("Mul", ["a", "gu"], ["y"])]
    rows = nh.from_array(np.array([[1], [0], [3], [2], [4], [5], [7], [6]]), "rows")
    check(nodes, (2, 8), [rows], counted=("DFT", "GatherND", "ReduceSum", "NonZero"))


def test_class_token_concat():
    """ViT: a class token expanded to the batch and concatenated before the
    patches; the proved extent 1 beside 4 now sums to 5."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), ints("zero", [0]), ints("one", [1]),
             h.make_node("Slice", ["s", "zero", "one"], ["n"]),
             ints("rest", [-1, -1]), h.make_node("Concat", ["n", "rest"], ["t"], axis=0),
             ints("neg", [-1, -1, -1]), h.make_node("Equal", ["t", "neg"], ["is_neg"]),
             ints("ones", [1, 1, 1]), h.make_node("Where", ["is_neg", "ones", "t"], ["target"]),
             h.make_node("Expand", ["token", "target"], ["cls"]),
             h.make_node("Tanh", ["x"], ["tx"]),
             h.make_node("Concat", ["cls", "tx"], ["c"], axis=1),
             h.make_node("Add", ["c", "pos"], ["y"])]
    check(nodes, (2, 4, 3), [weight("token", 1, 1, 3), weight("pos", 1, 5, 3)],
          counted=("Tanh",))


def test_upsample_of_run_time_extents():
    """A feature pyramid's nearest upsample by scales, spatial extents
    known at run time only: the merged directions' Reshape took -1 for k*N,
    and reshaping the cotangent back read k*N off the linear Resize."""
    scales = h.make_node("Constant", [], ["sc"],
                         value=nh.from_array(np.asarray([1, 1, 2, 2], np.float32)))
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]), scales,
             h.make_node("Resize", ["c", "", "sc"], ["u"], mode="nearest"),
             h.make_node("ReduceMean", ["u"], ["m"], keepdims=0),
             h.make_node("Conv", ["x", "w2"], ["l"]), h.make_node("Tanh", ["l"], ["t"]),
             h.make_node("Mul", ["t", "m"], ["y"])]
    m = model(nodes, ["n", 2, "h", "w"], [weight("w", 3, 2, 3, 3), weight("w2", 3, 2, 1, 1)])
    rev = reverse(m, layout="onnx")
    assert not stand_ins(rev)
    check_derivatives(m, {"x": rng.standard_normal((1, 2, 4, 6)).astype(np.float32)})


def test_resize_to_sizes_read_off_the_batch():
    """torch's interpolate(size=...) with a dynamic batch: sizes
    Concat(Shape(x)[:2], [h, w]), computed at run time though the resized
    extents are static. The interpolation matrices were built at run time
    from EyeLike identities (50 reverse nodes instead of 25 for bicubic)."""
    nodes = [h.make_node("Tanh", ["x"], ["t"]), h.make_node("Shape", ["x"], ["s"], end=2),
             ints("hw", [5, 7]), h.make_node("Concat", ["s", "hw"], ["sizes"], axis=0),
             h.make_node("Resize", ["t", "", "", "sizes"], ["y"], mode="cubic",
                         coordinate_transformation_mode="align_corners")]
    check(nodes, (2, 3, 4, 4), counted=("MatMul", "Resize", "EyeLike", "Tanh"))


def test_windows_of_run_time_extents_agree():
    """Image extents known at run time: a pool's window gives the same
    extents as the window sums of its derivative (one symbol made of the
    input's and the window's numbers), and the seed adj_y has y's extents
    whatever names y's declaration gives them (ONNX inference's unk__2):
    multiplying the derivative by the pool's divisor map needs no run-time
    unbroadcasting, and the linear program dies (was: 81 reverse nodes,
    NonZero twice, the tangent Conv kept)."""
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("AveragePool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    m = model(nodes, ["n", 3, "h", "w"], [weight("w", 4, 3, 3, 3)])
    rev = reverse(m, layout="onnx")
    ops = Counter(n.op_type for n in rev.graph.node)
    assert ops["NonZero"] == 0 and ops["Conv"] == 2, ops  # (the primal's, the divisor map's)
    assert not stand_ins(rev)
    check_derivatives(m, {"x": rng.standard_normal((2, 3, 4, 6)).astype(np.float32)})


def test_residual_windows_of_run_time_extents_agree():
    """A ResNet downsampling block over run-time image extents: the strided
    3x3 Conv padded by 1 and the strided 1x1 skip give the same extents
    (floor((e - 1) / 2) + 1 both; one symbol for the windows that agree on
    the formula, SAME padding's among them), so their sum's transposes need
    no run-time unbroadcast and the linear program dies (torchvision's
    resnet18 by TorchScript with run-time height and width: reverse 503 ->
    255 nodes, 244 with them pinned)."""
    nodes = [h.make_node("Conv", ["x", "w3"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
             h.make_node("Conv", ["x", "w1"], ["b"], strides=[2, 2]),
             h.make_node("Conv", ["x", "w1"], ["c"], strides=[2, 2], auto_pad="SAME_UPPER"),
             h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Mul", ["s", "c"], ["y"])]
    m = model(nodes, ["n", 3, "h", "w"], [weight("w3", 4, 3, 3, 3), weight("w1", 4, 3, 1, 1)])
    rev = reverse(m, layout="onnx")
    ops = Counter(n.op_type for n in rev.graph.node)
    assert ops["NonZero"] == 0, ops
    assert not stand_ins(rev)
    check_derivatives(m, {"x": rng.standard_normal((2, 3, 5, 6)).astype(np.float32)})


def test_max_pool_over_run_time_image_extents():
    """A ResNet stem (3x3 stride-2 MaxPool, padded) over run-time image
    extents: the tangent gathered at the argmax from a flat view whose
    extent was read off the linear program; it is now read off x."""
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1])]
    m = model(nodes, ["n", 3, "h", "w"], [weight("w", 4, 3, 3, 3)])
    rev = reverse(m, layout="onnx")
    assert not stand_ins(rev)
    check_derivatives(m, {"x": rng.standard_normal((2, 3, 5, 6)).astype(np.float32)})


@pytest.mark.parametrize("op,window", [
    ("AveragePool", {"ceil_mode": 1}), ("AveragePool", {"auto_pad": "SAME_UPPER"}),
    ("AveragePool", {"auto_pad": "SAME_LOWER", "count_include_pad": 1}),
    ("LpPool", {"auto_pad": "SAME_UPPER"})])
def test_windows_placed_at_run_time(op, window):
    """Windows placed by ceil_mode or auto_pad on run-time image extents
    (pads computed at run time): the window sums' extents, and those of the
    tangent padded for them, are declared the pool's and the padded ones
    image's, so the transposes read them off primal values (was: the
    tangent Conv and pool kept alive, 93 reverse nodes for the ceil_mode
    AveragePool, 56 now; 23 with static extents)."""
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node(op, ["c"], ["y"], kernel_shape=[3, 3], strides=[2, 2], **window)]
    m = model(nodes, ["n", 3, "h", "w"], [weight("w", 4, 3, 3, 3)])
    rev = reverse(m, layout="onnx")
    assert not stand_ins(rev)
    ops = Counter(n.op_type for n in rev.graph.node)
    assert ops["NonZero"] == 0, ops
    for shape in ((2, 3, 5, 6), (1, 3, 4, 4)):
        check_derivatives(m, {"x": rng.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_same_stride_one_conv_over_run_time_extents(auto_pad):
    """auto_pad SAME with stride 1 (Keras' and torch's padding='same') keeps
    any extent, so its pads are static (kernel - 1, split; ONNX Runtime has
    no SAME with dilations) and the transposed convolution lands on x's
    extents exactly: no pads computed at run time, no Slice of the gradient
    (was: 34 reverse nodes, a Slice, Where and Less; 19 now, 13 with static
    extents)."""
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], auto_pad=auto_pad),
             h.make_node("Tanh", ["c"], ["y"])]
    m = model(nodes, ["n", 3, "h", "w"], [weight("w", 4, 3, 3, 2)])
    rev = reverse(m, layout="onnx")
    ops = Counter(n.op_type for n in rev.graph.node)
    assert not ops.keys() & {"Slice", "Where", "Less", "Pad"}, ops
    assert not stand_ins(rev)
    for shape in ((2, 3, 5, 6), (1, 3, 4, 3)):
        check_derivatives(m, {"x": rng.standard_normal(shape).astype(np.float32)})
