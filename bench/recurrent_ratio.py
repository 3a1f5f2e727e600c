"""Reverse/primal and forward/primal run-time ratios for RNN-family models.

ONNX Runtime, 1 thread, median of N runs (default 20), gradient (one seed).
Times are CPU time of the calling thread (ORT with one intra-op thread runs
there), so a machine shared with other jobs does not inflate them; primal,
reverse and forward runs are interleaved.
Models: the torch fixtures gru/lstm (2-layer bidirectional, tiny), and
hand-built bidirectional GRU/LSTM with seq 50, batch 8, input 64, hidden 64,
differentiated w.r.t. X only and w.r.t. X and all weights.

  python bench/recurrent_ratio.py [--runs 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from onnx_ad_mlir.api import forward, reverse

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "test", "fixtures", "torch")


def session(m):
    o = ort.SessionOptions()
    o.intra_op_num_threads = o.inter_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])


def timed(cases, runs):
    """Median CPU time of each (model, feeds), runs interleaved."""
    sessions = [(session(m), f) for m, f in cases]
    for s, f in sessions:
        for _ in range(3):
            s.run(None, f)
    ts = [[] for _ in cases]
    for _ in range(runs):
        for j, (s, f) in enumerate(sessions):
            t0 = time.thread_time()
            s.run(None, f)
            ts[j].append(time.thread_time() - t0)
    return [statistics.median(t) for t in ts]


def big(kind, T=50, B=8, I=64, H=64, weights_as_inputs=False, seed=0):
    G = {"GRU": 3, "LSTM": 4}[kind]
    rng = np.random.default_rng(seed)
    vals = {"X": rng.standard_normal([T, B, I]), "W": 0.1 * rng.standard_normal([2, G * H, I]),
            "R": 0.1 * rng.standard_normal([2, G * H, H]), "B": 0.1 * rng.standard_normal([2, 2 * G * H])}
    vals = {k: v.astype(np.float32) for k, v in vals.items()}
    outs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    attrs = {"linear_before_reset": 1} if kind == "GRU" else {}
    node = helper.make_node(kind, ["X", "W", "R", "B"], outs, direction="bidirectional",
                            hidden_size=H, **attrs)
    ins = ["X"] + (["W", "R", "B"] if weights_as_inputs else [])
    graph = helper.make_graph(
        [node], kind.lower(),
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(vals[k].shape)) for k in ins],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [T, 2, B, H])],
        [onnx.numpy_helper.from_array(vals[k], k) for k in vals if k not in ins])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return m, {k: vals[k] for k in ins}


def measure(name, model, feeds, runs):
    xs = list(feeds)
    t0 = time.perf_counter()
    adj = reverse(model, inputs=xs, outputs=["y" if "y" in [o.name for o in model.graph.output] else "Y"],
                  layout="onnx")
    fwd = forward(model, inputs=xs[:1], layout="onnx")
    transform = time.perf_counter() - t0
    ys = dict(zip([o.name for o in session(model).get_outputs()], session(model).run(None, feeds)))
    yname = [o.name for o in adj.graph.input if o.name.startswith("adj_")][0]
    w = np.random.default_rng(1).standard_normal(ys[yname[4:]].shape + (1,)).astype(np.float32)
    v = np.random.default_rng(2).standard_normal(feeds[xs[0]].shape + (1,)).astype(np.float32)
    p, r, f = timed([(model, feeds), (adj, {**feeds, yname: w}),
                     (fwd, {**feeds, f"fwd_{xs[0]}": v})], runs)
    print(f"| {name} | {len(model.graph.node)} | {len(adj.graph.node)} | {p * 1e3:.3f} | "
          f"{r * 1e3:.3f} | {r / p:.2f} | {f / p:.2f} | {transform:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    print("| model | primal nodes | reverse nodes | primal ms | reverse ms | reverse/primal | "
          "forward/primal (1 dir) | transform s |")
    print("|---|---|---|---|---|---|---|---|")
    for n in ("gru", "lstm"):
        m = onnx.load(os.path.join(FIXTURES, f"{n}.onnx"))
        x = np.load(os.path.join(FIXTURES, f"{n}.npz"))["x"]
        measure(f"fixture {n} (wrt x)", m, {"x": x}, a.runs)
    for kind in ("GRU", "LSTM"):
        for wi in (False, True):
            m, feeds = big(kind, weights_as_inputs=wi)
            measure(f"{kind} T50 B8 H64 bidir (wrt X{', W, R, B' if wi else ''})", m, feeds, a.runs)


if __name__ == "__main__":
    sys.exit(main())
