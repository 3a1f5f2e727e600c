"""Import/export throughput (CPU time) on a scripted model of >= 10,000 nodes, against
onnx.load + onnx.save of the same model (not a test: prints figures).

    python bench/import_export.py [--nodes 12000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import io
import time

import numpy as np
import onnx
from mlir import ir
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_ad_mlir import export_onnx, import_onnx


def build(num_nodes: int, width: int = 16) -> onnx.ModelProto:
    """A residual MLP-like chain: MatMul, Add, Relu, Add (skip) blocks, each
    with its own small weights, so attributes, initializers and names vary."""
    nodes, inits = [], []
    rng = np.random.default_rng(0)
    x = "x"
    for b in range(num_nodes // 5):
        w, bias = f"w{b}", f"b{b}"
        inits.append(numpy_helper.from_array(rng.standard_normal((width, width), np.float32), w))
        inits.append(numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), bias))
        nodes += [h.make_node("MatMul", [x, w], [f"mm{b}"], name=f"mm{b}"),
                  h.make_node("Add", [f"mm{b}", bias], [f"add{b}"], name=f"add{b}"),
                  h.make_node("Relu", [f"add{b}"], [f"relu{b}"], name=f"relu{b}"),
                  h.make_node("Transpose", [f"relu{b}"], [f"tr{b}"], name=f"tr{b}", perm=[0, 1]),
                  h.make_node("Add", [x, f"tr{b}"], [f"res{b}"], name=f"res{b}")]
        x = f"res{b}"
    graph = h.make_graph(nodes, "bench",
                         [h.make_tensor_value_info("x", T.FLOAT, ["batch", width])],
                         [h.make_tensor_value_info(x, T.FLOAT, ["batch", width])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def best_of(repeat: int, fn) -> tuple[float, object]:
    """Best CPU time of `repeat` runs: the machine may be shared, and CPU
    time is what the code costs (all of it runs in this one thread)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=12000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    model = build(args.nodes)
    data = model.SerializeToString()
    n = len(model.graph.node)

    def load_save():
        loaded = onnx.load_from_string(data)
        onnx.save(loaded, io.BytesIO())

    t_onnx, _ = best_of(args.repeat, load_save)
    context = ir.Context()
    t_import, module = best_of(args.repeat, lambda: import_onnx(model, context))
    t_export, exported = best_of(args.repeat, lambda: export_onnx(module))
    assert len(exported.graph.node) == n
    total = t_import + t_export
    print(f"model: {n} nodes, {len(model.graph.initializer)} initializers, "
          f"{len(data) / 1e6:.1f} MB")
    print(f"import (incl. shape inference): {t_import:.3f} s  {n / t_import:10.0f} nodes/s")
    print(f"export:                         {t_export:.3f} s  {n / t_export:10.0f} nodes/s")
    print(f"import + export:                {total:.3f} s  {n / total:10.0f} nodes/s "
          f"(goal >= 20000)")
    print(f"onnx.load + onnx.save:          {t_onnx:.3f} s  {n / t_onnx:10.0f} nodes/s  "
          f"-> import+export is {total / t_onnx:.1f}x slower (goal <= 10x)")


if __name__ == "__main__":
    main()
