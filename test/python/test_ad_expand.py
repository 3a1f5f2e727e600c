"""Ops the ONNX spec defines by a function body: expanded (onnx-ad-expand) at
the model's opset, primal outputs unchanged in ONNX Runtime, derivatives
checked against finite differences and the forward/reverse identity."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper as h

from adcheck import check_derivatives, run

from onnx_ad_mlir import transforms  # noqa: F401
from onnx_ad_mlir.errors import UnsupportedOp
from onnx_ad_mlir.exporter import export_onnx
from onnx_ad_mlir.importer import import_onnx
from onnx_ad_mlir.transforms.expand import expand_function
from onnx_ad_mlir.transforms.passes import module_opset, target_function

D, F, I64 = TP.DOUBLE, TP.FLOAT, TP.INT64


def model(nodes, inputs, outputs, opset, initializers=()):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(*i) for i in inputs],
                     [h.make_tensor_value_info(*o) for o in outputs], list(initializers))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def expanded(m: onnx.ModelProto, keep=()) -> tuple[onnx.ModelProto, int]:
    """The model with every function op expanded (also those with rules)."""
    with ir.Context() as ctx:
        module = import_onnx(m, ctx)
        n = expand_function(target_function(module.operation, None),
                            module_opset(module.operation), keep)
        module.operation.verify()
        return export_onnx(module), n


def op_types(m: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in m.graph.node}


def check(m, feeds, op, inputs=None, rtol=None, atol=None):
    """Expansion removes `op` and keeps the outputs; derivatives check out."""
    onnx.checker.check_model(m, full_check=True)
    e, n = expanded(m)
    assert n >= 1 and op not in op_types(e), op_types(e)
    onnx.checker.check_model(e, full_check=True)
    want, got = run(m, feeds), run(e, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=k)
    # Derivatives of the expanded body (an op may also have a hand rule,
    # tested with its family; the AD modes keep such ops).
    errors = check_derivatives(e, feeds, inputs=inputs, rtol=rtol, atol=atol)
    print(op, errors)
    return errors


R = np.random.default_rng(0)


def rand(*shape, dtype=np.float64):
    return R.standard_normal(shape).astype(dtype)


def test_swish():
    m = model([h.make_node("Swish", ["x"], ["y"], name="sw", alpha=0.7)],
              [("x", D, [2, 3])], [("y", D, [2, 3])], 24)
    check(m, {"x": rand(2, 3)}, "Swish")


def test_swish_names_stay_unique():
    m = model([h.make_node("Swish", ["x"], ["t"], name="sw"),
               h.make_node("Swish", ["t"], ["y"], name="sw2")],
              [("x", D, [2, 3])], [("y", D, [2, 3])], 24)
    e, n = expanded(m)
    names = [nd.name for nd in e.graph.node]
    assert n == 2 and len(names) == len(set(names))
    assert all(nm.startswith(("sw/", "sw2/")) for nm in names if nm)
    assert e.graph.output[0].name == "y"


@pytest.mark.parametrize("opset", [23, 24, 25])
def test_attention_4d(opset):
    b, hq, s, d = 1, 2, 3, 4
    m = model([h.make_node("Attention", ["q", "k", "v"], ["y"], name="att")],
              [("q", F, [b, hq, s, d]), ("k", F, [b, hq, s, d]), ("v", F, [b, hq, s, d])],
              [("y", F, [b, hq, s, d])], opset)
    check(m, {"q": rand(b, hq, s, d, dtype=np.float32), "k": rand(b, hq, s, d, dtype=np.float32),
              "v": rand(b, hq, s, d, dtype=np.float32)}, "Attention")


@pytest.mark.parametrize("opset", [23, 24])
def test_attention_3d_gqa_causal_mask(opset):
    b, s, hq, hk, d = 1, 3, 4, 2, 2
    m = model([h.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="att",
                           q_num_heads=hq, kv_num_heads=hk, is_causal=1, scale=0.4)],
              [("q", F, [b, s, hq * d]), ("k", F, [b, s, hk * d]), ("v", F, [b, s, hk * d]),
               ("mask", F, [s, s])],
              [("y", F, [b, s, hq * d])], opset)
    feeds = {"q": rand(b, s, hq * d, dtype=np.float32), "k": rand(b, s, hk * d, dtype=np.float32),
             "v": rand(b, s, hk * d, dtype=np.float32), "mask": rand(s, s, dtype=np.float32)}
    check(m, feeds, "Attention", inputs=["q", "k", "v"])


def test_rms_normalization():
    m = model([h.make_node("RMSNormalization", ["x", "s"], ["y"], name="rms", epsilon=1e-3)],
              [("x", F, [2, 3, 4]), ("s", F, [4])], [("y", F, [2, 3, 4])], 23)
    check(m, {"x": rand(2, 3, 4, dtype=np.float32), "s": rand(4, dtype=np.float32)},
          "RMSNormalization")


@pytest.mark.parametrize("opset", [21])
def test_group_normalization(opset):
    c = 4 if opset == 21 else 2  # scale/bias per channel (21) or per group (18)
    m = model([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn",
                           num_groups=2, epsilon=1e-3)],
              [("x", F, [2, 4, 3]), ("s", F, [c]), ("b", F, [c])], [("y", F, [2, 4, 3])], opset)
    check(m, {"x": rand(2, 4, 3, dtype=np.float32), "s": rand(c, dtype=np.float32),
              "b": rand(c, dtype=np.float32)}, "GroupNormalization")


def test_mean_variance_normalization_double_body():
    # The spec's body spells its constants in float32; they follow the input type.
    m = model([h.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn", axes=[0, 2])],
              [("x", D, [2, 3, 4])], [("y", D, [2, 3, 4])], 18)
    e, n = expanded(m)
    onnx.checker.check_model(e, full_check=True)
    x = rand(2, 3, 4)
    mean = x.mean(axis=(0, 2), keepdims=True)
    want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=(0, 2), keepdims=True) + 1e-9)
    np.testing.assert_allclose(run(e, {"x": x})["y"], want, rtol=1e-8)


def test_mean_variance_normalization():
    m = model([h.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn", axes=[0, 2])],
              [("x", F, [2, 3, 4])], [("y", F, [2, 3, 4])], 18)
    check(m, {"x": rand(2, 3, 4, dtype=np.float32)}, "MeanVarianceNormalization")


def test_rotary_embedding():
    b, s, nh, d = 1, 3, 2, 4
    m = model([h.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="rope",
                           num_heads=nh)],
              [("x", F, [b, s, nh * d]), ("cos", F, [8, d // 2]), ("sin", F, [8, d // 2]),
               ("pos", I64, [b, s])], [("y", F, [b, s, nh * d])], 23)
    ang = np.arange(8)[:, None] * np.array([1.0, 0.3])[None]
    feeds = {"x": rand(b, s, nh * d, dtype=np.float32), "cos": np.cos(ang).astype(np.float32),
             "sin": np.sin(ang).astype(np.float32), "pos": np.array([[0, 2, 5]], dtype=np.int64)}
    check(m, feeds, "RotaryEmbedding", inputs=["x"])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_loss(reduction):
    m = model([h.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], name="sce",
                           reduction=reduction)],
              [("x", F, [3, 4]), ("t", I64, [3])],
              [("y", F, [3] if reduction == "none" else [])], 18)
    check(m, {"x": rand(3, 4, dtype=np.float32), "t": np.array([0, 3, 1], dtype=np.int64)},
          "SoftmaxCrossEntropyLoss")


def test_negative_log_likelihood_loss_weighted():
    m = model([h.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], name="nll",
                           ignore_index=2)],
              [("x", F, [3, 4, 2]), ("t", I64, [3, 2]), ("w", F, [4])], [("y", F, [])], 22)
    check(m, {"x": rand(3, 4, 2, dtype=np.float32),
              "t": np.array([[0, 3], [2, 1], [1, 1]], dtype=np.int64),
              "w": np.abs(rand(4, dtype=np.float32)) + 0.5}, "NegativeLogLikelihoodLoss",
          inputs=["x"])


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(align):
    size = h.make_tensor("size", I64, [4], [2, 1, 3, 4])
    m = model([h.make_node("AffineGrid", ["theta", "size"], ["y"], name="ag",
                           align_corners=align)],
              [("theta", F, [2, 2, 3])], [("y", F, [2, 3, 4, 2])], 20, [size])
    check(m, {"theta": rand(2, 2, 3, dtype=np.float32)}, "AffineGrid")


def test_center_crop_pad():
    shape = h.make_tensor("shape", I64, [2], [2, 5])
    m = model([h.make_node("CenterCropPad", ["x", "shape"], ["y"], name="ccp")],
              [("x", D, [4, 3])], [("y", D, [2, 5])], 18, [shape])
    check(m, {"x": rand(4, 3)}, "CenterCropPad")


def test_shrink():
    m = model([h.make_node("Shrink", ["x"], ["y"], name="shr", lambd=0.5, bias=0.2)],
              [("x", F, [2, 3])], [("y", F, [2, 3])], 18)
    check(m, {"x": np.array([[-2, -0.7, -0.1], [0.2, 0.9, 3.0]], dtype=np.float32)}, "Shrink")


def test_modes_expand_ops_without_rule():
    """forward/reverse on the original model expand by themselves."""
    m = model([h.make_node("RMSNormalization", ["x", "s"], ["y"], name="rms",
                           stash_type=TP.DOUBLE)],
              [("x", D, [2, 4]), ("s", D, [4])], [("y", D, [2, 4])], 23)
    check_derivatives(m, {"x": rand(2, 4), "s": rand(4)})


def test_rule_ops_are_kept():
    """Ops with a hand rule are not expanded by the AD modes' default."""
    from onnx_ad_mlir.transforms.registry import JVP
    m = model([h.make_node("Softplus", ["x"], ["y"])], [("x", D, [2])], [("y", D, [2])], 18)
    e, n = expanded(m, keep=JVP)
    assert n == 0 and op_types(e) == {"Softplus"}


def test_body_onnx_does_not_generate_is_refused():
    """RMSNormalization with stash_type=0 (no element type): ONNX's body
    builder declines and returns an empty function; refused naming the node,
    not an 'output not defined' failure of the empty body."""
    m = model([h.make_node("RMSNormalization", ["x", "s"], ["y"], name="rms", stash_type=0)],
              [("x", D, [2, 4]), ("s", D, [4])], [("y", D, [2, 4])], 23)
    from onnx_ad_mlir.api import reverse
    with pytest.raises(UnsupportedOp, match=r"'rms' \(RMSNormalization\): onnx generates no body"):
        reverse(m)


def test_refusal_names_node():
    """A lowering that cannot apply names the node, the op and the reason."""
    m = model([h.make_node("STFT", ["x", "step", "", "n"], ["y"], name="spec")],
              [("x", F, [1, 16, 1]), ("step", I64, []), ("n", I64, [])], [("y", F, None)], 17)
    with pytest.raises(UnsupportedOp, match=r"spec.*STFT.*frame_length must be a constant"):
        expanded(m)


def test_dynamic_batch():
    """Shape arithmetic that cannot fold stays in the body; a dynamic batch survives."""
    # stash_type=double: the body otherwise computes in float32
    m = model([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn",
                           num_groups=2, stash_type=TP.DOUBLE)],
              [("x", D, ["N", 4, 3]), ("s", D, [4]), ("b", D, [4])], [("y", D, ["N", 4, 3])], 21)
    feeds = {"x": rand(3, 4, 3), "s": rand(4), "b": rand(4)}
    e, _ = expanded(m)
    assert e.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    np.testing.assert_allclose(run(e, feeds)["y"], run(m, feeds)["y"], rtol=1e-10)
    check_derivatives(m, feeds)


def test_hessian_through_expansion():
    from adcheck import check_hessian
    m = model([h.make_node("RMSNormalization", ["x", "s"], ["t"], name="rms", stash_type=TP.DOUBLE),
               h.make_node("ReduceSumSquare", ["t"], ["y"], keepdims=0)],
              [("x", D, [2, 4]), ("s", D, [4])], [("y", D, [])], 23)
    print("hessian", check_hessian(m, {"x": rand(2, 4), "s": rand(4)}))


def test_pass_in_pipeline():
    from mlir.passmanager import PassManager
    from onnx_ad_mlir.passes import build_pipeline
    m = model([h.make_node("Swish", ["x"], ["y"], name="sw")], [("x", D, [2])],
              [("y", D, [2])], 24)
    with ir.Context() as ctx:
        module = import_onnx(m, ctx)
        pm = PassManager("builtin.module")
        build_pipeline(pm, "builtin.module(onnx-ad-expand{all=true},func.func(canonicalize,cse))")
        pm.run(module.operation)
        text = str(module)
    assert "onnx.Swish" not in text and "onnx.Sigmoid" in text


def test_inside_a_branch():
    """Ops in region bodies are expanded in place."""
    then = h.make_graph([h.make_node("Swish", ["x"], ["t"], name="sw")], "then", [],
                        [h.make_tensor_value_info("t", D, [2, 3])])
    other = h.make_graph([h.make_node("Neg", ["x"], ["u"])], "else", [],
                         [h.make_tensor_value_info("u", D, [2, 3])])
    m = model([h.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
              [("c", TP.BOOL, []), ("x", D, [2, 3])], [("y", D, [2, 3])], 24)
    e, n = expanded(m)
    branch = e.graph.node[-1].attribute[0].g
    assert n == 1 and "Swish" not in {nd.op_type for nd in branch.node}
    x = rand(2, 3)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        np.testing.assert_allclose(run(e, feeds)["y"], run(m, feeds)["y"], rtol=1e-12)


@pytest.mark.parametrize("opset", [23, 24])
def test_attention_kv_cache_outputs(opset):
    """Several outputs (present key/value, qk matmul output), softcap, past cache."""
    b, h_, s, p, d = 1, 2, 2, 3, 4
    m = model([h.make_node("Attention", ["q", "k", "v", "", "pk", "pv"],
                           ["y", "present_k", "present_v", "qk"], name="att",
                           softcap=2.0, qk_matmul_output_mode=1)],
              [("q", F, [b, h_, s, d]), ("k", F, [b, h_, s, d]), ("v", F, [b, h_, s, d]),
               ("pk", F, [b, h_, p, d]), ("pv", F, [b, h_, p, d])],
              [("y", F, [b, h_, s, d]), ("present_k", F, [b, h_, p + s, d]),
               ("present_v", F, [b, h_, p + s, d]), ("qk", F, [b, h_, s, p + s])], opset)
    feeds = {n: rand(*shape, dtype=np.float32) for n, shape in
             (("q", (b, h_, s, d)), ("k", (b, h_, s, d)), ("v", (b, h_, s, d)),
              ("pk", (b, h_, p, d)), ("pv", (b, h_, p, d)))}
    check(m, feeds, "Attention")


def test_softmax_cross_entropy_loss_log_prob():
    m = model([h.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], name="sce")],
              [("x", F, [3, 4]), ("t", I64, [3])], [("y", F, []), ("lp", F, [3, 4])], 18)
    check(m, {"x": rand(3, 4, dtype=np.float32), "t": np.array([0, 3, 1], dtype=np.int64)},
          "SoftmaxCrossEntropyLoss")


def test_attention_fully_masked_row():
    """A row masked everywhere yields zeros (the body's Where); its reverse
    derivative stays finite (no 0 * NaN from the discarded softmax)."""
    b, h_, s, d = 1, 1, 3, 2
    m = model([h.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="att")],
              [("q", D, [b, h_, s, d]), ("k", D, [b, h_, s, d]), ("v", D, [b, h_, s, d]),
               ("mask", TP.BOOL, [s, s])], [("y", D, [b, h_, s, d])], 24)
    mask = np.array([[False, False, False], [True, False, True], [True, True, True]])
    feeds = {"q": rand(b, h_, s, d), "k": rand(b, h_, s, d), "v": rand(b, h_, s, d), "mask": mask}
    e, _ = expanded(m)
    want = run(m, feeds)["y"]
    assert np.all(want[0, 0, 0] == 0)
    np.testing.assert_allclose(run(e, feeds)["y"], want, rtol=1e-12, atol=0)
    print("Attention masked", check_derivatives(m, feeds))


@pytest.mark.parametrize("rule", ["linear", "gated_delta"])
def test_linear_attention(rule):
    """A body with a Scan: its body gets typed inputs and local constants, so
    shapes are known and the Scan rules apply."""
    b, t, nh, d = 1, 3, 2, 4
    ins = [("q", F, [b, t, nh * d]), ("k", F, [b, t, nh * d]), ("v", F, [b, t, nh * d])]
    names = ["q", "k", "v"]
    if rule == "gated_delta":
        ins += [("ps", F, [b, nh, d, d]), ("decay", F, [b, t, nh]), ("beta", F, [b, t, nh])]
        names += ["ps", "decay", "beta"]
    m = model([h.make_node("LinearAttention", names, ["y", "state"], name="la", q_num_heads=nh,
                           kv_num_heads=nh, update_rule=rule)],
              ins, [("y", F, [b, t, nh * d]), ("state", F, [b, nh, d, d])], 27)
    feeds = {n: rand(*shape, dtype=np.float32) * 0.5 for n, _, shape in ins}
    if rule == "gated_delta":
        feeds["decay"] = -np.abs(feeds["decay"])
        feeds["beta"] = 1 / (1 + np.exp(-feeds["beta"]))
    check(m, feeds, "LinearAttention")
