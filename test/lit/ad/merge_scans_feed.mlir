// onnx-ad-merge-scans (merge_scans.py), producer-consumer fusion: a Scan that
// reads another's scan output as a scan input, through ops acting on each
// step alone (here a MatMul by a 2-D constant), step i reading what step i
// wrote (both reverse), runs in the same Scan: the merged body multiplies the
// first body's step value by the matrix. Forward mode: the primal and tangent
// Scans of both all fuse into one. When the directions differ (step i would
// read step T-1-i), nothing fuses.
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s

// CHECK-LABEL: func.func @feed
// CHECK: "onnx.Scan"
// CHECK: "onnx.Tanh"
// CHECK: "onnx.MatMul"
// CHECK: "onnx.Sigmoid"
// CHECK: "onnx.Yield"
// CHECK-NOT: "onnx.Scan"
// CHECK: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @feed(%h0: tensor<1x3xf64>, %xs: tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<1x3xf64>) {
    %w = "onnx.Constant"() <{value = dense<[[1.0, 2.0, 0.5], [0.0, 1.0, -1.0], [0.25, 0.0, 1.0]]> : tensor<3x3xf64>}> : () -> tensor<3x3xf64>
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64, scan_input_directions = [1], scan_output_directions = [1]}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.Mul"(%h, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Tanh"(%1) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%2, %2) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    %m = "onnx.MatMul"(%0#1, %w) : (tensor<4x1x3xf64>, tensor<3x3xf64>) -> tensor<4x1x3xf64>
    %5:2 = "onnx.Scan"(%h0, %m) <{num_scan_inputs = 1 : si64, scan_input_directions = [1], scan_output_directions = [0]}> ({
    ^bb0(%h: tensor<1x3xf64>, %yt: tensor<1x3xf64>):
      %6 = "onnx.Add"(%h, %yt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %7 = "onnx.Sigmoid"(%6) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%7, %7) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    return %5#0, %0#0 : tensor<1x3xf64>, tensor<1x3xf64>
  }
}

// -----

// CHECK-LABEL: func.func @directions_differ
// CHECK-COUNT-2: "onnx.Scan"
// CHECK-NOT: "onnx.Scan"
// CHECK: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @directions_differ(%h0: tensor<1x3xf64>, %xs: tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<1x3xf64>) {
    %w = "onnx.Constant"() <{value = dense<[[1.0, 2.0, 0.5], [0.0, 1.0, -1.0], [0.25, 0.0, 1.0]]> : tensor<3x3xf64>}> : () -> tensor<3x3xf64>
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64, scan_input_directions = [1], scan_output_directions = [1]}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.Mul"(%h, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Tanh"(%1) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%2, %2) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    %m = "onnx.MatMul"(%0#1, %w) : (tensor<4x1x3xf64>, tensor<3x3xf64>) -> tensor<4x1x3xf64>
    %5:2 = "onnx.Scan"(%h0, %m) <{num_scan_inputs = 1 : si64, scan_input_directions = [0], scan_output_directions = [0]}> ({
    ^bb0(%h: tensor<1x3xf64>, %yt: tensor<1x3xf64>):
      %6 = "onnx.Add"(%h, %yt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %7 = "onnx.Sigmoid"(%6) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%7, %7) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    return %5#0, %0#0 : tensor<1x3xf64>, tensor<1x3xf64>
  }
}
