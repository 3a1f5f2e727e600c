"""ONNX Runtime's fused contrib operators (contrib_ops.py): each lowering
computes what ONNX Runtime's own kernel computes (float32, the kernels'
type), its derivatives match finite differences of that kernel, and in
float64 (the lowered model promoted) tightly; ONNX Runtime's own graph
optimizations write the fused ops the tests then differentiate."""
from __future__ import annotations

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
from onnx_ad_mlir.api import reverse
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
    # and the lowering uses them when the attribute is absent
    m = model([h.make_node("SkipLayerNormalization", ["x", "x", "g"], ["y"], domain=MS)],
              [("x", [2, 4]), ("g", [4])], ["y"])
    ln = next(n for n in lowered(m).graph.node if n.op_type == "LayerNormalization")
    assert next(a.f for a in ln.attribute if a.name == "epsilon") == pytest.approx(1e-12)


@pytest.mark.parametrize("node,message", [
    (h.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2, name="attn"),
     "node 'attn' \\(Attention, domain com.microsoft\\): op 'Attention' of domain "
     "'com.microsoft' is not supported \\(of com.microsoft, Gelu, .* are lowered"),
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
