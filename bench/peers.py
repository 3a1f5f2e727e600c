#!/usr/bin/env python3
"""Builds the peers' derivative models; run by bench/run.py in the peers' own
environments (a subprocess each), never imported by the product.

    <onnx-ad env>/bin/python bench/peers.py onnx-ad  jobs.json results.json
    <ort-training env>/bin/python bench/peers.py ort-training jobs.json results.json

jobs.json: [{"name", "path", "inputs": [...], "outputs": [...], "out_dir", "repeat"}].
Writes, per job, the derivative models' paths, the transform time (best of
`repeat`, wall clock, in this process) or the error met.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback


def _best(repeat, fn):
    best, out = float("inf"), None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def onnx_ad_job(job):
    import onnx
    import onnx_ad
    model = onnx.load(job["path"])
    out = {}
    for kind, fn in (("fwd", onnx_ad.forward), ("rev", onnx_ad.reverse)):
        try:
            t, m = _best(job["repeat"], lambda: fn(model, inputs=job["inputs"],
                                                    outputs=job["outputs"], layout="onnx"))
            path = os.path.join(job["out_dir"], f"{job['name']}.onnx_ad.{kind}.onnx")
            onnx.save(m, path)
            out[kind] = {"path": path, "transform_s": t}
        except Exception as e:  # noqa: BLE001 - reported in the table
            out[kind] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    return out


def ort_training_job(job):
    """The gradient graph of loss = sum(y * u) w.r.t. the inputs: its
    `<x>_grad` outputs are J^T u, one reverse pass (u is an extra input)."""
    import onnx
    from onnx import helper as h
    from onnxruntime.capi._pybind_state import GradientGraphBuilder
    model = onnx.load(job["path"])
    g = model.graph
    y = job["outputs"][0]
    y_vi = next(o for o in g.output if o.name == y)
    u_vi = onnx.ValueInfoProto()
    u_vi.CopyFrom(y_vi)
    u_vi.name = "bench_u"
    g.input.append(u_vi)
    g.node.extend([h.make_node("Mul", [y, "bench_u"], ["bench_yu"]),
                   h.make_node("ReduceSum", ["bench_yu"], ["bench_loss"], keepdims=0)])
    g.output.append(h.make_tensor_value_info("bench_loss", y_vi.type.tensor_type.elem_type, []))
    try:
        def build():
            b = GradientGraphBuilder(model.SerializeToString(), {y}, set(job["inputs"]),
                                     "bench_loss")
            b.build()
            return b
        t, b = _best(job["repeat"], build)
        path = os.path.join(job["out_dir"], f"{job['name']}.ort_training.rev.onnx")
        b.save(path)
        # The graph reads the seed `<y>_grad` without declaring it: make it an input.
        grad = onnx.load(path)
        declared = {vi.name for vi in grad.graph.input}
        used = {i for n in grad.graph.node for i in n.input}
        if f"{y}_grad" in used and f"{y}_grad" not in declared:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(y_vi)
            vi.name = f"{y}_grad"
            grad.graph.input.append(vi)
            onnx.save(grad, path)
        return {"rev": {"path": path, "transform_s": t, "seed_input": "bench_u",
                        "grad_outputs": [x + "_grad" for x in job["inputs"]]}}
    except Exception as e:  # noqa: BLE001
        return {"rev": {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"}}


def ort_training_run(spec_path, out_path):
    """Times a gradient graph that needs the training build's kernels
    (com.microsoft *Grad ops) beside its primal, in this process, the way
    run.py times the others; saves the gradient for the error check."""
    import statistics
    import numpy as np
    import onnxruntime as ort
    spec = json.load(open(spec_path))
    data = dict(np.load(spec["feeds"]))

    def sess(path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    runs = []
    for path, feed_names, outs in ((spec["primal"], spec["primal_feeds"], spec["primal_outs"]),
                                   (spec["grad"], spec["grad_feeds"], spec["grad_outs"])):
        s = sess(path)
        feeds = {k: data[k] for k in feed_names}
        result = s.run(outs, feeds)
        for _ in range(2):
            s.run(outs, feeds)
        runs.append([s, outs, feeds, result, []])
    for i in range(spec["rounds"]):
        for r in (runs if i % 2 == 0 else runs[::-1]):
            t0 = time.perf_counter()
            for _ in range(spec["inner"]):
                r[0].run(r[1], r[2])
            r[4].append((time.perf_counter() - t0) / spec["inner"])
    np.save(out_path + ".npy", runs[1][3][0])
    json.dump({"primal_s": statistics.median(runs[0][4]), "grad_s": statistics.median(runs[1][4]),
               "ort": ort.__version__}, open(out_path, "w"))


def main() -> None:
    if sys.argv[1] == "ort-training-run":
        ort_training_run(*sys.argv[2:4])
        return
    peer, jobs_path, out_path = sys.argv[1:4]
    jobs = json.load(open(jobs_path))
    fn = {"onnx-ad": onnx_ad_job, "ort-training": ort_training_job}[peer]
    results = {}
    for job in jobs:
        try:
            results[job["name"]] = fn(job)
        except Exception as e:  # noqa: BLE001
            results[job["name"]] = {"error": traceback.format_exc(limit=2)[-300:]}
            print(f"{peer} {job['name']}: {e}", file=sys.stderr)
    json.dump(results, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
