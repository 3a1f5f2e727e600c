// onnx-ad-merge-scans (merge_scans.py), stacking: two independent Scans
// running the same elementwise body on operands of the same extents become
// one Scan running that body once on both, stacked along the steps' axis 0
// (a Concat per operand pair before it, a Slice per result read after it),
// when the steps it saves outnumber the ops it adds (T = 16 here: the primal
// pair of the reverse model is stacked; T = 4: merged side by side only).
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s

// CHECK-LABEL: func.func @same_bodies
// CHECK: "onnx.Concat"(%arg0, %arg1) <{axis = 0 : si64}> : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<2x3xf64>
// CHECK: "onnx.Concat"(%arg2, %arg3) <{axis = 1 : si64}> : (tensor<16x1x3xf64>, tensor<16x1x3xf64>) -> tensor<16x2x3xf64>
// CHECK: "onnx.Scan"
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<2x3xf64>, %{{.*}}: tensor<2x3xf64>):
// CHECK-NEXT: "onnx.Mul"{{.*}} -> tensor<2x3xf64>
// CHECK-NEXT: "onnx.Tanh"{{.*}} -> tensor<2x3xf64>
// CHECK-NEXT: "onnx.Yield"
// CHECK-COUNT-2: "onnx.Slice"({{.*}}) : (tensor<2x3xf64>
// CHECK: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @same_bodies(%h0: tensor<1x3xf64>, %g0: tensor<1x3xf64>, %xs: tensor<16x1x3xf64>, %ys: tensor<16x1x3xf64>) -> (tensor<1x3xf64>, tensor<1x3xf64>) {
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.Mul"(%h, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Tanh"(%1) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%2, %1) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<16x1x3xf64>) -> (tensor<1x3xf64>, tensor<16x1x3xf64>)
    %5:2 = "onnx.Scan"(%g0, %ys) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %yt: tensor<1x3xf64>):
      %6 = "onnx.Mul"(%h, %yt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %7 = "onnx.Tanh"(%6) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%7, %6) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<16x1x3xf64>) -> (tensor<1x3xf64>, tensor<16x1x3xf64>)
    return %0#0, %5#0 : tensor<1x3xf64>, tensor<1x3xf64>
  }
}

// -----

// CHECK-LABEL: func.func @short
// CHECK-NOT: "onnx.Concat"
// CHECK: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @short(%h0: tensor<1x3xf64>, %g0: tensor<1x3xf64>, %xs: tensor<4x1x3xf64>, %ys: tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<1x3xf64>) {
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.Mul"(%h, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Tanh"(%1) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%2, %1) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    %5:2 = "onnx.Scan"(%g0, %ys) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %yt: tensor<1x3xf64>):
      %6 = "onnx.Mul"(%h, %yt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %7 = "onnx.Tanh"(%6) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%7, %6) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    return %0#0, %5#0 : tensor<1x3xf64>, tensor<1x3xf64>
  }
}
