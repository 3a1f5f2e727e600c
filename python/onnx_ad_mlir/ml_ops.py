"""Lowers the `ai.onnx.ml` operators that have an exact default-domain form.

scikit-learn models exported by skl2onnx put a float32 StandardScaler in a
`Scaler`, a linear model in a `LinearRegressor`, a column selection in an
`ArrayFeatureExtractor`, an SVR in an `SVMRegressor`, a float32 classifier
in a `LinearClassifier` (and a `Normalizer`), a PowerTransformer's guards in
`Imputer`s, a ColumnTransformer's categorical columns in `OneHotEncoder`s
and `LabelEncoder`s (ordinal and target encoders), a threshold in a
`Binarizer`, per-feature inputs joined in a `FeatureVectorizer`; the dialect
holds only the default ONNX domain.
Each such node of the main graph becomes the default-domain nodes that
compute what ONNX Runtime's kernel computes (types and shapes included), so
the derivative model runs on any runtime. Attributes outside that exact form
(a post transform, a coefficient count that does not match) are refused
here, naming the node, as is any other `ai.onnx.ml` operator of the main
graph, before the lowering starts (`unsupported`: the importer's message
for nodes of other domains, in subgraphs too). Runs on an inferred model:
the rewrites need input ranks and element types.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import UnsupportedOp
from .node_lowering import Emitter, GraphFacts, Lowering, NotYet, lower_nodes

ML_DOMAIN = "ai.onnx.ml"
_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE)
# the element types ONNX Runtime's numeric ML kernels take
_NUMERIC_TYPES = _FLOAT_TYPES + (TensorProto.INT64, TensorProto.INT32)


_PIECEWISE_CONSTANT = "a tree ensemble is piecewise constant: its derivative is 0 wherever " \
    "it has one"
# why the common ai.onnx.ml ops without a lowering have none, and what to do
_NO_LOWERING = {
    "ZipMap": "it turns the probabilities into a sequence of maps, which no derivative model "
              "can output; export the classifier with skl2onnx's options={'zipmap': False} "
              "to keep them a tensor",
    "TreeEnsembleRegressor": _PIECEWISE_CONSTANT,
    "TreeEnsembleClassifier": _PIECEWISE_CONSTANT,
    "TreeEnsemble": _PIECEWISE_CONSTANT,
}


def unsupported(node: onnx.NodeProto) -> UnsupportedOp:
    """The refusal of a node of a domain other than the default one."""
    what = f"node '{node.name}' ({node.op_type})" if node.name else f"node {node.op_type}"
    also = f", and of {ML_DOMAIN} {', '.join(LOWERINGS)} in the main graph" \
        if node.domain == ML_DOMAIN else ""
    why = f": {_NO_LOWERING[node.op_type]}" \
        if node.domain == ML_DOMAIN and node.op_type in _NO_LOWERING else ""
    return UnsupportedOp(f"{what}: op '{node.op_type}' of domain '{node.domain}' is not "
                         f"supported (only the default ONNX domain is{also}){why}")


def _refuse(node: onnx.NodeProto, reason: str) -> UnsupportedOp:
    what = f"node '{node.name}' ({node.op_type}" if node.name else f"node ({node.op_type}"
    return UnsupportedOp(f"{what}, domain {ML_DOMAIN}): {reason}")


_A = onnx.AttributeProto
# the attributes each lowering reads, with their ONNX types (others are ignored
# as ONNX Runtime ignores them)
_ATTRIBUTE_TYPES = {"offset": _A.FLOATS, "scale": _A.FLOATS, "coefficients": _A.FLOATS,
                    "intercepts": _A.FLOATS, "targets": _A.INT, "post_transform": _A.STRING,
                    "kernel_type": _A.STRING, "kernel_params": _A.FLOATS,
                    "support_vectors": _A.FLOATS, "rho": _A.FLOATS, "n_supports": _A.INT,
                    "one_class": _A.INT, "classlabels_ints": _A.INTS,
                    "classlabels_strings": _A.STRINGS, "multi_class": _A.INT, "norm": _A.STRING,
                    "imputed_value_floats": _A.FLOATS, "imputed_value_int64s": _A.INTS,
                    "replaced_value_float": _A.FLOAT, "replaced_value_int64": _A.INT,
                    "cats_int64s": _A.INTS, "cats_strings": _A.STRINGS, "zeros": _A.INT,
                    "threshold": _A.FLOAT, "classes_strings": _A.STRINGS,
                    "keys_floats": _A.FLOATS, "keys_int64s": _A.INTS, "keys_strings": _A.STRINGS,
                    "values_floats": _A.FLOATS, "values_int64s": _A.INTS,
                    "values_strings": _A.STRINGS, "default_float": _A.FLOAT,
                    "default_int64": _A.INT, "default_string": _A.STRING,
                    "keys_tensor": _A.TENSOR, "values_tensor": _A.TENSOR,
                    "default_tensor": _A.TENSOR, "inputdimensions": _A.INTS}
# operands, results
_ARITY = {"Scaler": (1, 1), "LinearRegressor": (1, 1), "ArrayFeatureExtractor": (2, 1),
          "SVMRegressor": (1, 1), "LinearClassifier": (1, 2), "Normalizer": (1, 1),
          "Imputer": (1, 1), "OneHotEncoder": (1, 1), "LabelEncoder": (1, 1),
          "Binarizer": (1, 1), "FeatureVectorizer": (None, 1)}


def _attrs(node: onnx.NodeProto) -> dict:
    """The node's attributes (strings decoded), after checking its operand
    and result counts and the types of the attributes the lowering reads (a
    classifier's label result may be absent)."""
    operands, results = _ARITY[node.op_type]  # (None: any number, at least one)
    if len(node.input) != (operands or len(node.input) or 1) or not all(node.input) or \
            len(node.output) != results or not node.output[-1]:
        raise _refuse(node, f"takes {operands or 'one or more'} operand(s) and gives "
                      f"{results} result(s)")
    found = {}
    for a in node.attribute:
        expected = _ATTRIBUTE_TYPES.get(a.name)
        if expected is not None and a.type != expected:
            raise _refuse(node, f"attribute '{a.name}' must be {_A.AttributeType.Name(expected)}")
        value = helper.get_attribute_value(a)
        try:
            if a.type == _A.STRING:
                value = value.decode()
            elif a.type == _A.STRINGS:
                value = [v.decode() for v in value]
        except UnicodeDecodeError:
            raise _refuse(node, f"attribute '{a.name}' is not valid UTF-8 text") from None
        found[a.name] = value
    return found


def _elem_type(e: Emitter, x: str) -> int:
    """x's element type; a lowering waits for inference to give it."""
    elem = e.g.elem_type(x)
    if not elem:
        raise NotYet("needs the element type of its input")
    return elem


def _features(e: Emitter) -> int | None:
    """The features of the op's [N, C] or [C] input: C if static (None if
    computed at run time); other ranks are refused (ONNX Runtime indexes
    the features as C of a 2-D input)."""
    x = e.node.input[0]
    rank = e.g.rank(x)
    if rank is None:
        raise NotYet("needs the rank of its input")
    if rank not in (1, 2):
        raise _refuse(e.node, f"needs an input of rank 1 or 2, not {rank}")
    return _last_extent(e.g, x)


def _last_extent(g: GraphFacts, x: str) -> int | None:
    """The static extent of x's last axis (x of known rank >= 1), else None."""
    dim = g.types[x].tensor_type.shape.dim[-1]
    return dim.dim_value if dim.HasField("dim_value") else None


def _in_float(e: Emitter, x: str) -> tuple[str, type]:
    """x in the type the lowering computes in: its own if float or double
    (ONNX Runtime's Scaler computes a double input in double; its
    LinearRegressor and SVMRegressor take float only), float for the
    integer inputs these ops accept."""
    elem = _elem_type(e, x)
    if elem in _FLOAT_TYPES:
        return x, np.float64 if elem == TensorProto.DOUBLE else np.float32
    return e.op("Cast", [x], to=TensorProto.FLOAT), np.float32


def _as_rows(e: Emitter, x: str) -> str:
    """x (the op's input, or its cast) as [N, C]: a 1-D input is one row."""
    if e.g.rank(e.node.input[0]) == 1:
        return e.unsqueeze(x, 0)
    return x


def _as_float_output(e: Emitter, value: str, dtype: type) -> None:
    """The op's output, which ONNX declares float whatever the input type."""
    if dtype is np.float32:
        e.op("Identity", [value], e.node.output[0])
    else:
        e.op("Cast", [value], e.node.output[0], to=TensorProto.FLOAT)


def _scaler(e: Emitter) -> None:
    # Y = (X - offset) * scale over the last axis (lengths 1 or the last
    # extent: ONNX Runtime refuses other pairs)
    a = _attrs(e.node)
    offset, scale = a.get("offset"), a.get("scale")
    if not offset or not scale or len(offset) != len(scale):
        raise _refuse(e.node, "needs `offset` and `scale` of the same length")
    features = _features(e)
    if features is not None and len(offset) not in (1, features):
        raise _refuse(e.node, f"{len(offset)} offsets and scales for {features} features")
    x, dtype = _in_float(e, e.node.input[0])
    y = e.op("Sub", [x, e.const(np.asarray(offset, np.float32).astype(dtype))])
    y = e.op("Mul", [y, e.const(np.asarray(scale, np.float32).astype(dtype))])
    _as_float_output(e, y, dtype)


def _linear_regressor(e: Emitter) -> None:
    # Y[N, targets] = X @ coefficients^T + intercepts; a 1-D X is one row
    a = _attrs(e.node)
    _post_transform(e, a, ("NONE",))
    features = _features(e)
    targets = int(a.get("targets", 1))
    coefficients = np.asarray(a.get("coefficients", []), np.float32)
    if targets < 1 or coefficients.size == 0 or coefficients.size % targets or \
            features is not None and coefficients.size != targets * features:
        raise _refuse(e.node, f"{coefficients.size} coefficients do not make {targets} "
                      "target rows" + (f" of {features} features" if features else ""))
    intercepts = np.asarray(a.get("intercepts", [0.0] * targets), np.float32)
    if intercepts.size != targets:
        raise _refuse(e.node, f"{intercepts.size} intercepts for {targets} targets")
    x, dtype = _in_float(e, e.node.input[0])
    x = _as_rows(e, x)
    weights = coefficients.reshape(targets, -1).T.astype(dtype)
    y = e.op("MatMul", [x, e.const(weights)])
    y = e.op("Add", [y, e.const(intercepts.astype(dtype))])
    _as_float_output(e, y, dtype)


def _array_feature_extractor(e: Emitter) -> None:
    # the indices, flattened, select along the last axis; a 1-D X gives [1, k]
    _attrs(e.node)
    x, indices = e.node.input[0], e.node.input[1]
    rank = e.g.rank(x)
    if rank is None:
        raise NotYet("needs the rank of its input")
    if rank < 1:
        raise _refuse(e.node, "needs an input of rank 1 or more")
    known = e.g.constants.get(indices)
    if known is not None and known.data_location != TensorProto.EXTERNAL:
        values = numpy_helper.to_array(known)
        end = _last_extent(e.g, x)
        if values.size == 0 or values.min() < 0 or end is not None and values.max() >= end:
            raise _refuse(e.node, "needs indices in [0, features) (ONNX Runtime refuses others)")
    flat = e.op("Reshape", [indices, e.const(np.array([-1], np.int64))])
    if rank == 1:
        y = e.op("Gather", [x, flat], axis=0)
        e.unsqueeze(y, 0, e.node.output[0])
    else:
        e.op("Gather", [x, flat], e.node.output[0], axis=-1)


def _svm_regressor(e: Emitter) -> None:
    # Y[N, 1] = sum_j coefficients[j] K(x, support_vector[j]) + rho, with
    # libsvm's kernels (kernel_params: gamma, coef0, degree); no support
    # vectors: a linear model with `coefficients` as its weights
    a = _attrs(e.node)
    _post_transform(e, a, ("NONE",))
    features = _features(e)
    kernel = a.get("kernel_type", "LINEAR")
    if kernel not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
        raise _refuse(e.node, f"unknown kernel_type {kernel}")
    params = list(a.get("kernel_params", []))
    if len(params) not in (0, 3):  # (gamma, coef0, degree), or all 0
        raise _refuse(e.node, f"kernel_params needs 0 or 3 values, not {len(params)}")
    gamma, coef0, degree = (np.float32(p) for p in params or [0.0] * 3)
    coefficients = np.asarray(a.get("coefficients", []), np.float32)
    rho = np.asarray(a.get("rho", [0.0]), np.float32)[:1]
    supports = int(a.get("n_supports", 0))
    vectors = np.asarray(a.get("support_vectors", []), np.float32)
    per_vector = vectors.size // supports if supports else coefficients.size
    if supports < 0 or coefficients.size == 0 or rho.size != 1 or \
            supports and (coefficients.size != supports or vectors.size % supports) or \
            features is not None and per_vector != features:
        raise _refuse(e.node, f"{coefficients.size} coefficients, {vectors.size} support "
                      f"vector entries and {rho.size} rho do not fit n_supports {supports}"
                      + (f" and {features} features" if features else ""))
    x, dtype = _in_float(e, e.node.input[0])
    x = _as_rows(e, x)
    if supports == 0:
        y = e.op("MatMul", [x, e.const(coefficients.reshape(-1, 1).astype(dtype))])
    else:
        vectors = vectors.reshape(supports, -1).astype(dtype)
        if kernel == "RBF":  # squared distances, as the kernel sums them
            diff = e.op("Sub", [e.unsqueeze(x, 1), e.const(vectors)])
            squares = e.reduce("ReduceSum", e.op("Mul", [diff, diff]), 2, 0)
            k = e.op("Exp", [e.op("Mul", [squares, e.const(np.asarray(-gamma, dtype))])])
        else:
            k = e.op("MatMul", [x, e.const(vectors.T.copy())])
            if kernel != "LINEAR":
                k = e.op("Add", [e.op("Mul", [k, e.const(np.asarray(gamma, dtype))]),
                                 e.const(np.asarray(coef0, dtype))])
                k = e.op("Pow", [k, e.const(np.asarray(degree, dtype))]) if kernel == "POLY" \
                    else e.op("Tanh", [k])
        y = e.op("MatMul", [k, e.const(coefficients.reshape(-1, 1).astype(dtype))])
    y = e.op("Add", [y, e.const(rho.astype(dtype))])
    if int(a.get("one_class", 0)):  # the sign: piecewise constant
        y = e.op("Where", [e.op("Greater", [y, e.const(np.zeros(1, dtype))]),
                           e.const(np.ones(1, dtype)), e.const(-np.ones(1, dtype))])
    _as_float_output(e, y, dtype)


def _post_transform(e: Emitter, a: dict, allowed: tuple[str, ...]) -> str:
    post = a.get("post_transform", "NONE")
    if post not in allowed:
        raise _refuse(e.node, f"post_transform {post} is not supported (only "
                      f"{', '.join(allowed)})")
    return post


def _linear_classifier(e: Emitter) -> None:
    # ONNX Runtime's kernel: scores = float(X) @ coefficients^T + intercepts,
    # one class per intercept; the label of the first best raw score (of a
    # single score: the second label if > 0); then the post transform.
    # A single score with two labels becomes [logistic(-s), logistic(s)]
    # under LOGISTIC, [1 - s, s] under the others; one without is left raw
    # (ONNX Runtime 1.32).
    a = _attrs(e.node)
    features = _features(e)
    classes = len(a.get("intercepts", []))
    coefficients = np.asarray(a.get("coefficients", []), np.float32)
    if classes == 0 or coefficients.size == 0 or coefficients.size % classes or \
            features is not None and coefficients.size != classes * features:
        raise _refuse(e.node, f"{coefficients.size} coefficients do not make {classes} class "
                      "rows (one per intercept)" + (f" of {features} features" if features else ""))
    strings = "classlabels_strings" in a
    labels = list(a.get("classlabels_strings" if strings else "classlabels_ints", []))
    if len(labels) not in ((classes,) if classes > 1 else (0, 2)):
        raise _refuse(e.node, f"{len(labels)} class labels for {classes} classes"
                      + (" (one score takes 0 or 2)" if classes == 1 else ""))
    post = _post_transform(e, a, ("NONE", "LOGISTIC", "SOFTMAX") if classes > 1 else
                           ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"))
    x = e.node.input[0]
    if _elem_type(e, x) != TensorProto.FLOAT:
        x = e.op("Cast", [x], to=TensorProto.FLOAT)
    x = _as_rows(e, x)
    weights = coefficients.reshape(classes, -1).T.copy()
    scores = e.op("Add", [e.op("MatMul", [x, e.const(weights)]),
                          e.const(np.asarray(a["intercepts"], np.float32))])
    label_out, scores_out = e.node.output
    if label_out:
        as_labels = (lambda values: np.array(values, dtype=object)) if strings \
            else (lambda values: np.asarray(values, np.int64))
        if classes > 1:
            best = e.op("ArgMax", [scores], axis=1, keepdims=0)
            e.op("Gather", [e.const(as_labels(labels)), best], label_out)
        else:
            two = labels if len(labels) == 2 else (["0", "1"] if strings else [0, 1])
            positive = e.op("Cast", [e.op("Greater", [scores, e.const(np.zeros(1, np.float32))])],
                            to=TensorProto.INT64)
            pick = e.op("Reshape", [positive, e.const(np.array([-1], np.int64))])
            e.op("Gather", [e.const(as_labels(two)), pick], label_out)
    if classes == 1:
        if len(labels) != 2:
            e.op("Identity", [scores], scores_out)
        elif post == "LOGISTIC":
            e.op("Concat", [e.op("Sigmoid", [e.op("Neg", [scores])]), e.op("Sigmoid", [scores])],
                 scores_out, axis=1)
        else:
            e.op("Concat", [e.op("Sub", [e.const(np.ones(1, np.float32)), scores]), scores],
                 scores_out, axis=1)
    elif post == "LOGISTIC":
        e.op("Sigmoid", [scores], scores_out)
    elif post == "SOFTMAX":
        e.op("Softmax", [scores], scores_out, axis=1)
    else:
        e.op("Identity", [scores], scores_out)


def _normalizer(e: Emitter) -> None:
    # each row over its norm: MAX (the signed maximum), L1 or L2; a row
    # whose norm is 0 is left as it is (ONNX Runtime's kernel)
    a = _attrs(e.node)
    norm = a.get("norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        raise _refuse(e.node, f"unknown norm {norm}")
    _features(e)
    _require_opset(e, 11, "rows of norm 0 are found by Equal on floats")
    x, dtype = _in_float(e, e.node.input[0])
    reduce = {"MAX": "ReduceMax", "L1": "ReduceL1", "L2": "ReduceSumSquare"}[norm]
    n = e.reduce(reduce, x, -1, 1)
    zero = e.op("Equal", [n, e.const(np.zeros(1, dtype))])
    n = e.op("Where", [zero, e.const(np.ones(1, dtype)), n])
    if norm == "L2":  # the root after the Where: ReduceL2's derivative is 0/0 at 0
        n = e.op("Sqrt", [n])
    _as_float_output(e, e.op("Div", [x, n]), dtype)


def _imputer(e: Emitter) -> None:
    # entries equal to the replaced value (NaN: the NaNs) become the imputed
    # value of their column (or the one imputed value); a float input reads
    # the float attributes, an integer one the int64 ones
    a = _attrs(e.node)
    features = _features(e)
    x = e.node.input[0]
    elem = _elem_type(e, x)
    floats = elem in _FLOAT_TYPES
    imputed = a.get("imputed_value_floats" if floats else "imputed_value_int64s", [])
    if len(imputed) == 0 or features is not None and len(imputed) not in (1, features):
        raise _refuse(e.node, f"{len(imputed)} imputed values for {features} features")
    if elem not in _NUMERIC_TYPES:
        raise _refuse(e.node, f"input of element type {TensorProto.DataType.Name(elem)}")
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    replaced = a.get("replaced_value_float", 0.0) if floats else a.get("replaced_value_int64", 0)
    if floats and np.isnan(replaced):
        _require_opset(e, 9, "IsNaN and Where")
        mask = e.op("IsNaN", [x])
    else:
        _require_opset(e, 11 if floats else 9, "Equal on floats and Where" if floats else "Where")
        mask = e.op("Equal", [x, e.const(np.asarray([replaced], dtype))])
    e.op("Where", [mask, e.const(np.asarray(imputed, dtype)), x], e.node.output[0])


def _require_opset(e: Emitter, version: int, why: str) -> None:
    if e.g.opset < version:
        raise _refuse(e.node, f"{why} (opset {version}); the model imports opset "
                      f"{e.g.opset}: re-export it at opset {version} or later")


def _one_hot_encoder(e: Emitter) -> None:
    # Y [*X.shape, C]: 1 where X equals the category (a float X truncated to
    # int64 first, as ONNX Runtime casts it); of repeated categories only the
    # last column matches (ONNX Runtime's map keeps the last index). An
    # unknown category gives a row of zeros even under zeros=0, where ONNX
    # Runtime stops with an error instead.
    a = _attrs(e.node)
    strings = "cats_strings" in a
    if strings == ("cats_int64s" in a):
        raise _refuse(e.node, "needs exactly one of cats_int64s and cats_strings")
    cats = list(a["cats_strings" if strings else "cats_int64s"])
    if not cats:
        raise _refuse(e.node, "has no categories")
    x = e.node.input[0]
    elem, rank = _elem_type(e, x), e.g.rank(x)
    if rank is None:
        raise NotYet("needs the rank of its input")
    if (elem == TensorProto.STRING) != strings:
        raise _refuse(e.node, "string categories need a string input, int64 ones a numeric "
                      "input (these never match)")
    if strings:
        _require_opset(e, 19, "string categories need Equal on strings")
    if not strings and elem != TensorProto.INT64:
        if elem not in _NUMERIC_TYPES:
            raise _refuse(e.node, f"input of element type {TensorProto.DataType.Name(elem)}")
        x = e.op("Cast", [x], to=TensorProto.INT64)
    values = np.array(cats, dtype=object) if strings else np.asarray(cats, np.int64)
    hit = e.op("Equal", [e.unsqueeze(x, rank), e.const(values)])
    last = np.array([c not in cats[i + 1:] for i, c in enumerate(cats)])
    if not last.all():
        hit = e.op("And", [hit, e.const(last)])
    e.op("Cast", [hit], e.node.output[0], to=TensorProto.FLOAT)


# the element types of the arrays a LabelEncoder's attributes give
_NP_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
            np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int16): TensorProto.INT16,
            np.dtype(object): TensorProto.STRING}


def _label_encoder_map(e: Emitter, a: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, values, default) of the mapping, whichever opset spelled it:
    `classes_strings` (opset 1: strings <-> their indices), `keys_*` and
    `values_*` (2), `*_tensor` (4). Defaults are ONNX Runtime's: -1, -0.0,
    "_Unused"."""
    def array(kind: str) -> np.ndarray | None:
        if f"{kind}_tensor" in a:
            v = numpy_helper.to_array(a[f"{kind}_tensor"]).reshape(-1)
            return v.astype(object) if v.dtype.kind in "SUO" else v
        for suffix, dtype in (("floats", np.float32), ("int64s", np.int64), ("strings", object)):
            if f"{kind}_{suffix}" in a:
                return np.asarray(a[f"{kind}_{suffix}"], dtype)
        return None

    if "classes_strings" in a:
        classes = np.asarray(a["classes_strings"], object)
        indices = np.arange(len(classes), dtype=np.int64)
        if e.g.elem_type(e.node.input[0]) == TensorProto.STRING:
            return classes, indices, np.asarray(a.get("default_int64", -1), np.int64)
        return indices, classes, np.asarray(a.get("default_string", "_Unused"), object)
    keys, values = array("keys"), array("values")
    if keys is None or values is None or len(keys) != len(values) or len(keys) == 0:
        raise _refuse(e.node, "needs keys and values of the same, non-zero length")
    if "default_tensor" in a:
        default = numpy_helper.to_array(a["default_tensor"]).reshape(-1)
        if default.size != 1:
            raise _refuse(e.node, "default_tensor must hold one value")
        default = default.astype(object) if default.dtype.kind in "SUO" else default
        return keys, values, default.astype(values.dtype)[0]
    if values.dtype == object:
        return keys, values, np.asarray(a.get("default_string", "_Unused"), object)
    if values.dtype.kind == "f":
        return keys, values, np.asarray(a.get("default_float", -0.0), values.dtype)
    return keys, values, np.asarray(a.get("default_int64", -1), values.dtype)


def _label_encoder(e: Emitter) -> None:
    # elementwise lookup: the value of the first key X equals (Equal: NaN
    # matches no key, -0.0 matches 0.0, as ONNX Runtime's map), else the
    # default. ArgMax over [matches..., 1] picks the first match, or the
    # appended default when none.
    a = _attrs(e.node)
    x = e.node.input[0]
    elem, rank = _elem_type(e, x), e.g.rank(x)
    if rank is None:
        raise NotYet("needs the rank of its input")
    keys, values, default = _label_encoder_map(e, a)
    key_elem = _NP_ELEM.get(keys.dtype, TensorProto.UNDEFINED)
    if key_elem != elem:
        name = TensorProto.DataType.Name
        raise _refuse(e.node, f"keys of element type {name(key_elem)} for an input of {name(elem)}")
    if elem == TensorProto.STRING:
        _require_opset(e, 19, "string keys need Equal on strings")
    _require_opset(e, 11, "the lookup needs Equal on floats and Pad with operands")
    hit = e.op("Cast", [e.op("Equal", [e.unsqueeze(x, rank), e.const(keys)])],
               to=TensorProto.INT32)
    pads = np.zeros(2 * (rank + 1), np.int64)
    pads[-1] = 1
    hit = e.op("Pad", [hit, e.const(pads), e.const(np.array(1, np.int32))])
    first = e.op("ArgMax", [hit], axis=-1, keepdims=0)
    table = np.concatenate([values, np.asarray(default, values.dtype).reshape(1)])
    e.op("Gather", [e.const(table), first], e.node.output[0], axis=0)


def _binarizer(e: Emitter) -> None:
    # 1 where X > threshold, else 0 (a NaN gives 0; ONNX Runtime stops with
    # an error there); a step: its derivative is 0 wherever it has one
    a = _attrs(e.node)
    x = e.node.input[0]
    elem = _elem_type(e, x)
    if elem not in _NUMERIC_TYPES:
        raise _refuse(e.node, f"input of element type {TensorProto.DataType.Name(elem)}")
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    threshold = float(np.float32(a.get("threshold", 0.0)))
    if elem not in _FLOAT_TYPES:  # x > t <=> x > floor(t) for integers
        _require_opset(e, 9, "Greater on integers")
        threshold = np.floor(threshold)
    above = e.op("Greater", [x, e.const(np.asarray(threshold, dtype))])
    e.op("Cast", [above], e.node.output[0], to=elem)


def _feature_vectorizer(e: Emitter) -> None:
    # the inputs as rows ([N, rest] flattened; a 1-D input is one row), cast
    # to float, each cut or zero-padded to its `inputdimensions` entry, side
    # by side (ONNX Runtime's kernel; it takes inputs of one element type)
    a = _attrs(e.node)
    widths = list(a.get("inputdimensions", []))
    inputs = list(e.node.input)
    if len(widths) != len(inputs) or any(w < 0 for w in widths):
        raise _refuse(e.node, f"{len(widths)} inputdimensions for {len(inputs)} inputs")
    elems = {e.g.elem_type(x) for x in inputs}
    ranks = [e.g.rank(x) for x in inputs]
    if 0 in elems or None in ranks:
        raise NotYet("needs the element types and ranks of its inputs")
    if len(elems) != 1 or elems - set(_NUMERIC_TYPES):
        raise _refuse(e.node, "needs inputs of one element type: float, double, int64 or int32")
    if len({r == 1 for r in ranks}) != 1 or 0 in ranks:
        raise _refuse(e.node, "needs inputs of rank 1 (one row each) or all of rank 2 or more")
    parts = []
    for name, rank, width in zip(inputs, ranks, widths):
        columns = _columns(e.g, name, rank)
        if columns is None:
            raise _refuse(e.node, f"input '{name}' needs static extents past its first axis "
                          "(its width against inputdimensions)")
        x = name if elems == {TensorProto.FLOAT} else e.op("Cast", [name], to=TensorProto.FLOAT)
        x = e.unsqueeze(x, 0) if rank == 1 else \
            e.op("Reshape", [x, e.const(np.array([0, -1], np.int64))]) if rank > 2 else x
        if columns != width:
            _require_opset(e, 11, "an input cut or padded to its width needs Slice and Pad "
                           "with operands")
        if columns > width:
            x = e.op("Slice", [x, e.const(np.array([0], np.int64)),
                               e.const(np.array([width], np.int64)),
                               e.const(np.array([1], np.int64))])
        elif columns < width:
            x = e.op("Pad", [x, e.const(np.array([0, 0, 0, width - columns], np.int64))])
        parts.append(x)
    e.op("Concat", parts, e.node.output[0], axis=1)


def _columns(g: GraphFacts, x: str, rank: int) -> int | None:
    """The width of x as rows: its extents past the first multiplied (all of
    them for a 1-D x), None when one is computed at run time."""
    dims = g.types[x].tensor_type.shape.dim
    extents = [d.dim_value if d.HasField("dim_value") else None
               for d in (dims if rank == 1 else dims[1:])]
    return None if None in extents else int(np.prod(extents, dtype=np.int64))


# op -> (its rewrite, the default-domain form it takes: docs/COVERAGE.md)
LOWERINGS: dict[str, tuple[Lowering, str]] = {
    "Scaler": (_scaler, "Sub, Mul (float32 result)"),
    "LinearRegressor": (_linear_regressor, "MatMul, Add; post_transform NONE"),
    "ArrayFeatureExtractor": (_array_feature_extractor, "Gather on the last axis"),
    "SVMRegressor": (_svm_regressor, "kernels (LINEAR, POLY, RBF, SIGMOID) of MatMul, "
                     "Exp, Pow, Tanh; post_transform NONE"),
    "Normalizer": (_normalizer, "ReduceMax, ReduceL1 or ReduceSumSquare and Sqrt, Div"),
    "Imputer": (_imputer, "IsNaN or Equal, Where"),
    "LabelEncoder": (_label_encoder, "Equal against the keys (strings: opset 19), Cast, Pad, "
                     "ArgMax, Gather of the values and the default"),
    "Binarizer": (_binarizer, "Greater, Cast (derivative 0)"),
    "FeatureVectorizer": (_feature_vectorizer, "Reshape to rows, Cast, Slice or Pad to each "
                          "input's width, Concat"),
    "OneHotEncoder": (_one_hot_encoder, "Equal against the categories (strings: opset 19), "
                      "Cast to float"),
    "LinearClassifier": (_linear_classifier, "MatMul, Add, then Sigmoid or Softmax (scores); "
                         "ArgMax, Gather (labels); post_transform NONE, LOGISTIC, SOFTMAX"),
}


def lower(model: onnx.ModelProto,
          infer: Callable[[onnx.ModelProto], onnx.ModelProto]) -> onnx.ModelProto | None:
    """A copy of `model` (inferred by `infer`) whose main-graph ML nodes
    with a default-domain form are replaced by it, or None when there are
    none."""
    other = next((n for n in model.graph.node
                  if n.domain == ML_DOMAIN and n.op_type not in LOWERINGS), None)
    if other is not None:  # before the others wait on its untyped result
        raise unsupported(other)
    return lower_nodes(model, _lowering, infer, _refuse, ML_DOMAIN)


def _lowering(node: onnx.NodeProto) -> Lowering | None:
    return LOWERINGS[node.op_type][0] if node.domain == ML_DOMAIN and \
        node.op_type in LOWERINGS else None
