#!/usr/bin/env python3
"""Loops over a run-time batch: do the derivative models pay for it?

A Scan or Loop body sees its batch as `?`. Unless the derivative rules can
prove which `?` extents are equal, reverse mode sums every cotangent back to
its operand's shape with run-time shape arithmetic in every step (Shape,
Equal, NonZero, ReduceSum). This script builds two recurrences, h <- tanh(h W
+ x_t U) * x_t + h as a Scan and h <- tanh(h W) * x + h as a Loop (H 32, 50
steps, batch 8), each declared three ways: the batch static, the batch a
named run-time extent `n`, and `n` with the outputs' extents under names of
their own (as torch exports a Loop's outputs). In one process with
interleaved rounds it times the forward and reverse models over the primal
and counts the ops of their bodies: with every `?` proved, the run-time
declarations cost what the static one does.

    /opt/adv/bin/python bench/dynamic_batch.py [--rounds 15]
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import run

H, B, STEPS = 32, 8, 50


def _weights(rng: np.random.Generator, *names: str) -> list[onnx.TensorProto]:
    return [nh.from_array((rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32), n)
            for n in names]


def scan_rnn(batch, out: list) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    vi = h.make_tensor_value_info
    body = h.make_graph(
        [h.make_node("MatMul", ["hb", "W"], ["a"]), h.make_node("MatMul", ["xt", "U"], ["b"]),
         h.make_node("Add", ["a", "b"], ["c"]), h.make_node("Tanh", ["c"], ["d"]),
         h.make_node("Mul", ["d", "xt"], ["e"]), h.make_node("Add", ["e", "hb"], ["hn"]),
         h.make_node("Identity", ["hn"], ["yt"])], "body",
        [vi("hb", T.FLOAT, [None, H]), vi("xt", T.FLOAT, [None, H])],
        [vi("hn", T.FLOAT, [None, H]), vi("yt", T.FLOAT, [None, H])])
    g = h.make_graph([h.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=body, num_scan_inputs=1)],
                     "scan_rnn", [vi("h0", T.FLOAT, [batch, H]), vi("X", T.FLOAT, [STEPS, batch, H])],
                     [vi("hT", T.FLOAT, out), vi("Y", T.FLOAT, [STEPS] + out)],
                     _weights(rng, "W", "U"))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def loop_rnn(batch, out: list) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    vi = h.make_tensor_value_info
    body = h.make_graph(
        [h.make_node("MatMul", ["hb", "W"], ["a"]), h.make_node("Tanh", ["a"], ["d"]),
         h.make_node("Mul", ["d", "X"], ["e"]), h.make_node("Add", ["e", "hb"], ["hn"]),
         h.make_node("Identity", ["c"], ["co"])], "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("hb", T.FLOAT, [None, H])],
        [vi("co", T.BOOL, []), vi("hn", T.FLOAT, [None, H])])
    steps = nh.from_array(np.array(STEPS, np.int64), "steps")
    g = h.make_graph([h.make_node("Loop", ["steps", "", "h0"], ["hT"], body=body)], "loop_rnn",
                     [vi("h0", T.FLOAT, [batch, H]), vi("X", T.FLOAT, [batch, H])],
                     [vi("hT", T.FLOAT, out)], _weights(rng, "W") + [steps])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def body_ops(m: onnx.ModelProto) -> int:
    return sum(len(a.g.node) for n in m.graph.node for a in n.attribute
               if a.type == onnx.AttributeProto.GRAPH)


def measure(m: onnx.ModelProto, rounds: int) -> dict:
    import onnx_ad_mlir
    rng = np.random.default_rng(1)
    feeds = {i.name: (0.3 * rng.standard_normal([d.dim_value or B for d in
                                                i.type.tensor_type.shape.dim])).astype(np.float32)
             for i in m.graph.input}
    models = {"primal": m, "fwd": onnx_ad_mlir.forward(m, layout="onnx"),
              "rev": onnx_ad_mlir.reverse(m, layout="onnx")}
    values = dict(feeds)
    values.update(zip([o.name for o in m.graph.output], run.session(m).run(None, feeds)))
    runs = {}
    for kind, model in models.items():
        f = dict(feeds)
        for i in model.graph.input:
            if i.name not in f:  # a seed fwd_<x> / adj_<y>: that value's shape + [1]
                f[i.name] = np.ones(values[i.name.split("_", 1)[1]].shape + (1,), np.float32)
        runs[kind] = (run.session(model), f)
    med = run.interleaved_medians({kind: (s, f, None) for kind, (s, f) in runs.items()}, rounds)
    return {"fwd_x": med["fwd"] / med["primal"], "rev_x": med["rev"] / med["primal"],
            "fwd_body": body_ops(models["fwd"]), "rev_body": body_ops(models["rev"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    lines = ["| model | batch declared | fwd/primal | rev/primal | body ops fwd / rev |",
             "|---|---|---|---|---|"]
    for name, make in (("scan_rnn", scan_rnn), ("loop_rnn", loop_rnn)):
        for label, batch, out in (("static 8", B, [B, H]), ("n", "n", ["n", H]),
                                  ("n, outputs renamed", "n", ["out_0", "out_1"])):
            r = measure(make(batch, out), a.rounds)
            lines.append(f"| {name} | {label} | {r['fwd_x']:.2f} | {r['rev_x']:.2f} | "
                         f"{r['fwd_body']} / {r['rev_body']} |")
            print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
