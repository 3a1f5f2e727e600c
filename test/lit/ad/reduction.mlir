// ReduceSum (rules/reduction.py) is linear: the JVP reduces the tangent over
// the shifted axes (the direction axis leads); its transpose expands back.
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @reduce
// FWD: %[[AX:.*]] = "onnx.Constant"() <{value = dense<2> : tensor<1xi64>}>
// FWD: "onnx.ReduceSum"(%{{.*}}, %[[AX]]) <{keepdims = 0 : si64, noop_with_empty_axes = 1 : si64}> : (tensor<?x2x5xf32>, tensor<1xi64>) -> tensor<?x2xf32>
// REV-LABEL: func.func @reduce
// REV: "onnx.Unsqueeze"
// REV: "onnx.Expand"({{.*}}) : (tensor<?x2x1xf32>, tensor<3xi64>) -> tensor<?x2x5xf32>
// REV: return {{.*}} : tensor<2xf32>, tensor<2x5x?xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @reduce(%x: tensor<2x5xf32>) -> tensor<2xf32> {
    %a = "onnx.Constant"() <{value = dense<1> : tensor<1xi64>}> : () -> tensor<1xi64>
    %y = "onnx.ReduceSum"(%x, %a) <{keepdims = 0 : si64}> : (tensor<2x5xf32>, tensor<1xi64>) -> tensor<2xf32>
    return %y : tensor<2xf32>
  }
}
