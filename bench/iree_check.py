#!/usr/bin/env python3
"""Do our derivative models compile and run correctly in IREE?

For each corpus model: the primal, forward, reverse and Hessian-vector
models (layout onnx, one direction) with every input extent fixed to its
feed's (batch and seed count included: IREE miscompiles recurrences over
symbolic extents), imported with `iree-import-onnx`, compiled for llvm-cpu,
run through `iree.runtime` and compared with ONNX Runtime on the same feeds.
Prints a markdown table (max relative error, or the first error line).

IREE lives in its own environment (never the project's):

    python3 -m venv /opt/ireeenv
    /opt/ireeenv/bin/pip install iree-base-compiler==3.13.0 iree-base-runtime==3.13.0 \\
        onnx==1.23.2 numpy
    /opt/adv/bin/python bench/iree_check.py [--models gru,lstm] [--iree /opt/ireeenv/bin]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

import run
import second_order

DEFAULT_MODELS = ["mlp", "gelu_mlp", "cnn", "transformer_block", "resnet", "gru", "lstm",
                  "if_model", "scan_rnn", "loop_model", "neural_ode"]

# Runs in IREE's environment: the compiled module on the feeds, outputs to a .npz.
RUNNER = r"""
import sys, numpy as np, iree.runtime as rt
vmfb, feeds, names, out = sys.argv[1], np.load(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
module = rt.load_vm_flatbuffer_file(vmfb, driver="local-sync")
entry = next(n for n in module.vm_module.function_names if not n.startswith("__") and "$" not in n)
res = module[entry](*[feeds[n] for n in names])
res = res if isinstance(res, (tuple, list)) else [res]
np.savez(out, *[np.asarray(r.to_host() if hasattr(r, "to_host") else r) for r in res])
"""


def static(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The model with its inputs' extents those of the feeds, inferred again."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name in feeds:
            for d, n in zip(vi.type.tensor_type.shape.dim, feeds[vi.name].shape):
                d.Clear()
                d.dim_value = int(n)
    for vi in list(m.graph.output) + list(m.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.Clear()
    return onnx.shape_inference.infer_shapes(m)


def derivative_models(name: str) -> dict[str, tuple[onnx.ModelProto, dict]]:
    import onnx_ad_mlir
    case = run.load_case(name)
    x, y = case["inputs"][0], case["outputs"][0]
    u, v = case["u"][..., None], case["v"][..., None]
    second = second_order.models(case)  # (the reverse and Hessian-vector models)
    return {"primal": (case["model"], case["feeds"]),
            "fwd": (onnx_ad_mlir.forward(case["model"], inputs=case["inputs"],
                                         outputs=case["outputs"], layout="onnx"),
                    {**case["feeds"], f"fwd_{x}": v}),
            "rev": (second["rev"], {**case["feeds"], f"adj_{y}": u}),
            "hvp": (second["hvp"], {**case["feeds"], f"adj_{y}": u, f"fwd_{x}": v})}


def first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "?")[:160]


def check(model: onnx.ModelProto, feeds: dict, iree: str, folder: str, tag: str) -> str:
    """'ok (max relative error)' or what failed, with its first error line."""
    names = [i.name for i in model.graph.input
             if i.name not in {t.name for t in model.graph.initializer}]
    feeds = {k: feeds[k] for k in names}
    model = static(model, feeds)
    paths = {k: os.path.join(folder, f"{tag}.{k}") for k in ("onnx", "mlir", "vmfb", "npz", "out")}
    onnx.save(model, paths["onnx"])
    np.savez(paths["npz"], **feeds)
    steps = [("import", [f"{iree}/iree-import-onnx", paths["onnx"], "-o", paths["mlir"]]),
             ("compile", [f"{iree}/iree-compile", "--iree-hal-target-device=local",
                          "--iree-hal-local-target-device-backends=llvm-cpu",
                          "--iree-llvmcpu-target-cpu=host", paths["mlir"], "-o", paths["vmfb"]]),
             ("run", [f"{iree}/python", "-c", RUNNER, paths["vmfb"], paths["npz"],
                      ",".join(names), paths["out"] + ".npz"])]
    for what, cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=folder)
        if p.returncode:
            return f"{what} error: {first_error(p.stderr + p.stdout)}"
    got = np.load(paths["out"] + ".npz")
    want = run.session(model).run(None, feeds)
    worst = 0.0
    for i, w in enumerate(want):
        g = got[f"arr_{i}"]
        if g.shape != w.shape:
            return f"wrong shape {g.shape} (ONNX Runtime: {w.shape})"
        scale = max(float(np.abs(w).max()) if w.size else 0.0, 1e-30)
        worst = max(worst, float(np.abs(g.astype(np.float64) - w).max()) / scale if w.size else 0)
    return f"ok ({worst:.0e})" if worst <= 1e-3 else f"wrong numbers ({worst:.1e})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--iree", default="/opt/ireeenv/bin", help="IREE's environment's bin folder")
    ap.add_argument("--json", help="also write the outcomes here")
    args = ap.parse_args()
    rows, outcomes = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            built = derivative_models(name)
            cells = {mode: check(m, f, args.iree, folder, f"{name}.{mode}")
                     for mode, (m, f) in built.items()}
            outcomes[name] = cells
            rows.append(f"| {name} | " + " | ".join(cells[k] for k in built) + " |")
            print(rows[-1], file=sys.stderr, flush=True)
    print("| model | primal | fwd | rev | hvp |\n|---|---|---|---|---|\n" + "\n".join(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(outcomes, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
