// onnx-ad-simplify (transforms/simplify.py): folds of the ops that depend on
// the seed arguments; primal ops are never touched.
// RUN: onnx-ad-opt %s --split-input-file --pass-pipeline='builtin.module(onnx-ad-simplify{seeds=t},func.func(canonicalize,cse))' | FileCheck %s
// The modes run it last: GELU's tangent chain is one Mul by a coefficient.
// RUN: onnx-ad-opt %s --split-input-file --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx inputs=x},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD

// ReduceSum(t) * (1/N) -> ReduceMean(t); the primal's own ReduceSum * 1/4 stays.
// CHECK-LABEL: func.func @mean
// CHECK: "onnx.ReduceSum"(%arg0,
// CHECK: "onnx.Mul"
// CHECK: %[[M:.*]] = "onnx.ReduceMean"(%arg1, %{{.*}}) <{keepdims = 1 : si64, noop_with_empty_axes = 1 : si64}> : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
// CHECK-NOT: "onnx.ReduceSum"
// CHECK: return %{{.*}}, %[[M]]
// FWD-LABEL: func.func @mean
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @mean(%x: tensor<2x4xf32> {onnx.name = "x"}, %t: tensor<?x2x4xf32> {onnx.name = "t"}) -> (tensor<2x1xf32>, tensor<?x2x1xf32>) {
    %a = "onnx.Constant"() <{value = dense<1> : tensor<1xi64>}> : () -> tensor<1xi64>
    %a2 = "onnx.Constant"() <{value = dense<2> : tensor<1xi64>}> : () -> tensor<1xi64>
    %c = "onnx.Constant"() <{value = dense<2.500000e-01> : tensor<f32>}> : () -> tensor<f32>
    %s = "onnx.ReduceSum"(%x, %a) <{keepdims = 1 : si64}> : (tensor<2x4xf32>, tensor<1xi64>) -> tensor<2x1xf32>
    %y = "onnx.Mul"(%s, %c) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
    %ts = "onnx.ReduceSum"(%t, %a2) <{keepdims = 1 : si64, noop_with_empty_axes = 1 : si64}> : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
    %ty = "onnx.Mul"(%ts, %c) : (tensor<?x2x1xf32>, tensor<f32>) -> tensor<?x2x1xf32>
    return %y, %ty : tensor<2x1xf32>, tensor<?x2x1xf32>
  }
}

// -----

// Not 1/N (here N = 4): kept.
// CHECK-LABEL: func.func @not_mean
// CHECK: "onnx.ReduceSum"
// CHECK: "onnx.Mul"
// CHECK-NOT: ReduceMean
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @not_mean(%x: tensor<2x4xf32> {onnx.name = "x"}, %t: tensor<?x2x4xf32> {onnx.name = "t"}) -> tensor<?x2x1xf32> {
    %a2 = "onnx.Constant"() <{value = dense<2> : tensor<1xi64>}> : () -> tensor<1xi64>
    %c = "onnx.Constant"() <{value = dense<5.000000e-01> : tensor<f32>}> : () -> tensor<f32>
    %ts = "onnx.ReduceSum"(%t, %a2) <{keepdims = 1 : si64, noop_with_empty_axes = 1 : si64}> : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
    %ty = "onnx.Mul"(%ts, %c) : (tensor<?x2x1xf32>, tensor<f32>) -> tensor<?x2x1xf32>
    return %ty : tensor<?x2x1xf32>
  }
}

// -----

// (t / c) * e * x + t * a -> t * ((e * x / c) + a), the scalar constants
// multiplied out: one op on the seed-dependent value.
// CHECK-LABEL: func.func @factor
// CHECK-DAG: %[[K:.*]] = "onnx.Constant"() <{value = dense<5.000000e-01> : tensor<f32>}>
// CHECK: %[[E:.*]] = "onnx.Mul"(%arg0, %[[K]])
// CHECK: %[[EX:.*]] = "onnx.Mul"(%[[E]], %arg0)
// CHECK: %[[C:.*]] = "onnx.Add"(%arg0, %[[EX]])
// CHECK: %[[T:.*]] = "onnx.Mul"(%arg1, %[[C]]) : (tensor<?x2x4xf32>, tensor<2x4xf32>) -> tensor<?x2x4xf32>
// CHECK: return %[[T]]
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @factor(%x: tensor<2x4xf32> {onnx.name = "x"}, %t: tensor<?x2x4xf32> {onnx.name = "t"}) -> tensor<?x2x4xf32> {
    %two = "onnx.Constant"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %four = "onnx.Constant"() <{value = dense<4.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %e = "onnx.Mul"(%x, %two) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %t1 = "onnx.Div"(%t, %four) : (tensor<?x2x4xf32>, tensor<f32>) -> tensor<?x2x4xf32>
    %t2 = "onnx.Mul"(%t1, %e) : (tensor<?x2x4xf32>, tensor<2x4xf32>) -> tensor<?x2x4xf32>
    %t3 = "onnx.Mul"(%t2, %x) : (tensor<?x2x4xf32>, tensor<2x4xf32>) -> tensor<?x2x4xf32>
    %t4 = "onnx.Mul"(%x, %t) : (tensor<2x4xf32>, tensor<?x2x4xf32>) -> tensor<?x2x4xf32>
    %t5 = "onnx.Add"(%t4, %t3) : (tensor<?x2x4xf32>, tensor<?x2x4xf32>) -> tensor<?x2x4xf32>
    return %t5 : tensor<?x2x4xf32>
  }
}

// -----

// An intermediate with another user stays (no duplicated work).
// CHECK-LABEL: func.func @shared
// CHECK: %[[T1:.*]] = "onnx.Mul"(%arg1, %arg0)
// CHECK: %[[T2:.*]] = "onnx.Mul"(%[[T1]], %arg0)
// CHECK: return %[[T1]], %[[T2]]
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @shared(%x: tensor<2x4xf32> {onnx.name = "x"}, %t: tensor<?x2x4xf32> {onnx.name = "t"}) -> (tensor<?x2x4xf32>, tensor<?x2x4xf32>) {
    %t1 = "onnx.Mul"(%t, %x) : (tensor<?x2x4xf32>, tensor<2x4xf32>) -> tensor<?x2x4xf32>
    %t2 = "onnx.Mul"(%t1, %x) : (tensor<?x2x4xf32>, tensor<2x4xf32>) -> tensor<?x2x4xf32>
    return %t1, %t2 : tensor<?x2x4xf32>, tensor<?x2x4xf32>
  }
}

// -----

// FWD-LABEL: func.func @gelu
// FWD: "onnx.Erf"
// FWD: "onnx.Exp"
// FWD: "onnx.Mul"(%{{.*}}, %{{.*}}) : (tensor<?x2x8xf32>, tensor<2x8xf32>) -> tensor<?x2x8xf32>
// FWD-NOT: tensor<?x2x8xf32>) -> tensor<?x2x8xf32>
// FWD: "onnx.Transpose"
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @gelu(%x: tensor<2x8xf32> {onnx.name = "x"}, %t: tensor<2x8xf32> {onnx.name = "t"}) -> (tensor<2x8xf32> {onnx.name = "y"}) {
    %c = "onnx.Constant"() <{value = dense<1.41421354> : tensor<f32>}> : () -> tensor<f32>
    %one = "onnx.Constant"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %half = "onnx.Constant"() <{value = dense<5.000000e-01> : tensor<f32>}> : () -> tensor<f32>
    %z = "onnx.Div"(%x, %c) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %e = "onnx.Erf"(%z) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %a = "onnx.Add"(%e, %one) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %m = "onnx.Mul"(%x, %a) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    %y = "onnx.Mul"(%m, %half) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    return %y : tensor<2x8xf32>
  }
}

// -----

// (x - Mean) * InvStdDev of a LayerNormalization(x, ...) -> LayerNormalization(x, ones).
// CHECK-LABEL: func.func @standardized
// CHECK: %[[ONES:.*]] = "onnx.Constant"() <{value = dense<1.000000e+00> : tensor<4xf32>}>
// CHECK: "onnx.LayerNormalization"(%arg0, %arg2, %{{.*}})
// CHECK: %[[XH:[^,]*]], {{.*}} = "onnx.LayerNormalization"(%arg0, %[[ONES]], %{{.*}}) <{axis = -1 : si64}> : (tensor<2x4xf32>, tensor<4xf32>, none) -> (tensor<2x4xf32>, none, none)
// CHECK-NOT: "onnx.Sub"
// CHECK: "onnx.Mul"(%arg1, %[[XH]])
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @standardized(%x: tensor<2x4xf32> {onnx.name = "x"}, %t: tensor<?x2x4xf32> {onnx.name = "t"}, %s: tensor<4xf32> {onnx.name = "s"}) -> (tensor<2x4xf32>, tensor<?x2x4xf32>) {
    %n = "onnx.NoValue"() {value} : () -> none
    %y, %m, %i = "onnx.LayerNormalization"(%x, %s, %n) <{axis = -1 : si64}> : (tensor<2x4xf32>, tensor<4xf32>, none) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
    %d = "onnx.Sub"(%x, %m) : (tensor<2x4xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
    %xh = "onnx.Mul"(%d, %i) : (tensor<2x4xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
    %tx = "onnx.Mul"(%t, %xh) : (tensor<?x2x4xf32>, tensor<2x4xf32>) -> tensor<?x2x4xf32>
    return %y, %tx : tensor<2x4xf32>, tensor<?x2x4xf32>
  }
}

// -----

// Integer arithmetic (shape computations) is never reassociated: (t / 4) * 2 != t / 2.
// CHECK-LABEL: func.func @integers
// CHECK: "onnx.Div"(%arg1,
// CHECK: "onnx.Mul"
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @integers(%x: tensor<2xf32> {onnx.name = "x"}, %t: tensor<2xi64> {onnx.name = "t"}) -> (tensor<2xf32>, tensor<2xi64>) {
    %two = "onnx.Constant"() <{value = dense<2> : tensor<i64>}> : () -> tensor<i64>
    %four = "onnx.Constant"() <{value = dense<4> : tensor<i64>}> : () -> tensor<i64>
    %t1 = "onnx.Div"(%t, %four) : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
    %t2 = "onnx.Mul"(%t1, %two) : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
    return %x, %t2 : tensor<2xf32>, tensor<2xi64>
  }
}
