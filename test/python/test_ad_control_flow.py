"""If, Scan and Loop: both modes and forward(reverse) against central finite
differences (adcheck), and against the derivatives of the unrolled model
(`api.unroll`, flattened by different code), on hand-built float64 models."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from adcheck import assert_unique_node_names, check_derivatives, check_hessian, run
from onnx_ad_mlir.api import forward, reverse, unroll

D, F, I64, B = TP.DOUBLE, TP.FLOAT, TP.INT64, TP.BOOL


def vi(name, t, shape):
    return h.make_tensor_value_info(name, t, shape)


def const(name, value, t=D):
    arr = np.asarray(value)
    return h.make_node("Constant", [], [name], name=f"c_{name}",
                       value=h.make_tensor(name, t, list(arr.shape), arr.ravel().tolist()))


def model(nodes, inputs, outputs, opset=18):
    g = h.make_graph(nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


# ---- models ------------------------------------------------------------------------------

def if_model(else_constant=False):
    """y = sin(x*w) if sum(x) > 0 else exp(x) (or a constant): both branches
    capture outer values; with a constant branch the tangent is absent there."""
    then = h.make_graph([h.make_node("Mul", ["x", "w"], ["a"], name="t_mul"),
                         h.make_node("Sin", ["a"], ["t_out"], name="t_sin")],
                        "then", [], [vi("t_out", D, [3])])
    if else_constant:
        els = h.make_graph([const("e_out", [1.0, 2.0, 3.0])], "else", [], [vi("e_out", D, [3])])
    else:
        els = h.make_graph([h.make_node("Exp", ["x"], ["e_out"], name="e_exp")], "else", [],
                           [vi("e_out", D, [3])])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"), const("zero", 0.0),
             h.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els, name="if")]
    return model(nodes, [("x", D, [3]), ("w", D, [3])], [("y", D, [3])])


def if_constant_condition():
    then = h.make_graph([h.make_node("Mul", ["x", "x"], ["a"], name="t_sq")], "then", [],
                        [vi("a", D, [3])])
    els = h.make_graph([h.make_node("Neg", ["x"], ["b"], name="e_neg")], "else", [],
                       [vi("b", D, [3])])
    nodes = [const("c", True, B),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els, name="if")]
    return model(nodes, [("x", D, [3])], [("y", D, [3])])


def rnn_body(prefix=""):
    """h' = tanh(h W + x_t), output h'; W is captured from the outer scope."""
    return h.make_graph([h.make_node("MatMul", ["h", "W"], ["hw"], name=prefix + "mm"),
                         h.make_node("Add", ["hw", "xt"], ["pre"], name=prefix + "add"),
                         h.make_node("Tanh", ["pre"], ["hn"], name=prefix + "tanh"),
                         h.make_node("Identity", ["hn"], ["yo"], name=prefix + "id")],
                        "body", [vi("h", D, [1, 3]), vi("xt", D, [1, 3])],
                        [vi("hn", D, [1, 3]), vi("yo", D, [1, 3])])


def scan_model(T=4, backwards=False):
    """An RNN cell over T steps with a captured weight; `backwards` scans axis
    1 in reverse and writes the outputs reversed along axis 1."""
    attrs = dict(num_scan_inputs=1)
    xshape, yshape = [T, 1, 3], [T, 1, 3]
    if backwards:
        attrs.update(scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1],
                     scan_output_directions=[1])
        xshape, yshape = [1, T, 3], [1, T, 3]
    nodes = [h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=rnn_body(), name="scan", **attrs)]
    if backwards:  # the body sees [1, 3] slices of [1, T, 3] along axis 1: [1, 3]
        pass
    return model(nodes, [("h0", D, [1, 3]), ("X", D, xshape), ("W", D, [3, 3])],
                 [("hT", D, [1, 3]), ("Y", D, yshape)])


def loop_model(M=20, stop=True):
    """while i < M and sum(v) < 10: v = 1.5 v + w sin(v); n += 1 (an int64
    counter carried beside v), v stacked as a scan output. With stop=False
    the condition stays true (a constant trip count, unrollable)."""
    cond = (h.make_node("Less", ["ss", "lim"], ["cn"], name="l_less") if stop
            else h.make_node("Identity", ["cin"], ["cn"], name="l_keep"))
    body = h.make_graph([h.make_node("Sin", ["v"], ["sv"], name="l_sin"),
                         h.make_node("Mul", ["sv", "w"], ["ws"], name="l_mul"),
                         h.make_node("Mul", ["v", "k15"], ["v15"], name="l_scale"),
                         h.make_node("Add", ["v15", "ws"], ["vn"], name="l_add"),
                         h.make_node("ReduceSum", ["vn"], ["ss"], keepdims=0, name="l_sum"),
                         cond,
                         h.make_node("Add", ["cnt", "one"], ["cntn"], name="l_count"),
                         h.make_node("Identity", ["vn"], ["so"], name="l_out")],
                        "body", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [2]),
                                 vi("cnt", I64, [])],
                        [vi("cn", B, []), vi("vn", D, [2]), vi("cntn", I64, []), vi("so", D, [2])])
    nodes = [const("k15", 1.5), const("lim", 10.0), const("one", 1, I64), const("n0", 0, I64),
             const("M", M, I64), const("t", True, B),
             h.make_node("Loop", ["M", "t", "v0", "n0"], ["vT", "n", "V"], body=body, name="loop")]
    return model(nodes, [("v0", D, [2]), ("w", D, [2])],
                 [("vT", D, [2]), ("n", I64, []), ("V", D, ["T", 2])])


def if_in_scan(T=3):
    """Scan whose body branches on the sign of x_t; the If captures W and the
    body's state h."""
    then = h.make_graph([h.make_node("MatMul", ["h", "W"], ["hw"], name="n_mm"),
                         h.make_node("Add", ["hw", "xt"], ["a1"], name="n_add1")], "then", [],
                        [vi("a1", D, [1, 3])])
    els = h.make_graph([h.make_node("Sin", ["h"], ["sh"], name="n_sin"),
                        h.make_node("Add", ["sh", "xt"], ["a2"], name="n_add2")], "else", [],
                       [vi("a2", D, [1, 3])])
    body = h.make_graph([h.make_node("ReduceSum", ["xt"], ["s"], keepdims=0, name="n_sum"),
                         h.make_node("Greater", ["s", "zero"], ["c"], name="n_gt"),
                         h.make_node("If", ["c"], ["hn0"], then_branch=then, else_branch=els,
                                     name="n_if"),
                         h.make_node("Tanh", ["hn0"], ["hn"], name="n_tanh"),
                         h.make_node("Identity", ["hn"], ["yo"], name="n_id")],
                        "body", [vi("h", D, [1, 3]), vi("xt", D, [1, 3])],
                        [vi("hn", D, [1, 3]), vi("yo", D, [1, 3])])
    nodes = [const("zero", 0.0),
             h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=body, num_scan_inputs=1,
                         name="scan")]
    return model(nodes, [("h0", D, [1, 3]), ("X", D, [T, 1, 3]), ("W", D, [3, 3])],
                 [("hT", D, [1, 3]), ("Y", D, [T, 1, 3])])


def scan_in_loop(M=3):
    """A Loop running an RNN Scan over X M times; per-iteration sums stacked."""
    sbody = h.make_graph([h.make_node("MatMul", ["hh", "W"], ["hw"], name="s_mm"),
                          h.make_node("Add", ["hw", "xt"], ["pre"], name="s_add"),
                          h.make_node("Tanh", ["pre"], ["hn"], name="s_tanh")],
                         "sbody", [vi("hh", D, [1, 3]), vi("xt", D, [1, 3])], [vi("hn", D, [1, 3])])
    lbody = h.make_graph([h.make_node("Scan", ["v", "X"], ["vn"], body=sbody, num_scan_inputs=1,
                                      name="l_scan"),
                          h.make_node("Identity", ["cin"], ["cout"], name="l_cond"),
                          h.make_node("ReduceSum", ["vn"], ["ys"], keepdims=0, name="l_sum")],
                         "lbody", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [1, 3])],
                         [vi("cout", B, []), vi("vn", D, [1, 3]), vi("ys", D, [])])
    nodes = [const("M", M, I64), const("t", True, B),
             h.make_node("Loop", ["M", "t", "v0"], ["vT", "YS"], body=lbody, name="loop")]
    return model(nodes, [("v0", D, [1, 3]), ("X", D, [2, 1, 3]), ("W", D, [3, 3])],
                 [("vT", D, [1, 3]), ("YS", D, [M])])


def loop_in_scan(T=3, M=2):
    """A Scan over X whose step runs M fixed steps h <- tanh(h W + x_t) in a
    Loop (a Loop inside a Scan: rewriting the Scan clones its body, so
    unroll and checkpointing must rewrite the Loop first)."""
    lbody = h.make_graph([h.make_node("MatMul", ["v", "W"], ["vw"], name="l_mm"),
                          h.make_node("Add", ["vw", "xt"], ["pre"], name="l_add"),
                          h.make_node("Tanh", ["pre"], ["vn"], name="l_tanh"),
                          h.make_node("Identity", ["cin"], ["cout"], name="l_cond")],
                         "lbody", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [1, 3])],
                         [vi("cout", B, []), vi("vn", D, [1, 3])])
    sbody = h.make_graph([const("M", M, I64), const("t", True, B),
                          h.make_node("Loop", ["M", "t", "hh"], ["hn"], body=lbody, name="s_loop"),
                          h.make_node("Identity", ["hn"], ["yo"], name="s_id")],
                         "sbody", [vi("hh", D, [1, 3]), vi("xt", D, [1, 3])],
                         [vi("hn", D, [1, 3]), vi("yo", D, [1, 3])])
    nodes = [h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=sbody, num_scan_inputs=1,
                         name="scan")]
    return model(nodes, [("h0", D, [1, 3]), ("X", D, [T, 1, 3]), ("W", D, [3, 3])],
                 [("hT", D, [1, 3]), ("Y", D, [T, 1, 3])])


def loop_in_if():
    """If(sum(x) > 0) runs a data-dependent Loop, else a plain expression."""
    lbody = h.make_graph([h.make_node("Mul", ["v", "w"], ["vw"], name="li_mul"),
                          h.make_node("Sin", ["vw"], ["vn"], name="li_sin"),
                          h.make_node("ReduceSum", ["vn"], ["ls"], keepdims=0, name="li_sum"),
                          h.make_node("Less", ["ls", "lim"], ["cn"], name="li_less")],
                         "lbody", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [3])],
                         [vi("cn", B, []), vi("vn", D, [3])])
    then = h.make_graph([h.make_node("Loop", ["M", "", "x"], ["lv"], body=lbody, name="li_loop")],
                        "then", [], [vi("lv", D, [3])])
    els = h.make_graph([h.make_node("Mul", ["x", "w"], ["e"], name="li_else")], "else", [],
                       [vi("e", D, [3])])
    nodes = [const("M", 4, I64), const("lim", 2.5), const("zero", 0.0),
             h.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="li_top_sum"),
             h.make_node("Greater", ["s", "zero"], ["c"], name="li_gt"),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els, name="li_if")]
    return model(nodes, [("x", D, [3]), ("w", D, [3])], [("y", D, [3])])


def loop_rk2(M=3):
    """M midpoint (RK2) steps of dv/dt = tanh(v W1) W2 in a Loop with a
    constant trip count: a neural ODE whose reverse reads the stacked tanh
    values instead of recomputing the step's MatMuls."""
    f = lambda src, k: [h.make_node("MatMul", [src, "W1"], [f"{k}a"], name=f"rk_{k}mm1"),
                        h.make_node("Tanh", [f"{k}a"], [f"{k}t"], name=f"rk_{k}tanh"),
                        h.make_node("MatMul", [f"{k}t", "W2"], [k], name=f"rk_{k}mm2")]
    body = h.make_graph(f("v", "k1") + [
        h.make_node("Mul", ["k1", "half"], ["s1"], name="rk_half"),
        h.make_node("Add", ["v", "s1"], ["vm"], name="rk_mid")] + f("vm", "k2") + [
        h.make_node("Mul", ["k2", "dt"], ["s2"], name="rk_full"),
        h.make_node("Add", ["v", "s2"], ["vn"], name="rk_step"),
        h.make_node("Identity", ["cin"], ["cout"], name="rk_cond")],
        "rk2", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [1, 3])],
        [vi("cout", B, []), vi("vn", D, [1, 3])])
    nodes = [const("M", M, I64), const("t", True, B), const("half", 0.15), const("dt", 0.3),
             h.make_node("Loop", ["M", "t", "v0"], ["vT"], body=body, name="rk_loop")]
    return model(nodes, [("v0", D, [1, 3]), ("W1", D, [3, 4]), ("W2", D, [4, 3])],
                 [("vT", D, [1, 3])])


def scan_mlp_cell(T=4):
    """h' = h + tanh(h W1 + x_t) W2 over T steps, h' stacked: the tanh is no
    scan output, the reverse reads it from a stack the primal adds."""
    body = h.make_graph([h.make_node("MatMul", ["h", "W1"], ["a"], name="c_mm1"),
                         h.make_node("Add", ["a", "xt"], ["p"], name="c_add"),
                         h.make_node("Tanh", ["p"], ["t"], name="c_tanh"),
                         h.make_node("MatMul", ["t", "W2"], ["d"], name="c_mm2"),
                         h.make_node("Add", ["h", "d"], ["hn"], name="c_res"),
                         h.make_node("Identity", ["hn"], ["yo"], name="c_id")],
                        "cell", [vi("h", D, [1, 3]), vi("xt", D, [1, 3])],
                        [vi("hn", D, [1, 3]), vi("yo", D, [1, 3])])
    nodes = [h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=body, num_scan_inputs=1,
                         name="c_scan")]
    return model(nodes, [("h0", D, [1, 3]), ("X", D, [T, 1, 3]), ("W1", D, [3, 3]),
                         ("W2", D, [3, 3])], [("hT", D, [1, 3]), ("Y", D, [T, 1, 3])])


def loop_growing_slice(M=4):
    """A step whose tanh acts on the first i+1 columns of v W (its width
    changes every iteration): that value cannot be stacked, the reverse
    recomputes it."""
    body = h.make_graph([h.make_node("MatMul", ["v", "W"], ["a"], name="g_mm"),
                         h.make_node("Add", ["i", "one"], ["i1"], name="g_inc"),
                         h.make_node("Unsqueeze", ["i1", "ax0"], ["end"], name="g_end"),
                         h.make_node("Slice", ["a", "zero1", "end", "ax1"], ["s"], name="g_slice"),
                         h.make_node("Tanh", ["s"], ["ts"], name="g_tanh"),
                         h.make_node("ReduceSum", ["ts", "ax1"], ["r"], keepdims=1, name="g_sum"),
                         h.make_node("Mul", ["v", "r"], ["vr"], name="g_mul"),
                         h.make_node("Add", ["v", "vr"], ["vn"], name="g_add"),
                         h.make_node("Identity", ["cin"], ["cout"], name="g_cond")],
                        "grow", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [1, 4])],
                        [vi("cout", B, []), vi("vn", D, [1, 4])])
    nodes = [const("M", M, I64), const("t", True, B), const("one", 1, I64),
             const("ax0", [0], I64), const("ax1", [1], I64), const("zero1", [0], I64),
             h.make_node("Loop", ["M", "t", "v0"], ["vT"], body=body, name="g_loop")]
    return model(nodes, [("v0", D, [1, 4]), ("W", D, [4, 4])], [("vT", D, [1, 4])])


RNG = np.random.default_rng(7)


def _r(*shape):
    return RNG.standard_normal(shape) * 0.5


CASES = {
    "if_then": (if_model(), {"x": np.array([0.3, 0.5, -0.1]), "w": np.array([1.2, -0.7, 0.4])}),
    "if_else": (if_model(), {"x": np.array([-0.3, 0.5, -0.9]), "w": np.array([1.2, -0.7, 0.4])}),
    "if_constant_branch": (if_model(True), {"x": np.array([-0.3, 0.5, -0.9]),
                                            "w": np.array([1.2, -0.7, 0.4])}),
    "scan_rnn": (scan_model(), {"h0": _r(1, 3), "X": _r(4, 1, 3), "W": _r(3, 3)}),
    "scan_backwards_axis1": (scan_model(backwards=True),
                             {"h0": _r(1, 3), "X": _r(1, 4, 3), "W": _r(3, 3)}),
    "loop_data_dependent": (loop_model(), {"v0": np.array([0.3, 0.4]), "w": np.array([0.5, -0.2])}),
    "loop_zero_iterations": (loop_model(M=0), {"v0": np.array([0.3, 0.4]),
                                               "w": np.array([0.5, -0.2])}),
    "if_in_scan": (if_in_scan(), {"h0": _r(1, 3), "X": _r(3, 1, 3), "W": _r(3, 3)}),
    "scan_in_loop": (scan_in_loop(), {"v0": _r(1, 3), "X": _r(2, 1, 3), "W": _r(3, 3)}),
    "loop_in_scan": (loop_in_scan(), {"h0": _r(1, 3), "X": _r(3, 1, 3), "W": _r(3, 3)}),
    "loop_in_if": (loop_in_if(), {"x": np.array([0.4, 0.3, 0.2]), "w": np.array([1.1, 0.9, 1.3])}),
    "loop_rk2": (loop_rk2(), {"v0": _r(1, 3), "W1": _r(3, 4), "W2": _r(4, 3)}),
    "scan_mlp_cell": (scan_mlp_cell(), {"h0": _r(1, 3), "X": _r(4, 1, 3), "W1": _r(3, 3),
                                        "W2": _r(3, 3)}),
    "loop_growing_slice": (loop_growing_slice(), {"v0": _r(1, 4) * 0.3, "W": _r(4, 4)}),
}


def _outputs(m):
    return [o.name for o in m.graph.output if o.type.tensor_type.elem_type == D]


@pytest.mark.parametrize("name", list(CASES))
def test_both_modes_and_hessian(name):
    m, feeds = CASES[name]
    errors = check_derivatives(m, feeds, outputs=_outputs(m))
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output=_outputs(m)[0])
    for d in (forward(m, layout="onnx"), reverse(m, outputs=_outputs(m), layout="onnx")):
        assert_unique_node_names(d)


def _derivatives(m, feeds, k=2, seed=3):
    """Forward J v and reverse J^T w for fixed random seeds."""
    rng = np.random.default_rng(seed)
    outs = _outputs(m)
    xs = list(feeds)
    fwd = run(forward(m, outputs=outs, layout="onnx"),
              {**feeds, **{f"fwd_{x}": rng.standard_normal(feeds[x].shape + (k,)) for x in xs}})
    y = run(m, feeds)
    adj = run(reverse(m, outputs=outs, layout="onnx"),
              {**feeds, **{f"adj_{o}": rng.standard_normal(y[o].shape + (k,)) for o in outs}})
    return ([fwd[f"fwd_{o}"] for o in outs], [adj[f"adj_{x}"] for x in xs])


UNROLLABLE = {
    "scan_rnn": None, "scan_backwards_axis1": None, "if_in_scan": None, "scan_in_loop": None,
    "loop_in_scan": None,
    "loop_rk2": None, "scan_mlp_cell": None, "loop_growing_slice": None,
    # the data-dependent loop ran 7 times at these inputs: same derivatives as 7 fixed steps
    "loop_data_dependent": loop_model(M=7, stop=False),
}


@pytest.mark.parametrize("name", list(UNROLLABLE))
def test_against_unrolled(name):
    m, feeds = CASES[name]
    if UNROLLABLE[name] is not None:
        ref = UNROLLABLE[name]
        assert int(run(m, feeds)["n"]) == 7  # the trip count the reference fixes
        np.testing.assert_allclose(run(ref, feeds)["vT"], run(m, feeds)["vT"])
    else:
        ref = m
    flat = unroll(ref)
    kinds = {n.op_type for n in flat.graph.node}
    assert not kinds & {"Scan", "Loop"}
    got, want = _derivatives(m, feeds), _derivatives(flat, feeds)
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_int_and_bool_loop_state_get_no_tangents():
    m, _ = CASES["loop_data_dependent"]
    fwd = forward(m, layout="onnx")
    loop = next(n for n in fwd.graph.node if n.op_type == "Loop")
    # M, cond, v, counter, then one tangent: v's (none for the int64 counter)
    assert len(loop.input) == 5
    body = loop.attribute[0].g
    assert [i.type.tensor_type.elem_type for i in body.input] == [I64, B, D, I64, D]


def test_primal_after_a_region_op_keeps_its_ops():
    """(l * k1) * k2 after a Loop (float32): the forward model's Loop has a
    tangent operand, but its primal result does not vary with it, so the
    folds of the tangent program leave the primal product as written and the
    derivative models' primal outputs are the model's, bit for bit; the
    tangent of an If result (which captures its operands) is folded."""
    body = h.make_graph([h.make_node("Sin", ["s"], ["s2"]), h.make_node("Identity", ["c"], ["c2"])],
                        "body", [vi("i", I64, []), vi("c", B, []), vi("s", F, [3])],
                        [vi("c2", B, []), vi("s2", F, [3])])
    branch = [h.make_graph([h.make_node(op, ["x"], [op.lower()])], op, [], [vi(op.lower(), F, [3])])
              for op in ("Tanh", "Sin")]
    m = model([const("M", 3, I64), const("k1", [0.1, 0.7, 1.3], F), const("k2", [3.3, 1.1, 0.9], F),
               const("zero", 0.0, F), h.make_node("Loop", ["M", "", "x"], ["l"], body=body),
               h.make_node("Mul", ["l", "k1"], ["a"]), h.make_node("Mul", ["a", "k2"], ["y"]),
               h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
               h.make_node("Greater", ["s", "zero"], ["c"]),
               h.make_node("If", ["c"], ["z"], then_branch=branch[0], else_branch=branch[1]),
               h.make_node("Mul", ["z", "k1"], ["b"]), h.make_node("Mul", ["b", "k2"], ["w"])],
              [("x", F, [3])], [("y", F, [3]), ("w", F, [3])])
    for x in (np.array([0.6923107, -0.6979347, 2.9832597], np.float32),
              np.array([-0.3, -1.7, 0.9], np.float32)):  # (l * k1) * k2 != l * (k1 * k2) at the first
        want = run(m, {"x": x})
        fwd, adj = forward(m, layout="onnx"), reverse(m, layout="onnx")
        got = run(fwd, {"x": x, "fwd_x": np.ones((3, 1), np.float32)})
        got_adj = run(adj, {"x": x, "adj_y": np.ones((3, 1), np.float32),
                            "adj_w": np.ones((3, 1), np.float32)})
        for k in ("y", "w"):
            np.testing.assert_array_equal(got[k], want[k])
            np.testing.assert_array_equal(got_adj[k], want[k])
        check_derivatives(m, {"x": x})
    for d in (fwd, adj):
        writes = {n.output[0]: list(n.input) for n in d.graph.node}
        assert writes["y"] == ["a", "k2"] and writes["w"] == ["b", "k2"]
    # both tangents: one Mul each by the coefficient k1 * k2
    k2_readers = [n for n in fwd.graph.node if "k2" in n.input]
    assert sorted(tuple(n.input) for n in k2_readers) == [("a", "k2"), ("b", "k2"), ("k1", "k2")]


def test_tangent_folds_inside_region_bodies():
    """sigmoid(x) * x * k in an If branch: the folds of the tangent program
    apply there as in the main graph, so the branch's tangent is x's tangent
    times one primal coefficient (read once; twice before, and four ops)."""
    then = h.make_graph([h.make_node("Sigmoid", ["x"], ["t"]), h.make_node("Mul", ["t", "x"], ["a"]),
                         h.make_node("Mul", ["a", "k"], ["z"])], "then", [], [vi("z", D, [3])])
    other = h.make_graph([h.make_node("Sin", ["x"], ["s"])], "else", [], [vi("s", D, [3])])
    m = model([const("k", [3.3, 1.1, 0.9]), const("zero", 0.0),
               h.make_node("ReduceSum", ["x"], ["r"], keepdims=0),
               h.make_node("Greater", ["r", "zero"], ["c"]),
               h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [("x", D, [3])], [("y", D, [3])])
    for x in ([0.3, -1.7, 2.9], [-0.3, -1.7, 0.9]):
        check_derivatives(m, {"x": np.array(x)})
    fwd = forward(m, layout="onnx")
    seed = next(n.output[0] for n in fwd.graph.node if list(n.input) == ["fwd_x"])
    branches = next(n for n in fwd.graph.node if n.op_type == "If").attribute
    body = next(a.g for a in branches if a.name == "then_branch")
    assert [n.op_type for n in body.node if seed in n.input] == ["Mul"]


def test_constant_condition_is_inlined():
    m = if_constant_condition()
    x = np.array([0.5, -1.0, 2.0])
    for d in (forward(m, layout="onnx"), reverse(m, layout="onnx")):
        assert not any(n.op_type == "If" for n in d.graph.node)
    check_derivatives(m, {"x": x})


@pytest.mark.parametrize("name", ["if_then", "scan_rnn", "loop_data_dependent", "scan_in_loop"])
def test_derivative_models_differentiate_again(name):
    """reverse(forward(m)) and forward(forward(m)) through the region ops: the
    forward model is itself checked as a primal, in both modes, against
    finite differences and the forward/reverse identity."""
    m, feeds = CASES[name]
    fwd = forward(m, inputs=list(feeds), outputs=_outputs(m), layout="onnx")
    seeds = {f"fwd_{x}": RNG.standard_normal(v.shape + (1,)) for x, v in feeds.items()}
    check_derivatives(fwd, {**feeds, **seeds}, k=2)


@pytest.mark.parametrize("name", list(CASES))
def test_reverse_models_differentiate_again(name):
    """reverse(reverse(m)) and forward(reverse(m)) through the reverse region
    ops (Scans over stacks and residuals, the guarded Scan of a while loop,
    carried next states): the reverse model checked as a primal, in both
    modes, against finite differences and the forward/reverse identity."""
    m, feeds = CASES[name]
    xs = [x for x, v in feeds.items() if v.dtype == np.float64]
    outs = _outputs(m)
    rev = reverse(m, inputs=xs, outputs=outs, layout="onnx")
    y = run(m, feeds)
    seeds = {f"adj_{o}": RNG.standard_normal(np.shape(y[o]) + (1,)) for o in outs}
    errors = check_derivatives(rev, {**feeds, **seeds}, inputs=xs + list(seeds), k=2)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9


def captured_weight_loop(M=4, reduce="ReduceMean"):
    """h' = tanh(h W + x) with W and x captured from the outer scope, h'
    stacked; y = mean(hs) + hT. ONNX shape inference leaves the Loop's carried
    result untyped (it reads outer values)."""
    body = h.make_graph([h.make_node("MatMul", ["h", "W"], ["a"], name="cw_mm"),
                         h.make_node("Add", ["a", "x"], ["b"], name="cw_add"),
                         h.make_node("Tanh", ["b"], ["h2"], name="cw_tanh"),
                         h.make_node("Identity", ["cond"], ["cond2"], name="cw_cond"),
                         h.make_node("Identity", ["h2"], ["so"], name="cw_so")],
                        "body", [vi("i", I64, []), vi("cond", B, []), vi("h", D, [2, 3])],
                        [vi("cond2", B, []), vi("h2", D, [2, 3]), vi("so", D, [2, 3])])
    nodes = [const("M", M, I64), const("ax", [0], I64),
             h.make_node("Loop", ["M", "", "x"], ["hT", "hs"], body=body, name="cw_loop"),
             h.make_node(reduce, ["hs"] + (["ax"] if reduce == "ReduceSum" else []), ["m"],
                         keepdims=0, name="cw_mean", **({} if reduce == "ReduceSum" else
                                                        {"axes": [0]})),
             h.make_node("Add", ["m", "hT"], ["y"], name="cw_y")]
    return model(nodes, [("x", D, [2, 3]), ("W", D, [3, 3])], [("y", D, [2, 3])], opset=17)


@pytest.mark.parametrize("M,reduce", [(4, "ReduceMean"), (1, "ReduceMean"), (0, "ReduceSum")])
def test_untyped_loop_results_are_typed_from_the_body(M, reduce):
    """Loop/Scan results ONNX left untyped get their types from the inits and
    the bodies' yields before differentiation (a constant trip count with no
    condition is the scan outputs' extent): the derivative models have no
    run-time rank/broadcast plumbing, and stay exact, zero iterations
    included. The reverse Loop reads the iteration-invariant cotangent of
    the stacked output without a per-iteration Gather, stores no iteration
    numbers the body does not read, reads the stacked tanh the primal Loop
    outputs anyway instead of storing the states and recomputing the step
    from them (as a Scan slice when the loop runs at least once), and hoists
    the transposed weight."""
    m = captured_weight_loop(M, reduce)
    inferred = onnx.shape_inference.infer_shapes(m)
    assert not any(v.name == "hT" and v.type.tensor_type.HasField("shape")
                   for v in inferred.graph.value_info)  # the premise
    feeds = {"x": _r(2, 3), "W": _r(3, 3)}
    errors = check_derivatives(m, feeds)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    for d in (forward(m, layout="onnx"), reverse(m, layout="onnx")):
        kinds = [n.op_type for n in d.graph.node]
        for n in d.graph.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    kinds += [nn.op_type for nn in a.g.node]
        assert not {"NonZero", "ConstantOfShape"} & set(kinds), kinds
    rev = reverse(m, inputs=["x"], layout="onnx")
    loops = [n for n in rev.graph.node if n.op_type in ("Loop", "Scan")]
    assert len(loops) == 2 and list(loops[0].output) == ["hT", "hs"]  # no states stored
    # a loop that runs at least once is reversed by a Scan over hs, else by a
    # Loop reading hs with Gather (ONNX Runtime's Scan fails on zero steps)
    assert loops[1].op_type == ("Scan" if M else "Loop")
    body = _body_ops(loops[1])
    assert body.count("Gather") == (0 if M else 1) and "Transpose" not in body, body
    assert body.count("MatMul") == 1 and "Tanh" not in body, body


def test_reverse_loop_recomputes_a_clip_it_would_read():
    """A Loop whose state is a Clip of values its reverse sweep recomputes
    (over all steps at once, where ONNX Runtime's Log rounds a last bit
    differently at these inputs): Clip's rule compares its operand with its
    result, so the reversal recomputes the Clip too instead of comparing
    its recomputed operand with the Clip the primal stacked (none equal: a
    zero row of J^T; fuzz seed 108 case 854 had Max(l, l), whose rule now
    compares its two operands instead). J from forward mode, J^T from
    reverse mode and J written by hand agree."""
    body = h.make_graph([h.make_node("Mul", ["v", "v"], ["sq"], name="lm_sq"), const("one", 1.0, F),
                         h.make_node("Add", ["sq", "one"], ["u"], name="lm_add"),
                         h.make_node("Log", ["u"], ["l"], name="lm_log"),
                         const("lo", -10.0, F), const("hi", 10.0, F),
                         h.make_node("Clip", ["l", "lo", "hi"], ["m"], name="lm_clip"),
                         h.make_node("Identity", ["c"], ["c2"], name="lm_c"),
                         h.make_node("Identity", ["m"], ["o"], name="lm_o")], "body",
                        [vi("i", I64, []), vi("c", B, []), vi("v", F, [1, 2, 1, 3])],
                        [vi("c2", B, []), vi("m", F, [1, 2, 1, 3]), vi("o", F, [1, 2, 1, 3])])
    m = model([const("n", 2, I64), const("t", True, B),
               h.make_node("Loop", ["n", "t", "x"], ["y", "ys"], body=body, name="lm_loop")],
              [("x", F, [1, 2, 1, 3])], [("y", F, [1, 2, 1, 3])])
    x = np.array([0.92337965965271, 0.760155439376831, 0.01393156498670578,
                  -0.15650780498981476, -0.15102587640285492, -0.4185658097267151],
                 np.float32).reshape(1, 2, 1, 3)
    eye = np.eye(6, dtype=np.float32).reshape(1, 2, 1, 3, 6)
    jac = run(forward(m, layout="onnx"), {"x": x, "fwd_x": eye})["fwd_y"].reshape(6, 6)
    jac_t = run(reverse(m, layout="onnx"), {"x": x, "adj_y": eye})["adj_x"].reshape(6, 6)
    np.testing.assert_allclose(jac_t.T, jac, rtol=1e-6, atol=1e-7)
    v, d = x.astype(np.float64).ravel(), np.ones(6)
    for _ in range(2):  # by hand, in float64: d/dv log(1 + v^2) = 2 v / (1 + v^2), per step
        v, d = np.log1p(v * v), d * 2 * v / (1 + v * v)
    np.testing.assert_allclose(jac, np.diag(d), rtol=1e-5, atol=1e-7)


def _branch_ops(m):
    ifs = [n for n in m.graph.node if n.op_type == "If"]
    return [[n.op_type for n in a.g.node] for i in ifs for a in i.attribute]


def _if_projection(op: str, sign: float):
    """y = op(x W) (Tanh, or Clip to [-0.5, 0.5]) if sum(x) > 0 else exp(x),
    and feeds taking the branch `sign` says."""
    ins = ["a"] if op == "Tanh" else ["a", "lo", "hi"]
    then = h.make_graph([h.make_node("MatMul", ["x", "W"], ["a"], name="ip_mm"),
                         const("lo", -0.5), const("hi", 0.5),
                         h.make_node(op, ins, ["t"], name="ip_op")], "then", [],
                        [vi("t", D, [2, 3])])
    els = h.make_graph([h.make_node("Exp", ["x"], ["e"], name="ip_exp")], "else", [],
                       [vi("e", D, [2, 3])])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="ip_sum"), const("zero", 0.0),
             h.make_node("Greater", ["s", "zero"], ["c"], name="ip_gt"),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els, name="ip_if")]
    m = model(nodes, [("x", D, [2, 3]), ("W", D, [3, 3])], [("y", D, [2, 3])])
    return m, {"x": sign * np.abs(_r(2, 3)), "W": _r(3, 3)}


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_reverse_if_reads_the_primal_results(sign):
    """The reverse If's branch reads the primal If's result where the
    recomputed branch would yield the same value (Tanh' and Exp' come from
    their outputs): no recomputation of the branch there; the transposed
    weight is computed once, outside both branches."""
    m, feeds = _if_projection("Tanh", sign)
    errors = check_derivatives(m, feeds)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    rev = reverse(m, inputs=["x"], layout="onnx")
    primal_branches, reverse_branches = _branch_ops(rev)[:2], _branch_ops(rev)[2:]
    assert primal_branches == [["MatMul", "Tanh"], ["Exp"]]
    assert not {"Tanh", "Exp", "Transpose"} & {t for b in reverse_branches for t in b}, \
        reverse_branches


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_reverse_if_recomputes_a_clip_it_would_read(sign):
    """A branch yielding Clip(x W): the reverse branch recomputes x W and
    compares it with the clipped value, so it recomputes the Clip as well
    rather than reading the primal If's result (computed where ONNX Runtime
    may fuse and round otherwise; see
    test_reverse_loop_recomputes_a_clip_it_would_read)."""
    m, feeds = _if_projection("Clip", sign)
    errors = check_derivatives(m, feeds)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    assert "Clip" in _branch_ops(reverse(m, inputs=["x"], layout="onnx"))[2]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_reverse_if_with_a_padded_pool_in_the_taken_branch(sign):
    """The pool's rule builds a pool of ones with the pool's attributes: it
    also copied the region reversal's tag marking the op that computes the
    branch's result, and the reverse branch then read the primal result in
    place of that pool's (fuzz seed 87, case 404: <J v, w> != <v, J^T w>)."""
    pool = lambda name, out: h.make_node("AveragePool", ["x"], [out], kernel_shape=[3, 3],
                                         pads=[1, 1, 1, 1], count_include_pad=0, name=name)
    then = h.make_graph([pool("p_then", "t")], "then", [], [vi("t", F, [1, 1, 4, 5])])
    els = h.make_graph([h.make_node("Tanh", ["x"], ["e"], name="p_tanh")], "else", [],
                       [vi("e", F, [1, 1, 4, 5])])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="p_sum"), const("zero", 0.0, F),
             h.make_node("Greater", ["s", "zero"], ["c"], name="p_gt"),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els, name="p_if")]
    m = model(nodes, [("x", F, [1, 1, 4, 5])], [("y", F, [1, 1, 4, 5])])  # (no double pools in ORT)
    errors = check_derivatives(m, {"x": (sign * np.abs(_r(1, 1, 4, 5))).astype(np.float32)})
    assert errors["dot"] < 1e-6


def sibling_scans(T=4):
    """Two independent Scans of T steps (the second backwards along axis 1,
    with its own captured weight) with an op reading the first between them:
    onnx-ad-merge-scans makes one Scan of the primal pair and one of the
    reverse pair (merge_scans.py)."""
    b2 = h.make_graph([h.make_node("MatMul", ["h", "V"], ["hv"], name="b_mm"),
                       h.make_node("Mul", ["hv", "xt"], ["pre"], name="b_mul"),
                       h.make_node("Sigmoid", ["pre"], ["hn"], name="b_sig"),
                       h.make_node("Identity", ["hn"], ["yo"], name="b_id")],
                      "body2", [vi("h", D, [1, 3]), vi("xt", D, [1, 3])],
                      [vi("hn", D, [1, 3]), vi("yo", D, [1, 3])])
    nodes = [h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=rnn_body("a_"), name="scan1",
                         num_scan_inputs=1),
             h.make_node("Sin", ["hT"], ["s"], name="sin"),
             h.make_node("Scan", ["h0", "Z"], ["gT", "G"], body=b2, name="scan2",
                         num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[1],
                         scan_output_axes=[1], scan_output_directions=[1]),
             h.make_node("Mul", ["s", "gT"], ["out"], name="mul")]
    return model(nodes, [("h0", D, [1, 3]), ("X", D, [T, 1, 3]), ("Z", D, [1, T, 3]),
                         ("W", D, [3, 3]), ("V", D, [3, 3])],
                 [("out", D, [1, 3]), ("Y", D, [T, 1, 3]), ("G", D, [1, T, 3])])


def test_sibling_scans_merge_exactly():
    m = sibling_scans()
    feeds = {"h0": _r(1, 3), "X": _r(4, 1, 3), "Z": _r(1, 4, 3), "W": _r(3, 3), "V": _r(3, 3)}
    produced: list = []
    errors = check_derivatives(m, feeds, outputs=_outputs(m), produced=produced)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    fwd, rev = produced[:2]
    scans = lambda d: sum(n.op_type == "Scan" for n in d.graph.node)
    assert scans(fwd) == 1  # the primal pair with its tangents
    assert scans(rev) == 2  # the primal pair, then the reverse pair
    for d in (fwd, rev):
        assert_unique_node_names(d)


def _unranked_loop_result_then(op: str, **attrs) -> onnx.ModelProto:
    """`op` of a Loop result whose rank nothing knows (the body leaves the
    state's shape open: with one shape throughout, the import would know
    the result's), output declared without a shape."""
    body = h.make_graph([h.make_node("Identity", ["c"], ["co"]), h.make_node("Tanh", ["v"], ["vo"])],
                        "body", [h.make_tensor_value_info("i", TP.INT64, []),
                                 h.make_tensor_value_info("c", TP.BOOL, []),
                                 h.make_tensor_value_info("v", TP.FLOAT, None)],
                        [h.make_tensor_value_info("co", TP.BOOL, []),
                         h.make_tensor_value_info("vo", TP.FLOAT, [2, 3, 4])])
    nodes = [h.make_node("Constant", [], ["n"], value=h.make_tensor("n", TP.INT64, [], [2])),
             h.make_node("Constant", [], ["t"], value=h.make_tensor("t", TP.BOOL, [], [1])),
             h.make_node("Loop", ["n", "t", "x"], ["l"], body=body),
             h.make_node(op, ["l"], ["y"], **attrs)]
    return h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 3, 4])],
                                     [h.make_tensor_value_info("y", TP.FLOAT, None)]),
                        opset_imports=[h.make_opsetid("", 18)])


def test_unranked_output_refused_in_both_modes():
    """Hardmax keeps its operand's unknown rank: both modes refuse the
    output naming the reason. Forward mode used to raise a TypeError
    building its zero or packed derivative."""
    from onnx_ad_mlir.errors import OnnxAdError
    m = _unranked_loop_result_then("Hardmax", axis=0)
    for mode in (forward, reverse):
        with pytest.raises(OnnxAdError, match="needs the rank"):
            mode(m, layout="onnx")


@pytest.mark.parametrize("axis", [0, 2])
def test_flatten_of_an_unranked_loop_result(axis):
    """Flatten's result has rank 2 whatever its operand's (ranks.py), so its
    derivative is taken (it was refused with Hardmax's)."""
    m = _unranked_loop_result_then("Flatten", axis=axis)
    feeds = {"x": _r(2, 3, 4).astype(np.float32)}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


@pytest.mark.parametrize("op", ["Loop", "Scan"])
def test_state_declared_against_its_start_refused(op):
    """A body state declared [1] that starts from a scalar: ORT broadcasts its
    way through, the rules would build for the declared rank; refused at
    import, naming the node (the Loop's state and both types: our check,
    fuzz seed 42 case 965; the Scan's: ONNX's strict inference)."""
    from onnx_ad_mlir.errors import OnnxAdError
    state = h.make_tensor_value_info("v", TP.FLOAT, [1])
    out = h.make_tensor_value_info("vo", TP.FLOAT, [1])
    if op == "Loop":
        body = h.make_graph([h.make_node("Identity", ["c"], ["co"]), h.make_node("Tanh", ["v"], ["vo"])],
                            "body", [h.make_tensor_value_info("i", TP.INT64, []),
                                     h.make_tensor_value_info("c", TP.BOOL, []), state],
                            [h.make_tensor_value_info("co", TP.BOOL, []), out])
        nodes = [h.make_node("Constant", [], ["n"], value=h.make_tensor("n", TP.INT64, [], [2])),
                 h.make_node("Constant", [], ["t"], value=h.make_tensor("t", TP.BOOL, [], [1])),
                 h.make_node("Loop", ["n", "t", "x"], ["y"], body=body)]
        inputs = [h.make_tensor_value_info("x", TP.FLOAT, [])]
    else:
        body = h.make_graph([h.make_node("Add", ["v", "s"], ["vo"])], "body",
                            [state, h.make_tensor_value_info("s", TP.FLOAT, [])], [out])
        nodes = [h.make_node("Scan", ["x", "xs"], ["y"], body=body, num_scan_inputs=1)]
        inputs = [h.make_tensor_value_info("x", TP.FLOAT, []),
                  h.make_tensor_value_info("xs", TP.FLOAT, [4])]
    m = h.make_model(h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info("y", TP.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 18)])
    why = ("the body declares 'v' as tensor<1xf32>, but the loop starts it from a value of "
           "type tensor<f32>") if op == "Loop" else "strict ONNX shape inference rejects"
    with pytest.raises(OnnxAdError, match=f"\\({op}\\): {why}"):
        reverse(m, inputs=["x"], layout="onnx")


def test_refusal_inside_a_reversed_region_names_the_region_op():
    """A branch's Reshape to a shape that is a graph input (IR 3: every
    initializer is one) leaves the tangent's extents unknown; at opset 9
    reversing the broadcast back to the declared output (a sum over axes
    known at run time) is refused, and the message names the If node, not
    reverse mode's internal stand-in for it."""
    from onnx_ad_mlir.errors import UnsupportedOp
    branch = lambda name, op: h.make_graph(
        [h.make_node(op, ["x"], [name + "a"]), h.make_node("Reshape", [name + "a", "S"], [name + "r"]),
         h.make_node("Mul", [name + "r", name + "r"], [name + "o"])], name, [],
        [h.make_tensor_value_info(name + "o", TP.FLOAT, [4, 2])])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             h.make_node("Greater", ["s", "z"], ["c"]),
             h.make_node("If", ["c"], ["y"], name="choose", then_branch=branch("t", "Tanh"),
                         else_branch=branch("e", "Sigmoid"))]
    inits = [onnx.numpy_helper.from_array(np.array([4, 2], np.int64), "S"),
             onnx.numpy_helper.from_array(np.array(0.0, np.float32), "z")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 4]),
                                  h.make_tensor_value_info("S", TP.INT64, [2]),
                                  h.make_tensor_value_info("z", TP.FLOAT, [])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [4, 2])], initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 3
    with pytest.raises(UnsupportedOp, match=r"^onnx\.If\w* \(node 'choose'\): onnx\.Expand.*"
                                            r"run time needs opset >= 13"):
        reverse(m, inputs=["x"], layout="onnx")


def test_loop_carried_shape_reaches_its_users():
    """ONNX's inference keeps only the element type of a Loop's carried
    results (a state may change shape per iteration); one whose start, body
    argument and body result share a static shape keeps it, and the import
    declares it so that later ops (here Flatten, Slice) get ranks: they were
    refused before ('Slice needs its operand's rank', fuzz)."""
    body = h.make_graph([h.make_node("Identity", ["c"], ["co"]), h.make_node("Tanh", ["v"], ["t"]),
                         h.make_node("Mul", ["t", "w"], ["vo"])],
                        "body", [h.make_tensor_value_info("i", TP.INT64, []),
                                 h.make_tensor_value_info("c", TP.BOOL, []),
                                 h.make_tensor_value_info("v", TP.DOUBLE, [2, 3, 2])],
                        [h.make_tensor_value_info("co", TP.BOOL, []),
                         h.make_tensor_value_info("vo", TP.DOUBLE, [2, 3, 2])])
    nodes = [const("n", np.asarray(3, np.int64), TP.INT64), const("t0", np.asarray(True), TP.BOOL),
             const("w", np.linspace(0.5, 1.5, 12).reshape(2, 3, 2)),
             h.make_node("Loop", ["n", "t0", "x"], ["l"], body=body),
             h.make_node("Flatten", ["l"], ["f"], axis=2),
             const("st", np.asarray([1], np.int64), TP.INT64),
             const("en", np.asarray([4], np.int64), TP.INT64),
             const("ax", np.asarray([1], np.int64), TP.INT64),
             h.make_node("Slice", ["f", "st", "en", "ax"], ["y"])]
    m = model(nodes, [("x", D, [2, 3, 2])], [("y", D, None)])
    from onnx_ad_mlir import import_onnx
    assert "-> tensor<6x1xf64>" in str(import_onnx(m))  # the Slice result, typed
    check_derivatives(m, {"x": np.random.default_rng(4).standard_normal((2, 3, 2))})


def test_loop_carried_shape_in_a_branch():
    """The same inside an If branch: a MaxPool of the Loop's result there
    took the Indices path for lack of a rank, and reverse mode refused it
    (fuzz: window ops in bodies)."""
    body = h.make_graph([h.make_node("Identity", ["c"], ["co"]), h.make_node("Tanh", ["v"], ["vo"])],
                        "body", [h.make_tensor_value_info("i", TP.INT64, []),
                                 h.make_tensor_value_info("c", TP.BOOL, []),
                                 h.make_tensor_value_info("v", TP.FLOAT, [1, 2, 5])],
                        [h.make_tensor_value_info("co", TP.BOOL, []),
                         h.make_tensor_value_info("vo", TP.FLOAT, [1, 2, 5])])
    then = h.make_graph([const("n", np.asarray(2, np.int64), TP.INT64),
                         const("t0", np.asarray(True), TP.BOOL),
                         h.make_node("Loop", ["n", "t0", "x"], ["l"], body=body),
                         h.make_node("MaxPool", ["l"], ["p"], kernel_shape=[3], pads=[1, 1])],
                        "then", [], [h.make_tensor_value_info("p", TP.FLOAT, [1, 2, 5])])
    other = h.make_graph([h.make_node("Neg", ["x"], ["q"])], "else", [],
                         [h.make_tensor_value_info("q", TP.FLOAT, [1, 2, 5])])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             const("z", np.asarray(0.0, np.float32), TP.FLOAT), h.make_node("Greater", ["s", "z"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    m = model(nodes, [("x", TP.FLOAT, [1, 2, 5])], [("y", TP.FLOAT, [1, 2, 5])])
    x = np.random.default_rng(5).permutation(10).reshape(1, 2, 5).astype(np.float32) * 0.1 + 0.05
    check_derivatives(m, {"x": x})
    check_derivatives(m, {"x": -x})


@pytest.mark.parametrize("M", [0, 3])
def test_flattened_stack_of_a_loop_that_may_not_run(M):
    """The stacked output of a Loop that runs M times (its extent known only
    at run time), flattened: the Reshape's transpose cannot write its
    direction axis as -1 beside that extent when M is 0 (ONNX Runtime refuses
    -1 among zero elements), in reverse mode and in the reverse model
    differentiated again."""
    m = loop_model(M=M)
    m.graph.node.extend([const("flat", [-1], I64),
                         h.make_node("Reshape", ["V", "flat"], ["Vf"], name="fl_reshape"),
                         h.make_node("Sin", ["Vf"], ["z"], name="fl_sin")])
    m.graph.output.append(vi("z", D, ["N"]))
    feeds = {"v0": np.array([0.3, 0.4]), "w": np.array([0.5, -0.2])}
    outs = ["vT", "z"]
    check_derivatives(m, feeds, outputs=outs)
    y = run(m, feeds)
    assert y["z"].shape == (2 * min(M, 7),)
    adj = reverse(m, outputs=outs, layout="onnx")
    seeds = {f"adj_{o}": RNG.standard_normal(y[o].shape + (1,)) for o in outs}
    check_derivatives(adj, {**feeds, **seeds})


def _stack_users():
    """One user (or a short chain) of the stack V [T, 2, 3] per entry: the
    ops, and z's declared shape."""
    c = lambda name, v, t=I64: const(name, v, t)
    return {
        "reshape": ([c("s", [-1, 3]), h.make_node("Reshape", ["V", "s"], ["z0"]),
                     h.make_node("Tanh", ["z0"], ["z"])], ["N", 3]),
        "flatten": ([h.make_node("Flatten", ["V"], ["z0"], axis=1),
                     h.make_node("Tanh", ["z0"], ["z"])], ["N", 6]),
        "flatten0": ([h.make_node("Flatten", ["V"], ["z0"], axis=0),
                      h.make_node("Tanh", ["z0"], ["z"])], [1, "N"]),
        "transpose": ([h.make_node("Transpose", ["V"], ["z0"], perm=[2, 0, 1]),
                       h.make_node("Tanh", ["z0"], ["z"])], [3, "N", 2]),
        "reduce": ([c("a", [1]), h.make_node("ReduceSum", ["V", "a"], ["z0"], keepdims=1),
                    h.make_node("Mul", ["z0", "V"], ["z"])], ["N", 2, 3]),
        "matmul": ([c("W", np.linspace(-1, 1, 12).reshape(3, 4), D),
                    h.make_node("MatMul", ["V", "W"], ["z0"]),
                    h.make_node("Tanh", ["z0"], ["z"])], ["N", 2, 4]),
        "gram": ([h.make_node("Transpose", ["V"], ["Vt"], perm=[0, 2, 1]),
                  h.make_node("MatMul", ["Vt", "V"], ["z"])], ["N", 3, 3]),
        "softmax": ([h.make_node("Softmax", ["V"], ["z"], axis=0)], ["N", 2, 3]),
        "gather": ([c("ix", [1, 0]), h.make_node("Gather", ["V", "ix"], ["z0"], axis=1),
                    h.make_node("Sin", ["z0"], ["z"])], ["N", 2, 3]),
        "expand": ([c("u", [1]), h.make_node("Unsqueeze", ["V", "u"], ["z0"]),
                    c("e", [1, 2, 2, 3]), h.make_node("Expand", ["z0", "e"], ["z1"]),
                    h.make_node("Sin", ["z1"], ["z"])], ["N", 2, 2, 3]),
        "cumsum": ([c("ax", 0), h.make_node("CumSum", ["V", "ax"], ["z0"]),
                    h.make_node("Sin", ["z0"], ["z"])], ["N", 2, 3]),
        "split": ([c("sp", [1, 1]), h.make_node("Split", ["V", "sp"], ["a1", "a2"], axis=1),
                   h.make_node("Mul", ["a1", "a2"], ["z"])], ["N", 1, 3]),
        "layernorm": ([c("g", np.ones(3), D), c("b", np.zeros(3), D),
                       h.make_node("LayerNormalization", ["V", "g", "b"], ["z"])], ["N", 2, 3]),
        "pad_slice": ([c("p", [1, 0, 0, 0, 0, 0]), h.make_node("Pad", ["V", "p"], ["z0"]),
                       c("st", [1]), c("en", [100]), c("ax", [0]),
                       h.make_node("Slice", ["z0", "st", "en", "ax"], ["z"])], ["N", 2, 3]),
    }


@pytest.mark.parametrize("user", list(_stack_users()))
def test_users_of_the_stack_of_a_loop_that_did_not_run(user):
    """The stack of a Loop that ran 0 times (a trip count only known at run
    time) through shaping, contracting and normalizing ops: both modes and
    the reverse model differentiated again. Reshapes whose extents may be 0
    use allowzero and never -1 beside them (ONNX Runtime refuses -1 among
    zero elements, and its Reshape fusion writes -1 for a shape it reads)."""
    body = h.make_graph([h.make_node("Sin", ["v"], ["vn"]), h.make_node("Mul", ["vn", "w"], ["so"]),
                         h.make_node("Identity", ["cin"], ["cn"])], "body",
                        [vi("i", I64, []), vi("cin", B, []), vi("v", D, [2, 3])],
                        [vi("cn", B, []), vi("vn", D, [2, 3]), vi("so", D, [2, 3])])
    nodes, zshape = _stack_users()[user]
    m = model([const("M", 0, I64), const("t", True, B),
               h.make_node("Loop", ["M", "t", "v0"], ["vT", "V"], body=body)] + nodes,
              [("v0", D, [2, 3]), ("w", D, [2, 3])], [("vT", D, [2, 3]), ("z", D, zshape)])
    rng = np.random.default_rng(6)
    feeds = {"v0": rng.standard_normal((2, 3)), "w": rng.standard_normal((2, 3))}
    check_derivatives(m, feeds)
    y = run(m, feeds)
    assert y["z"].size == 0
    seeds = {f"adj_{o}": rng.standard_normal(y[o].shape + (1,)) for o in ("vT", "z")}
    check_derivatives(reverse(m, layout="onnx"), {**feeds, **seeds})


@pytest.mark.parametrize("M", [0, 1, 4])
def test_loop_whose_state_grows(M):
    """v <- Concat(v, w * sin(v[-1:])) M times: the carried value changes
    shape every iteration, so reverse mode cannot stack its states as scan
    outputs (ONNX Runtime requires their slices to agree); the reverse Loop
    recomputes the state of iteration i by running the body i times from
    the start (a Loop inside its body, no stored history). Both modes,
    and Hessians (forward over reverse) through the recomputing Loop."""
    body = h.make_graph([const("st", [-1], I64), const("en", [2 ** 40], I64), const("ax", [0], I64),
                         h.make_node("Slice", ["v", "st", "en", "ax"], ["last"]),
                         h.make_node("Sin", ["last"], ["sl"]), h.make_node("Mul", ["sl", "w"], ["nw"]),
                         h.make_node("Concat", ["v", "nw"], ["vn"], axis=0),
                         h.make_node("Identity", ["cin"], ["cn"])], "body",
                        [vi("i", I64, []), vi("cin", B, []), vi("v", D, ["L"])],
                        [vi("cn", B, []), vi("vn", D, ["L2"])])
    m = model([const("M", M, I64), const("t", True, B),
               h.make_node("Loop", ["M", "t", "v0"], ["vT"], body=body, name="grow"),
               h.make_node("Tanh", ["vT"], ["y"])],
              [("v0", D, [2]), ("w", D, [1])], [("y", D, ["K"])])
    feeds = {"v0": np.array([0.3, 0.7]), "w": np.array([1.3])}
    assert run(m, feeds)["y"].shape == (2 + M,)
    errors = check_derivatives(m, feeds)
    assert errors["fd"] < 1e-7 and errors["dot"] < 1e-12
    check_hessian(m, feeds)
    rev = reverse(m, layout="onnx")
    loops = [n for n in rev.graph.node if n.op_type == "Loop"]
    assert len(loops) == 2 and len(loops[0].output) == 2  # vT, the iteration numbers
    assert "Loop" in [n.op_type for n in loops[1].attribute[0].g.node]
    u = {"adj_y": np.random.default_rng(1).standard_normal((2 + M, 2))}
    plain = run(rev, {**feeds, **u})
    for got in run(reverse(m, layout="onnx", checkpoint=2), {**feeds, **u}).items():
        np.testing.assert_array_equal(got[1], plain[got[0]])  # no segments: nothing stored


def _ops_in_bodies(m: onnx.ModelProto) -> list[str]:
    found = []
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                found += [x.op_type for x in a.g.node]
    return found


@pytest.mark.parametrize("out", [["n", 3], ["out_0", "out_1"]])
def test_run_time_batch_scan_bodies_need_no_shape_arithmetic(out):
    """h <- h * x_t + x_t over a Scan with a run-time batch n. Forward mode:
    d(h x) = dh x + h dx and the primal h x broadcast the same extents
    (symdims' joint extents), so no Shape/Expand per step. Reverse mode: the
    body's state has h0's extents and its slice of X has X's without the
    scan axis (symdims reads them off the Scan's operands), so the
    cotangents of h and x_t need no run-time unbroadcasting (Shape, NonZero,
    ReduceSum per step; 3.2x the reverse model's time on a dynamic-batch
    Scan RNN), also when the output is declared with extent names of its
    own. Values of both modes and of forward(reverse(m)) by central
    differences."""
    body = h.make_graph([h.make_node("Mul", ["hb", "xt"], ["p"], name="b_mul"),
                         h.make_node("Add", ["p", "xt"], ["hn"], name="b_add"),
                         h.make_node("Identity", ["hn"], ["yt"], name="b_id")],
                        "body", [vi("hb", D, [None, 3]), vi("xt", D, [None, 3])],
                        [vi("hn", D, [None, 3]), vi("yt", D, [None, 3])])
    m = model([h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=body, num_scan_inputs=1,
                           name="scan")],
              [("h0", D, ["n", 3]), ("X", D, [4, "n", 3])], [("hT", D, out)])
    body_ops = _ops_in_bodies(forward(m, layout="onnx"))
    assert not {"Expand", "Shape"} & set(body_ops), body_ops
    body_ops = _ops_in_bodies(reverse(m, layout="onnx"))
    assert not {"Shape", "NonZero", "ReduceSum"} & set(body_ops), body_ops
    rng = np.random.default_rng(3)
    feeds = {"h0": rng.uniform(0.5, 1.0, (2, 3)), "X": rng.uniform(0.5, 1.0, (4, 2, 3))}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


@pytest.mark.parametrize("batch,out", [("n", ["n", 3]), ("n", ["out_0", "out_1"]), (2, [2, 3])])
def test_loop_bodies_need_no_run_time_unbroadcasting(batch, out):
    """h <- tanh(h W) * x + h over a Loop, the body's h typed [?, 3]: with a
    static batch outside, the carried argument gets its start's extents (the
    start and every yield have them); with a run-time batch, the reverse
    body's stored states and cotangents are known to keep their starts'
    extents (a stacked history is one shape), whatever names the output's
    declaration gives them (a torch export's Loop output: [out_0, out_1]).
    Either way no Shape, NonZero or ReduceSum per step (3x the reverse
    model's time on a Loop RNN), and no Expand of x's cotangent either: the
    stacked tanh's slices have h0's extents (the carried argument keeps its
    start's, Gather and the Loop's stack keep theirs; 1.2x). Values by
    central differences, second order too."""
    body = h.make_graph([h.make_node("MatMul", ["hb", "W"], ["a"], name="l_mm"),
                         h.make_node("Tanh", ["a"], ["d"], name="l_tanh"),
                         h.make_node("Mul", ["d", "x"], ["e"], name="l_mul"),
                         h.make_node("Add", ["e", "hb"], ["hn"], name="l_add"),
                         h.make_node("Identity", ["c"], ["co"], name="l_cond")], "body",
                        [vi("i", I64, []), vi("c", B, []), vi("hb", D, [None, 3])],
                        [vi("co", B, []), vi("hn", D, [None, 3])])
    m = model([const("M", 5, I64), const("W", np.linspace(-0.5, 0.7, 9).reshape(3, 3)),
               h.make_node("Loop", ["M", "", "h0"], ["hT"], body=body, name="loop")],
              [("h0", D, [batch, 3]), ("x", D, [batch, 3])], [("hT", D, out)])
    body_ops = _ops_in_bodies(reverse(m, layout="onnx"))
    assert not {"Shape", "NonZero", "ReduceSum", "Expand"} & set(body_ops), body_ops
    rng = np.random.default_rng(4)
    feeds = {"h0": rng.uniform(-1, 1, (2, 3)), "x": rng.uniform(-1, 1, (2, 3))}
    check_derivatives(m, feeds)
    check_hessian(m, feeds)


def _body_ops(node: onnx.NodeProto) -> list[str]:
    return [n.op_type for a in node.attribute if a.name == "body" for n in a.g.node]


@pytest.mark.parametrize("name,inputs", [("loop_rk2", ["v0"]), ("scan_mlp_cell", ["h0", "X"])])
def test_reverse_reads_stacked_values_instead_of_recomputing_the_step(name, inputs):
    """The primal loop stacks the tanh values its reverse needs (not the
    states: nothing else reads them) and the reverse body recomputes none of
    the step: its MatMuls are the transposes, one per primal MatMul."""
    m, feeds = CASES[name]
    r = reverse(m, inputs=inputs, layout="onnx")
    primal, rev = [n for n in r.graph.node if n.op_type in ("Loop", "Scan")]
    n_final = 1 if name == "loop_rk2" else 2  # (the Scan's final state and its stacked Y)
    assert len(primal.output) == n_final + _body_ops(primal).count("Tanh"), list(primal.output)
    assert "Tanh" not in _body_ops(rev)
    assert _body_ops(rev).count("MatMul") == _body_ops(primal).count("MatMul")
    errors = check_derivatives(m, feeds, inputs=inputs, outputs=_outputs(m))
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9


def test_values_whose_shape_changes_are_recomputed_not_stacked():
    """The tanh of a slice that widens every iteration cannot be a stack
    (ONNX Runtime needs one shape per stack): the reverse recomputes it,
    from the stacked MatMul before it."""
    m, feeds = CASES["loop_growing_slice"]
    r = reverse(m, inputs=["v0"], layout="onnx")
    primal, rev = [n for n in r.graph.node if n.op_type in ("Loop", "Scan")]
    assert "Tanh" in _body_ops(rev) and _body_ops(rev).count("Slice") >= 1
    out = run(r, {**feeds, "adj_vT": np.ones((1, 4, 1))})
    errors = check_derivatives(m, feeds, inputs=["v0"], outputs=["vT"])
    assert errors["fd"] < 1e-6 and np.all(np.isfinite(out["adj_v0"]))


def test_next_state_is_carried_not_stacked():
    """An RNN that outputs only its last state: the reverse of step t needs
    tanh's output, which is step t+1's state. The reverse Scan carries it
    down from the step after (the final state first) instead of the primal
    stacking a copy beside the states: one stack, no Tanh recomputed."""
    body = h.make_graph([h.make_node("MatMul", ["h", "W"], ["hw"], name="n_mm"),
                         h.make_node("Add", ["hw", "xt"], ["pre"], name="n_add"),
                         h.make_node("Tanh", ["pre"], ["hn"], name="n_tanh")],
                        "body", [vi("h", D, [1, 3]), vi("xt", D, [1, 3])], [vi("hn", D, [1, 3])])
    m = model([h.make_node("Scan", ["h0", "X"], ["hT"], body=body, num_scan_inputs=1,
                           name="n_scan")],
              [("h0", D, [1, 3]), ("X", D, [5, 1, 3]), ("W", D, [3, 3])], [("hT", D, [1, 3])])
    r = reverse(m, layout="onnx")
    primal, rev = [n for n in r.graph.node if n.op_type == "Scan"]
    assert len(primal.output) == 2  # hT and the states (W's adjoint reads h_t-1)
    assert "Tanh" not in _body_ops(rev) and "hT" in rev.input
    feeds = {"h0": _r(1, 3), "X": _r(5, 1, 3), "W": _r(3, 3)}
    errors = check_derivatives(m, feeds)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output="hT")


def test_padded_scan_input_keeps_its_run_time_extents():
    """A Scan over Pad(X) (a step more in front, as our reverse models build
    for a shifted sweep) differentiated w.r.t. h0 only: the tangent of
    h + x_t is dh, of h + x_t's extents only if x_t's batch is h's. Pad
    keeps the extents of the axes it does not pad, so it is (h0's run-time
    n) and forward mode needs no Shape/Expand per step (the Hessian-vector
    model of the 2-layer LSTM lost one of each)."""
    body = h.make_graph([h.make_node("Add", ["hb", "xt"], ["p"], name="q_add"),
                         h.make_node("Tanh", ["p"], ["hn"], name="q_tanh")],
                        "body", [vi("hb", D, [None, 3]), vi("xt", D, [None, 3])],
                        [vi("hn", D, [None, 3])])
    m = model([const("pads", [1, 0, 0, 0, 0, 0], I64),
               h.make_node("Pad", ["X", "pads"], ["Xp"], name="q_pad"),
               h.make_node("Scan", ["h0", "Xp"], ["hT"], body=body, num_scan_inputs=1,
                           name="q_scan")],
              [("h0", D, ["n", 3]), ("X", D, [4, "n", 3])], [("hT", D, ["n", 3])])
    # declared without the extent's name, as our own exported models declare
    # their inner values: the name must come from the Pad itself
    m.graph.value_info.append(vi("Xp", D, [5, None, 3]))
    body_ops = _ops_in_bodies(forward(m, inputs=["h0"], layout="onnx"))
    assert not {"Expand", "Shape"} & set(body_ops), body_ops
    rng = np.random.default_rng(5)
    feeds = {"h0": rng.uniform(-1.0, 1.0, (2, 3)), "X": rng.uniform(-1.0, 1.0, (4, 2, 3))}
    errors = check_derivatives(m, feeds, inputs=["h0"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_run_time_trip_count_reverse_is_a_guarded_scan(steps):
    """A Loop over a trip count fed at run time: the reverse is a Scan over
    the stored states inside an If on a positive count (ONNX Runtime's Scan
    cannot run zero steps), the other branch passing the cotangents through;
    exact at 0, 1 and 3 steps."""
    body = h.make_graph([h.make_node("Sin", ["v"], ["sv"], name="r_sin"),
                         h.make_node("Mul", ["sv", "w"], ["ws"], name="r_mul"),
                         h.make_node("Add", ["v", "ws"], ["vn"], name="r_add"),
                         h.make_node("Identity", ["cin"], ["cout"], name="r_cond")],
                        "body", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [2])],
                        [vi("cout", B, []), vi("vn", D, [2])])
    m = model([h.make_node("Loop", ["M", "", "v0"], ["vT"], body=body, name="r_loop")],
              [("M", I64, []), ("v0", D, [2]), ("w", D, [2])], [("vT", D, [2])])
    r = reverse(m, inputs=["v0", "w"], layout="onnx")
    kinds = [n.op_type for n in r.graph.node]
    assert kinds.count("Loop") == 1 and "If" in kinds, kinds
    feeds = {"M": np.array(steps, np.int64), "v0": np.array([0.3, -0.4]),
             "w": np.array([0.5, 0.7])}
    errors = check_derivatives(m, feeds, inputs=["v0", "w"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, inputs=["v0", "w"])


def _rnn_with_input_projection() -> onnx.ModelProto:
    body = h.make_graph([h.make_node("MatMul", ["h", "W"], ["hw"], name="p_mmh"),
                         h.make_node("MatMul", ["xt", "U"], ["xu"], name="p_mmx"),
                         h.make_node("Add", ["hw", "xu"], ["pre"], name="p_add"),
                         h.make_node("Tanh", ["pre"], ["hn"], name="p_tanh"),
                         h.make_node("Identity", ["hn"], ["yo"], name="p_id")],
                        "body", [vi("h", D, [1, 3]), vi("xt", D, [1, 2])],
                        [vi("hn", D, [1, 3]), vi("yo", D, [1, 3])])
    return model([h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=body, num_scan_inputs=1,
                               name="p_scan")],
                 [("h0", D, [1, 3]), ("X", D, [5, 1, 2]), ("W", D, [3, 3]), ("U", D, [2, 3])],
                 [("hT", D, [1, 3]), ("Y", D, [5, 1, 3])])


def test_maps_of_scan_inputs_run_on_whole_stacks():
    """h' = tanh(h W + x_t U): x_t U depends on the step's slice alone, so
    it runs once on the whole X in front of the Scan (one MatMul over [T, 1,
    3]) and the body reads its slices; in the reverse Scan, 1 - tanh^2 of
    the stacked tanh likewise. Same values: both modes and second order
    against central differences."""
    m = _rnn_with_input_projection()
    r = reverse(m, layout="onnx")
    primal, rev = [n for n in r.graph.node if n.op_type == "Scan"]
    assert _body_ops(primal).count("MatMul") == 1  # h W; x_t U runs on X in front
    assert "Sub" not in _body_ops(rev) and "Sub" in [n.op_type for n in r.graph.node]
    feeds = {"h0": _r(1, 3), "X": _r(5, 1, 2), "W": _r(3, 3), "U": _r(2, 3)}
    errors = check_derivatives(m, feeds, outputs=["hT", "Y"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output="hT")


def test_weight_cotangents_are_summed_after_the_reverse_scan():
    """The reverse sweep of h' = tanh(h W + x_t U) w.r.t. W and U used to
    carry their cotangents, adding h_t^T d_t and x_t^T d_t (a MatMul and an
    Add each) at every step. The sums now come after the Scan: it stacks
    d_t, and one batched MatMul over the stacks, summed over the steps,
    gives each (sink_sums.py); the only carried value left is h's
    cotangent. The cotangent of x_t, d_t U^T, a map of d_t the Scan only
    stacks, runs behind it on the stack too, the one stack of d_t (it was
    stacked twice, for X's cotangent and for the sums). Values: central
    differences, the dot test, second order."""
    m = _rnn_with_input_projection()
    r = reverse(m, layout="onnx")
    rev = [n for n in r.graph.node if n.op_type == "Scan"][1]
    carried = len(rev.input) - next(a.i for a in rev.attribute if a.name == "num_scan_inputs")
    assert carried == 1, rev.input
    # d_t W^T only: no h_t^T d_t, x_t^T d_t, and X's cotangent d_t U^T runs
    # once on the stack of d_t behind the Scan (hoist_maps.sink_maps)
    assert _body_ops(rev).count("MatMul") == 1
    assert len(rev.output) == carried + 1 and "Identity" not in _body_ops(rev)
    feeds = {"h0": _r(1, 3), "X": _r(5, 1, 2), "W": _r(3, 3), "U": _r(2, 3)}
    errors = check_derivatives(m, feeds, outputs=["hT", "Y"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output="hT")
    check_hessian(m, feeds, output="hT", inputs=["W", "U"])


def test_running_sum_in_the_primal_scan():
    """A Scan of the model itself that only accumulates (a running sum of
    x_t^2 beside an RNN state): sink_sums takes the sum after the Scan in
    the derivative models too, their primal outputs equal the model's up to
    the order of additions, and the derivatives are exact."""
    body = h.make_graph([h.make_node("Mul", ["xt", "xt"], ["sq"], name="s_sq"),
                         h.make_node("Add", ["acc", "sq"], ["acc2"], name="s_acc"),
                         h.make_node("MatMul", ["hb", "W"], ["hw"], name="s_mm"),
                         h.make_node("Add", ["hw", "xt"], ["pre"], name="s_add"),
                         h.make_node("Tanh", ["pre"], ["hn"], name="s_tanh")],
                        "body", [vi("acc", D, [1, 3]), vi("hb", D, [1, 3]), vi("xt", D, [1, 3])],
                        [vi("acc2", D, [1, 3]), vi("hn", D, [1, 3])])
    m = model([h.make_node("Scan", ["a0", "h0", "X"], ["aT", "hT"], body=body,
                           num_scan_inputs=1, name="s_scan")],
              [("a0", D, [1, 3]), ("h0", D, [1, 3]), ("X", D, [5, 1, 3]), ("W", D, [3, 3])],
              [("aT", D, [1, 3]), ("hT", D, [1, 3])])
    feeds = {"a0": _r(1, 3), "h0": _r(1, 3), "X": _r(5, 1, 3), "W": _r(3, 3)}
    primal = run(m, feeds)
    for d in (forward(m, layout="onnx"), reverse(m, layout="onnx")):
        scan = next(n for n in d.graph.node if n.op_type == "Scan")
        assert "a0" not in scan.input  # (the running sum is no carried value)
        got = run(d, {**feeds, **{vi.name: np.ones([x.dim_value or 1 for x in
                                                    vi.type.tensor_type.shape.dim])
                                  for vi in d.graph.input if vi.name not in feeds}})
        np.testing.assert_allclose(got["aT"], primal["aT"], rtol=1e-14)
    errors = check_derivatives(m, feeds, outputs=["aT", "hT"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output="aT")


def test_linear_ops_on_a_step_value_run_on_its_sum():
    """acc' = acc + ReduceSum(2 h_t), the 2 a constant of the body: Mul by it
    and ReduceSum are linear in h_t, so the Scan stacks h_t alone and both
    run once on sum_t h_t behind it (the constant cloned there); exact."""
    two = h.make_tensor("two_v", TP.DOUBLE, [], [2.0])
    body = h.make_graph([h.make_node("Constant", [], ["two"], value=two, name="c_two"),
                         h.make_node("Mul", ["hb", "two"], ["h2"], name="c_h2"),
                         h.make_node("ReduceSum", ["h2"], ["s"], keepdims=0, name="c_rs"),
                         h.make_node("Add", ["acc", "s"], ["acc2"], name="c_acc"),
                         h.make_node("Add", ["hb", "xt"], ["p"], name="c_p"),
                         h.make_node("Tanh", ["p"], ["hn"], name="c_tanh")],
                        "body", [vi("acc", D, []), vi("hb", D, [3]), vi("xt", D, [3])],
                        [vi("acc2", D, []), vi("hn", D, [3])])
    m = model([h.make_node("Scan", ["a0", "h0", "X"], ["aT", "hT"], body=body,
                           num_scan_inputs=1, name="c_scan")],
              [("a0", D, []), ("h0", D, [3]), ("X", D, [4, 3])], [("aT", D, []), ("hT", D, [3])])
    f = forward(m, inputs=["h0", "X"], layout="onnx")
    kinds = [n.op_type for n in f.graph.node]
    scan = kinds.index("Scan")
    assert "Mul" in kinds[scan:] and "ReduceSum" not in _body_ops(f.graph.node[scan])
    feeds = {"a0": np.array(0.5), "h0": _r(3), "X": _r(4, 3)}
    errors = check_derivatives(m, feeds, outputs=["aT", "hT"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output="aT")


def test_increment_from_outside_stays_in_the_scan():
    """acc' = acc + w with w from outside the body: no step value to stack
    (a Scan cannot yield a value of the outer scope as a stack here), so the
    accumulation stays in the body; exact in both modes and second order."""
    body = h.make_graph([h.make_node("Mul", ["w", "w"], ["ww"], name="li_ww"),
                         h.make_node("Add", ["ww", "xt"], ["inc"], name="li_inc"),
                         h.make_node("Add", ["acc", "w"], ["acc2"], name="li_acc")],
                        "body", [vi("acc", D, [3]), vi("xt", D, [3])], [vi("acc2", D, [3]),
                                                                        vi("inc", D, [3])])
    m = model([h.make_node("Scan", ["a0", "X"], ["aT", "incs"], body=body, num_scan_inputs=1,
                           name="li_scan")],
              [("a0", D, [3]), ("X", D, [4, 3]), ("w", D, [3])],
              [("aT", D, [3]), ("incs", D, [4, 3])])
    scan = next(n for n in forward(m, layout="onnx").graph.node if n.op_type == "Scan")
    assert "a0" in scan.input
    feeds = {"a0": _r(3), "X": _r(4, 3), "w": _r(3)}
    errors = check_derivatives(m, feeds, outputs=["aT", "incs"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output="aT")


def test_maps_of_tangent_stacks_run_on_whole_stacks():
    """Tangent stacks are scanned on axis 1, behind their direction axis:
    dx_t U is still a map of the step's slice, so forward mode runs it once
    on the whole tangent stack (the body keeps h W and dh W only). In the
    Hessian-vector model (W and U inputs too), the reverse body's x_t^T and
    h_t^T of the weights' adjoints and the Unsqueezes lining primal slices
    up with tangents run on the stacks as well (an Unsqueeze of a value from
    outside stays: that is no map of a slice). Values: both modes and
    second order against central differences."""
    m = _rnn_with_input_projection()
    f = forward(m, inputs=["X"], layout="onnx")
    scan = next(n for n in f.graph.node if n.op_type == "Scan")
    assert _body_ops(scan).count("MatMul") == 2
    # (scanned on axis 1 inside; exported as axis 0 of a Transpose: portable.py)
    assert not [a for a in scan.attribute if a.name.startswith("scan_")]
    hvp = forward(reverse(m, layout="onnx"), outputs=["adj_X", "adj_W", "adj_U"], layout="onnx")
    for scan in (n for n in hvp.graph.node if n.op_type == "Scan"):
        body = next(a.g for a in scan.attribute if a.name == "body")
        slices = {vi.name for vi in body.input}
        assert not [n for n in body.node if n.op_type in ("Transpose", "Unsqueeze")
                    and n.input[0] in slices], onnx.printer.to_text(body)
    feeds = {"h0": _r(1, 3), "X": _r(5, 1, 2), "W": _r(3, 3), "U": _r(2, 3)}
    errors = check_derivatives(m, feeds, outputs=["hT", "Y"])
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-9
    check_hessian(m, feeds, output="hT")


@pytest.mark.parametrize("layout", ["onnx", "casadi"])
def test_stacked_output_of_a_run_time_trip_count_needs_no_unbroadcasting(layout):
    """A Loop's scan output stacks a run-time number of steps, read through
    a Transpose: the seed's extents and those of the Loop's result in
    reverse mode's linear program are one (its stand-in's results are
    registered as [k] + the result's extents), so no run-time check of
    which axes to sum (Shape, Equal, NonZero, ReduceSum: 41 -> 25 reverse
    nodes in the casadi layout)."""
    body = h.make_graph([h.make_node("Sin", ["v"], ["sv"], name="s_sin"),
                         h.make_node("Mul", ["sv", "w"], ["ws"], name="s_mul"),
                         h.make_node("Add", ["v", "ws"], ["vn"], name="s_add"),
                         h.make_node("Identity", ["vn"], ["out"], name="s_out"),
                         h.make_node("Identity", ["cin"], ["cout"], name="s_cond")],
                        "body", [vi("i", I64, []), vi("cin", B, []), vi("v", D, [2, 3])],
                        [vi("cout", B, []), vi("vn", D, [2, 3]), vi("out", D, [2, 3])])
    m = model([h.make_node("Loop", ["M", "", "v0"], ["vT", "stack"], body=body, name="s_loop"),
               h.make_node("Transpose", ["stack"], ["y"], perm=[1, 0, 2], name="s_t")],
              [("M", I64, []), ("v0", D, [2, 3]), ("w", D, [2, 3])], [("y", D, [2, "T", 3])])
    kinds = [n.op_type for n in reverse(m, inputs=["v0", "w"], layout=layout).graph.node]
    assert not {"NonZero", "ReduceSum", "Equal"} & set(kinds), kinds
    rng = np.random.default_rng(6)
    feeds = {"M": np.array(3, np.int64), "v0": rng.uniform(-1, 1, (2, 3)),
             "w": rng.uniform(-1, 1, (2, 3))}
    check_derivatives(m, feeds, inputs=["v0", "w"])
