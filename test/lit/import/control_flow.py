# RUN: %python %s | onnx-ad-translate --import-onnx - | FileCheck %s
# If, Loop and Scan become regions (If: then before else) whose bodies use
# outer values directly; subgraph inputs are block arguments named by their
# locations, and a body input may shadow an outer name.
import sys

from onnx import TensorProto as T
from onnx import helper as h


def vi(name, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


then_g = h.make_graph([h.make_node("Add", ["x", "y"], ["r1"])], "then_g", [], [vi("r1", [2])])
else_g = h.make_graph([h.make_node("Sub", ["x", "y"], ["r2"])], "else_g", [], [vi("r2", [2])])
loop_body = h.make_graph(
    [h.make_node("Identity", ["c_in"], ["c_out"]),
     h.make_node("Mul", ["x", "y"], ["x_next"])],  # body input x shadows outer x
    "loop_body", [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("x", [2])],
    [vi("c_out", [], T.BOOL), vi("x_next", [2])])
scan_body = h.make_graph(
    [h.make_node("Add", ["acc", "e"], ["acc_next"]),
     h.make_node("Mul", ["acc_next", "z"], ["out_e"])],  # z: captured
    "scan_body", [vi("acc", [2]), vi("e", [2])], [vi("acc_next", [2]), vi("out_e", [2])])
nodes = [
    h.make_node("Neg", ["y"], ["z"]),
    h.make_node("If", ["cond"], ["picked"], then_branch=then_g, else_branch=else_g),
    h.make_node("Loop", ["n", "", "x"], ["looped"], body=loop_body),
    h.make_node("Scan", ["x", "xs"], ["acc_final", "outs"], body=scan_body, num_scan_inputs=1),
]
graph = h.make_graph(
    nodes, "cf",
    [vi("cond", [], T.BOOL), vi("n", [], T.INT64), vi("x", [2]), vi("y", [2]), vi("xs", [3, 2])],
    [vi("picked", [2]), vi("looped", [2]), vi("acc_final", [2]), vi("outs", [3, 2])])
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
sys.stdout.buffer.write(model.SerializeToString())

# CHECK-LABEL: func.func @main_graph(
# CHECK-SAME: %[[COND:[a-z0-9]+]]: tensor<i1> {onnx.name = "cond"}
# CHECK-SAME: %[[N:[a-z0-9]+]]: tensor<i64> {onnx.name = "n"}
# CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2xf32> {onnx.name = "x"}
# CHECK-SAME: %[[Y:[a-z0-9]+]]: tensor<2xf32> {onnx.name = "y"}
# CHECK-SAME: %[[XS:[a-z0-9]+]]: tensor<3x2xf32> {onnx.name = "xs"}
# CHECK: %[[NONE:.*]] = "onnx.NoValue"() <{value}> : () -> none
# CHECK: %[[Z:.*]] = "onnx.Neg"(%[[Y]])

# CHECK: "onnx.If"(%[[COND]]) ({
# CHECK-NEXT: %[[T:.*]] = "onnx.Add"(%[[X]], %[[Y]])
# CHECK-NEXT: "onnx.Yield"(%[[T]]) : (tensor<2xf32>) -> () loc(#[[THENLOC:loc[0-9]*]])
# CHECK-NEXT: }, {
# CHECK-NEXT: %[[E:.*]] = "onnx.Sub"(%[[X]], %[[Y]])
# CHECK-NEXT: "onnx.Yield"(%[[E]])
# CHECK-NEXT: }) : (tensor<i1>) -> tensor<2xf32>

# CHECK: "onnx.Loop"(%[[N]], %[[NONE]], %[[X]]) ({
# CHECK-NEXT: ^bb0(%[[I:.*]]: tensor<i64> loc("i"), %[[CIN:.*]]: tensor<i1> loc("c_in"), %[[XIN:.*]]: tensor<2xf32> loc("x")):
# CHECK-NEXT: %[[COUT:.*]] = "onnx.Identity"(%[[CIN]])
# CHECK-NEXT: %[[XN:.*]] = "onnx.Mul"(%[[XIN]], %[[Y]])
# CHECK-NEXT: "onnx.Yield"(%[[COUT]], %[[XN]])
# CHECK-NEXT: }) : (tensor<i64>, none, tensor<2xf32>) -> tensor<2xf32>

# CHECK: "onnx.Scan"(%[[X]], %[[XS]]) <{num_scan_inputs = 1 : si64}> ({
# CHECK-NEXT: ^bb0(%[[ACC:.*]]: tensor<2xf32> loc("acc"), %[[EL:.*]]: tensor<2xf32> loc("e")):
# CHECK-NEXT: %[[AN:.*]] = "onnx.Add"(%[[ACC]], %[[EL]])
# CHECK-NEXT: %[[OE:.*]] = "onnx.Mul"(%[[AN]], %[[Z]])
# CHECK-NEXT: "onnx.Yield"(%[[AN]], %[[OE]])
# CHECK-NEXT: }) : (tensor<2xf32>, tensor<3x2xf32>) -> (tensor<2xf32>, tensor<3x2xf32>)
# CHECK-DAG: #[[R1:loc[0-9]*]] = loc("r1")
# CHECK-DAG: #[[THENLOC]] = loc("then_g"(#[[R1]]))
