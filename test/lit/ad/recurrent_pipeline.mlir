// Stacked LSTM layers, reverse mode (rules/recurrent.py pipelined_pair,
// merge_scans.py): layer 2's reverse Scan feeds layer 1's its input adjoint
// step by step through a MatMul by W2; with constant weights and zero
// initial states both run as one Scan, layer 1 one step behind layer 2
// (T + 1 steps): two states [k, 1, B, 2H] with both layers side by side, the
// elementwise ops once, one MatMul by the [8H, 2H] block matrix
// [[R2_x, W2_x], [0, R1_x]] per gate x. Each layer's coefficients get a
// padding step (Pad), layer 1's adjoint of tA is its half of the output.
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s

// CHECK-LABEL: func.func @stacked
// CHECK: "onnx.Pad{{[A-Z0-9]*}}"(
// CHECK: "onnx.Scan"({{.*}}) <{num_scan_inputs = 4 : si64
// CHECK-SAME: scan_input_directions = [1, 1, 1, 1]
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<?x1x2x4xf32>, %{{.*}}: tensor<?x1x2x4xf32>, %{{.*}}: tensor<?x1x2x4xf32>, %{{.*}}: tensor<1x2x16xf32>, %{{.*}}: tensor<1x2x4xf32>, %{{.*}}: tensor<1x2x4xf32>):
// CHECK: "onnx.Concat"({{.*}}) <{axis = 3 : si64}> : (tensor<?x1x2x4xf32>, tensor<?x1x2x4xf32>, tensor<?x1x2x4xf32>, tensor<?x1x2x4xf32>) -> tensor<?x1x2x16xf32>
// CHECK: "onnx.MatMul"({{.*}}) : (tensor<?x1x2x16xf32>, tensor<16x4xf32>) -> tensor<?x1x2x4xf32>
// CHECK-NOT: "onnx.MatMul"
// CHECK: "onnx.Yield"
// CHECK-NOT: "onnx.Scan"
// CHECK: return
module attributes {onnx.opset_import = [["", 17]]} {
  func.func @stacked(%x: tensor<3x2x2xf32>) -> tensor<3x1x2x2xf32> {
    %none = "onnx.NoValue"() <{value}> : () -> none
    %axis = "onnx.Constant"() <{value = dense<1> : tensor<1xi64>}> : () -> tensor<1xi64>
    %w1 = "onnx.Constant"() <{value = dense<0.5> : tensor<1x8x2xf32>}> : () -> tensor<1x8x2xf32>
    %r1 = "onnx.Constant"() <{value = dense<0.25> : tensor<1x8x2xf32>}> : () -> tensor<1x8x2xf32>
    %w2 = "onnx.Constant"() <{value = dense<-0.5> : tensor<1x8x2xf32>}> : () -> tensor<1x8x2xf32>
    %r2 = "onnx.Constant"() <{value = dense<0.125> : tensor<1x8x2xf32>}> : () -> tensor<1x8x2xf32>
    %y1, %yh1, %yc1 = "onnx.LSTM"(%x, %w1, %r1, %none, %none, %none, %none, %none) <{hidden_size = 2 : si64}> : (tensor<3x2x2xf32>, tensor<1x8x2xf32>, tensor<1x8x2xf32>, none, none, none, none, none) -> (tensor<3x1x2x2xf32>, none, none)
    %x2 = "onnx.Squeeze"(%y1, %axis) : (tensor<3x1x2x2xf32>, tensor<1xi64>) -> tensor<3x2x2xf32>
    %y2, %yh2, %yc2 = "onnx.LSTM"(%x2, %w2, %r2, %none, %none, %none, %none, %none) <{hidden_size = 2 : si64}> : (tensor<3x2x2xf32>, tensor<1x8x2xf32>, tensor<1x8x2xf32>, none, none, none, none, none) -> (tensor<3x1x2x2xf32>, none, none)
    return %y2 : tensor<3x1x2x2xf32>
  }
}
