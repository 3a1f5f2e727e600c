#!/usr/bin/env python3
"""Many directions in one run: our derivative models against onnx-ad's.

A full Jacobian (CasADi's jacobian, a sensitivity matrix) asks a forward
model for one direction per input entry, or a reverse model for one per
output entry; both tools' models take them all at once (seeds S + [K]).
For each corpus model and K (default 1 and 16), in one process with
interleaved rounds like run.py: the run time of our forward and reverse
models and of onnx-ad's with K random directions, as a multiple of the
primal's time, and ours÷onnx-ad. The first direction is the corpus
reference's: its max relative error is reported as a check.

    /opt/adv/bin/python bench/directions.py [--models mlp,cnn] [--k 1,16] [--rounds 15]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np

import run

DEFAULT_MODELS = ["mlp", "gelu_mlp", "cnn", "transformer_block", "resnet", "gru", "lstm"]


def _variants(case: dict, onnx_ad_python: str) -> dict:
    """label -> (model, kind, peer) for ours and onnx-ad's fwd and rev."""
    ours = run.our_transforms(case, 1)
    peer = run.peer_transforms("onnx-ad", onnx_ad_python, [case], 1,
                               tempfile.mkdtemp(prefix="bench-dir-"))[case["name"]]
    out = {}
    for res, tag in ((ours, "ours"), (peer, "onnx-ad")):
        for kind in ("fwd", "rev"):
            if isinstance(res.get(kind), dict) and "model" in res[kind]:
                out[f"{tag} {kind}"] = (res[kind]["model"], kind, tag)
    return out


def _feeds(case: dict, model, kind: str, peer: str, k: int) -> tuple[dict, list, str]:
    feeds, outs = run._derivative_io(case, model, kind, peer)
    seed = next(n for n in feeds if n not in case["feeds"])
    first = feeds[seed]
    rng = np.random.default_rng(k)
    many = rng.standard_normal(first.shape[:-1] + (k,)).astype(first.dtype)
    many[..., 0] = first[..., 0]
    feeds[seed] = many
    primal_out = {o.name for o in case["model"].graph.output}
    return feeds, outs, next(o for o in outs if o not in primal_out)


def measure(case: dict, variants: dict, k: int, rounds: int) -> dict:
    runs = {"primal": (run.session(case["model"]), dict(case["feeds"]),
                       [o.name for o in case["model"].graph.output], None, None)}
    result = {}
    for label, (model, kind, peer) in variants.items():
        try:
            s = run.session(model)
            feeds, outs, deriv = _feeds(case, model, kind, peer, k)
            got = s.run(outs, feeds)[outs.index(deriv)]
            ref = case["ref"][{"fwd": "jvp", "rev": "vjp"}[kind]] if case["ref"] else None
            err = run._rel_err(got[..., 0], ref) if ref is not None else None
            runs[label] = (s, feeds, outs, kind, err)
        except Exception as e:  # noqa: BLE001
            result[label] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    med = run.interleaved_medians({label: r[:3] for label, r in runs.items()}, rounds)
    primal = med["primal"]
    for label in list(runs)[1:]:
        result[label] = {"median_s": med[label], "x_primal": med[label] / primal,
                         "max_rel_err": runs[label][4]}
    result["primal"] = {"median_s": primal}
    return result


def report(rows: list[dict]) -> str:
    lines = ["| model | K | primal | fwd/primal ours / onnx-ad | rev/primal ours / onnx-ad | "
             "ours÷onnx-ad fwd / rev | err (first direction) fwd / rev |", "|---" * 7 + "|"]
    for r in rows:
        t = r["times"]

        def x(label):
            return f"{t[label]['x_primal']:.2f}" if "x_primal" in t.get(label, {}) else "✗"

        def vs(kind):
            a, b = t.get(f"ours {kind}", {}), t.get(f"onnx-ad {kind}", {})
            return f"{a['median_s'] / b['median_s']:.2f}" if "median_s" in a and "median_s" in b \
                else "-"

        def err(kind):
            e = t.get(f"ours {kind}", {}).get("max_rel_err")
            return "-" if e is None else f"{e:.1e}"

        lines.append(f"| {r['name']} | {r['k']} | {run.fmt_t(t['primal']['median_s'])} | "
                     f"{x('ours fwd')} / {x('onnx-ad fwd')} | {x('ours rev')} / {x('onnx-ad rev')} | "
                     f"{vs('fwd')} / {vs('rev')} | {err('fwd')} / {err('rev')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--k", default="1,16", help="direction counts")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--onnx-ad-python", default="/opt/benchenv/bin/python")
    ap.add_argument("--out", default=os.path.join(run.HERE, "results"))
    a = ap.parse_args()
    rows = []
    for name in a.models.split(","):
        case = run.load_case(name)
        variants = _variants(case, a.onnx_ad_python)
        for k in (int(v) for v in a.k.split(",")):
            rows.append({"name": name, "k": k, "times": measure(case, variants, k, a.rounds)})
            print(report(rows[-1:]).splitlines()[-1], flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "directions.md"), "w") as f:
        f.write(report(rows) + "\n")
    with open(os.path.join(a.out, "directions.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(report(rows))


if __name__ == "__main__":
    main()
