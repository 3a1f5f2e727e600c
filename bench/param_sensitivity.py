#!/usr/bin/env python3
"""Sensitivities to parameters through loops: reverse mode w.r.t. the input
and every weight and bias of the hand-built loop models.

    /opt/adv/bin/python bench/param_sensitivity.py [--models neural_ode,...] [--rounds 20]

Parameter estimation and training-like uses ask a reverse model for the
cotangents of the weights a Scan/Loop body captures, which the reverse sweep
sums over the steps. The models are bench/make_corpus.py's hand-built
scan_rnn, loop_model and neural_ode with their float weights and biases
made graph inputs. Reported: the reverse model's nodes and run time over the
primal's (ONNX Runtime, 1 thread, interleaved rounds, median), and its error
against central differences of the float64 twin along random directions:
max over 3 directions v of |<J^T u, v> - FD| / |FD|. Writes
param_sensitivity.md to --out. Not a test.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_corpus  # noqa: E402
import run  # noqa: E402

MODELS = ["scan_rnn", "loop_model", "neural_ode"]


def with_parameter_inputs(graph: onnx.GraphProto) -> tuple[onnx.ModelProto, dict]:
    """The model with its float initializers of rank >= 1 as inputs, and
    their values."""
    params = {t.name: t for t in graph.initializer
              if t.data_type in (T.FLOAT, T.DOUBLE) and len(t.dims) >= 1}
    keep = [t for t in graph.initializer if t.name not in params]
    inputs = list(graph.input) + [h.make_tensor_value_info(n, t.data_type, list(t.dims))
                                  for n, t in params.items()]
    g = h.make_graph(list(graph.node), graph.name, inputs, list(graph.output), keep)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {n: numpy_helper.to_array(t) for n, t in params.items()}


def directional_error(f64: onnx.ModelProto, feeds: dict, names: list[str], u: np.ndarray,
                      grads: dict, rng: np.random.Generator) -> float:
    s = run.session(f64)
    out = f64.graph.output[0].name
    worst = 0.0
    for _ in range(3):
        v = {n: rng.standard_normal(feeds[n].shape) for n in names}
        eps = 1e-6

        def at(sign: float) -> float:
            x = {**feeds, **{n: feeds[n] + sign * eps * v[n] for n in names}}
            return float(np.sum(u * s.run([out], x)[0]))
        fd = (at(1.0) - at(-1.0)) / (2 * eps)
        ad = sum(float(np.sum(grads[n].reshape(v[n].shape) * v[n])) for n in names)
        worst = max(worst, abs(ad - fd) / max(abs(fd), 1e-12))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    from onnx_ad_mlir import reverse
    f32, f64 = make_corpus._hand_built(T.FLOAT), make_corpus._hand_built(T.DOUBLE)
    rows = ["| model | parameters | nodes primal/rev | primal | rev/primal | err vs FD (float64) |",
            "|---|---|---|---|---|---|"]
    for name in args.models.split(","):
        m32, params = with_parameter_inputs(f32[name][0])
        m64, params64 = with_parameter_inputs(f64[name][0])
        case = run.load_case(name)
        x, y = case["inputs"][0], case["outputs"][0]
        feeds = {**case["feeds"], **params}
        names = [x] + list(params)
        rev = reverse(m32, inputs=names, outputs=[y], layout="onnx")
        rfeeds = {**feeds, f"adj_{y}": case["u"][..., None]}
        srev, sp = run.session(rev), run.session(m32)
        grads = dict(zip([f"adj_{n}" for n in names], srev.run([f"adj_{n}" for n in names], rfeeds)))
        med = run.interleaved_medians({"primal": (sp, feeds, None), "rev": (srev, rfeeds, None)},
                                      args.rounds)
        feeds64 = {**{k: v.astype(np.float64) for k, v in case["feeds"].items()}, **params64}
        err = directional_error(m64, feeds64, names, case["u"].astype(np.float64),
                                {n: grads[f"adj_{n}"] for n in names}, np.random.default_rng(0))
        n_params = sum(v.size for v in params.values())
        rows.append(f"| {name} | {n_params} | {len(m32.graph.node)}/{len(rev.graph.node)} | "
                    f"{med['primal'] * 1e3:.3g} ms | {med['rev'] / med['primal']:.2f} | {err:.1e} |")
        print(rows[-1], flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "param_sensitivity.md"), "w") as fh:
        fh.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
