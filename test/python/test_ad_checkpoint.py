"""Reverse mode with checkpointing (`reverse(m, checkpoint=k)`): Loop/Scan
store every k-th state and recompute in between. Same adjoints as the
default (period 1) mode, on Scan (T divisible by k or not), fori-like Loops
with scan outputs (constant and run-time trip counts), while-like Loops
with a data-dependent stop, nested loops, and the jax2onnx fixtures."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper as h

from adcheck import run
from onnx_ad_mlir.api import reverse
from test_ad_control_flow import CASES, D, I64, loop_model, model, scan_model, vi

HERE = os.path.dirname(os.path.abspath(__file__))


def while_model():
    """while sum(v) < 10 (at most M=50 times): v = 1.2 v + w sin(v); no scan outputs."""
    body = h.make_graph([h.make_node("Sin", ["v"], ["sv"], name="w_sin"),
                         h.make_node("Mul", ["sv", "w"], ["ws"], name="w_mul"),
                         h.make_node("Mul", ["v", "k12"], ["v12"], name="w_scale"),
                         h.make_node("Add", ["v12", "ws"], ["vn"], name="w_add"),
                         h.make_node("ReduceSum", ["vn"], ["ss"], keepdims=0, name="w_sum"),
                         h.make_node("Less", ["ss", "lim"], ["cn"], name="w_less")],
                        "body", [vi("i", I64, []), vi("cin", onnx.TensorProto.BOOL, []),
                                 vi("v", D, [2])],
                        [vi("cn", onnx.TensorProto.BOOL, []), vi("vn", D, [2])])
    nodes = [h.make_node("Constant", [], ["k12"], name="c_k12", value=h.make_tensor("k", D, [], [1.2])),
             h.make_node("Constant", [], ["lim"], name="c_lim", value=h.make_tensor("l", D, [], [10.0])),
             h.make_node("Constant", [], ["M"], name="c_M", value=h.make_tensor("m", I64, [], [50])),
             h.make_node("Loop", ["M", "", "v0"], ["vT"], body=body, name="loop")]
    return model(nodes, [("v0", D, [2]), ("w", D, [2])], [("vT", D, [2])])


def runtime_trip_model():
    """The fori-like loop_model with its trip count an input."""
    m = loop_model(M=7, stop=False)
    g = m.graph
    nodes = [n for n in g.node if n.name != "c_M"]
    del g.node[:]
    g.node.extend(nodes)
    g.input.append(vi("M", I64, []))
    return m


def while_opset11_model():
    """while_model at opset 11, where Min takes floats only: the segments'
    step count min(k, M - base) is written with Where (fuzz seed 267 case
    470: the checker rejected the reverse model)."""
    m = while_model()
    m.opset_import[0].version = 11
    return m


def scan_empty_steps_model():
    """A Scan over 4 steps of statically empty [2, 0] slices beside a
    non-empty state: its segments' [q, k] + S reshapes would need literal 0
    extents (invalid before allowzero), and there is nothing to store: left
    unsegmented (generated model seed 4538)."""
    body = h.make_graph([h.make_node("Mul", ["e", "xt"], ["en"], name="s_mul"),
                         h.make_node("Sin", ["h"], ["hn"], name="s_sin"),
                         h.make_node("Identity", ["en"], ["yo"], name="s_id")],
                        "body", [vi("h", D, [3]), vi("e", D, [2, 0]), vi("xt", D, [2, 0])],
                        [vi("hn", D, [3]), vi("en", D, [2, 0]), vi("yo", D, [2, 0])])
    return model([h.make_node("Scan", ["h0", "e0", "X"], ["hT", "eT", "Y"], body=body,
                              num_scan_inputs=1, name="scan")],
                 [("h0", D, [3]), ("e0", D, [2, 0]), ("X", D, [4, 2, 0])],
                 [("hT", D, [3]), ("eT", D, [2, 0]), ("Y", D, [4, 2, 0])], opset=14)


R = np.random.default_rng(5)
EXTRA = {
    "scan_empty_steps": (scan_empty_steps_model(), {"h0": R.standard_normal(3),
                                                    "e0": np.zeros((2, 0)),
                                                    "X": np.zeros((4, 2, 0))}),
    "scan_T13": (scan_model(T=13), {"h0": R.standard_normal((1, 3)),
                                    "X": R.standard_normal((13, 1, 3)),
                                    "W": R.standard_normal((3, 3)) * 0.5}),
    "fori_loop_outputs": (loop_model(M=11, stop=False), {"v0": np.array([0.3, 0.4]),
                                                          "w": np.array([0.5, -0.2])}),
    "while_no_outputs": (while_model(), {"v0": np.array([0.3, 0.4]), "w": np.array([0.5, -0.2])}),
    "runtime_trip": (runtime_trip_model(), {"v0": np.array([0.1, 0.2]),
                                            "w": np.array([0.3, -0.1]), "M": np.array(9)}),
    "while_opset11": (while_opset11_model(), {"v0": np.array([0.3, 0.4]),
                                              "w": np.array([0.5, -0.2])}),
}
ALL = {**{k: v for k, v in CASES.items() if k != "loop_zero_iterations"}, **EXTRA}


def _float_outputs(m):
    return [o.name for o in m.graph.output if o.type.tensor_type.elem_type == D]


def _adjoints(m, feeds, checkpoint, y=None):
    outs = _float_outputs(m)
    xs = [i.name for i in m.graph.input if i.type.tensor_type.elem_type == D]
    y = run(m, feeds) if y is None else y  # (bool Where: some exports do not run in ORT)
    rng = np.random.default_rng(0)
    seeds = {f"adj_{o}": rng.standard_normal(y[o].shape + (2,)) for o in outs}
    adj = reverse(m, inputs=xs, outputs=outs, layout="onnx", checkpoint=checkpoint)
    onnx.checker.check_model(adj, full_check=True)
    got = run(adj, {**feeds, **seeds})
    return adj, [got[o] for o in outs] + [got[f"adj_{x}"] for x in xs]


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("name", list(ALL))
def test_checkpointing_equals_default(name, k):
    m, feeds = ALL[name]
    _, want = _adjoints(m, feeds, 1)
    _, got = _adjoints(m, feeds, k)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def _count_loops(g) -> int:
    n = 0
    for node in g.node:
        n += node.op_type in ("Loop", "Scan")
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += _count_loops(a.g)
    return n


@pytest.mark.parametrize("name", ["scan_T13", "fori_loop_outputs", "while_no_outputs",
                                  "runtime_trip"])
def test_checkpointing_nests_the_loop(name):
    m, feeds = ALL[name]
    plain, _ = _adjoints(m, feeds, 1)
    nested, _ = _adjoints(m, feeds, 3)
    assert _count_loops(nested.graph) > _count_loops(plain.graph)


def test_checkpointing_stacks_nothing_over_all_steps():
    """With checkpointing, the per-step work stays in the loops: the passes
    that compute a step's map for all steps at once (hoist_maps: the input
    projection x_t U as one MatMul over the T steps) hold T steps' values,
    which undid the memory bound (bench/checkpointing.py's RNN, T = 2000:
    525 MiB at k = 45 against 72 MiB without them). Without checkpointing
    they run."""
    body = h.make_graph([h.make_node("Mul", ["h", "W"], ["hw"]),
                         h.make_node("MatMul", ["xt", "U"], ["xu"]),
                         h.make_node("Add", ["hw", "xu"], ["pre"]),
                         h.make_node("Tanh", ["pre"], ["hn"])],
                        "body", [vi("h", D, [1, 8]), vi("xt", D, [1, 4])], [vi("hn", D, [1, 8])])
    m = model([h.make_node("Scan", ["h0", "Xs"], ["hT"], body=body, num_scan_inputs=1)],
              [("h0", D, [1, 8]), ("Xs", D, [20, 1, 4]), ("W", D, [1, 8]), ("U", D, [4, 8])],
              [("hT", D, [1, 8])])
    top = lambda r: [n.op_type for n in r.graph.node]  # noqa: E731
    assert "MatMul" in top(reverse(m, outputs=["hT"], layout="onnx"))
    assert "MatMul" not in top(reverse(m, outputs=["hT"], layout="onnx", checkpoint=4))


@pytest.mark.parametrize("name", ["fori_euler", "while_stop", "diffrax_euler",
                                  "diffrax_tsit5_pid"])
def test_jax_fixture_checkpointed(name):
    """jax2onnx while loops pass trip count INT64_MAX (ceil(M/k) must not overflow)."""
    path = os.path.join(HERE, "..", "fixtures", "jax", name)
    m = onnx.load(path + ".onnx")
    data = dict(np.load(path + ".npz"))
    feeds = {x.name: data[f"in_{x.name}"] for x in m.graph.input}
    y = {o.name: data[f"out_{o.name}"] for o in m.graph.output}
    plain, want = _adjoints(m, feeds, 1, y)
    nested, got = _adjoints(m, feeds, 4, y)
    assert _count_loops(nested.graph) > _count_loops(plain.graph)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_bad_checkpoint_option():
    from onnx_ad_mlir.errors import OnnxAdError
    m, _ = CASES["scan_rnn"]
    with pytest.raises(OnnxAdError):
        reverse(m, checkpoint=0)
