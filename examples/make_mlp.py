#!/usr/bin/env python3
"""Writes examples/mlp.onnx: a tiny two-layer perceptron, the bundled example.

    y = Tanh(x @ W1 + b1) @ W2 + b2      x: float32[N, 4] -> y: float32[N, 2]

Weights are drawn from a seeded numpy generator, so the file is
reproducible: `python examples/make_mlp.py` rewrites it byte for byte.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
HERE = os.path.dirname(os.path.abspath(__file__))


def make_model() -> onnx.ModelProto:
    rng = np.random.default_rng(seed=0)
    weights = {
        "W1": rng.standard_normal((4, 8)).astype(np.float32),
        "b1": rng.standard_normal(8).astype(np.float32),
        "W2": rng.standard_normal((8, 2)).astype(np.float32),
        "b2": rng.standard_normal(2).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"], name="layer1_matmul"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="layer1_bias"),
        helper.make_node("Tanh", ["h1"], ["h"], name="layer1_tanh"),
        helper.make_node("MatMul", ["h", "W2"], ["y0"], name="layer2_matmul"),
        helper.make_node("Add", ["y0", "b2"], ["y"], name="layer2_bias"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        initializer=[numpy_helper.from_array(w, name) for name, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="onnx-ad-mlir examples/make_mlp.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main(path: str = os.path.join(HERE, "mlp.onnx")) -> None:
    data = make_model().SerializeToString()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:  # written atomically
        f.write(data)
    os.replace(tmp, path)
    print(f"wrote {path} ({len(data)} bytes)")


if __name__ == "__main__":
    main(*sys.argv[1:])
