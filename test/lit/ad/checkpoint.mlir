// Reverse mode with checkpoint=2: a Scan of 5 steps becomes an outer Scan over
// 2 segments (a [2, 2] + S reshape of the scanned input) running the body's
// Scan for 2 steps, then a remainder Scan of 1 step; the reverse rules store
// the outer states and, in the reverse outer body, reverse a recomputed segment.
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx checkpoint=2},func.func(canonicalize,cse))' | FileCheck %s
// RUN: not onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{checkpoint=0})' 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK-LABEL: func.func @scan_rnn
// CHECK: "onnx.Reshape"({{.*}}) : (tensor<4x1x3xf64>, tensor<4xi64>) -> tensor<2x2x1x3xf64>
// CHECK: "onnx.Scan"
// CHECK: "onnx.Scan"
// CHECK: (tensor<1x3xf64>, tensor<2x1x3xf64>)
// CHECK: (tensor<1x3xf64>, tensor<2x2x1x3xf64>)
// CHECK: }) : (tensor<1x3xf64>, tensor<1x1x3xf64>)
// CHECK: "onnx.Scan"{{.*}}scan_input_directions = [1, 1]
// CHECK: "onnx.Scan"{{.*}}scan_input_directions = [1, 1]
// CHECK: "onnx.Scan"
// CHECK: "onnx.Scan"{{.*}}scan_input_directions = [1, 1]
// CHECK: -> (tensor<?x1x3xf64>, tensor<?x3x3xf64>, tensor<?x2x2x1x3xf64>)
// BAD: checkpoint=0: expected a positive integer
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @scan_rnn(%h0: tensor<1x3xf64>, %xs: tensor<5x1x3xf64>, %w: tensor<3x3xf64>) -> tensor<1x3xf64> {
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.MatMul"(%h, %w) : (tensor<1x3xf64>, tensor<3x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Add"(%1, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %3 = "onnx.Tanh"(%2) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%3, %3) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<5x1x3xf64>) -> (tensor<1x3xf64>, tensor<5x1x3xf64>)
    return %0#0 : tensor<1x3xf64>
  }
}
