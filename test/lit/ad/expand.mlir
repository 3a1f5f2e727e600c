// onnx-ad-expand: function bodies (at the module's opset) and lowerings replace
// their op; body nodes are named <node>/<inner>; ops with a rule are kept
// unless all=true; the AD modes expand by themselves.
// RUN: onnx-ad-opt %s -split-input-file --onnx-ad-expand --mlir-print-debuginfo | FileCheck %s --check-prefix=EXP
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-expand{all=true},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=ALL
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD

// Swish-24: alpha * x through a Sigmoid, the output keeps its name.
// EXP-LABEL: func.func @swish
// EXP-NOT: "onnx.Swish"
// EXP: "onnx.Sigmoid"
// EXP-SAME: loc(#[[SIG:.*]])
// EXP: "onnx.Mul"
// EXP-DAG: #[[SIG]] = loc("sw/Sigmoid"
// ALL-LABEL: func.func @swish
// ALL: "onnx.Sigmoid"
// FWD-LABEL: func.func @swish
// FWD-NOT: "onnx.Swish"
// FWD: "onnx.Sigmoid"
module attributes {onnx.opset_import = [["", 24]]} {
  func.func @swish(%x: tensor<2x3xf64>) -> tensor<2x3xf64> {
    %0 = "onnx.Swish"(%x) {alpha = 5.000000e-01 : f32} : (tensor<2x3xf64>) -> tensor<2x3xf64> loc("sw"("y"))
    return %0 : tensor<2x3xf64>
  }
}

// -----

// LRN: a lowering (padded channel window as shifted slices).
// EXP-LABEL: func.func @lrn
// EXP-NOT: "onnx.LRN"
// EXP: "onnx.PadV13"
// EXP: "onnx.Slice"
// EXP: "onnx.Pow"
// EXP: "onnx.Div"
module attributes {onnx.opset_import = [["", 13]]} {
  func.func @lrn(%x: tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32> {
    %0 = "onnx.LRN"(%x) {size = 3 : si64} : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
    return %0 : tensor<1x4x2x2xf32>
  }
}

// -----

// Softplus has a rule: kept by default, expanded with all=true.
// EXP-LABEL: func.func @kept
// EXP: "onnx.Softplus"
// ALL-LABEL: func.func @kept
// ALL-NOT: "onnx.Softplus"
// ALL: "onnx.Exp"
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @kept(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = "onnx.Softplus"(%x) : (tensor<3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}
