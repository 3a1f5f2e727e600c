#!/usr/bin/env python3
"""Second order: Hessian-vector products as forward(reverse(m)).

IPOPT's exact Hessians and Newton-type solvers ask for H v = d/dx <u, J(x) v>
products: our reverse model differentiated again in forward mode, the
derivative model that `family` writes as fwd_adj_f.onnx. For each corpus
model, in one process with interleaved rounds like run.py: node counts and
the run time of the reverse model and of the Hessian-vector model (one
direction v, one adjoint seed u) as multiples of the primal's, the second
transform's time, and a check that needs no reference: with the same u,
<v2, H v1> = <v1, H v2> (the Hessian is symmetric), reported as the relative
asymmetry.

    /opt/adv/bin/python bench/second_order.py [--models lstm,gru] [--rounds 15]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import run

DEFAULT_MODELS = ["mlp", "gelu_mlp", "cnn", "transformer_block", "resnet", "gru", "lstm",
                  "if_model", "scan_rnn", "loop_model", "neural_ode"]


def models(case: dict) -> dict:
    import onnx_ad_mlir
    x = case["inputs"][0]
    rev = onnx_ad_mlir.reverse(case["model"], inputs=case["inputs"], outputs=case["outputs"],
                               layout="onnx")
    t0 = time.perf_counter()
    hvp = onnx_ad_mlir.forward(rev, inputs=case["inputs"], outputs=[f"adj_{x}"], layout="onnx")
    return {"rev": rev, "hvp": hvp, "transform_s": time.perf_counter() - t0}


def asymmetry(case: dict, session, rng: np.random.Generator) -> float:
    """|<v2, H v1> - <v1, H v2>| / max of the two, for random v1, v2."""
    x, y = case["inputs"][0], case["outputs"][0]
    v = [rng.standard_normal(case["v"].shape).astype(case["v"].dtype) for _ in range(2)]
    hv = [session.run([f"fwd_adj_{x}"], {**case["feeds"], f"adj_{y}": case["u"][..., None],
                                         f"fwd_{x}": vi[..., None]})[0].reshape(vi.shape)
          for vi in v]
    a = float(np.sum(v[1].astype(np.float64) * hv[0]))
    b = float(np.sum(v[0].astype(np.float64) * hv[1]))
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else 0.0


def measure(case: dict, built: dict, rounds: int) -> dict:
    x, y = case["inputs"][0], case["outputs"][0]
    adj = {f"adj_{y}": case["u"][..., None]}
    runs = {"primal": (run.session(case["model"]), dict(case["feeds"])),
            "rev": (run.session(built["rev"]), {**case["feeds"], **adj}),
            "hvp": (run.session(built["hvp"]), {**case["feeds"], **adj,
                                                f"fwd_{x}": case["v"][..., None]})}
    med = run.interleaved_medians({label: (s, feeds, None) for label, (s, feeds) in runs.items()},
                                  rounds)
    return {"primal_s": med["primal"], "rev_x": med["rev"] / med["primal"],
            "hvp_x": med["hvp"] / med["primal"],
            "asymmetry": asymmetry(case, runs["hvp"][0], np.random.default_rng(0))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(run.HERE, "results"))
    a = ap.parse_args()
    rows = []
    for name in a.models.split(","):
        case = run.load_case(name)
        built = models(case)
        row = {"model": name, "nodes": [len(case["model"].graph.node),
                                        len(built["rev"].graph.node),
                                        len(built["hvp"].graph.node)],
               "hvp_transform_s": built["transform_s"], **measure(case, built, a.rounds)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    lines = ["| model | nodes p/rev/hvp | primal | rev/primal | hvp/primal | hvp/rev | "
             "hvp transform | asymmetry |", "|---" * 8 + "|"]
    for r in rows:
        lines.append(f"| {r['model']} | {'/'.join(map(str, r['nodes']))} | "
                     f"{r['primal_s'] * 1e3:.3g} ms | {r['rev_x']:.2f} | {r['hvp_x']:.2f} | "
                     f"{r['hvp_x'] / r['rev_x']:.2f} | {r['hvp_transform_s'] * 1e3:.0f} ms | "
                     f"{r['asymmetry']:.1e} |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "second_order.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "second_order.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
