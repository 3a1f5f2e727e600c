// Every op family parses, verifies, prints, and parses again unchanged.
// RUN: onnx-ad-opt %s | FileCheck %s
// RUN: onnx-ad-opt %s | onnx-ad-opt | FileCheck %s

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2x3xi1>) -> tensor<2x3xi64> {
  // CHECK: "onnx.Add"(%{{.*}}, %{{.*}}) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = "onnx.Add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: "onnx.Relu"
  %1 = "onnx.Relu"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: "onnx.Where"
  %2 = "onnx.Where"(%c, %1, %0) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: "onnx.Cast"(%{{.*}}) <{to = 7 : si64}> : (tensor<2x3xf32>) -> tensor<2x3xi64>
  %3 = "onnx.Cast"(%2) {to = 7 : si64} : (tensor<2x3xf32>) -> tensor<2x3xi64>
  return %3 : tensor<2x3xi64>
}

// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  // CHECK: %[[NONE:.*]] = "onnx.NoValue"() <{value}> : () -> none
  %none = "onnx.NoValue"() {value} : () -> none
  // CHECK: "onnx.Conv"(%{{.*}}, %{{.*}}, %[[NONE]]) <{kernel_shape = [3, 3], pads = [1, 1, 1, 1]}> : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, none) -> tensor<1x4x8x8xf32>
  %y = "onnx.Conv"(%x, %w, %none) {kernel_shape = [3, 3], pads = [1, 1, 1, 1]} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, none) -> tensor<1x4x8x8xf32>
  return %y : tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<2x3xf32>, %axes: tensor<1xi64>) -> (tensor<2x1xf32>, tensor<2xf32>) {
  // CHECK: "onnx.ReduceSum"(%{{.*}}, %{{.*}}) <{keepdims = 1 : si64}>
  %0 = "onnx.ReduceSum"(%x, %axes) {keepdims = 1 : si64} : (tensor<2x3xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  // An older schema version keeps axes as an attribute.
  // CHECK: "onnx.ReduceMeanV13"(%{{.*}}) <{axes = [1], keepdims = 0 : si64}>
  %1 = "onnx.ReduceMeanV13"(%x) {axes = [1], keepdims = 0 : si64} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2x1xf32>, tensor<2xf32>
}

// CHECK-LABEL: func.func @shape
func.func @shape(%x: tensor<2x3xf32>, %s: tensor<2xi64>, %i: tensor<2xi64>) -> (tensor<3x2xf32>, tensor<6x2xf32>, tensor<2xi64>, tensor<2x2xf32>) {
  // CHECK: "onnx.Reshape"
  %0 = "onnx.Reshape"(%x, %s) : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<3x2xf32>
  // CHECK: "onnx.Transpose"(%{{.*}}) <{perm = [1, 0]}>
  %1 = "onnx.Transpose"(%x) {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  // CHECK: "onnx.Concat"(%{{.*}}, %{{.*}}) <{axis = 0 : si64}>
  %2 = "onnx.Concat"(%0, %1) {axis = 0 : si64} : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<6x2xf32>
  // CHECK: "onnx.Shape"
  %3 = "onnx.Shape"(%x) : (tensor<2x3xf32>) -> tensor<2xi64>
  // CHECK: "onnx.Gather"(%{{.*}}, %{{.*}}) <{axis = 1 : si64}>
  %4 = "onnx.Gather"(%x, %i) {axis = 1 : si64} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2x2xf32>
  return %1, %2, %3, %4 : tensor<3x2xf32>, tensor<6x2xf32>, tensor<2xi64>, tensor<2x2xf32>
}

// CHECK-LABEL: func.func @constants
func.func @constants() -> (tensor<2xf32>, tensor<3xi64>, tensor<2xf32>) {
  // CHECK: "onnx.Constant"() <{value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}> : () -> tensor<2xf32>
  %0 = "onnx.Constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  // CHECK: "onnx.Constant"() <{value = dense_resource<weights> : tensor<3xi64>}> : () -> tensor<3xi64>
  %1 = "onnx.Constant"() {value = dense_resource<weights> : tensor<3xi64>} : () -> tensor<3xi64>
  // CHECK: "onnx.Constant"() <{value_floats = [1.000000e+00 : f32, 2.000000e+00 : f32]}> : () -> tensor<2xf32>
  %2 = "onnx.Constant"() {value_floats = [1.0 : f32, 2.0 : f32]} : () -> tensor<2xf32>
  return %0, %1, %2 : tensor<2xf32>, tensor<3xi64>, tensor<2xf32>
}

// CHECK-LABEL: func.func @onnx_types
// CHECK-SAME: !onnx.Seq<tensor<?xf32>>
// CHECK-SAME: !onnx.Opt<tensor<2xf32>>
// CHECK-SAME: tensor<3x!onnx.String>
func.func @onnx_types(%a: tensor<2xf32>, %seq: !onnx.Seq<tensor<?xf32>>, %opt: !onnx.Opt<tensor<2xf32>>, %s: tensor<3x!onnx.String>) -> (!onnx.Seq<tensor<?xf32>>, tensor<2xf32>, tensor<3x!onnx.String>) {
  // CHECK: "onnx.SequenceConstruct"(%{{.*}}, %{{.*}}) : (tensor<2xf32>, tensor<2xf32>) -> !onnx.Seq<tensor<?xf32>>
  %0 = "onnx.SequenceConstruct"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> !onnx.Seq<tensor<?xf32>>
  // CHECK: "onnx.OptionalGetElement"(%{{.*}}) : (!onnx.Opt<tensor<2xf32>>) -> tensor<2xf32>
  %1 = "onnx.OptionalGetElement"(%opt) : (!onnx.Opt<tensor<2xf32>>) -> tensor<2xf32>
  // CHECK: "onnx.StringNormalizer"(%{{.*}}) <{case_change_action = "LOWER"}> : (tensor<3x!onnx.String>) -> tensor<3x!onnx.String>
  %2 = "onnx.StringNormalizer"(%s) {case_change_action = "LOWER"} : (tensor<3x!onnx.String>) -> tensor<3x!onnx.String>
  return %0, %1, %2 : !onnx.Seq<tensor<?xf32>>, tensor<2xf32>, tensor<3x!onnx.String>
}

// CHECK-LABEL: func.func @control_flow
func.func @control_flow(%c: tensor<i1>, %x: tensor<2xf32>, %m: tensor<i64>, %xs: tensor<4x2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<4x2xf32>) {
  // CHECK: "onnx.If"(%{{.*}}) ({
  // CHECK-NEXT: "onnx.Relu"
  // CHECK-NEXT: "onnx.Yield"
  // CHECK-NEXT: }, {
  // CHECK-NEXT: "onnx.Yield"
  // CHECK-NEXT: }) : (tensor<i1>) -> tensor<2xf32>
  %0 = "onnx.If"(%c) ({
    %r = "onnx.Relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    "onnx.Yield"(%r) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%x) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  // CHECK: "onnx.Loop"(%{{.*}}, %{{.*}}, %{{.*}}) ({
  // CHECK-NEXT: ^bb0(%{{.*}}: tensor<i64>, %{{.*}}: tensor<i1>, %{{.*}}: tensor<2xf32>):
  // CHECK: "onnx.Yield"
  // CHECK: }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  %1 = "onnx.Loop"(%m, %c, %x) ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xf32>):
    %s = "onnx.Add"(%v, %x) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "onnx.Yield"(%cond, %s) : (tensor<i1>, tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  // CHECK: "onnx.Scan"(%{{.*}}, %{{.*}}) <{num_scan_inputs = 1 : si64}> ({
  // CHECK-NEXT: ^bb0(%{{.*}}: tensor<2xf32>, %{{.*}}: tensor<2xf32>):
  // CHECK: }) : (tensor<2xf32>, tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>)
  %2:2 = "onnx.Scan"(%x, %xs) ({
  ^bb0(%acc: tensor<2xf32>, %e: tensor<2xf32>):
    %n = "onnx.Add"(%acc, %e) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "onnx.Yield"(%n, %n) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) {num_scan_inputs = 1 : si64} : (tensor<2xf32>, tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>)
  return %0, %1, %2#0, %2#1 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<4x2xf32>
}

// CHECK: dialect_resources
// CHECK: weights: "0x08000000010000000000000002000000000000000300000000000000"
{-#
  dialect_resources: {
    builtin: {
      weights: "0x08000000010000000000000002000000000000000300000000000000"
    }
  }
#-}
