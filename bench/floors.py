#!/usr/bin/env python3
"""How far the derivative models are from the time of their linear kernels.

    /opt/adv/bin/python bench/floors.py [--models mlp,cnn,resnet,if_model] [--rounds 20]

Forward mode has to apply each of the primal's linear maps to the tangent
as well as run the primal; reverse mode has to apply their transposes. The
kernels that do this (Conv, ConvTranspose, Gemm, MatMul and ONNX Runtime's
fused and NCHWc forms of them) set a floor that no rewrite of the rest (masks,
layout reorders, reshapes, elementwise ops) can go below with these kernels.

Per model and mode, this script times the primal, our model and onnx-ad's
side by side (bench/run.py's `measure`). It then profiles our model with ONNX
Runtime's profiler to get the linear kernels' share of its time. The profiler
charges every node its own overhead, so the share it reports is a little low,
and the floors below are a little low too: a bar above a floor may still be
out of reach, but a bar below a floor certainly is.

Columns: time over the primal's for ours, for our linear kernels (the floor)
and for onnx-ad; ours÷onnx-ad as measured, and the best ours÷onnx-ad the
floor allows. Writes floors.md beside the other results (--out).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile

import run

LINEAR = {"Conv", "ConvTranspose", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul"}
DEFAULT = ["mlp", "cnn", "resnet", "if_model", "zoo_densenet121"]


def linear_time(model, feeds: dict, outs: list, runs: int) -> float:
    """Seconds per run ONNX Runtime's profiler reports for the LINEAR ops' kernels."""
    so = run.ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.execution_mode = run.ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="floors-"), "p")
    s = run.ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        s.run(outs, feeds)
    path = s.end_profiling()
    by_op = collections.Counter()
    for e in json.load(open(path)):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
    os.remove(path)
    return sum(v for k, v in by_op.items() if k in LINEAR) * 1e-6 / runs


def floors(case: dict, rounds: int, onnx_ad: dict) -> list[dict]:
    ours = run.our_transforms(case, 1)
    variants = {"primal": (case["model"], "primal", None)}
    for kind in ("fwd", "rev"):
        for label, entry, peer in ((f"ours_{kind}", ours.get(kind), "ours"),
                                   (f"onnx_ad_{kind}", onnx_ad.get(kind), "onnx-ad")):
            if entry and "model" in entry:
                variants[label] = (entry["model"], kind, peer)
    times = run.measure(case, variants, rounds)
    primal = times["primal"]["median_s"]
    rows = []
    for kind in ("fwd", "rev"):
        mine = times.get(f"ours_{kind}", {})
        if "median_s" not in mine:
            continue
        model = variants[f"ours_{kind}"][0]
        feeds, outs = run._derivative_io(case, model, kind, "ours")
        floor_s = linear_time(model, feeds, outs, max(5, rounds))
        peer = times.get(f"onnx_ad_{kind}", {}).get("median_s")
        rows.append({"model": case["name"], "mode": kind, "primal_s": primal,
                     "ours": mine["median_s"] / primal, "floor": floor_s / primal,
                     "onnx_ad": peer / primal if peer else None,
                     "ours_vs_onnx_ad": mine["median_s"] / peer if peer else None,
                     "floor_vs_onnx_ad": floor_s / peer if peer else None})
    return rows


def report(rows: list[dict]) -> str:
    f = lambda v: "-" if v is None else f"{v:.2f}"
    lines = ["| model | mode | primal | ours / primal | linear kernels (floor) / primal | "
             "onnx-ad / primal | ours÷onnx-ad | floor÷onnx-ad |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['mode']} | {run.fmt_t(r['primal_s'])} | {f(r['ours'])} | "
                     f"{f(r['floor'])} | {f(r['onnx_ad'])} | {f(r['ours_vs_onnx_ad'])} | "
                     f"{f(r['floor_vs_onnx_ad'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--onnx-ad-python", default="/opt/benchenv/bin/python")
    ap.add_argument("--out", default=os.path.join(run.HERE, "results"))
    a = ap.parse_args()
    names = [n for n in a.models.split(",")
             if os.path.exists(os.path.join(run.CORPUS, f"{n}.onnx"))]
    cases = [run.load_case(n) for n in names]
    for c in cases:
        if c["ref"] is None:
            run.fd_reference(c)
    peers = run.peer_transforms("onnx-ad", a.onnx_ad_python, cases, 1,
                                tempfile.mkdtemp(prefix="floors-"))
    rows = []
    for c in cases:
        new = floors(c, a.rounds, peers.get(c["name"], {}))
        rows += new
        print("\n".join(report(new).splitlines()[2:]), flush=True)
    text = report(rows)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "floors.md"), "w") as fh:
        fh.write(f"ONNX Runtime {run.ort.__version__}, 1 thread, median of {a.rounds} rounds.\n\n"
                 + text + "\n")
    print(text)


if __name__ == "__main__":
    main()
