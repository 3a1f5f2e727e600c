# RUN: %python %s | onnx-ad-translate --import-onnx - | FileCheck %s
# Plain ops: signature names and symbolic dims, versioned op choice, attribute
# kinds, initializers as marked constants, absent optional inputs, node and
# value names as locations.
import sys

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

nodes = [
    h.make_node("Gemm", ["x", "w"], ["y"], name="gemm", alpha=0.5, transB=1),
    h.make_node("ReduceSum", ["y"], ["s"], keepdims=0, axes=[1]),  # opset 11: V11
    h.make_node("Clip", ["y", "", "hi"], ["c"]),  # absent 'min'
    h.make_node("Cast", ["c"], ["i"], to=T.INT64),
]
graph = h.make_graph(
    nodes, "basic", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4])],
    [h.make_tensor_value_info("s", T.FLOAT, ["batch"]),
     h.make_tensor_value_info("i", T.INT64, ["batch", 2])],
    [numpy_helper.from_array(np.ones((2, 4), np.float32), "w"),
     numpy_helper.from_array(np.array(6, np.float32), "hi")])
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)], producer_name="lit")
sys.stdout.buffer.write(model.SerializeToString())

# CHECK: module attributes {onnx.ir_version = {{[0-9]+}} : i64, onnx.opset_import = {{\[\[}}"", 11]], onnx.producer_name = "lit"}
# CHECK: func.func @main_graph(%[[X:.*]]: tensor<?x4xf32> {onnx.dim_params = ["batch", ""], onnx.name = "x"}
# CHECK-SAME: -> (tensor<?xf32> {onnx.dim_params = ["batch"], onnx.name = "s"}, tensor<?x2xi64> {onnx.dim_params = ["batch", ""], onnx.name = "i"})
# CHECK-SAME: attributes {onnx.graph_name = "basic"}
# CHECK: %[[NONE:.*]] = "onnx.NoValue"() <{value}> : () -> none
# CHECK: %[[W:.*]] = "onnx.Constant"() <{value = dense<1.000000e+00> : tensor<2x4xf32>}> {onnx.initializer} : () -> tensor<2x4xf32> loc(#[[WLOC:loc[0-9]*]])
# CHECK: %[[HI:.*]] = "onnx.Constant"() <{value = dense<6.000000e+00> : tensor<f32>}> {onnx.initializer}
# CHECK: %[[Y:.*]] = "onnx.Gemm"(%[[X]], %[[W]], %[[NONE]]) <{alpha = 5.000000e-01 : f32, transB = 1 : si64}> : (tensor<?x4xf32>, tensor<2x4xf32>, none) -> tensor<?x2xf32> loc(#[[GEMMLOC:loc[0-9]*]])
# CHECK: %[[S:.*]] = "onnx.ReduceSumV11"(%[[Y]]) <{axes = [1], keepdims = 0 : si64}>
# CHECK: %[[C:.*]] = "onnx.Clip"(%[[Y]], %[[NONE]], %[[HI]])
# CHECK: %[[I:.*]] = "onnx.Cast{{(V[0-9]+)?}}"(%[[C]]) <{to = 7 : si64}> : (tensor<?x2xf32>) -> tensor<?x2xi64>
# CHECK: return %[[S]], %[[I]] : tensor<?xf32>, tensor<?x2xi64>
# CHECK-DAG: #[[WNAME:loc[0-9]*]] = loc("w")
# CHECK-DAG: #[[WLOC]] = loc(""(#[[WNAME]]))
# CHECK-DAG: #[[YNAME:loc[0-9]*]] = loc("y")
# CHECK-DAG: #[[GEMMLOC]] = loc("gemm"(#[[YNAME]]))
