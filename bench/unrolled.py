"""Reverse/primal run-time ratio of recurrences unrolled over T steps.

An RNN cell h <- tanh(x[:, t] W + h U) written out for each of T steps, as
torch's exporters unroll a Python loop over a sequence: dynamo reads x[:, t]
by Gather of a scalar index, TorchScript by Slice + Squeeze. Each read's
cotangent is x's extent; summed one by one that costs T full-size tensors
(quadratic in T), concatenated once it is linear (simplify.py, "sums of
placements"). ONNX Runtime, 1 thread, CPU time of the calling thread,
median of N interleaved runs; batch 4, width 32.

  python bench/unrolled.py [--steps 16,64,256] [--runs 30]
"""
from __future__ import annotations

import argparse

import numpy as np
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from onnx_ad_mlir.api import reverse
from recurrent_ratio import timed

B, D = 4, 32


def unrolled(steps: int, read: str):
    """The cell over `steps` steps, x [B, steps, D] read by `read` ("gather",
    "slice") at each."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32), "W"),
             nh.from_array((rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32), "U"),
             nh.from_array(np.zeros((B, D), np.float32), "h_init")]
    if read == "slice":
        inits.append(nh.from_array(np.array([1], np.int64), "axis1"))
    nodes, h = [], "h_init"
    for t in range(steps):
        if read == "gather":
            inits.append(nh.from_array(np.array(t, np.int64), f"t{t}"))
            nodes.append(helper.make_node("Gather", ["x", f"t{t}"], [f"x{t}"], axis=1))
        else:
            inits += [nh.from_array(np.array([t], np.int64), f"t{t}"),
                      nh.from_array(np.array([t + 1], np.int64), f"u{t}")]
            nodes += [helper.make_node("Slice", ["x", f"t{t}", f"u{t}", "axis1"], [f"s{t}"]),
                      helper.make_node("Squeeze", [f"s{t}", "axis1"], [f"x{t}"])]
        nodes += [helper.make_node("MatMul", [f"x{t}", "W"], [f"a{t}"]),
                  helper.make_node("MatMul", [h, "U"], [f"b{t}"]),
                  helper.make_node("Add", [f"a{t}", f"b{t}"], [f"c{t}"]),
                  helper.make_node("Tanh", [f"c{t}"], [f"h{t}"])]
        h = f"h{t}"
    nodes.append(helper.make_node("Identity", [h], ["y"]))
    g = helper.make_graph(nodes, "unrolled",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, steps, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, D])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="16,64,256")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    print("| read | T | nodes primal / reverse | primal | reverse/primal |")
    print("|---|---|---|---|---|")
    for read in ("gather", "slice"):
        for steps in (int(s) for s in args.steps.split(",")):
            m = unrolled(steps, read)
            r = reverse(m, layout="onnx")
            x = rng.standard_normal((B, steps, D)).astype(np.float32)
            seed = rng.standard_normal((B, D, 1)).astype(np.float32)
            p, q = timed([(m, {"x": x}), (r, {"x": x, "adj_y": seed})], args.runs)
            print(f"| {read} | {steps} | {len(m.graph.node)} / {len(r.graph.node)} | "
                  f"{p * 1e3:.3g} ms | {q / p:.2f} |", flush=True)


if __name__ == "__main__":
    main()
