// Matrix products and convolution (rules/linalg.py): bilinear, so the JVP
// applies the op to one tangent at a time and reverse mode multiplies the
// cotangent by the other factor, transposed; a Conv's input cotangent is a
// ConvTranspose (few result channels) or a Conv with the flipped kernel (16 or
// more: ONNX Runtime's blocked Conv is faster there), its weight cotangent one
// MatMul over patches.
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @matmul
// FWD: "onnx.MatMul"(%arg0, %arg1)
// FWD: "onnx.MatMul"({{.*}}) : (tensor<?x2x3xf32>, tensor<3x4xf32>) -> tensor<?x2x4xf32>
// FWD: "onnx.MatMul"({{.*}}) : (tensor<2x3xf32>, tensor<?x3x4xf32>) -> tensor<?x2x4xf32>
// FWD: "onnx.Add"
// REV-LABEL: func.func @matmul
// REV-DAG: "onnx.Transpose"(%arg1) <{perm = [1, 0]}> : (tensor<3x4xf32>) -> tensor<4x3xf32>
// REV-DAG: "onnx.Transpose"(%arg0) <{perm = [1, 0]}> : (tensor<2x3xf32>) -> tensor<3x2xf32>
// REV: return {{.*}} : tensor<2x4xf32>, tensor<2x3x?xf32>, tensor<3x4x?xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @matmul(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {
    %y = "onnx.MatMul"(%x, %w) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    return %y : tensor<2x4xf32>
  }
}

// -----

// FWD-LABEL: func.func @conv
// FWD-COUNT-3: "onnx.Conv"
// REV-LABEL: func.func @conv
// REV: "onnx.Conv"(%arg0, %arg1
// REV: "onnx.MatMul"
// REV: "onnx.ConvTranspose"({{.*}}, %arg1,
// REV: return {{.*}} : tensor<1x3x3x3xf32>, tensor<1x2x5x5x?xf32>, tensor<3x2x3x3x?xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @conv(%x: tensor<1x2x5x5xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32> {
    %none = "onnx.NoValue"() <{value}> : () -> none
    %y = "onnx.Conv"(%x, %w, %none) : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>, none) -> tensor<1x3x3x3xf32>
    return %y : tensor<1x3x3x3xf32>
  }
}

// -----

// A constant kernel (only X is differentiated), 16 result (X) channels and more.
// REV-LABEL: func.func @conv_wide
// REV: "onnx.Conv"(%arg0, %[[W:.*]], %
// REV-NOT: "onnx.ConvTranspose"
// REV: "onnx.Conv"({{.*}}) <{{{.*}}pads = [2, 2, 2, 2]{{.*}}}> : (tensor<?x16x3x3xf32>, tensor<16x16x3x3xf32>, none) -> tensor<?x16x5x5xf32>
// REV-NOT: "onnx.ConvTranspose"
// REV: return {{.*}} : tensor<1x16x3x3xf32>, tensor<1x16x5x5x?xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @conv_wide(%x: tensor<1x16x5x5xf32>) -> tensor<1x16x3x3xf32> {
    %none = "onnx.NoValue"() <{value}> : () -> none
    %w = "onnx.Constant"() <{value = dense<0.5> : tensor<16x16x3x3xf32>}> : () -> tensor<16x16x3x3xf32>
    %y = "onnx.Conv"(%x, %w, %none) : (tensor<1x16x5x5xf32>, tensor<16x16x3x3xf32>, none) -> tensor<1x16x3x3xf32>
    return %y : tensor<1x16x3x3xf32>
  }
}
