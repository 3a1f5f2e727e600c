"""Lowers ONNX Runtime's fused contrib operators to the default domain.

Models saved after ONNX Runtime's graph optimizations, or after its
transformer optimizer (`onnxruntime.transformers.optimizer`: BERT, GPT-2 and
ViT exports come back with Attention, EmbedLayerNormalization,
SkipLayerNormalization, Gelu, FastGelu), carry
fused operators of the `com.microsoft` domain, and one of the default domain
that ONNX itself does not define (SimplifiedLayerNormalization). Each is a
composition of standard operators: it becomes them (the standard fused op
where the model's opset has it: LayerNormalization from 17, Gelu from 20,
RMSNormalization from 23), so the derivative model runs on any runtime and
takes the standard ops' rules. Semantics and attribute defaults are ONNX
Runtime's (its operator schemas and CPU kernels); tests compare each
lowering with ONNX Runtime's kernel. Other `com.microsoft` operators (the
quantized ones, rotary embeddings, grouped-query attention) are refused
naming the node.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from .errors import UnsupportedOp
from .node_lowering import Emitter, Lowering, NotYet, lower_nodes

MS_DOMAIN = "com.microsoft"
_FLOATS = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
           TensorProto.FLOAT16: np.float16}
_NARROW = (TensorProto.FLOAT16, TensorProto.BFLOAT16)  # statistics in float32 (stash_type 1)


def _refuse(node: onnx.NodeProto, reason: str) -> UnsupportedOp:
    what = f"node '{node.name}' ({node.op_type}" if node.name else f"node ({node.op_type}"
    return UnsupportedOp(f"{what}, domain {node.domain or 'ai.onnx'}): {reason}")


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _input(node: onnx.NodeProto, i: int) -> str:
    """The i-th operand's name, '' when absent."""
    return node.input[i] if i < len(node.input) else ""


def _elem(e: Emitter, x: str) -> int:
    """x's element type; that of the float operand of the contrib node
    computing x, where ONNX infers no type (every lowered op keeps it), so
    that chains of them lower in one round."""
    elem, v = e.g.elem_type(x), x
    while not elem:
        node = e.g.producers.get(v)
        if node is None or _lowering(node) is None:
            raise NotYet("needs the element type of its input")
        v = node.input[_TYPED_BY.get(node.op_type, 0)]
        elem = e.g.elem_type(v)
    if elem not in _FLOATS and elem != TensorProto.BFLOAT16:
        raise _refuse(e.node, f"lowered for floating-point inputs, not "
                      f"{TensorProto.DataType.Name(elem)}")
    return elem


# the operand whose type a contrib op's float results take, where not the first
_TYPED_BY = {"EmbedLayerNormalization": 2}  # (word_embedding; the first is the ids)


def _scalar(e: Emitter, value: float, elem: int | None = None) -> str:
    """A constant of the node's element type (its first operand's, which
    every lowered op keeps), or of `elem`; bfloat16 through a float32 Cast."""
    elem = elem or _elem(e, e.node.input[0])
    if elem == TensorProto.BFLOAT16:
        return e.op("Cast", [e.const(np.asarray(value, np.float32))], to=elem)
    return e.const(np.asarray(value, _FLOATS[elem]))


def _outputs(e: Emitter, count: int) -> list[str]:
    """The node's result names, '' for those absent, padded to `count`."""
    names = list(e.node.output) + [""] * count
    return names[:count]


# ---- activations -----------------------------------------------------------------------

def _erf_gelu(e: Emitter, x: str, out: str) -> None:
    """0.5 x (1 + erf(x / sqrt 2)), the Gelu op from opset 20."""
    if e.g.opset >= 20:
        e.op("Gelu", [x], out)
        return
    half = e.op("Mul", [x, _scalar(e, 0.5)])
    erf = e.op("Erf", [e.op("Mul", [x, _scalar(e, 1 / np.sqrt(2.0))])])
    e.op("Mul", [half, e.op("Add", [erf, _scalar(e, 1.0)])], out)


def _gelu(e: Emitter) -> None:
    _erf_gelu(e, e.node.input[0], e.node.output[0])


def _bias_gelu(e: Emitter) -> None:
    a, b = e.node.input[:2]
    _erf_gelu(e, e.op("Add", [a, b]), e.node.output[0])


def _fast_gelu(e: Emitter) -> None:
    """0.5 y (1 + tanh(sqrt(2 / pi) (y + 0.044715 y^3))), y = X (+ bias)."""
    x, bias = e.node.input[0], _input(e.node, 1)
    y = e.op("Add", [x, bias]) if bias else x
    out = e.node.output[0]
    if e.g.opset >= 20:
        e.op("Gelu", [y], out, approximate="tanh")
        return
    cube = e.op("Mul", [e.op("Mul", [y, y]), y])
    inner = e.op("Add", [y, e.op("Mul", [cube, _scalar(e, 0.044715)])])
    t = e.op("Tanh", [e.op("Mul", [inner, _scalar(e, np.sqrt(2 / np.pi))])])
    half = e.op("Mul", [y, _scalar(e, 0.5)])
    e.op("Mul", [half, e.op("Add", [t, _scalar(e, 1.0)])], out)


def _quick_gelu(e: Emitter) -> None:
    """x sigmoid(alpha x)."""
    x = e.node.input[0]
    alpha = _attrs(e.node).get("alpha", 1.702)
    e.op("Mul", [x, e.op("Sigmoid", [e.op("Mul", [x, _scalar(e, alpha)])])],
         e.node.output[0])


def _activation(e: Emitter, x: str, name: str, params: list[float], out: str) -> None:
    """The activation ONNX Runtime's FusedConv/FusedGemm apply to their result."""
    if name in ("Relu", "Tanh", "Sigmoid"):
        e.op(name, [x], out)
    elif name == "LeakyRelu":
        e.op("LeakyRelu", [x], out, alpha=params[0] if params else 0.01)
    elif name == "HardSigmoid":
        alpha, beta = (params + [0.2, 0.5][len(params):])[:2]
        e.op("HardSigmoid", [x], out, alpha=alpha, beta=beta)
    elif name == "Clip" and len(params) == 2 and e.g.opset >= 11:
        e.op("Clip", [x, _scalar(e, params[0]), _scalar(e, params[1])], out)
    else:
        raise _refuse(e.node, f"activation '{name}' with parameters {params} is not lowered "
                      "(Relu, Tanh, Sigmoid, LeakyRelu, HardSigmoid, and Clip from opset 11 are)")


# ---- fused linear ops ----------------------------------------------------------------

def _fused_conv(e: Emitter) -> None:
    """activation(Conv(X, W, B) + Z)."""
    a = _attrs(e.node)
    name = a.pop("activation", b"").decode()
    params = list(a.pop("activation_params", []))
    x, w, b, z = (_input(e.node, i) for i in range(4))
    out = e.node.output[0]
    conv = e.op("Conv", [x, w] + ([b] if b else []), **a)
    if z:
        conv = e.op("Add", [conv, z])
    if name:
        _activation(e, conv, name, params, out)
    else:
        e.op("Identity", [conv], out)


def _fused_gemm(e: Emitter) -> None:
    """activation(Gemm(A, B, C))."""
    a = _attrs(e.node)
    name = a.pop("activation", b"").decode()
    params = []  # alpha, beta, gamma: the leading ones given
    for k in ("activation_alpha", "activation_beta", "activation_gamma"):
        if k not in a:
            break
        params.append(a.pop(k))
    for k in ("activation_alpha", "activation_beta", "activation_gamma"):
        a.pop(k, None)
    _elem(e, e.node.input[0])  # (FusedGemm also takes integers: refused, as its derivative)
    gemm = e.op("Gemm", [i for i in e.node.input if i], **a)
    if name:
        _activation(e, gemm, name, params, e.node.output[0])
    else:
        e.op("Identity", [gemm], e.node.output[0])


def _fused_matmul(e: Emitter) -> None:
    """alpha * op(A) @ op(B), op the Transpose ONNX Runtime fused away:
    trans swaps the last two axes; transBatch moves the first axis to
    second-to-last ([M, b.., K] -> [b.., M, K]; with trans, [K, b.., M])."""
    a = _attrs(e.node)
    operands = []
    for x, tag in zip(e.node.input[:2], "AB"):
        trans, batch = a.get(f"trans{tag}", 0), a.get(f"transBatch{tag}", 0)
        if not (trans or batch):
            operands.append(x)
            continue
        r = e.g.rank(x)
        if r is None:
            raise NotYet("needs the ranks of its operands")
        if batch and r < 3:
            raise _refuse(e.node, f"transBatch{tag} needs an operand of rank 3 or more")
        if batch:
            perm = list(range(1, r - 1)) + ([r - 1, 0] if trans else [0, r - 1])
        else:
            perm = list(range(r - 2)) + [r - 1, r - 2] if r >= 2 else [0]
        operands.append(e.op("Transpose", [x], perm=perm) if perm != list(range(r)) else x)
    alpha = a.get("alpha", 1.0)
    if alpha == 1.0:
        e.op("MatMul", operands, e.node.output[0])
    else:
        product = e.op("MatMul", operands)
        e.op("Mul", [product, _scalar(e, alpha)], e.node.output[0])


# ---- normalizations -------------------------------------------------------------------

def _widened(e: Emitter, v: str, wide: bool) -> str:
    return e.op("Cast", [v], to=TensorProto.FLOAT) if wide else v


def _skip_sum(e: Emitter, bias: str, summed: str, wide: bool) -> str:
    """input + skip (+ bias), in float32 for narrow types as ONNX Runtime
    sums them: the value normalized, also the op's last result."""
    s = e.op("Add", [_widened(e, v, wide) for v in e.node.input[:2]])
    if bias:
        s = e.op("Add", [s, _widened(e, bias, wide)])
    if summed:
        if wide:
            e.op("Cast", [s], summed, to=_elem(e, e.node.input[0]))
        else:
            e.op("Identity", [s], summed)
    return s


def _narrowed(e: Emitter, v: str, wide: bool, out: str) -> None:
    """The op's result `out`: v, cast back to the node's type when widened."""
    if wide:
        e.op("Cast", [v], out, to=_elem(e, e.node.input[0]))
    else:
        e.op("Identity", [v], out)


def _no_statistics(e: Emitter, mean: str, inv_std_var: str) -> None:
    if mean or inv_std_var:
        raise _refuse(e.node, "its mean and inv_std_var results (training only) are not lowered")


def _skip_layer_normalization(e: Emitter) -> None:
    """LayerNormalization over the last axis of input + skip (+ bias), in
    float32 for narrow types (as ONNX Runtime's kernel)."""
    node = e.node
    eps = _attrs(node).get("epsilon", 1e-12)
    out, mean, inv_std_var, summed = _outputs(e, 4)
    _no_statistics(e, mean, inv_std_var)
    wide = _elem(e, node.input[0]) in _NARROW
    gamma, beta, bias = node.input[2], _input(node, 3), _input(node, 4)
    s = _skip_sum(e, bias, summed, wide)
    normed = _layer_normalization(e, s, _widened(e, gamma, wide), beta and _widened(e, beta, wide),
                                  eps, TensorProto.FLOAT if wide else _elem(e, node.input[0]))
    _narrowed(e, normed, wide, out)


def _layer_normalization(e: Emitter, x: str, gamma: str, beta: str, eps: float,
                         elem: int) -> str:
    """LayerNormalization of x over its last axis, x, gamma and beta of type
    `elem` (beta '' when absent)."""
    if e.g.opset >= 17:
        return e.op("LayerNormalization", [x, gamma] + ([beta] if beta else []), axis=-1,
                    epsilon=eps)
    centred = e.op("Sub", [x, e.reduce("ReduceMean", x, -1, 1)])
    var = e.reduce("ReduceMean", e.op("Mul", [centred, centred]), -1, 1)
    std = e.op("Sqrt", [e.op("Add", [var, _scalar(e, eps, elem)])])
    normed = e.op("Mul", [e.op("Div", [centred, std]), gamma])
    return e.op("Add", [normed, beta]) if beta else normed


def _rms_normalization(e: Emitter, x: str, scale: str, axis: int, eps: float,
                       wide: bool) -> str:
    """x / sqrt(mean(x^2 over axis..) + eps) * scale, x (and scale) already
    float32 when `wide`."""
    elem = TensorProto.FLOAT if wide else _elem(e, e.node.input[0])
    if e.g.opset >= 23:
        return e.op("RMSNormalization", [x, scale], axis=axis, epsilon=eps, stash_type=elem)
    r = e.g.rank(e.node.input[0])
    if axis != -1 and r is None:
        raise NotYet("needs the rank of its input")
    axes = [-1] if axis == -1 else list(range(axis % r, r))
    square = e.op("Mul", [x, x])
    square_mean = e.op("ReduceMean", [square, e.const(np.asarray(axes, np.int64))],
                       keepdims=1) if e.g.opset >= 18 else \
        e.op("ReduceMean", [square], axes=axes, keepdims=1)
    std = e.op("Sqrt", [e.op("Add", [square_mean, _scalar(e, eps, elem)])])
    return e.op("Mul", [e.op("Div", [x, std]), scale])


def _skip_simplified_layer_normalization(e: Emitter) -> None:
    """RMS normalization over the last axis of input + skip (+ bias), in
    float32 for narrow types."""
    node = e.node
    eps = _attrs(node).get("epsilon", 1e-12)
    out, mean, inv_std_var, summed = _outputs(e, 4)
    _no_statistics(e, mean, inv_std_var)
    wide = _elem(e, node.input[0]) in _NARROW
    s = _skip_sum(e, _input(node, 3), summed, wide)
    normed = _rms_normalization(e, s, _widened(e, node.input[2], wide), -1, eps, wide)
    _narrowed(e, normed, wide, out)


def _simplified_layer_normalization(e: Emitter) -> None:
    """RMS normalization over axes axis.. (ONNX Runtime's, of the default
    domain), in float32 for narrow types unless stash_type says otherwise."""
    a = _attrs(e.node)
    out, inv_std_var = _outputs(e, 2)
    _no_statistics(e, "", inv_std_var)
    x, scale = e.node.input[:2]
    wide = _elem(e, x) in _NARROW and a.get("stash_type", 1) == TensorProto.FLOAT
    normed = _rms_normalization(e, _widened(e, x, wide), _widened(e, scale, wide),
                                a.get("axis", -1), a.get("epsilon", 1e-5), wide)
    _narrowed(e, normed, wide, out)


# ---- embeddings and attention ------------------------------------------------------------

def _extent(e: Emitter, x: str, axis: int) -> str:
    """x's extent along `axis`, an int64 scalar at run time."""
    return e.op("Gather", [e.op("Shape", [x]), e.const(np.asarray(axis, np.int64))])


def _positions(e: Emitter, x: str, axis: int) -> str:
    """0, 1, .. up to x's extent along `axis` (int64)."""
    return e.op("Range", [e.const(np.asarray(0, np.int64)), _extent(e, x, axis),
                          e.const(np.asarray(1, np.int64))])


def _embed_layer_normalization(e: Emitter) -> None:
    """BERT's embedding: the rows of the word, position and segment tables
    summed, then LayerNormalization over the hidden axis; the mask's count
    of ones per row as mask_index (zeros without a mask)."""
    node = e.node
    (ids, segment_ids, words, positions, segments, gamma, beta, mask,
     position_ids) = (_input(node, i) for i in range(9))
    out, mask_index, summed = _outputs(e, 3)
    if bool(segment_ids) != bool(segments):
        raise _refuse(node, "segment_ids and segment_embedding are given together or not at all")
    elem = _elem(e, words)
    if e.g.opset < 11 and not position_ids:
        raise _refuse(node, "positions without position_ids need Range (opset 11)")
    s = e.op("Gather", [words, ids])
    s = e.op("Add", [s, e.op("Gather", [positions, position_ids or _positions(e, ids, 1)])])
    if segment_ids:
        s = e.op("Add", [s, e.op("Gather", [segments, segment_ids])])
    if summed:
        e.op("Identity", [s], summed)
    eps = _attrs(node).get("epsilon", 1e-12)
    e.op("Identity", [_layer_normalization(e, s, gamma, beta, eps, elem)], out)
    if mask_index and mask:
        ones = e.op("Cast", [e.op("Equal", [mask, e.const(np.asarray(1, np.int32))])],
                    to=TensorProto.INT32)
        e.op("Identity", [e.reduce("ReduceSum", ones, 1, 0)], mask_index)
    elif mask_index:  # zeros, as ONNX Runtime's kernel gives
        e.op("ConstantOfShape", [e.unsqueeze(_extent(e, ids, 0), 0)], mask_index,
             value=helper.make_tensor("zero", TensorProto.INT32, [1], [0]))


_HEADS = [0, 2, 1, 3]  # [B, S, H, d] -> [B, H, S, d]
_KEYS = [0, 2, 3, 1]  # [B, T, H, d] -> [B, H, d, T]


def _heads(e: Emitter, x: str, heads: int, size: int, perm: list[int]) -> str:
    """x [B, S, size] split into `heads` heads of size / heads, transposed by perm."""
    split = e.op("Reshape", [x, e.const(np.asarray([0, 0, heads, size // heads], np.int64))])
    return e.op("Transpose", [split], perm=perm)


def _mask_form(e: Emitter, mask: str) -> int:
    """How many position vectors a 1-D mask_index holds per batch row: 1
    (ends: right padding), 2 (ends, then starts: left padding)."""
    m, b = (e.g.dims(v) for v in (mask, e.node.input[0]))
    if m is None or b is None or m[0] is None or b[0] is None:
        raise NotYet("needs the extents of its mask and query")
    if m[0] == b[0]:
        return 1
    if isinstance(m[0], int) and isinstance(b[0], int) and m[0] == 2 * b[0]:
        return 2
    raise _refuse(e.node, f"a 1-D mask of extent {m[0]} for a batch of {b[0]} is not lowered "
                  "(ends [batch] or ends and starts [2 * batch] are; [3 * batch + 2] is a "
                  "GPU-only form)")


def _mask_bias(e: Emitter, mask: str, query: str, key: str, fill: float,
               causal: bool) -> str:
    """What ONNX Runtime adds to the scaled scores for a mask (0 where a key
    is attended, mask_filter_value where it is masked) and for causality (the
    lowest float past each query's own position), broadcast to
    [B, 1, S, T]; '' when neither."""
    bias = ""
    if mask:
        r = e.g.rank(mask)
        if r is None:
            raise NotYet("needs the rank of its mask")
        if not e.g.elem_type(mask):
            raise NotYet("needs the element type of its mask")
        if e.g.elem_type(mask) != TensorProto.INT32:
            raise _refuse(e.node, "its mask is int32 (ONNX Runtime's kernels take no other)")
        if r in (2, 3):
            keep = e.op("Greater", [mask, e.const(np.asarray(0, np.int32))])
        elif r == 1:
            at = e.unsqueeze(_positions(e, key, 1), 0)  # [1, T]
            ends = e.op("Cast", [mask], to=TensorProto.INT64)
            if _mask_form(e, mask) == 1:
                keep = e.op("Less", [at, e.unsqueeze(ends, 1)])
            else:
                rows = e.op("Reshape", [ends, e.const(np.asarray([2, -1], np.int64))])
                ends, starts = (e.unsqueeze(e.op("Gather", [rows, e.const(np.asarray(
                    i, np.int64))]), 1) for i in (0, 1))
                keep = e.op("And", [e.op("Less", [at, ends]),
                                    e.op("Not", [e.op("Less", [at, starts])])])
        else:
            raise _refuse(e.node, f"a {r}-D mask is not lowered (1-D, 2-D and 3-D are; "
                          "ONNX Runtime's CPU kernels have no 4-D one)")
        bias = e.op("Where", [keep, _scalar(e, 0.0), _scalar(e, fill)])
        bias = e.unsqueeze(bias, 1)  # heads
        if r != 3:
            bias = e.unsqueeze(bias, 2)  # queries
    if causal:
        ahead = e.op("Greater", [e.unsqueeze(_positions(e, key, 1), 0),
                                 e.unsqueeze(_positions(e, query, 1), 1)])  # [S, T]
        lowest = _scalar(e, float(np.finfo(_FLOATS.get(_elem(e, e.node.input[0]), np.float32)).min))
        bias = e.op("Where", [ahead, lowest, bias or _scalar(e, 0.0)])
    return bias


def _attend(e: Emitter, q: str, k: str, v: str, sizes: list[int], heads: int,
            mask: str, bias: str) -> None:
    """softmax(scale Q K^T + mask + bias) V per head, heads merged again:
    the node's first result."""
    a = _attrs(e.node)
    if e.g.opset < 11 and (mask or a.get("unidirectional", 0)):
        raise _refuse(e.node, "its masks need Range (opset 11)")
    scale = a.get("scale", 0.0) or 1 / np.sqrt(sizes[0] // heads)  # 0: the default
    scores = e.op("MatMul", [_heads(e, q, heads, sizes[0], _HEADS),
                             _heads(e, k, heads, sizes[1], _KEYS)])
    scores = e.op("Mul", [scores, _scalar(e, scale)])
    masked = _mask_bias(e, mask, q, k, a.get("mask_filter_value", -10000.0),
                        bool(a.get("unidirectional", 0)))
    if masked:
        scores = e.op("Add", [scores, masked])
    if bias:
        scores = e.op("Add", [scores, bias])
    weights = e.op("Softmax", [scores], axis=3)
    context = e.op("MatMul", [weights, _heads(e, v, heads, sizes[2], _HEADS)])
    merged = e.op("Transpose", [context], perm=_HEADS)
    e.op("Reshape", [merged, e.const(np.asarray([0, 0, sizes[2]], np.int64))],
         e.node.output[0])


def _num_heads(e: Emitter, sizes: list[int]) -> int:
    heads = _attrs(e.node).get("num_heads", 0)
    if heads <= 0:
        raise _refuse(e.node, "num_heads is a positive number")
    if len(sizes) != 3 or sizes[0] != sizes[1] or any(s <= 0 or s % heads for s in sizes):
        raise _refuse(e.node, f"hidden sizes {sizes} are not those of Q, K and V: equal for Q "
                      f"and K, each a positive multiple of num_heads {heads}")
    return heads


def _attention(e: Emitter) -> None:
    """Self-attention of BERT and GPT-2 (ONNX Runtime's transformer
    optimizer): Q, K and V projected by one MatMul of the merged weights,
    then per head as `_attend`."""
    node = e.node
    a = _attrs(node)
    x, w, bias, mask, past, attn_bias, past_length = (_input(node, i) for i in range(7))
    if past or past_length or any(_outputs(e, 2)[1:]) or a.get("past_present_share_buffer"):
        raise _refuse(node, "past and present key/value states (decoding with a cache) are "
                      "not lowered")
    if a.get("do_rotary", 0):
        raise _refuse(node, "rotary position embedding (do_rotary) is not lowered")
    sizes = list(a.get("qkv_hidden_sizes", []))
    if not sizes:
        wd = e.g.dims(w)
        if wd is None or len(wd) != 2 or not isinstance(wd[1], int):
            raise NotYet("needs the extent of its weights' second axis")
        sizes = [wd[1] // 3] * 3 if wd[1] % 3 == 0 else [wd[1]]
    heads = _num_heads(e, sizes)
    _elem(e, x)
    proj = e.op("MatMul", [x, w])
    if bias:
        proj = e.op("Add", [proj, bias])
    q, k, v = e.split(proj, sizes, 2)
    _attend(e, q, k, v, sizes, heads, mask, attn_bias)


def _multi_head_attention(e: Emitter) -> None:
    """Attention over separate query, key and value [B, S|T, hidden] (ViT,
    Stable Diffusion, encoder-decoder cross attention), each biased by its
    part of bias, then per head as `_attend`."""
    node = e.node
    q, k, v, bias, mask, attn_bias = (_input(node, i) for i in range(6))
    if any(_input(node, i) for i in range(6, 10)) or any(_outputs(e, 4)[1:]):
        raise _refuse(node, "past and present key/value states, cache_indirection and the qk "
                      "result are not lowered")
    if not (k and v):
        raise _refuse(node, "packed QKV (a query without key and value) is not lowered")
    shapes = [e.g.dims(t) for t in (q, k, v)]
    if any(d is None for d in shapes):
        raise NotYet("needs the ranks of query, key and value")
    if any(len(d) != 3 for d in shapes):
        raise _refuse(node, "query, key and value of rank 3 are lowered, not packed or past "
                      f"forms (ranks {[len(d) for d in shapes]})")
    sizes = [d[2] for d in shapes]
    if not all(isinstance(s, int) for s in sizes):
        raise NotYet("needs the hidden extents of query, key and value")
    if _attrs(node).get("unidirectional", 0) and (shapes[0][1] is None or
                                                 shapes[0][1] != shapes[1][1]):
        # (ONNX Runtime's kernel masks the keys past each query's position
        # but the last query's, which attends to every key)
        raise _refuse(node, "unidirectional attention is lowered where query and key have "
                      f"one sequence extent, not {shapes[0][1]} and {shapes[1][1]}")
    heads = _num_heads(e, sizes)
    _elem(e, q)
    if bias:
        q, k, v = (e.op("Add", [t, b]) for t, b in zip((q, k, v), e.split(bias, sizes, 0)))
    _attend(e, q, k, v, sizes, heads, mask, attn_bias)


# op -> (its rewrite, the default-domain form it takes)
LOWERINGS: dict[str, tuple[Lowering, str]] = {
    "Gelu": (_gelu, "Gelu (opset 20), else Erf, Mul, Add"),
    "BiasGelu": (_bias_gelu, "Add, then as Gelu"),
    "FastGelu": (_fast_gelu, "Add of the bias, Gelu approximate='tanh' (opset 20), else Tanh, "
                 "Mul, Add"),
    "QuickGelu": (_quick_gelu, "Mul, Sigmoid"),
    "FusedMatMul": (_fused_matmul, "Transpose (trans, transBatch), MatMul, Mul by alpha"),
    "FusedGemm": (_fused_gemm, "Gemm, then its activation"),
    "FusedConv": (_fused_conv, "Conv, Add of Z, then its activation"),
    "EmbedLayerNormalization": (_embed_layer_normalization, "Gather, Add, LayerNormalization "
                                "(opset 17), else ReduceMean, Sub, Mul, Sqrt, Div; mask_index: "
                                "Equal, Cast, ReduceSum, or zeros"),
    "Attention": (_attention, "MatMul, Split, Reshape, Transpose, MatMul, Mul, Softmax; masks: "
                  "Where of Greater or Less against Range"),
    "MultiHeadAttention": (_multi_head_attention, "Add of the biases, then as Attention"),
    "SkipLayerNormalization": (_skip_layer_normalization, "Add, LayerNormalization (opset 17), "
                               "else ReduceMean, Sub, Mul, Sqrt, Div"),
    "SkipSimplifiedLayerNormalization": (_skip_simplified_layer_normalization,
                                         "Add, RMSNormalization (opset 23), else ReduceMean, "
                                         "Mul, Sqrt, Div"),
}
# ONNX Runtime's contrib op of the default domain, which ONNX does not define
DEFAULT_DOMAIN_LOWERINGS: dict[str, tuple[Lowering, str]] = {
    "SimplifiedLayerNormalization": (_simplified_layer_normalization,
                                     "RMSNormalization (opset 23), else ReduceMean, Mul, Sqrt, "
                                     "Div"),
}


def _lowering(node: onnx.NodeProto) -> Lowering | None:
    if node.domain == MS_DOMAIN and node.op_type in LOWERINGS:
        return LOWERINGS[node.op_type][0]
    if node.domain in ("", "ai.onnx") and node.op_type in DEFAULT_DOMAIN_LOWERINGS:
        return DEFAULT_DOMAIN_LOWERINGS[node.op_type][0]
    return None


def lower(model: onnx.ModelProto,
          infer: Callable[[onnx.ModelProto], onnx.ModelProto]) -> onnx.ModelProto | None:
    """A copy of `model` (inferred by `infer`) whose main-graph contrib
    nodes are replaced by their default-domain form, or None when there
    are none."""
    other = next((n for n in model.graph.node
                  if n.domain == MS_DOMAIN and n.op_type not in LOWERINGS), None)
    if other is not None:
        raise _refuse(other, f"op '{other.op_type}' of domain '{MS_DOMAIN}' is not supported "
                      f"(of {MS_DOMAIN}, {', '.join(LOWERINGS)} are lowered to the default "
                      "domain)")
    return lower_nodes(model, _lowering, infer, _refuse, MS_DOMAIN)
