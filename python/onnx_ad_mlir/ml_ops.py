"""Lowers the `ai.onnx.ml` operators that have an exact default-domain form.

scikit-learn models exported by skl2onnx put a float32 StandardScaler in a
`Scaler`, a linear model in a `LinearRegressor`, a column selection in an
`ArrayFeatureExtractor`, an SVR in an `SVMRegressor`, a float32 classifier
in a `LinearClassifier` (and a `Normalizer`), a PowerTransformer's guards in
`Imputer`s; the dialect holds only the default ONNX domain.
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

ML_DOMAIN = "ai.onnx.ml"
_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE)


class _Graph:
    """The facts a rewrite reads (element types and ranks of values) and
    fresh value names."""

    def __init__(self, graph: onnx.GraphProto):
        self.types: dict[str, onnx.TypeProto] = {
            v.name: v.type for v in list(graph.input) + list(graph.value_info) +
            list(graph.output)}
        for t in graph.initializer:
            self.types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
        self.constants = {t.name: t for t in graph.initializer}
        for n in graph.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.attribute \
                    and n.attribute[0].name == "value":
                self.constants[n.output[0]] = n.attribute[0].t
        self.names = set(self.types) | {o for n in graph.node for o in n.output}
        self.names |= {i for n in graph.node for i in n.input}

    def elem_type(self, name: str) -> int:
        t = self.types.get(name)
        return t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else 0

    def rank(self, name: str) -> int | None:
        t = self.types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return len(t.tensor_type.shape.dim)

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.names:
            i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name


class _Emitter:
    """Default-domain nodes replacing one ML node, named after it."""

    def __init__(self, g: _Graph, node: onnx.NodeProto):
        self.g, self.node, self.nodes = g, node, []
        self.prefix = node.name or (node.output[0] if node.output else node.op_type)

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.g.fresh(f"{self.prefix}/{op_type}")
        self.nodes.append(helper.make_node(op_type, inputs, [out],
                                           name=self.g.fresh(f"{self.prefix}/{op_type}"), **attrs))
        return out

    def const(self, value: np.ndarray) -> str:
        return self.op("Constant", [], value=numpy_helper.from_array(value))


def unsupported(node: onnx.NodeProto) -> UnsupportedOp:
    """The refusal of a node of a domain other than the default one."""
    what = f"node '{node.name}' ({node.op_type})" if node.name else f"node {node.op_type}"
    also = f", and of {ML_DOMAIN} {', '.join(LOWERINGS)} in the main graph" \
        if node.domain == ML_DOMAIN else ""
    return UnsupportedOp(f"{what}: op '{node.op_type}' of domain '{node.domain}' is not "
                         f"supported (only the default ONNX domain is{also})")


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
                    "replaced_value_float": _A.FLOAT, "replaced_value_int64": _A.INT}
# operands, results
_ARITY = {"Scaler": (1, 1), "LinearRegressor": (1, 1), "ArrayFeatureExtractor": (2, 1),
          "SVMRegressor": (1, 1), "LinearClassifier": (1, 2), "Normalizer": (1, 1),
          "Imputer": (1, 1)}


def _attrs(node: onnx.NodeProto) -> dict:
    """The node's attributes (strings decoded), after checking its operand
    and result counts and the types of the attributes the lowering reads (a
    classifier's label result may be absent)."""
    operands, results = _ARITY[node.op_type]
    if len(node.input) != operands or not all(node.input) or \
            len(node.output) != results or not node.output[-1]:
        raise _refuse(node, f"takes {operands} operand(s) and gives {results} result(s)")
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


def _features(e: _Emitter) -> int | None:
    """The features of the op's [N, C] or [C] input: C if static (None if
    computed at run time); other ranks are refused (ONNX Runtime indexes
    the features as C of a 2-D input)."""
    x = e.node.input[0]
    rank = e.g.rank(x)
    if rank is None:
        raise _NotYet("needs the rank of its input")
    if rank not in (1, 2):
        raise _refuse(e.node, f"needs an input of rank 1 or 2, not {rank}")
    return _last_extent(e.g, x)


def _last_extent(g: _Graph, x: str) -> int | None:
    """The static extent of x's last axis (x of known rank >= 1), else None."""
    dim = g.types[x].tensor_type.shape.dim[-1]
    return dim.dim_value if dim.HasField("dim_value") else None


def _in_float(e: _Emitter, x: str) -> tuple[str, type]:
    """x in the type the lowering computes in: its own if float or double
    (ONNX Runtime's Scaler computes a double input in double; its
    LinearRegressor and SVMRegressor take float only), float for the
    integer inputs these ops accept."""
    elem = e.g.elem_type(x)
    if not elem:
        raise _NotYet("needs the element type of its input")
    if elem in _FLOAT_TYPES:
        return x, np.float64 if elem == TensorProto.DOUBLE else np.float32
    return e.op("Cast", [x], to=TensorProto.FLOAT), np.float32


def _as_rows(e: _Emitter, x: str) -> str:
    """x (the op's input, or its cast) as [N, C]: a 1-D input is one row."""
    if e.g.rank(e.node.input[0]) == 1:
        return e.op("Unsqueeze", [x, e.const(np.array([0], np.int64))])
    return x


def _as_float_output(e: _Emitter, value: str, dtype: type) -> None:
    """The op's output, which ONNX declares float whatever the input type."""
    if dtype is np.float32:
        e.op("Identity", [value], e.node.output[0])
    else:
        e.op("Cast", [value], e.node.output[0], to=TensorProto.FLOAT)


def _scaler(e: _Emitter) -> None:
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


def _linear_regressor(e: _Emitter) -> None:
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


def _array_feature_extractor(e: _Emitter) -> None:
    # the indices, flattened, select along the last axis; a 1-D X gives [1, k]
    _attrs(e.node)
    x, indices = e.node.input[0], e.node.input[1]
    rank = e.g.rank(x)
    if rank is None:
        raise _NotYet("needs the rank of its input")
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
        e.op("Unsqueeze", [y, e.const(np.array([0], np.int64))], e.node.output[0])
    else:
        e.op("Gather", [x, flat], e.node.output[0], axis=-1)


def _svm_regressor(e: _Emitter) -> None:
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
            diff = e.op("Sub", [e.op("Unsqueeze", [x, e.const(np.array([1], np.int64))]),
                                e.const(vectors)])
            squares = e.op("ReduceSum", [e.op("Mul", [diff, diff]),
                                         e.const(np.array([2], np.int64))], keepdims=0)
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


def _post_transform(e: _Emitter, a: dict, allowed: tuple[str, ...]) -> str:
    post = a.get("post_transform", "NONE")
    if post not in allowed:
        raise _refuse(e.node, f"post_transform {post} is not supported (only "
                      f"{', '.join(allowed)})")
    return post


def _linear_classifier(e: _Emitter) -> None:
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
    if e.g.elem_type(x) == 0:
        raise _NotYet("needs the element type of its input")
    if e.g.elem_type(x) != TensorProto.FLOAT:
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


def _normalizer(e: _Emitter) -> None:
    # each row over its norm: MAX (the signed maximum), L1 or L2; a row
    # whose norm is 0 is left as it is (ONNX Runtime's kernel)
    a = _attrs(e.node)
    norm = a.get("norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        raise _refuse(e.node, f"unknown norm {norm}")
    _features(e)
    x, dtype = _in_float(e, e.node.input[0])
    last = e.const(np.array([-1], np.int64))
    reduce = {"MAX": "ReduceMax", "L1": "ReduceL1", "L2": "ReduceSumSquare"}[norm]
    n = e.op(reduce, [x, last], keepdims=1)
    zero = e.op("Equal", [n, e.const(np.zeros(1, dtype))])
    n = e.op("Where", [zero, e.const(np.ones(1, dtype)), n])
    if norm == "L2":  # the root after the Where: ReduceL2's derivative is 0/0 at 0
        n = e.op("Sqrt", [n])
    _as_float_output(e, e.op("Div", [x, n]), dtype)


def _imputer(e: _Emitter) -> None:
    # entries equal to the replaced value (NaN: the NaNs) become the imputed
    # value of their column (or the one imputed value); a float input reads
    # the float attributes, an integer one the int64 ones
    a = _attrs(e.node)
    features = _features(e)
    x = e.node.input[0]
    elem = e.g.elem_type(x)
    if not elem:
        raise _NotYet("needs the element type of its input")
    floats = elem in _FLOAT_TYPES
    imputed = a.get("imputed_value_floats" if floats else "imputed_value_int64s", [])
    if len(imputed) == 0 or features is not None and len(imputed) not in (1, features):
        raise _refuse(e.node, f"{len(imputed)} imputed values for {features} features")
    dtype = {TensorProto.DOUBLE: np.float64, TensorProto.FLOAT: np.float32}.get(elem)
    if dtype is None:
        if elem not in (TensorProto.INT64, TensorProto.INT32):
            raise _refuse(e.node, f"input of element type {TensorProto.DataType.Name(elem)}")
        dtype = np.int64 if elem == TensorProto.INT64 else np.int32
    replaced = a.get("replaced_value_float", 0.0) if floats else a.get("replaced_value_int64", 0)
    if floats and np.isnan(replaced):
        mask = e.op("IsNaN", [x])
    else:
        mask = e.op("Equal", [x, e.const(np.asarray([replaced], dtype))])
    e.op("Where", [mask, e.const(np.asarray(imputed, dtype)), x], e.node.output[0])


# op -> (its rewrite, the default-domain form it takes: docs/COVERAGE.md)
LOWERINGS: dict[str, tuple[Callable[[_Emitter], None], str]] = {
    "Scaler": (_scaler, "Sub, Mul (float32 result)"),
    "LinearRegressor": (_linear_regressor, "MatMul, Add; post_transform NONE"),
    "ArrayFeatureExtractor": (_array_feature_extractor, "Gather on the last axis"),
    "SVMRegressor": (_svm_regressor, "kernels (LINEAR, POLY, RBF, SIGMOID) of MatMul, "
                     "Exp, Pow, Tanh; post_transform NONE"),
    "Normalizer": (_normalizer, "ReduceMax, ReduceL1 or ReduceSumSquare and Sqrt, Div"),
    "Imputer": (_imputer, "IsNaN or Equal, Where"),
    "LinearClassifier": (_linear_classifier, "MatMul, Add, then Sigmoid or Softmax (scores); "
                         "ArgMax, Gather (labels); post_transform NONE, LOGISTIC, SOFTMAX"),
}


def lower(model: onnx.ModelProto,
          infer: Callable[[onnx.ModelProto], onnx.ModelProto]) -> onnx.ModelProto | None:
    """A copy of `model` (inferred by `infer`) whose main-graph ML nodes
    with a default-domain form are replaced by it, or None when there are
    none. ONNX infers no type past most ML nodes: a node whose input is
    such a result waits for the next round's inference."""
    other = next((n for n in model.graph.node
                  if n.domain == ML_DOMAIN and n.op_type not in LOWERINGS), None)
    if other is not None:  # before the others wait on its untyped result
        raise unsupported(other)
    lowered = None
    while any(n.domain == ML_DOMAIN and n.op_type in LOWERINGS for n in model.graph.node):
        model = infer(_lower_ready(model, _Graph(model.graph)))
        lowered = model
    if lowered is not None and not _uses_ml(lowered.graph):
        kept = [o for o in lowered.opset_import if o.domain != ML_DOMAIN]
        del lowered.opset_import[:]
        lowered.opset_import.extend(kept)
    return lowered


class _NotYet(Exception):
    """An input's type or rank is not inferred yet."""


def _lower_ready(model: onnx.ModelProto, g: _Graph) -> onnx.ModelProto:
    """The model with the ML nodes whose inputs are typed lowered; when none
    is, the first one's refusal."""
    nodes, waiting, progressed = [], None, False
    for node in model.graph.node:
        if node.domain != ML_DOMAIN or node.op_type not in LOWERINGS:
            nodes.append(node)
            continue
        e = _Emitter(g, node)
        try:
            LOWERINGS[node.op_type][0](e)
        except _NotYet as reason:
            waiting = waiting or (node, str(reason))
            nodes.append(node)
            continue
        nodes.extend(e.nodes)
        progressed = True
    if not progressed:
        node, reason = waiting
        raise _refuse(node, f"{reason}, which shape inference does not give")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _uses_ml(graph: onnx.GraphProto) -> bool:
    for n in graph.node:
        if n.domain == ML_DOMAIN:
            return True
        for a in n.attribute:
            if any(_uses_ml(sub) for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH
                                             else a.graphs)):
                return True
    return False
