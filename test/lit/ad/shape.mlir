// Indexing (rules/shape.py): Gather's JVP gathers the tangent along the
// shifted axis; its transpose accumulates duplicate indices (index 2 twice)
// with a ScatterElements that adds.
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @gather
// FWD: "onnx.Gather"({{.*}}) <{axis = 1 : si64}> : (tensor<?x5x3xf32>, tensor<4xi64>) -> tensor<?x4x3xf32>
// REV-LABEL: func.func @gather
// REV: "onnx.ScatterElements"({{.*}}) <{axis = 1 : si64, reduction = "add"}>
// REV: return {{.*}} : tensor<4x3xf32>, tensor<5x3x?xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @gather(%x: tensor<5x3xf32>) -> tensor<4x3xf32> {
    %i = "onnx.Constant"() <{value = dense<[0, 2, 2, 4]> : tensor<4xi64>}> : () -> tensor<4xi64>
    %y = "onnx.Gather"(%x, %i) <{axis = 0 : si64}> : (tensor<5x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
    return %y : tensor<4x3xf32>
  }
}
