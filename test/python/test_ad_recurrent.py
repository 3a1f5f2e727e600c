"""RNN, GRU and LSTM (rules/recurrent.py): hand-built models checked by adcheck.

Every float input (X, W, R, B, initial_h, initial_c) is differentiated, all
outputs are seeded. ONNX Runtime (1.32) has no float64 kernel for RNN, GRU or
LSTM, so everything is checked in float32 with adcheck's looser defaults.
It has no layout=1 kernels either: layout 1 is checked by running the
derivative models with each fused op rewritten to Transpose + layout 0 +
Transpose, against the derivatives of a layout-0 model with those Transposes.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from adcheck import check_derivatives, check_hessian, run
from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.errors import UnsupportedOp

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def make(kind, direction="forward", layout=0, bias=True, init=True, dtype=np.float32,
         T=4, B=2, I=3, H=3, seed=0, peepholes=False, **attrs):
    D = 2 if direction == "bidirectional" else 1
    G = GATES[kind]
    rng = np.random.default_rng(seed)
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    x_shape = [B, T, I] if layout else [T, B, I]
    s_shape = [B, D, H] if layout else [D, B, H]
    feeds = {"X": rng.standard_normal(x_shape), "W": 0.5 * rng.standard_normal([D, G * H, I]),
             "R": 0.5 * rng.standard_normal([D, G * H, H])}
    names = ["X", "W", "R", "", "", ""]
    if bias:
        feeds["B"] = 0.3 * rng.standard_normal([D, 2 * G * H])
        names[3] = "B"
    if init:
        feeds["H0"] = 0.5 * rng.standard_normal(s_shape)
        names[5] = "H0"
        if kind == "LSTM":
            feeds["C0"] = 0.5 * rng.standard_normal(s_shape)
            names.append("C0")
    if peepholes:
        feeds["P"] = 0.5 * rng.standard_normal([D, 3 * H])
        names += [""] * (7 - len(names)) + ["P"]
    while names[-1] == "":
        names.pop()
    feeds = {k: v.astype(dtype) for k, v in feeds.items()}
    outs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outs, direction=direction, hidden_size=H,
                            **({"layout": layout} if layout else {}), **attrs)
    y_shape = [B, T, D, H] if layout else [T, D, B, H]
    graph = helper.make_graph(
        [node], kind.lower(),
        [helper.make_tensor_value_info(k, elem, list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info("Y", elem, y_shape)] +
        [helper.make_tensor_value_info(o, elem, s_shape) for o in outs[1:]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, feeds


CASES = [
    (kind, direction, bias, init)
    for kind in ("RNN", "GRU", "LSTM")
    for direction in ("forward", "reverse", "bidirectional")
    for bias, init in ((True, True), (False, False), (True, False))
]


@pytest.mark.parametrize("kind,direction,bias,init", CASES)
def test_recurrent(kind, direction, bias, init):
    model, feeds = make(kind, direction, 0, bias, init)
    errors = check_derivatives(model, feeds)
    print(kind, direction, bias, init, errors)


def _as_layout0(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each layout=1 RNN/GRU/LSTM node becomes Transpose + layout 0 + Transpose."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = []
    for i, n in enumerate(model.graph.node):
        if n.op_type not in GATES or not any(a.name == "layout" and a.i for a in n.attribute):
            nodes.append(n)
            continue
        ins, outs = list(n.input), list(n.output)
        for j in (0, 5, 6):
            if j < len(ins) and ins[j]:
                nodes.append(helper.make_node("Transpose", [ins[j]], [f"l0_{i}_in{j}"],
                                              perm=[1, 0, 2]))
                ins[j] = f"l0_{i}_in{j}"
        new_outs = [f"l0_{i}_out{j}" if o else "" for j, o in enumerate(outs)]
        attrs = [a for a in n.attribute if a.name != "layout"]
        node = helper.make_node(n.op_type, ins, new_outs, name=n.name)
        node.attribute.extend(attrs)
        nodes.append(node)
        for j, o in enumerate(outs):
            if o:
                nodes.append(helper.make_node("Transpose", [new_outs[j]], [o],
                                              perm=[2, 0, 1, 3] if j == 0 else [1, 0, 2]))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_layout1(kind, direction):
    model, feeds = make(kind, direction, layout=1, seed=1)
    reference = _as_layout0(model)  # differentiated through its Transposes
    check_derivatives(reference, feeds)
    rng = np.random.default_rng(3)
    fwd, fwd_ref = (forward(m, layout="onnx") for m in (model, reference))
    seeds = {f"fwd_{k}": rng.standard_normal(v.shape + (2,)).astype(v.dtype)
             for k, v in feeds.items()}
    got, want = run(_as_layout0(fwd), {**feeds, **seeds}), run(fwd_ref, {**feeds, **seeds})
    ys = run(reference, feeds)
    adj_seeds = {f"adj_{k}": rng.standard_normal(v.shape + (2,)).astype(v.dtype)
                 for k, v in ys.items()}
    adj, adj_ref = (reverse(m, layout="onnx") for m in (model, reference))
    got.update(run(_as_layout0(adj), {**feeds, **adj_seeds}))
    want.update(run(adj_ref, {**feeds, **adj_seeds}))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(direction, lbr):
    model, feeds = make("GRU", direction, linear_before_reset=lbr)
    print(check_derivatives(model, feeds))


# Relu: seeds whose pre-activations stay away from the kink (finite differences)
@pytest.mark.parametrize("kind,acts,seed", [
    ("RNN", ["Relu"], 2), ("RNN", ["Sigmoid"], 0), ("GRU", ["Tanh", "Sigmoid"], 0),
    ("GRU", ["Sigmoid", "Relu"], 2), ("LSTM", ["Sigmoid", "Relu", "Sigmoid"], 0),
    ("GRU", ["Relu", "Tanh", "Sigmoid", "Tanh"], 5)])
def test_activations(kind, acts, seed):
    direction = "bidirectional" if len(acts) > {"RNN": 1, "GRU": 2, "LSTM": 3}[kind] else "forward"
    model, feeds = make(kind, direction, activations=acts, seed=seed)
    print(check_derivatives(model, feeds))


@pytest.mark.parametrize("kind,attrs", [
    ("RNN", {"activations": ["Softsign"]}),
    ("RNN", {"activations": ["Softplus"]}),
    ("RNN", {"activations": ["Elu"], "activation_alpha": [0.7]}),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [1.3],
             "activation_beta": [0.6]}),
    ("RNN", {"activations": ["Affine"], "activation_alpha": [0.6], "activation_beta": [0.1]}),
    ("GRU", {"activations": ["HardSigmoid", "Tanh"]}),
    ("GRU", {"activations": ["HardSigmoid", "LeakyRelu"], "activation_alpha": [0.3, 0.1],
             "activation_beta": [0.4]}),
    ("LSTM", {"activations": ["Sigmoid", "Softsign", "ScaledTanh", "HardSigmoid", "Tanh",
                              "Tanh"], "activation_alpha": [1.5, 0.25],
              "activation_beta": [0.8, 0.5]}),
])
def test_parameterized_activations(kind, attrs):
    """(Seed 1: no pre-activation within finite-difference reach of a kink.)"""
    direction = "bidirectional" if kind == "LSTM" else "forward"
    model, feeds = make(kind, direction, seed=1, **attrs)
    print(check_derivatives(model, feeds))


def test_only_some_inputs():
    """Weights only; initial state only (the tangent source tA is absent)."""
    model, feeds = make("GRU", "bidirectional", linear_before_reset=1)
    check_derivatives(model, feeds, inputs=["W", "R", "B"])
    check_derivatives(model, feeds, inputs=["H0"], outputs=["Y"])
    model, feeds = make("LSTM", "reverse")
    check_derivatives(model, feeds, inputs=["C0"])
    check_derivatives(model, feeds, inputs=["X"], outputs=["Y_c"])


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_without_y(kind):
    """Only the last state is an output: the fused op is rebuilt to also give Y."""
    model, feeds = make(kind, "bidirectional")
    node = model.graph.node[0]
    node.output[0] = ""
    del model.graph.output[0]
    check_derivatives(model, feeds)


@pytest.mark.parametrize("kind,attrs", [("RNN", {}), ("GRU", {"linear_before_reset": 1}),
                                         ("GRU", {"linear_before_reset": 0}), ("LSTM", {}),
                                         ("LSTM", {"peepholes": True})])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("as_input", [False, True])
def test_ragged_sequence_lens(kind, attrs, direction, as_input):
    """Sequences shorter than T: zeros past their length, Y_h at their last
    step (reverse direction: each sequence reversed within its length)."""
    model, feeds = make(kind, direction, T=4, B=3, **attrs)
    lens = np.asarray([4, 2, 3], np.int32)
    if as_input:
        model.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [3]))
        feeds = {**feeds, "lens": lens}
    else:
        model.graph.initializer.append(helper.make_tensor("lens", TensorProto.INT32, [3], lens))
    model.graph.node[0].input[4] = "lens"
    print(check_derivatives(model, feeds))


def test_ragged_hessian():
    model, feeds = make("GRU", "bidirectional", T=3, B=2, I=2, H=2, linear_before_reset=1)
    model.graph.initializer.append(helper.make_tensor("lens", TensorProto.INT32, [2], [3, 2]))
    model.graph.node[0].input[4] = "lens"
    print(check_hessian(model, feeds, output="Y"))


def test_constant_sequence_lens():
    model, feeds = make("RNN", "forward", T=4, B=2)
    node = model.graph.node[0]
    model.graph.initializer.append(helper.make_tensor("lens", TensorProto.INT32, [2], [4, 4]))
    node.input[4] = "lens"
    check_derivatives(model, feeds)


@pytest.mark.parametrize("kind,attrs", [("GRU", {"linear_before_reset": 0}),
                                         ("GRU", {"linear_before_reset": 1}), ("LSTM", {}),
                                         ("RNN", {}),
                                         ("LSTM", {"activations": ["Sigmoid", "Softsign",
                                                                   "Softplus", "Sigmoid",
                                                                   "ScaledTanh", "Tanh"],
                                                   "activation_alpha": [1.2],
                                                   "activation_beta": [0.7], "seed": 1})])
def test_hessian(kind, attrs):
    # (seed 1 above: Softsign's second derivative jumps at 0, keep away from it)
    model, feeds = make(kind, "bidirectional", T=3, B=2, I=2, H=2, **attrs)
    print(check_hessian(model, feeds, output="Y"))


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_closure_second_order(kind):
    """Every op the rules emit has rules: differentiate twice, all ways, and run."""
    model, feeds = make(kind, "bidirectional", T=3, B=2, I=2, H=2)
    o = {"layout": "onnx"}
    for m in (reverse(reverse(model, **o), **o), reverse(forward(model, **o), **o),
              forward(forward(model, **o), **o)):
        onnx.checker.check_model(m, full_check=True)
        ins = {i.name: (feeds[i.name] if i.name in feeds else np.ones(
            [d.dim_value or 2 for d in i.type.tensor_type.shape.dim], np.float32))
            for i in m.graph.input}  # 2 seeds where the seed count is symbolic
        run(m, ins)


@pytest.mark.parametrize("attrs,message", [
    ({"activations": ["Selu", "Tanh"]}, "activation Selu"),
    ({"activations": ["Sigmoid", "ScaledTanh"]}, "needs activation_alpha"),
    ({"activations": ["LeakyRelu", "Tanh"], "activation_alpha": [-0.5]}, "negative alpha"),
])
def test_refusals(attrs, message):
    model, _ = make("GRU", **attrs)
    with pytest.raises(UnsupportedOp, match=message):
        reverse(model, layout="onnx")


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("init", [True, False])
def test_lstm_peepholes(direction, init):
    model, feeds = make("LSTM", direction, init=init, peepholes=True)
    print(check_derivatives(model, feeds))


def test_lstm_peepholes_hessian():
    model, feeds = make("LSTM", "bidirectional", T=3, B=2, I=2, H=2, peepholes=True)
    print(check_hessian(model, feeds, output="Y"))


# clip thresholds and seeds where clipping is active (Y differs from the
# unclipped op) and no pre-activation sits within finite-difference reach of
# a threshold (the derivatives themselves match float64 differences anywhere)
@pytest.mark.parametrize("kind,attrs,clip,seed", [
    ("RNN", {}, 1.0, 0), ("GRU", {"linear_before_reset": 1}, 1.0, 1),
    ("GRU", {"linear_before_reset": 0}, 1.0, 2), ("LSTM", {}, 2.0, 4),
    ("LSTM", {"peepholes": True}, 1.5, 1)])
def test_clip(kind, attrs, clip, seed):
    model, feeds = make(kind, "bidirectional", clip=clip, seed=seed, **attrs)
    unclipped, _ = make(kind, "bidirectional", seed=seed, **attrs)
    assert np.abs(run(model, feeds)["Y"] - run(unclipped, feeds)["Y"]).max() > 1e-3
    print(check_derivatives(model, feeds))


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("peepholes", [False, True])
def test_lstm_input_forget(direction, peepholes):
    model, feeds = make("LSTM", direction, peepholes=peepholes, input_forget=1)
    print(check_derivatives(model, feeds))


def test_primal_unchanged_and_fused_op_kept():
    model, feeds = make("LSTM", "bidirectional")
    adj = reverse(model, layout="onnx")
    assert sum(n.op_type == "LSTM" for n in adj.graph.node) == 1
    ref = run(model, feeds)
    got = run(adj, {**feeds, **{f"adj_{k}": np.zeros(v.shape + (1,), np.float32)
                                for k, v in ref.items()}})
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_symbolic_batch_and_time(kind):
    """Batch and sequence length unknown until run time."""
    model, feeds = make(kind, "bidirectional", peepholes=kind == "LSTM")
    for v in list(model.graph.input) + list(model.graph.output):
        dims_ = v.type.tensor_type.shape.dim
        if v.name == "X":
            dims_[0].dim_param, dims_[1].dim_param = "T", "B"
        elif v.name == "Y":
            dims_[0].dim_param, dims_[2].dim_param = "T", "B"
        elif v.name in ("H0", "C0", "Y_h", "Y_c"):
            dims_[1].dim_param = "B"
    check_derivatives(model, feeds)


def test_unknown_input_width():
    """X's feature extent unknown (a stacked layer's input behind the
    exporter's Reshape, PyTorch's dynamo GRU): it is W's (was an internal
    error of the rule)."""
    model, feeds = make("GRU", "bidirectional")
    for d in model.graph.input[0].type.tensor_type.shape.dim:
        d.dim_param = f"X_{d.dim_value}"
    check_derivatives(model, feeds)


def _constant_r(model, feeds):
    """R (and W) as initializers: the step matrices come from a constant."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for name in ("W", "R"):
        model.graph.initializer.append(onnx.numpy_helper.from_array(feeds[name], name))
        model.graph.input.remove(next(v for v in model.graph.input if v.name == name))
    return model, {k: v for k, v in feeds.items() if k not in ("W", "R")}


def _body_defines_matmul_weights(m: onnx.ModelProto) -> bool:
    """Every MatMul in a Scan body multiplies by a matrix made in that body."""
    found = False
    for n in m.graph.node:
        if n.op_type != "Scan":
            continue
        body = next(a.g for a in n.attribute if a.name == "body")
        made = {o for x in body.node for o in x.output} | {i.name for i in body.initializer}
        for x in body.node:
            if x.op_type == "MatMul":
                found = True
                if x.input[1] not in made:
                    return False
    return found


@pytest.mark.parametrize("kind,attrs", [("RNN", {}), ("GRU", {}),
                                        ("GRU", {"linear_before_reset": 1}), ("LSTM", {})])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_constant_recurrent_weights(kind, attrs, direction):
    """A constant R; an LSTM's reverse Scans make their step matrix inside
    their bodies (ONNX Runtime folds and prepacks it there)."""
    model, feeds = _constant_r(*make(kind, direction, **attrs))
    check_derivatives(model, feeds)
    if kind == "LSTM" and direction != "bidirectional":
        assert _body_defines_matmul_weights(reverse(model, layout="onnx"))


def _stacked(kind, constant, T=12, B=2, I=3, H=4, seed=1, **attrs):
    """Two layers: X -> kind -> Squeeze(num_directions) -> kind -> Y, the
    weights graph inputs or (constant) initializers."""
    G = GATES[kind]
    rng = np.random.default_rng(seed)
    weights = {}
    for layer, inp in ((1, I), (2, H)):
        weights[f"W{layer}"] = 0.5 * rng.standard_normal([1, G * H, inp]).astype(np.float32)
        weights[f"R{layer}"] = 0.5 * rng.standard_normal([1, G * H, H]).astype(np.float32)
        weights[f"B{layer}"] = 0.3 * rng.standard_normal([1, 2 * G * H]).astype(np.float32)
    feeds = {"X": rng.standard_normal([T, B, I]).astype(np.float32)}
    nodes = [helper.make_node(kind, ["X", "W1", "R1", "B1"], ["Y1"], hidden_size=H, **attrs),
             helper.make_node("Squeeze", ["Y1", "axis1"], ["X2"]),
             helper.make_node(kind, ["X2", "W2", "R2", "B2"], ["Y"], hidden_size=H, **attrs)]
    inits = [onnx.numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("X", f32, [T, B, I])]
    if constant:
        inits += [onnx.numpy_helper.from_array(v, k) for k, v in weights.items()]
    else:
        feeds.update(weights)
        inputs += [helper.make_tensor_value_info(k, f32, list(v.shape)) for k, v in weights.items()]
    graph = helper.make_graph(nodes, "stacked", inputs,
                              [helper.make_tensor_value_info("Y", f32, [T, 1, B, H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, feeds


@pytest.mark.parametrize("kind,attrs", [("LSTM", {}), ("GRU", {}),
                                        ("GRU", {"linear_before_reset": 1})])
@pytest.mark.parametrize("constant", [False, True])
def test_stacked_layers_one_reverse_scan(kind, attrs, constant):
    """Layer 2's reverse Scan makes the adjoint of layer 1's output step by
    step and layer 1's reverse Scan reads it in the same order: merge_scans
    fuses the two (one Scan runs both reverse recurrences; layer 1's Scan
    takes its seed count from layer 2's state, not from its result). The
    LSTM's two cell-state Scans run one body on both layers stacked. Checked
    against central differences and the forward/reverse dot product."""
    model, feeds = _stacked(kind, constant, **attrs)
    check_derivatives(model, feeds)
    adj = reverse(model, layout="onnx")
    scans = [n.name for n in adj.graph.node if n.op_type == "Scan"]
    # LSTM: + the (merged) cell-state Scan; a GRU with linear_before_reset
    # carries a tiled state: layer 1 reads a Concat of the adjoint, not fused
    assert len(scans) == {"LSTM": 2, "GRU": 2 if attrs else 1}[kind], scans
    if kind == "LSTM":
        bodies = [next(a.g for a in n.attribute if a.name == "body")
                  for n in adj.graph.node if n.op_type == "Scan"]
        assert any([x.op_type for x in g.node] == ["Mul", "Add"] for g in bodies)


def _scan_bodies(m: onnx.ModelProto) -> list[tuple[int, onnx.GraphProto]]:
    """(state count, body) of each top-level Scan."""
    out = []
    for n in m.graph.node:
        if n.op_type == "Scan":
            m_in = next(a.i for a in n.attribute if a.name == "num_scan_inputs")
            out.append((len(n.input) - m_in, next(a.g for a in n.attribute if a.name == "body")))
    return out


@pytest.mark.parametrize("k", [2, 3])
def test_stacked_lstm_pipelined(k):
    """Constant weights, zero initial states: layer 1's reverse step runs one
    step behind layer 2's in one Scan (recurrent.pipelined_pair): two states
    [k, 1, B, 2H] carrying both layers side by side, both layers'
    elementwise ops once and one MatMul a step (was four states, three
    MatMuls). k seed directions against central differences and the
    forward/reverse dot product; the Hessian runs forward mode over the
    pipelined Scan."""
    H = 4
    model, feeds = _stacked("LSTM", True, H=H)
    adj = reverse(model, layout="onnx")
    bodies = _scan_bodies(adj)
    assert len(bodies) == 2, bodies  # + the cell-state Scan
    states, body = next(sb for sb in bodies if any(x.op_type == "MatMul" for x in sb[1].node))
    assert states == 2
    assert [x.op_type for x in body.node].count("MatMul") == 1
    assert [d.dim_value for d in body.input[0].type.tensor_type.shape.dim][-1] == 2 * H
    check_derivatives(model, feeds, k=k)
    check_hessian(model, feeds)


def test_stacked_lstm_large_static_batch_not_pipelined():
    """A batch known to exceed PIPELINE_MAX_BATCH keeps the sequential fused
    Scan (pipelining measured slower there: B = 16 1.01x, 32 1.05x)."""
    from onnx_ad_mlir.transforms.rules import recurrent
    model, feeds = _stacked("LSTM", True, T=4, B=recurrent.PIPELINE_MAX_BATCH + 1, H=4)
    adj = reverse(model, layout="onnx")
    states = [st for st, body in _scan_bodies(adj) if any(x.op_type == "MatMul" for x in body.node)]
    assert states == [4], states  # both layers' h and c adjoints, one Scan
    check_derivatives(model, feeds)


def test_stacked_lstm_pipelined_matches_sequential():
    """The pipelined Scan gives the sequential fused Scan's adjoint up to
    rounding (layer 1's adjoint of h is one sum over both matrices where it
    was two sums and an Add), here with k = 3 seeds."""
    from onnx_ad_mlir.transforms.rules import recurrent
    model, feeds = _stacked("LSTM", True, T=9, H=5, seed=3)
    rng = np.random.default_rng(7)
    adj = reverse(model, layout="onnx")
    saved = recurrent.pipelined_pair
    recurrent.pipelined_pair = lambda *a: None
    try:
        seq = reverse(model, layout="onnx")
    finally:
        recurrent.pipelined_pair = saved
    assert len(_scan_bodies(seq)[-1][1].input) != len(_scan_bodies(adj)[-1][1].input)
    seed_name = next(i.name for i in adj.graph.input if i.name not in feeds)
    shape = [d.dim_value for d in next(i for i in adj.graph.input
                                       if i.name == seed_name).type.tensor_type.shape.dim]
    feeds = dict(feeds, **{seed_name: rng.standard_normal(shape[:-1] + [3]).astype(np.float32)})
    a, s = run(adj, feeds), run(seq, feeds)
    for name in a:
        np.testing.assert_allclose(a[name], s[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
def test_without_hidden_size(op, gates):
    """ONNX leaves hidden_size optional (R's shape tells it), ONNX Runtime
    refuses the op without it (fuzz seed 244 case 1325, a GRU): the
    derivative models carry it, taken from R, and compute what those of
    the model with it compute, which check out."""
    rng = np.random.default_rng(3)
    weights = [onnx.numpy_helper.from_array(
        (rng.standard_normal((1, gates * 3, n)) * 0.5).astype(np.float32), name)
        for name, n in (("w", 2), ("r", 3))]

    def model(**attrs):
        g = helper.make_graph(
            [helper.make_node(op, ["x", "w", "r"], ["", "y"], **attrs)], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])], weights)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    x = rng.standard_normal((4, 2, 2)).astype(np.float32)
    check_derivatives(model(hidden_size=3), {"x": x})
    for fn, seed, out in ((forward, "fwd_x", "fwd_y"), (reverse, "adj_y", "adj_x")):
        got = fn(model(), layout="onnx")
        assert [a.i for n in got.graph.node if n.op_type == op
                for a in n.attribute if a.name == "hidden_size"] == [3]
        shape = x.shape if seed == "fwd_x" else (1, 2, 3)
        feeds = {"x": x, seed: rng.standard_normal(shape + (1,)).astype(np.float32)}
        np.testing.assert_allclose(run(got, feeds)[out],
                                   run(fn(model(hidden_size=3), layout="onnx"), feeds)[out],
                                   rtol=1e-6, atol=1e-7)
