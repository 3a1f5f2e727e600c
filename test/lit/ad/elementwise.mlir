// Elementwise rules (rules/elementwise.py): a unary JVP is t * f'(x, y) with
// f' built from the primal result (Tanh' = 1 - y*y: Tanh is not recomputed);
// reverse mode sums a broadcast operand's cotangent back to its shape.
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @tanh
// FWD-SAME: onnx.name = "fwd_x"
// FWD: %[[T:.*]] = "onnx.Transpose"(%arg1) <{perm = [2, 0, 1]}> : (tensor<2x3x?xf32>) -> tensor<?x2x3xf32>
// FWD: %[[Y:.*]] = "onnx.Tanh"(%arg0)
// FWD: %[[YY:.*]] = "onnx.Mul"(%[[Y]], %[[Y]])
// FWD: %[[D:.*]] = "onnx.Sub"(%{{.*}}, %[[YY]])
// FWD: "onnx.Mul"(%[[T]], %[[D]]) : (tensor<?x2x3xf32>, tensor<2x3xf32>) -> tensor<?x2x3xf32>
// FWD-NOT: "onnx.Tanh"
// FWD: return
// REV-LABEL: func.func @tanh
// REV-SAME: onnx.name = "adj_y"
// REV-COUNT-1: "onnx.Tanh"
// REV-NOT: "onnx.Tanh"
// REV: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @tanh(%x: tensor<2x3xf32> {onnx.name = "x"}) -> (tensor<2x3xf32> {onnx.name = "y"}) {
    %y = "onnx.Tanh"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    return %y : tensor<2x3xf32>
  }
}

// -----

// FWD-LABEL: func.func @bias
// FWD: "onnx.Unsqueeze"(%{{.*}}, %{{.*}}) : (tensor<?x3xf32>, tensor<1xi64>) -> tensor<?x1x3xf32>
// FWD: "onnx.Add"(%{{.*}}, %{{.*}}) : (tensor<?x2x3xf32>, tensor<?x1x3xf32>) -> tensor<?x2x3xf32>
// REV-LABEL: func.func @bias
// REV: "onnx.ReduceSum"(%{{.*}}, %{{.*}}) <{keepdims = 1 : si64, noop_with_empty_axes = 1 : si64}> : (tensor<?x2x3xf32>, tensor<1xi64>) -> tensor<?x1x3xf32>
// REV: "onnx.Squeeze"
// REV: return %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x3xf32>, tensor<2x3x?xf32>, tensor<3x?xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @bias(%x: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
    %y = "onnx.Add"(%x, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    return %y : tensor<2x3xf32>
  }
}
