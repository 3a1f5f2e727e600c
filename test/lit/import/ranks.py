# RUN: %python %s | onnx-ad-translate --import-onnx - | FileCheck %s
# Results ONNX shape inference leaves unranked (shape-like operands computed
# at run time, or an unranked operand) get the rank their op and operands
# imply, every dim unknown; ranks flow on through later ops.
import sys

from onnx import TensorProto as T
from onnx import helper as h

nodes = [
    h.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
    h.make_node("Reshape", ["t", "s"], ["r"]),  # rank = len(s) (a Shape would fold)
    h.make_node("Add", ["r", "b"], ["a"]),  # broadcast: the largest rank
    h.make_node("ReduceSum", ["a", "axes"], ["k"]),  # keepdims=1: the input's rank
    h.make_node("ReduceSum", ["a", "axes"], ["d"], keepdims=0),  # 1 axis fewer
    h.make_node("Split", ["k", "sizes"], ["p", "q"], axis=1),  # computed sizes
    h.make_node("MatMul", ["q", "d"], ["m"]),  # [?, ?] x [?]: rank 1
    h.make_node("Unsqueeze", ["m", "axes"], ["u"]),
]
graph = h.make_graph(
    nodes, "ranks",
    [h.make_tensor_value_info("x", T.FLOAT, [3, 5]), h.make_tensor_value_info("b", T.FLOAT, [5]),
     h.make_tensor_value_info("s", T.INT64, [2]), h.make_tensor_value_info("axes", T.INT64, [1]),
     h.make_tensor_value_info("sizes", T.INT64, [2])],
    [h.make_tensor_value_info("p", T.FLOAT, None), h.make_tensor_value_info("u", T.FLOAT, None)])
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
sys.stdout.buffer.write(model.SerializeToString())

# CHECK: func.func @main_graph({{.*}}%[[S:[a-z0-9]+]]: tensor<2xi64> {onnx.name = "s"}
# CHECK: %[[R:.*]] = "onnx.ReshapeV13"(%{{.*}}, %[[S]]) : (tensor<5x3xf32>, tensor<2xi64>) -> tensor<?x?xf32>
# CHECK: %[[A:.*]] = "onnx.Add"(%[[R]], %{{.*}}) : (tensor<?x?xf32>, tensor<5xf32>) -> tensor<?x?xf32>
# CHECK: %[[K:.*]] = "onnx.ReduceSum{{(V[0-9]+)?}}"(%[[A]], %{{.*}}) : (tensor<?x?xf32>, tensor<1xi64>) -> tensor<?x?xf32>
# CHECK: %[[D:.*]] = "onnx.ReduceSum{{(V[0-9]+)?}}"(%[[A]], %{{.*}}) <{keepdims = 0 : si64}> : (tensor<?x?xf32>, tensor<1xi64>) -> tensor<?xf32>
# CHECK: %[[P:.*]]:2 = "onnx.Split{{(V[0-9]+)?}}"(%[[K]], %{{.*}}) <{axis = 1 : si64}> : (tensor<?x?xf32>, tensor<2xi64>) -> (tensor<?x?xf32>, tensor<?x?xf32>)
# CHECK: %[[M:.*]] = "onnx.MatMul"(%[[P]]#1, %[[D]]) : (tensor<?x?xf32>, tensor<?xf32>) -> tensor<?xf32>
# CHECK: "onnx.Unsqueeze{{(V[0-9]+)?}}"(%[[M]], %{{.*}}) : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x?xf32>
