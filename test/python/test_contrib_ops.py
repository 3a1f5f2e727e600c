"""ONNX Runtime's fused contrib operators (contrib_ops.py): each lowering
computes what ONNX Runtime's own kernel computes (float32, the kernels'
type), its derivatives match finite differences of that kernel, and in
float64 (the lowered model promoted) tightly; ONNX Runtime's own graph
optimizations write the fused ops the tests then differentiate."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from adcheck import check_derivatives, check_hessian, run
from node_case_sweep import promoted
from onnx_ad_mlir import contrib_ops
from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.errors import UnsupportedOp
from onnx_ad_mlir.exporter import export_onnx
from onnx_ad_mlir.importer import import_onnx

F = TP.FLOAT
MS = "com.microsoft"
rng = np.random.default_rng(17)


def model(nodes, inputs, outputs, opset=17, inits=()):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, F, s) for n, s in inputs],
                     [h.make_tensor_value_info(n, F, None) for n in outputs], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MS, 1)])


def lowered(m: onnx.ModelProto) -> onnx.ModelProto:
    with ir.Context():
        return export_onnx(import_onnx(m))


def check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], hessian: bool = True,
          wide: bool = True) -> None:
    """The lowering against ONNX Runtime's kernel, then the derivatives
    (`wide`: also in float64, where ONNX Runtime runs the lowered ops so:
    not Erf, not Conv)."""
    low = lowered(m)
    assert not any(n.domain == MS for n in low.graph.node)
    assert MS not in {o.domain for o in low.opset_import}
    onnx.checker.check_model(low, full_check=True)
    want, got = run(m, feeds), run(low, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-6, err_msg=k)
    check_derivatives(m, feeds)  # finite differences of ONNX Runtime's kernel (float32)
    if not wide:
        return
    wide_m, wide_feeds = promoted(low, feeds)
    assert wide_m.graph.input[0].type.tensor_type.elem_type == TP.DOUBLE
    check_derivatives(wide_m, wide_feeds)
    if hessian:
        check_hessian(wide_m, wide_feeds, output=wide_m.graph.output[-1].name)


def x(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("opset", [17, 20])  # primitives; the Gelu op
@pytest.mark.parametrize("op,inputs", [("Gelu", ["x"]), ("BiasGelu", ["x", "b"]),
                                       ("FastGelu", ["x", "b"]), ("FastGelu", ["x"]),
                                       ("QuickGelu", ["x"])])
def test_gelus(op, inputs, opset):
    shapes = {"x": [2, 3, 4], "b": [4]}
    m = model([h.make_node(op, inputs, ["y"], domain=MS)], [(i, shapes[i]) for i in inputs],
              ["y"], opset)
    check(m, {i: x(*shapes[i]) for i in inputs}, wide=op not in ("Gelu", "BiasGelu"))


def test_quick_gelu_alpha():
    m = model([h.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.3)], [("x", [3, 4])],
              ["y"])
    check(m, {"x": x(3, 4)})


@pytest.mark.parametrize("opset", [17, 13])  # LayerNormalization; primitives
@pytest.mark.parametrize("beta,bias,summed", [(True, True, True), (False, False, False),
                                              (True, False, True)])
def test_skip_layer_normalization(beta, bias, summed, opset):
    ins = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    outs = ["y", "", "", "sum" if summed else ""]
    shapes = {"x": [2, 3, 8], "skip": [2, 3, 8], "gamma": [8], "beta": [8], "bias": [8]}
    m = model([h.make_node("SkipLayerNormalization", ins, outs, domain=MS, epsilon=1e-5)],
              [(i, shapes[i]) for i in ins if i], [o for o in outs if o], opset)
    check(m, {i: x(*shapes[i]) for i in ins if i})


@pytest.mark.parametrize("opset", [17, 23])  # primitives; RMSNormalization
@pytest.mark.parametrize("bias,summed", [(False, True), (True, True), (False, False)])
def test_skip_simplified_layer_normalization(bias, summed, opset):
    ins = ["x", "skip", "gamma"] + (["bias"] if bias else [])
    outs = ["y", "", "", "sum"] if summed else ["y"]
    shapes = {"x": [2, 3, 8], "skip": [2, 3, 8], "gamma": [8], "bias": [8]}
    m = model([h.make_node("SkipSimplifiedLayerNormalization", ins, outs, domain=MS,
                           epsilon=1e-5)],
              [(i, shapes[i]) for i in ins], [o for o in outs if o], opset)
    check(m, {i: x(*shapes[i]) for i in ins})


@pytest.mark.parametrize("opset", [17, 23])
@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_normalization(axis, opset):
    """ONNX Runtime's op of the default domain that ONNX does not define."""
    m = model([h.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y"], axis=axis,
                           epsilon=1e-5)],
              [("x", [2, 3, 4]), ("s", [3, 4] if axis == 1 else [4])], ["y"], opset)
    check(m, {"x": x(2, 3, 4), "s": x(3, 4) if axis == 1 else x(4)})


# (trans, transBatch) -> an operand whose effective matrix is [2, 3, 5] (A) or [2, 5, 4] (B)
_OPERAND = {"A": {(0, 0): [2, 3, 5], (1, 0): [2, 5, 3], (0, 1): [3, 2, 5], (1, 1): [5, 2, 3]},
            "B": {(0, 0): [2, 5, 4], (1, 0): [2, 4, 5], (0, 1): [5, 2, 4], (1, 1): [4, 2, 5]}}


@pytest.mark.parametrize("flags_a,flags_b,alpha", [((0, 0), (1, 0), 0.5), ((1, 0), (0, 0), 1.0),
                                                   ((1, 0), (1, 0), 2.0), ((0, 1), (0, 0), 1.0),
                                                   ((1, 1), (0, 1), 0.7), ((0, 0), (1, 1), 1.0)])
def test_fused_matmul(flags_a, flags_b, alpha):
    """transBatch too (ONNX Runtime fuses an attention's head Transposes so)."""
    a_shape, b_shape = _OPERAND["A"][flags_a], _OPERAND["B"][flags_b]
    m = model([h.make_node("FusedMatMul", ["a", "b"], ["p"], domain=MS, transA=flags_a[0],
                           transBatchA=flags_a[1], transB=flags_b[0], transBatchB=flags_b[1],
                           alpha=alpha), h.make_node("Tanh", ["p"], ["y"])],
              [("a", a_shape), ("b", b_shape)], ["y"])
    check(m, {"a": x(*a_shape), "b": x(*b_shape)})


def test_a_chain_lowers_in_one_round():
    """A contrib result feeding another (no type inferred between them):
    the element type is read through the chain, so one inference round
    lowers both, as in a transformer block after ONNX Runtime's optimizer."""
    nodes = [h.make_node("FastGelu", ["x", "b"], ["g"], domain=MS),
             h.make_node("SkipLayerNormalization", ["g", "x", "gamma", "b"], ["y"], domain=MS)]
    m = model(nodes, [("x", [2, 3, 8]), ("b", [8]), ("gamma", [8])], ["y"], opset=13)
    rounds = []
    contrib = contrib_ops.lower(onnx.shape_inference.infer_shapes(m),
                                lambda m: rounds.append(m) or m)
    assert len(rounds) == 1 and contrib is not None
    check(m, {"x": x(2, 3, 8), "b": x(8), "gamma": x(8)})


# ---- embeddings and attention ------------------------------------------------------------

I32 = TP.INT32
attention_rng = np.random.default_rng(5)  # (the tests after keep their draws of rng)


def ax(*shape):
    return attention_rng.standard_normal(shape).astype(np.float32)


def typed_model(nodes, inputs, outputs, opset=17, inits=()):
    """As `model`, inputs and outputs given as (name, elem type, shape)."""
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(*i) for i in inputs],
                     [h.make_tensor_value_info(*o) for o in outputs], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MS, 1)])


# mask operand -> (its value for a batch of 2, 4 queries, 4 keys)
_MASKS = {
    "none": None,
    "ends": np.array([3, 2], np.int32),  # right padding
    "ends_starts": np.array([4, 3, 1, 0], np.int32),  # left padding too
    "raw_2d": np.array([[1, 1, 0, 1], [1, 0, 1, 1]], np.int32),
    "raw_3d": (attention_rng.random((2, 4, 4)) > 0.3).astype(np.int32),
}


@pytest.mark.parametrize("opset", [12, 17])  # Split's sizes an attribute; an operand
@pytest.mark.parametrize("mask,causal", [("none", 0), ("none", 1), ("ends", 0), ("ends", 1),
                                         ("ends_starts", 0), ("raw_2d", 0), ("raw_2d", 1),
                                         ("raw_3d", 0)])
def test_attention(mask, causal, opset):
    """BERT's (bidirectional, padding masks) and GPT-2's (unidirectional)
    self-attention, against ONNX Runtime's kernel and in float64 against
    differences, w.r.t. the input, the merged weights and the bias."""
    ins = ["x", "w", "b", "mask" if _MASKS[mask] is not None else ""]
    inits = [nh.from_array(_MASKS[mask], "mask")] if _MASKS[mask] is not None else []
    node = h.make_node("Attention", ins, ["y"], domain=MS, num_heads=2, unidirectional=causal)
    m = model([node], [("x", [2, 4, 6]), ("w", [6, 24]), ("b", [24])], ["y"], opset, inits)
    check(m, {"x": ax(2, 4, 6) * 0.5, "w": ax(6, 24) * 0.5, "b": ax(24) * 0.5})


def test_attention_sizes_scale_and_bias():
    """qkv_hidden_sizes with a wider V, a custom scale, mask_filter_value and
    an attention_bias per head."""
    node = h.make_node("Attention", ["x", "w", "", "mask", "", "ab"], ["y"], domain=MS,
                       num_heads=2, qkv_hidden_sizes=[4, 4, 10], scale=0.3,
                       mask_filter_value=-50.0)
    mask = nh.from_array(_MASKS["raw_2d"], "mask")
    m = model([node], [("x", [2, 4, 6]), ("w", [6, 18]), ("ab", [1, 2, 4, 4])], ["y"], 17,
              [mask])
    check(m, {"x": ax(2, 4, 6), "w": ax(6, 18), "ab": ax(1, 2, 4, 4)})


@pytest.mark.parametrize("mask,keys,causal", [("none", 5, 0), ("raw_2d", 5, 0), ("ends", 5, 0),
                                              ("raw_3d", 4, 1)])
def test_multi_head_attention(mask, keys, causal):
    """Cross attention of 4 queries over 5 keys with a wider value, biased;
    causal self-attention."""
    masks = {"raw_2d": np.array([[1, 1, 0, 1, 1], [1, 0, 1, 1, 0]], np.int32),
             "ends": np.array([5, 3], np.int32), "raw_3d": _MASKS["raw_3d"]}
    ins = ["q", "k", "v", "b", "mask" if mask != "none" else ""]
    inits = [nh.from_array(masks[mask], "mask")] if mask != "none" else []
    node = h.make_node("MultiHeadAttention", ins, ["y"], domain=MS, num_heads=2,
                       unidirectional=causal)
    shapes = {"q": [2, 4, 6], "k": [2, keys, 6], "v": [2, keys, 8], "b": [20]}
    m = model([node], list(shapes.items()), ["y"], 17, inits)
    check(m, {n: ax(*s) for n, s in shapes.items()})


@pytest.mark.parametrize("opset", [13, 17])  # primitives; LayerNormalization
@pytest.mark.parametrize("segments,position_ids,mask", [(True, False, True),
                                                        (False, True, False),
                                                        (True, True, False)])
def test_embed_layer_normalization(segments, position_ids, mask, opset):
    """BERT's embeddings w.r.t. the tables and the normalization's scales,
    with the mask's index (zeros without a mask, as ONNX Runtime's kernel)
    and the sum of the embeddings as results."""
    ins = ["ids", "seg" if segments else "", "words", "positions", "segments" if segments else "",
           "gamma", "beta", "mask" if mask else "", "pos_ids" if position_ids else ""]
    outs = ["y", "mask_index", "sum"]  # (without a mask, zeros)
    types = {"ids": (I32, [2, 5]), "seg": (I32, [2, 5]), "mask": (I32, [2, 5]),
             "pos_ids": (I32, [1, 5]), "words": (F, [7, 8]), "positions": (F, [6, 8]),
             "segments": (F, [2, 8]), "gamma": (F, [8]), "beta": (F, [8])}
    order = ["words", "positions", "segments", "gamma", "beta", "ids", "seg", "mask", "pos_ids"]
    node = h.make_node("EmbedLayerNormalization", ins, outs, domain=MS, epsilon=1e-5)
    m = typed_model([node], [(n, *types[n]) for n in order if n in ins],
                    [(o, I32 if o == "mask_index" else F, None) for o in outs if o], opset)
    ints = {"ids": attention_rng.integers(0, 7, (2, 5)),
            "seg": attention_rng.integers(0, 2, (2, 5)),
            "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]),
            "pos_ids": attention_rng.permutation(6)[None, :5]}
    feeds = {n: ints[n].astype(np.int32) if n in ints else ax(*types[n][1])
             for n in order if n in ins}
    check(m, feeds)


@pytest.mark.parametrize("node,shapes,message", [
    (h.make_node("Attention", ["x", "w", "", "", "past"], ["y", "present"], domain=MS,
                 num_heads=2, name="a"), {"past": [2, 2, 2, 0, 3]},
     "node 'a' .*past and present key/value states"),
    (h.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2, do_rotary=1, name="a"),
     {}, "node 'a' .*rotary position embedding"),
    (h.make_node("Attention", ["x", "w", "", "m4"], ["y"], domain=MS, num_heads=2, name="a"),
     {"m4": [2, 1, 4, 4]}, "node 'a' .*a 4-D mask is not lowered"),
    (h.make_node("Attention", ["x", "w", "", "m1"], ["y"], domain=MS, num_heads=2, name="a"),
     {"m1": [8]}, "node 'a' .*a 1-D mask of extent 8 for a batch of 2"),
    (h.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=4, name="a"),
     {}, "node 'a' .*hidden sizes \\[6, 6, 6\\] .* num_heads 4"),
    (h.make_node("MultiHeadAttention", ["x", "k", "k"], ["y"], domain=MS, num_heads=2,
                 unidirectional=1, name="m"), {"k": [2, 5, 6]},
     "node 'm' .*unidirectional attention is lowered where query and key have one sequence "
     "extent, not 4 and 5"),
    (h.make_node("MultiHeadAttention", ["x"], ["y"], domain=MS, num_heads=2, name="m"),
     {}, "node 'm' .*packed QKV"),
])
def test_attention_refusals(node, shapes, message):
    """What ONNX Runtime's CPU kernels do not do, or the lowering does not,
    refused naming the node; masks are int32."""
    shapes = {"x": [2, 4, 6], "w": [6, 18], "i": [2, 4], **shapes}
    ins = [(n, I32 if n in ("i", "m1", "m4") else F, s) for n, s in shapes.items()
           if n in node.input]
    m = typed_model([node], ins, [(o, F, None) for o in node.output])
    with pytest.raises(UnsupportedOp, match=message):
        reverse(m)


def _lifted(m: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """m with the initializers `names` as graph inputs (to differentiate)."""
    out = onnx.ModelProto()
    out.CopyFrom(m)
    kept = [t for t in m.graph.initializer if t.name not in names]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    out.graph.input.extend(h.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                           for t in m.graph.initializer if t.name in names)
    return out


def test_bert_fused_by_onnx_runtime():
    """A two-layer BERT as ONNX Runtime's transformer optimizer leaves it
    (EmbedLayerNormalization, Attention over a padding mask index,
    SkipLayerNormalization, BiasGelu; test/fixtures/make_ort_fused_fixtures.py):
    gradients w.r.t. the word embeddings and the first fused Q/K/V weights,
    and a Hessian-vector product, against torch.autograd in float64."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "ort_fused")
    ref = np.load(os.path.join(here, "bert.npz"))
    weights = ["word.weight", "Attention_0_qkv_weight"]
    m = _lifted(onnx.load(os.path.join(here, "bert.onnx")), set(weights))
    values = {t.name: nh.to_array(t) for t in onnx.load(os.path.join(here, "bert.onnx"))
              .graph.initializer if t.name in weights}
    feeds = {k: ref[k] for k in ("input_ids", "attention_mask", "token_type_ids")} | values
    np.testing.assert_allclose(run(lowered(m), feeds)["y"], ref["y"], rtol=1e-4, atol=1e-5)
    adj = reverse(m, inputs=weights, layout="onnx")
    got = run(adj, {**feeds, "adj_y": ref["w"][..., None]})
    for name, want in zip(weights, ("grad_word", "grad_qkv")):
        np.testing.assert_allclose(got[f"adj_{name}"][..., 0], ref[want], rtol=1e-4,
                                   atol=1e-4 * np.abs(ref[want]).max(), err_msg=name)
    hvp = forward(adj, inputs=["word.weight"], outputs=["adj_word.weight"], layout="onnx")
    got = run(hvp, {**feeds, "adj_y": ref["w"][..., None], "fwd_word.weight": ref["v"][..., None]})
    np.testing.assert_allclose(got["fwd_adj_word.weight"][..., 0, 0], ref["hvp_word"], rtol=1e-3,
                               atol=1e-3 * np.abs(ref["hvp_word"]).max())


def _ort_optimized(m: onnx.ModelProto, tmp_path) -> onnx.ModelProto:
    """The model as ONNX Runtime's own graph optimizations save it."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(so.optimized_model_filepath)


def test_fusions_onnx_runtime_writes(tmp_path):
    """Conv + Relu, Gemm + LeakyRelu and a MatMul of a transposed operand
    scaled: ONNX Runtime saves FusedConv, FusedGemm and FusedMatMul; their
    derivatives equal those of the model before its optimizations."""
    w = nh.from_array(x(4, 3, 3, 3) * 0.3, "w")
    cb = nh.from_array(x(4), "cb")
    g = nh.from_array(x(6, 16) * 0.3, "g")
    gb = nh.from_array(x(6), "gb")
    half = nh.from_array(np.asarray(0.5, np.float32), "half")
    nodes = [h.make_node("Conv", ["img", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Flatten", ["r"], ["flat"]),
             h.make_node("Gemm", ["q", "g", "gb"], ["gm"], transB=1),
             h.make_node("LeakyRelu", ["gm"], ["lr"], alpha=0.1),
             h.make_node("Transpose", ["lr"], ["lt"], perm=[1, 0]),
             h.make_node("MatMul", ["lt", "flat"], ["mm"]),
             h.make_node("Mul", ["mm", "half"], ["y"])]
    m = model(nodes, [("img", [2, 3, 2, 2]), ("q", [2, 16])], ["y"], 17, [w, cb, g, gb, half])
    opt = _ort_optimized(m, tmp_path)
    fused = {n.op_type for n in opt.graph.node if n.domain == MS}
    assert {"FusedConv", "FusedGemm", "FusedMatMul"} <= fused, fused
    feeds = {"img": x(2, 3, 2, 2), "q": x(2, 16)}
    check(opt, feeds, hessian=False, wide=False)  # (piecewise linear; Conv: float32 only)
    w_adj = rng.standard_normal((6, 16, 1)).astype(np.float32)
    grads = [run(reverse(mm, layout="onnx"), {**feeds, "adj_y": w_adj})
             for mm in (m, opt)]
    for k in ("adj_img", "adj_q"):
        np.testing.assert_allclose(grads[1][k], grads[0][k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_defaults_are_onnx_runtimes():
    """The defaults the lowerings assume are those of ONNX Runtime's schemas."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C
    defaults = {}
    for s in C.get_all_operator_schema():
        if s.domain == MS and s.name in contrib_ops.LOWERINGS or \
                s.domain == "" and s.name in contrib_ops.DEFAULT_DOMAIN_LOWERINGS:
            for a in s.attributes.values():
                d = onnx.AttributeProto()
                d.ParseFromString(a._default_value)
                if d.name:
                    defaults[(s.name, a.name)] = h.get_attribute_value(d)
    assert defaults[("SkipLayerNormalization", "epsilon")] == pytest.approx(1e-12)
    assert defaults[("SkipSimplifiedLayerNormalization", "epsilon")] == pytest.approx(1e-12)
    assert defaults[("SimplifiedLayerNormalization", "epsilon")] == pytest.approx(1e-5)
    assert defaults[("SimplifiedLayerNormalization", "axis")] == -1
    assert defaults[("SimplifiedLayerNormalization", "stash_type")] == 1
    assert defaults[("QuickGelu", "alpha")] == pytest.approx(1.702)
    assert defaults[("FusedMatMul", "alpha")] == 1.0
    assert defaults[("EmbedLayerNormalization", "epsilon")] == pytest.approx(1e-12)
    assert defaults[("Attention", "unidirectional")] == 0
    # and the lowering uses them when the attribute is absent
    m = model([h.make_node("SkipLayerNormalization", ["x", "x", "g"], ["y"], domain=MS)],
              [("x", [2, 4]), ("g", [4])], ["y"])
    ln = next(n for n in lowered(m).graph.node if n.op_type == "LayerNormalization")
    assert next(a.f for a in ln.attribute if a.name == "epsilon") == pytest.approx(1e-12)


@pytest.mark.parametrize("node,message", [
    (h.make_node("RotaryEmbedding", ["x", "w"], ["y"], domain=MS, name="rot"),
     "node 'rot' \\(RotaryEmbedding, domain com.microsoft\\): op 'RotaryEmbedding' of domain "
     "'com.microsoft' is not supported \\(of com.microsoft, Gelu, .* are lowered"),
    (h.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2, name="attn"),
     "node 'attn' .*hidden sizes \\[4\\] are not those of Q, K and V"),
    (h.make_node("FusedMatMul", ["x", "w"], ["y"], domain=MS, transBatchA=1, name="fm"),
     "node 'fm' \\(FusedMatMul, domain com.microsoft\\): transBatchA needs an operand of rank 3"),
    (h.make_node("SkipLayerNormalization", ["x", "x", "w"], ["y", "mean"], domain=MS,
                 name="sln"), "node 'sln' .*mean and inv_std_var results \\(training only\\)"),
    (h.make_node("FusedGemm", ["x", "w"], ["y"], domain=MS, activation="Elu", name="fg"),
     "node 'fg' .*activation 'Elu'"),
])
def test_refusals_name_the_node(node, message):
    m = model([node], [("x", [4, 4]), ("w", [4, 4])], list(node.output))
    with pytest.raises(UnsupportedOp, match=message):
        reverse(m)


@pytest.mark.parametrize("opset", [13, 17, 23])
@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_normalizations_float16(op, opset):
    """float16 inputs summed and normalized in float32, as ONNX Runtime's
    kernels do: the sum rounded to float16 first is off by its rounding
    (0.06 of 40 here)."""
    ins = ["x", "skip", "gamma"] + (["beta"] if op == "SkipLayerNormalization" else [])
    shapes = {"x": [2, 3, 8], "skip": [2, 3, 8], "gamma": [8], "beta": [8]}
    g = h.make_graph([h.make_node(op, ins, ["y"], domain=MS, epsilon=1e-5)],
                     "g", [h.make_tensor_value_info(i, TP.FLOAT16, shapes[i]) for i in ins],
                     [h.make_tensor_value_info("y", TP.FLOAT16, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MS, 1)])
    feeds = {i: (x(*shapes[i]) * 3 + 20).astype(np.float16) for i in ins}  # (a large mean)
    want, got = run(m, feeds)["y"], run(lowered(m), feeds)["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=4e-3)
