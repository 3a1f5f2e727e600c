# RUN: %python %s | onnx-ad-translate --import-onnx - | FileCheck %s
# A Reshape to a computed shape: ONNX shape inference at opset 13 leaves its
# result without a shape; the importer still gives it the rank of the shape
# operand (the derivative rules align broadcasts by rank).
import sys

from onnx import TensorProto as T
from onnx import helper as h

nodes = [
    h.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
    h.make_node("Shape", ["x"], ["s"]),
    h.make_node("Reshape", ["t", "s"], ["r"]),
    h.make_node("Add", ["r", "b"], ["y"]),
]
graph = h.make_graph(
    nodes, "reshape_rank",
    [h.make_tensor_value_info("x", T.FLOAT, [3, 5]), h.make_tensor_value_info("b", T.FLOAT, [5])],
    [h.make_tensor_value_info("y", T.FLOAT, None)])
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
sys.stdout.buffer.write(model.SerializeToString())

# CHECK: %[[S:.*]] = "onnx.ShapeV13"(%{{.*}}) : (tensor<3x5xf32>) -> tensor<2xi64>
# CHECK: %[[R:.*]] = "onnx.ReshapeV13"(%{{.*}}, %[[S]]) : (tensor<5x3xf32>, tensor<2xi64>) -> tensor<?x?xf32>
# CHECK: "onnx.Add"(%[[R]], %{{.*}}) : (tensor<?x?xf32>, tensor<5xf32>)
