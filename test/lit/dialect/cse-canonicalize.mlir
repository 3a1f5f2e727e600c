// Upstream cse/canonicalize see onnx ops as Pure: dead and duplicate ops go,
// random ops stay, Identity and Constant fold.
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(cse,canonicalize))' | FileCheck %s

// CHECK-LABEL: func.func @dead_and_duplicate
// CHECK-SAME: (%[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<3xf32>)
// CHECK-NEXT: %[[S:.*]] = "onnx.Add"(%[[A]], %[[B]])
// CHECK-NEXT: %[[M:.*]] = "onnx.Mul"(%[[S]], %[[S]])
// CHECK-NEXT: return %[[M]]
func.func @dead_and_duplicate(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "onnx.Add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = "onnx.Add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = "onnx.Mul"(%0, %1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %dead = "onnx.Exp"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %dead2 = "onnx.Conv"(%a, %a, %dead) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @random_ops_stay
// CHECK-NEXT: "onnx.RandomNormal"() <{shape = [2]}>
// CHECK-NEXT: "onnx.RandomNormal"() <{shape = [2]}>
// CHECK-NEXT: "onnx.RandomUniform"() <{shape = [2]}>
// CHECK-NEXT: "onnx.NoValue"
// CHECK-NEXT: "onnx.Dropout"
// CHECK-NEXT: return
func.func @random_ops_stay(%x: tensor<2xf32>) {
  %0 = "onnx.RandomNormal"() {shape = [2]} : () -> tensor<2xf32>
  %1 = "onnx.RandomNormal"() {shape = [2]} : () -> tensor<2xf32>
  %2 = "onnx.RandomUniform"() {shape = [2]} : () -> tensor<2xf32>
  %none = "onnx.NoValue"() {value} : () -> none
  // Dropout in training mode draws a random mask.
  %3:2 = "onnx.Dropout"(%x, %none, %none) : (tensor<2xf32>, none, none) -> (tensor<2xf32>, none)
  return
}

// -----

// CHECK-LABEL: func.func @identity_folds
// CHECK-SAME: (%[[X:.*]]: tensor<2xf32>)
// CHECK-NEXT: return %[[X]], %[[X]]
func.func @identity_folds(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0 = "onnx.Identity"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  %1 = "onnx.Identity"(%0) : (tensor<2xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// An Identity that refines the type is kept: folding it would change a type.
// CHECK-LABEL: func.func @identity_refining_type
// CHECK-NEXT: "onnx.Identity"
func.func @identity_refining_type(%x: tensor<?xf32>) -> tensor<2xf32> {
  %0 = "onnx.Identity"(%x) : (tensor<?xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Equal constants are merged, unused ones removed; NoValue is not a constant
// but is Pure, so an unused one goes too.
// CHECK-LABEL: func.func @constants
// CHECK-NEXT: %[[C:.*]] = "onnx.Constant"() <{value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}>
// CHECK-NOT: onnx.Constant
// CHECK-NOT: onnx.NoValue
// CHECK: "onnx.Add"(%[[C]], %[[C]])
func.func @constants() -> tensor<2xf32> {
  %0 = "onnx.Constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %1 = "onnx.Constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %2 = "onnx.Constant"() {value = dense<[3.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %none = "onnx.NoValue"() {value} : () -> none
  %3 = "onnx.Add"(%0, %1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %3 : tensor<2xf32>
}

// -----

// Identity of a constant folds to the constant.
// CHECK-LABEL: func.func @identity_of_constant
// CHECK-NEXT: %[[C:.*]] = "onnx.Constant"() <{value = dense<5> : tensor<3xi64>}>
// CHECK-NEXT: return %[[C]]
func.func @identity_of_constant() -> tensor<3xi64> {
  %0 = "onnx.Constant"() {value = dense<5> : tensor<3xi64>} : () -> tensor<3xi64>
  %1 = "onnx.Identity"(%0) : (tensor<3xi64>) -> tensor<3xi64>
  return %1 : tensor<3xi64>
}
