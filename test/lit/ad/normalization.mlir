// Softmax (rules/normalization.py): t_y = y*t - y*sum(y*t), from the primal
// result; no Exp is recomputed, and reverse mode is the textbook VJP.
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @softmax
// FWD-COUNT-1: "onnx.Softmax"
// FWD: "onnx.ReduceSum"({{.*}}) <{keepdims = 1 : si64, noop_with_empty_axes = 1 : si64}> : (tensor<?x2x5xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
// FWD-NOT: "onnx.Exp"
// FWD: return
// REV-LABEL: func.func @softmax
// REV-COUNT-1: "onnx.Softmax"
// REV: "onnx.ReduceSum"
// REV-NOT: "onnx.Exp"
// REV: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @softmax(%x: tensor<2x5xf32>) -> tensor<2x5xf32> {
    %y = "onnx.Softmax"(%x) <{axis = 1 : si64}> : (tensor<2x5xf32>) -> tensor<2x5xf32>
    return %y : tensor<2x5xf32>
  }
}
