#!/usr/bin/env python3
"""Differentiates a model and checks the result in ONNX Runtime.

    python examples/differentiate.py [model.onnx] [out_dir]

Writes CasADi's family (`f.onnx`, `adj_f.onnx`, `fwd_adj_f.onnx`) plus
`fwd_f.onnx` into out_dir (default: examples/out), then evaluates them on a
random input and compares Jacobian-vector products, vector-Jacobian products
and Hessian-vector products with central finite differences of the model.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

from onnx_ad_mlir import family, forward

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64}


def concrete_shape(vi: onnx.ValueInfoProto, symbolic: int = 3) -> tuple[int, ...]:
    return tuple(d.dim_value if d.HasField("dim_value") else symbolic
                 for d in vi.type.tensor_type.shape.dim)


def main(model_path: str, out_dir: str) -> int:
    model = onnx.load(model_path)
    name = os.path.basename(model_path)
    paths = family(model, os.path.join(out_dir, name), forward_sibling=True)
    print("wrote", ", ".join(os.path.relpath(p) for p in paths))

    x_info, y_info = model.graph.input[0], model.graph.output[0]
    dtype = DTYPES[x_info.type.tensor_type.elem_type]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(concrete_shape(x_info)).astype(dtype)
    primal = ort.InferenceSession(model.SerializeToString())
    f = lambda v: primal.run(None, {x_info.name: v})[0].astype(np.float64)
    y = f(x)
    eps = 1e-3 if dtype == np.float32 else 1e-6

    # Forward mode (layout="onnx": the seed count is a trailing axis).
    fwd = ort.InferenceSession(forward(model, layout="onnx").SerializeToString())
    v = rng.standard_normal(x.shape + (1,)).astype(dtype)
    jv = fwd.run(None, {x_info.name: x, f"fwd_{x_info.name}": v})[1][..., 0]
    fd = (f(x + eps * v[..., 0]) - f(x - eps * v[..., 0])) / (2 * eps)
    print(f"J v     vs finite differences: max error {np.abs(jv - fd).max():.2e}")

    # Reverse mode, from the family (CasADi's layout; rank-2 values are
    # [rows, nadj * cols] with one seed).
    adj = ort.InferenceSession(os.path.join(out_dir, f"adj_{name}"))
    w = rng.standard_normal(y.shape).astype(dtype)
    jtw = adj.run(None, {x_info.name: x, f"adj_{y_info.name}": w})[1]
    print(f"<J v,w> - <v,J^T w>: {abs(float(np.sum(jv * w)) - float(np.sum(v[..., 0] * jtw))):.2e}")

    # Hessian-vector product of <w, f(x)>: forward mode over the adjoint.
    hvp = ort.InferenceSession(os.path.join(out_dir, f"fwd_adj_{name}"))
    feeds = {i.name: None for i in hvp.get_inputs()}
    feeds.update({x_info.name: x, f"adj_{y_info.name}": w, f"fwd_{x_info.name}": v[..., 0],
                  f"fwd_adj_{y_info.name}": np.zeros_like(w)})
    hv = hvp.run([f"fwd_adj_{x_info.name}"], feeds)[0]
    grad = lambda p: adj.run(None, {x_info.name: p, f"adj_{y_info.name}": w})[1].astype(np.float64)
    h_eps = 1e-2 if dtype == np.float32 else 1e-5
    hv_fd = (grad(x + h_eps * v[..., 0]) - grad(x - h_eps * v[..., 0])) / (2 * h_eps)
    print(f"H v     vs finite differences of the gradient: max error {np.abs(hv - hv_fd).max():.2e}")
    ok = np.allclose(jv, fd, atol=1e-2) and np.allclose(hv, hv_fd, atol=5e-2)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[0] if args else os.path.join(HERE, "mlp.onnx"),
                  args[1] if len(args) > 1 else os.path.join(HERE, "out")))
