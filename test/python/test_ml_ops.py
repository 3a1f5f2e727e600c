"""ai.onnx.ml ops lowered at import (Scaler, LinearRegressor,
ArrayFeatureExtractor, SVMRegressor, LinearClassifier, Normalizer, Imputer,
OneHotEncoder, LabelEncoder, Binarizer, FeatureVectorizer): the derivative models' primal
outputs against ONNX Runtime's own ML kernels, their derivatives against
central differences of the original model (run with those kernels), and
the refusals."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from adcheck import check_derivatives, check_forward, check_hessian, run
from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.errors import OnnxAdError, UnsupportedOp

ML = "ai.onnx.ml"
OPSETS = [h.make_opsetid("", 18), h.make_opsetid(ML, 3)]


def ml_model(nodes: list[onnx.NodeProto], x_type: int, x_shape: list, inits=(),
             opsets=OPSETS) -> onnx.ModelProto:
    g = h.make_graph(nodes, "ml", [h.make_tensor_value_info("x", x_type, x_shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], list(inits))
    return h.make_model(g, opset_imports=opsets)


def scaler(x: str = "x", y: str = "y", offset=(0.5, -1.0, 2.0), scale=(2.0, 3.0, 0.5)):
    return h.make_node("Scaler", [x], [y], name="scale", domain=ML, offset=list(offset),
                       scale=list(scale))


def regressor(x: str = "x", y: str = "y", targets: int = 2, c: int = 3, **attrs):
    attrs = {"coefficients": np.linspace(-1.0, 1.5, targets * c).tolist(),
             "intercepts": [0.25 * i for i in range(targets)], **attrs}
    return h.make_node("LinearRegressor", [x], [y], name="linear", domain=ML, targets=targets,
                       **attrs)


def extractor(x: str = "x", y: str = "y"):
    return h.make_node("ArrayFeatureExtractor", [x, "idx"], [y], name="pick", domain=ML)


def indices(values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), "idx")


def assert_primal_matches_ort(model: onnx.ModelProto, feeds: dict) -> None:
    """Every derivative model recomputes y: as ONNX Runtime's ML kernel does."""
    want = run(model, feeds)["y"]
    fwd = forward(model, inputs=["x"], outputs=["y"], layout="onnx")
    onnx.checker.check_model(fwd, full_check=True)
    assert {o.domain for o in fwd.opset_import} <= {"", "ai.onnx"}
    assert not any(n.domain == ML for n in fwd.graph.node)
    seed = np.zeros(feeds["x"].shape + (1,), np.float32 if feeds["x"].dtype != np.float64
                    else np.float64)
    got = run(fwd, {**feeds, "fwd_x": seed})["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


X = np.array([[0.3, -1.2, 2.0], [1.5, 0.7, -0.4]], np.float32)


@pytest.mark.parametrize("offset,scale", [((0.5, -1.0, 2.0), (2.0, 3.0, 0.5)), ((0.5,), (2.0,))])
def test_scaler(offset, scale):
    model = ml_model([scaler(offset=offset, scale=scale)], T.FLOAT, [2, 3])
    assert_primal_matches_ort(model, {"x": X})
    check_derivatives(model, {"x": X})


def test_scaler_of_double_input_has_a_float_result():
    """ONNX Runtime computes in double, then rounds to the float result."""
    model = ml_model([scaler()], T.DOUBLE, [2, 3])
    feeds = {"x": X.astype(np.float64) + 1e-9}
    assert_primal_matches_ort(model, feeds)
    check_forward(model, feeds, "x", "y", eps=0.5, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("x_shape,targets", [([2, 3], 2), ([2, 3], 1), ([3], 3)])
def test_linear_regressor(x_shape, targets):
    """A 1-D input is one row: the result is [1, targets], as ONNX Runtime's."""
    model = ml_model([regressor(targets=targets)], T.FLOAT, x_shape)
    x = X if len(x_shape) == 2 else X[0]
    assert_primal_matches_ort(model, {"x": x})
    assert run(model, {"x": x})["y"].shape == ((2, targets) if len(x_shape) == 2 else (1, targets))
    check_derivatives(model, {"x": x})


@pytest.mark.parametrize("x_shape,idx", [([2, 3], [2, 0, 2]), ([3], [1]), ([2, 1, 3], [[0, 2]])])
def test_array_feature_extractor(x_shape, idx):
    """The indices, flattened, pick along the last axis (a repeated index
    sums both cotangents); a 1-D input gives [1, k]."""
    model = ml_model([extractor()], T.FLOAT, x_shape, [indices(idx)])
    x = np.arange(np.prod(x_shape), dtype=np.float32).reshape(x_shape) * 0.37 - 1.0
    assert_primal_matches_ort(model, {"x": x})
    check_derivatives(model, {"x": x})


def svm(kernel: str, supports: int = 3, **attrs):
    vectors = np.linspace(-1.0, 1.0, supports * 3).reshape(supports, 3)[::-1].ravel()
    attrs = {"kernel_type": kernel, "kernel_params": [0.4, 0.5, 3.0],
             "support_vectors": vectors.tolist(), "n_supports": supports,
             "coefficients": np.linspace(-0.6, 0.9, max(supports, 1) if supports else 3).tolist(),
             "rho": [0.3], **attrs}
    if not supports:
        del attrs["support_vectors"]
    return h.make_node("SVMRegressor", ["x"], ["y"], name="svm", domain=ML, **attrs)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_regressor(kernel):
    model = ml_model([svm(kernel)], T.FLOAT, [2, 3])
    assert_primal_matches_ort(model, {"x": X})
    check_derivatives(model, {"x": X})


@pytest.mark.parametrize("attrs,x", [({"supports": 0}, X), ({"one_class": 1}, X),
                                     ({}, X[0])])
def test_svm_regressor_forms(attrs, x):
    """No support vectors: a linear model; one_class: the sign (a zero
    derivative); a 1-D input is one row."""
    model = ml_model([svm("RBF", **attrs)], T.FLOAT, list(x.shape))
    assert_primal_matches_ort(model, {"x": x})
    check_derivatives(model, {"x": x})


def classifier(classes: int, labels=None, c: int = 3, **attrs):
    labels = list(range(10, 10 + classes)) if labels is None else labels
    key = "classlabels_strings" if labels and isinstance(labels[0], str) else "classlabels_ints"
    attrs = {"coefficients": np.linspace(-1.2, 0.9, classes * c).tolist(),
             "intercepts": np.linspace(-0.3, 0.4, classes).tolist(), **attrs}
    if labels:
        attrs[key] = labels
    return h.make_node("LinearClassifier", ["x"], ["label", "y"], name="cls", domain=ML, **attrs)


@pytest.mark.parametrize("classes,labels,post", [
    (3, None, "SOFTMAX"), (3, None, "LOGISTIC"), (3, ["a", "b", "c"], "NONE"),
    (2, [0, 1], "LOGISTIC"),  # skl2onnx's binary LogisticRegression
    (1, [4, 7], "LOGISTIC"), (1, [4, 7], "SOFTMAX"),  # one score, two labels
    (1, [], "LOGISTIC")])  # one score, raw
def test_linear_classifier(classes, labels, post):
    """Labels and scores as ONNX Runtime's kernel computes them (the label of
    the first best score); derivatives of the scores."""
    node = classifier(classes, labels, post_transform=post)
    g = h.make_graph([node], "ml", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("label", T.STRING if labels and
                                               isinstance(labels[0], str) else T.INT64, None),
                      h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(g, opset_imports=OPSETS)
    x = np.array([[0.3, -1.2, 2.0], [-1.5, 0.7, 0.4]], np.float32)
    want = run(model, {"x": x})
    fwd = forward(model, inputs=["x"], outputs=["y"], layout="onnx")
    got = run(fwd, {"x": x, "fwd_x": np.zeros(x.shape + (1,), np.float32)})
    assert got["label"].tolist() == want["label"].tolist()
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)
    check_derivatives(model, {"x": x}, outputs=["y"])


def normalizer(norm: str, shape: list) -> onnx.ModelProto:
    return ml_model([h.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm)], T.FLOAT,
                    shape)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("x", [X, X[0]])
def test_normalizer(norm, x):
    model = normalizer(norm, list(x.shape))
    assert_primal_matches_ort(model, {"x": x})
    check_derivatives(model, {"x": x})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_rows_of_norm_zero(norm):
    """Such a row (MAX: a maximum of 0) stays as it is, where the map jumps:
    finite differences cannot judge there, but both modes must give finite
    derivatives that agree (<J v, w> = <v, J^T w>), not 0/0."""
    x = np.array([[-1.0, 0.0, -2.0], [0.0, 0.0, 0.0], [0.5, -0.25, 1.0]], np.float32)
    model = normalizer(norm, [3, 3])
    assert_primal_matches_ort(model, {"x": x})
    rng = np.random.default_rng(0)
    v, w = rng.standard_normal((3, 3, 1)).astype(np.float32), \
        rng.standard_normal((3, 3, 1)).astype(np.float32)
    jv = run(forward(model, inputs=["x"], outputs=["y"], layout="onnx"),
             {"x": x, "fwd_x": v})["fwd_y"]
    jtw = run(reverse(model, inputs=["x"], outputs=["y"], layout="onnx"),
              {"x": x, "adj_y": w})["adj_x"]
    assert np.isfinite(jv).all() and np.isfinite(jtw).all()
    np.testing.assert_allclose(float((jv * w).sum()), float((v * jtw).sum()), rtol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"imputed_value_floats": [9.0, 8.0, 7.0], "replaced_value_float": float("nan")},
    {"imputed_value_floats": [0.0], "replaced_value_float": float("inf")},
    {"imputed_value_floats": [9.0, 8.0, 7.0]},  # replaces 0.0, ONNX's default
])
def test_imputer(attrs):
    """skl2onnx guards a PowerTransformer's branches with Imputers (inf and
    NaN to 0): the primal as ONNX Runtime's, derivatives at finite points
    (1 where kept, 0 where imputed)."""
    model = ml_model([h.make_node("Imputer", ["x"], ["y"], domain=ML, **attrs)], T.FLOAT, [2, 3])
    odd = np.array([[np.nan, 1.0, 0.0], [np.inf, -np.inf, 3.0]], np.float32)
    assert_primal_matches_ort(model, {"x": odd})
    check_derivatives(model, {"x": X})


def encoded(node: onnx.NodeProto, c_type: int, c_shape: list, to_float: bool = False,
            x_shape: tuple = (2, 3)) -> onnx.ModelProto:
    """y = x * float(node(c)): a float input x differentiated beside a
    categorical input c the encoder reads (as skl2onnx's ColumnTransformers)."""
    nodes = [node]
    code = node.output[0]
    if to_float:
        nodes.append(h.make_node("Cast", [code], ["code_f"], to=T.FLOAT))
        code = "code_f"
    nodes.append(h.make_node("Mul", ["x", code], ["y"]))
    g = h.make_graph(nodes, "ml", [h.make_tensor_value_info("x", T.FLOAT, list(x_shape)),
                                   h.make_tensor_value_info("c", c_type, c_shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19), h.make_opsetid(ML, 3)])


def encoder(op: str, **attrs) -> onnx.NodeProto:
    return h.make_node(op, ["c"], ["code"], name="enc", domain=ML, **attrs)


STR = np.array([["x", "q", "y"], ["y", "y", "x"]], object)
INTS = np.array([[0, 2, 7], [1, 1, 2]], np.int64)


@pytest.mark.parametrize("node,c,to_float", [
    (encoder("OneHotEncoder", cats_int64s=[7, 0, 2]), INTS[0], False),
    (encoder("OneHotEncoder", cats_int64s=[2, 0, 2]), INTS[1], False),  # repeated: the last
    (encoder("OneHotEncoder", cats_strings=["y", "x", "q"], zeros=0), STR[0], False),
    (encoder("OneHotEncoder", cats_int64s=[1, 0, 2]), np.array([1.7, -0.5, 2.0], np.float32),
     False),  # a float X truncated
    (encoder("LabelEncoder", keys_strings=["x", "y"], values_floats=[0.5, 1.5]), STR, False),
    (encoder("LabelEncoder", keys_strings=["x", "y"], values_floats=[0.5, 1.5],
             default_float=0.25), STR, False),
    (encoder("LabelEncoder", keys_int64s=[0, 1, 0], values_int64s=[5, 6, 7]), INTS, True),
    (encoder("LabelEncoder", keys_floats=[1.0, float("nan"), 0.0], values_floats=[2., 3., 4.]),
     np.array([[1.0, np.nan, -0.0], [0.0, 1.0, 5.0]], np.float32), False),  # NaN: no key
    (encoder("LabelEncoder", keys_strings=["x", "q"], values_int64s=[3, 4]), STR, True),
])
def test_encoders_recompute_ort_kernels(node, c, to_float):
    """The encoded categorical input scales x: the derivative models'
    primal as ONNX Runtime's OneHotEncoder/LabelEncoder kernels compute it,
    derivatives w.r.t. x by central differences."""
    # a LabelEncoder maps c [2, 3] to [2, 3]; a OneHotEncoder c [3] to [3, 3] (x [3, 1])
    x = X.T[:, :1].copy() if node.op_type == "OneHotEncoder" else X
    model = encoded(node, {np.float32: T.FLOAT, np.int64: T.INT64, np.object_: T.STRING}[
        c.dtype.type], list(c.shape), to_float, x.shape)
    feeds = {"x": x, "c": c}
    want = run(model, feeds)["y"]
    for transform, extra in ((forward, {"fwd_x": np.zeros(x.shape + (1,), np.float32)}),
                             (reverse, {"adj_y": np.zeros(want.shape + (1,), np.float32)})):
        m = transform(model, inputs=["x"], outputs=["y"], layout="onnx")
        onnx.checker.check_model(m, full_check=True)
        assert not any(n.domain == ML for n in m.graph.node)
        got = run(m, {**feeds, **extra})["y"]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # the -0.0 default
    check_derivatives(model, feeds, inputs=["x"])


def test_binarizer_is_a_step():
    """x * Binarizer(x): the primal as ONNX Runtime's kernel, the derivative
    the step's value where x is away from the threshold (its own 0 there)."""
    node = h.make_node("Binarizer", ["x"], ["b"], name="bin", domain=ML, threshold=0.5)
    model = ml_model([node, h.make_node("Mul", ["x", "b"], ["y"])], T.FLOAT, [2, 3])
    assert_primal_matches_ort(model, {"x": X})
    check_derivatives(model, {"x": X})


@pytest.mark.parametrize("opset", [9, 11, 12, 17])
@pytest.mark.parametrize("node,x_shape", [
    (extractor(), [3]),
    (regressor(targets=3, c=3), [3]),
    (svm("RBF"), [2, 3]),
    (h.make_node("Imputer", ["x"], ["y"], domain=ML, imputed_value_floats=[1.0],
                 replaced_value_float=float("nan")), [2, 3]),
    (h.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, cats_int64s=[0, 1, -1]), [2, 3]),
    (h.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=0.5), [2, 3]),
])
def test_older_default_opsets(node, x_shape, opset):
    """The lowering emits each opset's form (Unsqueeze and ReduceSum axes as
    attributes before 13, no negative axes before 11)."""
    model = ml_model([node], T.FLOAT, x_shape, [indices([2, 0])] if node.input[1:] else [],
                     opsets=[h.make_opsetid("", opset), h.make_opsetid(ML, 1)])
    assert_primal_matches_ort(model, {"x": X if len(x_shape) == 2 else X[0]})


@pytest.mark.parametrize("node,opset,match", [
    (normalizer("L2", [2, 3]).graph.node[0], 10, "node \\(Normalizer.*rows of norm 0 are found "
     "by Equal on floats \\(opset 11\\); the model imports opset 10: re-export it at opset 11"),
    (encoder("LabelEncoder", keys_floats=[1.0], values_floats=[2.0]), 10,
     "node 'enc'.*Pad with operands \\(opset 11\\)"),
    (h.make_node("FeatureVectorizer", ["x"], ["y"], name="vec", domain=ML, inputdimensions=[2]),
     10, "node 'vec'.*cut or padded to its width needs Slice and Pad with operands "
     "\\(opset 11\\)"),
])
def test_older_opsets_refused_naming_what_they_lack(node, opset, match):
    node = onnx.NodeProto.FromString(node.SerializeToString())
    node.input[0], node.output[0] = "x", "y"
    model = ml_model([node], T.FLOAT, [2, 3],
                     opsets=[h.make_opsetid("", opset), h.make_opsetid(ML, 2)])
    with pytest.raises(UnsupportedOp, match=match):
        forward(model, inputs=["x"], outputs=["y"])


def test_a_zero_derivative_at_opset_7():
    """Binarizer is piecewise constant: its derivative is zeros, an Expand
    (opset 8) written at opset 7 as an Add of tiled zeros (refused before)."""
    model = ml_model([h.make_node("Binarizer", ["x"], ["y"], domain=ML)], T.FLOAT, [2, 3],
                     opsets=[h.make_opsetid("", 7), h.make_opsetid(ML, 2)])
    fwd = forward(model, inputs=["x"], outputs=["y"], layout="onnx")
    onnx.checker.check_model(fwd, full_check=True)
    seeds = np.ones((2, 3, 2), np.float32)
    out = run(fwd, {"x": X, "fwd_x": seeds})
    np.testing.assert_array_equal(out["fwd_y"], np.zeros((2, 3, 2), np.float32))


def test_ml_only_model_refused():
    """ONNX's own ML test models import no default domain for the lowering."""
    model = ml_model([scaler()], T.FLOAT, [2, 3], opsets=[h.make_opsetid(ML, 1)])
    with pytest.raises(UnsupportedOp, match="node 'scale'.*imports no version of the default"):
        forward(model, inputs=["x"], outputs=["y"])


def test_string_keys_need_opset_19():
    """Equal compares strings from opset 19: an older model is refused with the fix."""
    model = encoded(encoder("OneHotEncoder", cats_strings=["x", "y", "z"]), T.STRING, [2])
    del model.opset_import[:]
    model.opset_import.extend([h.make_opsetid("", 18), h.make_opsetid(ML, 3)])
    with pytest.raises(UnsupportedOp, match="node 'enc'.*string categories need Equal on strings "
                       "\\(opset 19\\).*imports opset 18: re-export it at opset 19"):
        forward(model, inputs=["x"], outputs=["y"])


def trees(x: str, y: str) -> onnx.NodeProto:
    """A one-leaf TreeEnsembleRegressor (no lowering)."""
    return h.make_node("TreeEnsembleRegressor", [x], [y], name="trees", domain=ML,
                       n_targets=1, nodes_treeids=[0], nodes_nodeids=[0],
                       nodes_featureids=[0], nodes_values=[0.0], nodes_modes=["LEAF"],
                       nodes_truenodeids=[0], nodes_falsenodeids=[0], target_ids=[0],
                       target_nodeids=[0], target_treeids=[0], target_weights=[1.0])


def test_unsupported_ml_op_named_before_what_waits_on_it():
    """A Scaler after a TreeEnsembleRegressor cannot be typed: the refusal
    names the op without a lowering, not the Scaler."""
    model = ml_model([trees("x", "t"), scaler("t", "y", (0.5,), (2.0,))], T.FLOAT, [2, 3])
    with pytest.raises(UnsupportedOp, match="node 'trees' .*'TreeEnsembleRegressor' of domain"
                       ".*: a tree ensemble is piecewise constant"):
        reverse(model, inputs=["x"], outputs=["y"])


def test_zipmap_refused_with_the_export_option():
    """skl2onnx's default classifier export ends in a ZipMap (a sequence of
    maps): the refusal says how to export the probabilities as a tensor."""
    zipmap = h.make_node("ZipMap", ["y"], ["maps"], name="zip", domain=ML,
                         classlabels_int64s=[10, 11, 12])
    g = h.make_graph([classifier(3), zipmap], "ml",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("label", T.INT64, None),
                      h.make_value_info("maps", h.make_sequence_type_proto(
                          h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, []))))])
    with pytest.raises(UnsupportedOp, match="node 'zip' .*sequence of maps.*"
                       "options=\\{'zipmap': False\\}"):
        forward(h.make_model(g, opset_imports=OPSETS))


def test_pipeline_second_order():
    """Scaler -> MatMul -> Tanh -> LinearRegressor -> ArrayFeatureExtractor,
    the shape of a scikit-learn pipeline: both modes and forward(reverse(m))."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    nodes = [scaler(y="s"), h.make_node("MatMul", ["s", "w"], ["m"]),
             h.make_node("Tanh", ["m"], ["t"]), regressor("t", "r", targets=3, c=4),
             extractor("r", "y")]
    model = ml_model(nodes, T.FLOAT, ["n", 3], [w, indices([2, 0])])
    feeds = {"x": X * 0.5}
    assert_primal_matches_ort(model, feeds)
    check_derivatives(model, feeds)
    check_hessian(model, feeds)


def test_repeated_default_opset_entries_are_one_domain():
    """skl2onnx lists the default domain twice with the same version."""
    opsets = OPSETS + [h.make_opsetid("ai.onnx", 18)]
    model = ml_model([scaler()], T.FLOAT, [2, 3], opsets=opsets)
    check_derivatives(model, {"x": X})
    clash = ml_model([scaler()], T.FLOAT, [2, 3], opsets=OPSETS + [h.make_opsetid("", 17)])
    with pytest.raises(OnnxAdError, match="lists domain 'ai.onnx' twice"):
        forward(clash, inputs=["x"], outputs=["y"])


@pytest.mark.parametrize("node,inits,match", [
    (regressor(post_transform="SOFTMAX"), [], "node 'linear'.*post_transform SOFTMAX"),
    (h.make_node("LinearRegressor", ["x"], ["y"], name="linear", domain=ML, targets=2,
                 coefficients=[1.0, 2.0, 3.0]), [], "3 coefficients do not make 2 target rows"),
    (regressor(targets=2, c=3, intercepts=[1.0]), [], "1 intercepts for 2 targets"),
    (h.make_node("Scaler", ["x"], ["y"], name="scale", domain=ML, scale=[2.0]), [],
     "node 'scale'.*needs `offset` and `scale` of the same length"),
    (scaler(offset=(1.0,), scale=(1.0, 2.0, 3.0)), [], "of the same length"),
    (svm("RBF", kernel_params=[0.5, 1.0]), [], "kernel_params needs 0 or 3 values, not 2"),
    (extractor(), [indices([1, -1])], r"node 'pick'.*indices in \[0, features\)"),
    (extractor(), [indices([3])], r"indices in \[0, features\)"),
    (h.make_node("Scaler", ["x"], ["y"], domain=ML, offset=[1.0], scale=2.0), [],
     r"node \(Scaler, domain ai.onnx.ml\): attribute 'scale' must be FLOATS"),
    (h.make_node("LinearRegressor", ["x"], ["y"], domain=ML, coefficients=[1.0] * 6,
                 targets="2"), [], "attribute 'targets' must be INT"),
    (h.make_node("ArrayFeatureExtractor", ["x"], ["y"], name="pick", domain=ML), [],
     "node 'pick'.*takes 2 operand"),
    (h.make_node("Scaler", ["x"], [], domain=ML, offset=[1.0], scale=[2.0]), [],
     r"node \(Scaler, domain ai.onnx.ml\): takes 1 operand\(s\) and gives 1 result"),
    (svm("RBF", post_transform="PROBIT"), [], "node 'svm'.*post_transform PROBIT"),
    (svm("RBF", coefficients=[1.0]), [], "1 coefficients, 9 support vector entries"),
    (svm("CUBIC"), [], "unknown kernel_type CUBIC"),
    (h.make_node("Normalizer", ["x"], ["y"], name="norm", domain=ML, norm=b"\xffL2"), [],
     "node 'norm'.*attribute 'norm' is not valid UTF-8 text"),
    (trees("x", "y"), [], "'TreeEnsembleRegressor' of domain 'ai.onnx.ml' is not supported.*"
     "Scaler, LinearRegressor.*: a tree ensemble is piecewise constant"),
    (h.make_node("LabelEncoder", ["x"], ["y"], name="codes", domain=ML, keys_floats=[1.0, 2.0],
                 values_floats=[3.0]), [], "node 'codes'.*keys and values of the same"),
    (h.make_node("LabelEncoder", ["x"], ["y"], name="codes", domain=ML, keys_int64s=[1],
                 values_floats=[3.0]), [], "keys of element type INT64 for an input of FLOAT"),
    (h.make_node("OneHotEncoder", ["x"], ["y"], name="hot", domain=ML, cats_int64s=[1],
                 cats_strings=["a"]), [], "node 'hot'.*exactly one of cats_int64s and cats"),
    (h.make_node("OneHotEncoder", ["x"], ["y"], name="hot", domain=ML, cats_strings=["a"]), [],
     "string categories need a string input"),
    (h.make_node("Normalizer", ["x"], ["y"], name="norm", domain=ML, norm="L3"), [],
     "node 'norm'.*unknown norm L3"),
    (classifier(3, post_transform="PROBIT"), [], "node 'cls'.*post_transform PROBIT"),
    (classifier(3, labels=[0, 1]), [], "2 class labels for 3 classes"),
    (classifier(1, labels=["only"]), [], r"1 class labels for 1 classes \(one score takes 0 or 2\)"),
])
def test_refusals_name_the_node(node, inits, match):
    model = ml_model([node], T.FLOAT, [2, 3], inits)
    for transform in (forward, reverse):
        with pytest.raises(UnsupportedOp, match=match):
            transform(model, inputs=["x"], outputs=["y"])


@pytest.mark.parametrize("node,x_shape,match", [
    (scaler(), [2, 1, 3], "needs an input of rank 1 or 2, not 3"),
    (scaler(), [2, 2], "3 offsets and scales for 2 features"),
    (regressor(targets=2, c=3), [2, 2], "6 coefficients do not make 2 target rows of 2 features"),
    (svm("RBF"), [4], "do not fit n_supports 3 and 4 features"),
])
def test_feature_counts_checked(node, x_shape, match):
    """ONNX Runtime reads the features as the input's extent 1 (of a 2-D
    input) and runs some of these, past its attributes' ends."""
    with pytest.raises(UnsupportedOp, match=match):
        forward(ml_model([node], T.FLOAT, x_shape), inputs=["x"], outputs=["y"])


def test_in_a_subgraph_refused():
    """Only the main graph is lowered: an If branch's Scaler is refused."""
    branch = lambda name: h.make_graph([scaler(y=f"{name}_y")], name, [],
                                       [h.make_tensor_value_info(f"{name}_y", T.FLOAT, [2, 3])])
    cond = numpy_helper.from_array(np.array(True), "c")
    node = h.make_node("If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else"))
    model = ml_model([node], T.FLOAT, [2, 3], [cond])
    with pytest.raises(UnsupportedOp, match="'Scaler' of domain 'ai.onnx.ml'"):
        forward(model, inputs=["x"], outputs=["y"])


def _random_ml_node(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    """One ML node with attributes that fit, or miss by one, its input."""
    rank, c = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    shape = [int(rng.integers(1, 3)) for _ in range(rank - 1)] + [c]
    floats = lambda n: rng.standard_normal(n).round(2).tolist()
    size = lambda fit: int(rng.choice([fit, fit, fit + 1]))
    op = str(rng.choice(["Scaler", "LinearRegressor", "ArrayFeatureExtractor", "SVMRegressor",
                         "LinearClassifier", "Normalizer", "Binarizer", "LabelEncoder",
                         "OneHotEncoder", "FeatureVectorizer"]))
    attrs, inits, outputs = {}, [], ["y"]
    if op == "Scaler":
        n = int(rng.choice([1, c, c + 1]))
        attrs = {"offset": floats(n), "scale": floats(n)}
    elif op == "LinearRegressor":
        t = int(rng.integers(1, 3))
        attrs = {"coefficients": floats(size(t * c)), "targets": t, "intercepts": floats(t)}
    elif op == "ArrayFeatureExtractor":
        inits = [indices(rng.integers(-1, c + 1, size=int(rng.integers(1, 4))))]
    elif op == "SVMRegressor":
        s = int(rng.integers(0, 3))
        attrs = {"kernel_type": str(rng.choice(["LINEAR", "POLY", "RBF", "SIGMOID"])),
                 "kernel_params": [0.3, 0.5, 2.0], "coefficients": floats(s or size(c)),
                 "rho": floats(1), "n_supports": s}
        if s:
            attrs["support_vectors"] = floats(size(s * c))
    elif op == "LinearClassifier":
        e = int(rng.integers(1, 4))
        attrs = {"coefficients": floats(size(e * c)), "intercepts": floats(e),
                 "classlabels_ints": list(range(int(rng.choice([e, 2, 0])))),
                 "post_transform": str(rng.choice(["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"]))}
        outputs = ["label", "y"]
    elif op == "Binarizer":
        attrs = {"threshold": floats(1)[0]}
    elif op == "LabelEncoder":  # keys drawn from the input's own values, rounded as it is
        k = int(rng.integers(1, 4))
        attrs = {"keys_floats": floats(size(k)), "values_floats": floats(k)}
    elif op == "FeatureVectorizer":  # cut or zero-padded to a width near the input's
        attrs = {"inputdimensions": [int(rng.integers(1, c * max(1, rank - 1) + 2))]}
    elif op == "OneHotEncoder":  # the input truncated to int64: categories near it
        attrs = {"cats_int64s": rng.integers(-2, 3, size=int(rng.integers(1, 4))).tolist()}
    else:
        attrs = {"norm": str(rng.choice(["MAX", "L1", "L2"]))}
    attrs = {k: v for k, v in attrs.items() if v != []}
    node = h.make_node(op, ["x"] + [t.name for t in inits], outputs, domain=ML, **attrs)
    results = [h.make_tensor_value_info(o, T.INT64 if o == "label" else T.FLOAT, None)
               for o in outputs]
    g = h.make_graph([node], "ml", [h.make_tensor_value_info("x", T.FLOAT, shape)], results, inits)
    x = rng.standard_normal(shape).round(2).astype(np.float32)
    if op == "LabelEncoder":  # some entries hit a key
        keys = np.asarray(attrs["keys_floats"], np.float32)
        x.reshape(-1)[::2] = keys[rng.integers(0, keys.size, size=x.reshape(-1)[::2].size)]
    return h.make_model(g, opset_imports=OPSETS), x


def test_random_nodes_are_lowered_exactly_or_refused():
    """Each node is refused with an UnsupportedOp, or its derivative model
    recomputes every result of ONNX Runtime's kernel (which runs it)."""
    rng = np.random.default_rng(13)
    lowered = 0
    for _ in range(150):
        model, x = _random_ml_node(rng)
        try:
            fwd = forward(model, inputs=["x"], outputs=["y"], layout="onnx")
        except UnsupportedOp:
            continue
        want = run(model, {"x": x})
        got = run(fwd, {"x": x, "fwd_x": np.ones(x.shape + (1,), np.float32)})
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, equal_nan=True,
                                       err_msg=onnx.printer.to_text(model.graph))
        assert np.isfinite(got["fwd_y"]).all() or not np.isfinite(want["y"]).all()
        lowered += 1
    assert lowered >= 50


def test_feature_vectorizer_pipeline():
    """skl2onnx joins a pipeline's per-feature inputs with a
    FeatureVectorizer (here: cut to 1 of x's 2 columns, z padded from 1 to 2
    with zeros): FeatureVectorizer -> Scaler -> LinearRegressor, the primal
    as ONNX Runtime's kernels compute it, derivatives w.r.t. both inputs."""
    vec = h.make_node("FeatureVectorizer", ["x", "z"], ["v"], name="vec", domain=ML,
                      inputdimensions=[1, 2])
    g = h.make_graph([vec, scaler("v", "s", (0.5, -1.0, 2.0), (2.0, 3.0, 0.5)),
                      regressor("s", "y", targets=2, c=3)], "ml",
                     [h.make_tensor_value_info("x", T.FLOAT, ["n", 2]),
                      h.make_tensor_value_info("z", T.FLOAT, ["n", 1])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(g, opset_imports=OPSETS)
    feeds = {"x": X[:, :2].copy(), "z": X[:, 2:].copy()}
    want = run(model, feeds)["y"]
    fwd = forward(model, layout="onnx")
    assert not any(n.domain == ML for n in fwd.graph.node)
    seeds = {"fwd_x": np.zeros((2, 2, 1), np.float32), "fwd_z": np.zeros((2, 1, 1), np.float32)}
    np.testing.assert_array_equal(run(fwd, {**feeds, **seeds})["y"], want)
    check_derivatives(model, feeds)


@pytest.mark.parametrize("dims,types,match", [
    ([1], (T.FLOAT, T.FLOAT), "1 inputdimensions for 2 inputs"),
    ([1, 1], (T.FLOAT, T.DOUBLE), "needs inputs of one element type"),
])
def test_feature_vectorizer_refusals(dims, types, match):
    vec = h.make_node("FeatureVectorizer", ["x", "z"], ["y"], name="vec", domain=ML,
                      inputdimensions=dims)
    g = h.make_graph([vec], "ml", [h.make_tensor_value_info("x", types[0], [2, 1]),
                                   h.make_tensor_value_info("z", types[1], [2, 1])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(UnsupportedOp, match="node 'vec'.*" + match):
        forward(h.make_model(g, opset_imports=OPSETS), inputs=["x"], outputs=["y"])
