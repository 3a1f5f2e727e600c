// Region rewrites of the AD passes: If, Scan and Loop in forward mode (tangents
// carried in the regions), reverse mode (backward Scan/Loop over stored states,
// branch-wise If), and the unroll pass.
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-unroll,func.func(canonicalize,cse))' | FileCheck %s --check-prefix=UNROLL

// One If whose branches also yield tangents; the constant branch yields a zero
// tangent. Reverse: an If on the same condition yielding the cotangents of the
// captured x and w.
// FWD-LABEL: func.func @if_capture
// FWD: %[[IF:.*]]:2 = "onnx.If"(%arg2) ({
// FWD: "onnx.Yield"(%{{.*}}, %{{.*}}) : (tensor<3xf64>, tensor<?x3xf64>) -> ()
// FWD: "onnx.Expand"
// FWD: "onnx.Yield"(%{{.*}}, %{{.*}}) : (tensor<3xf64>, tensor<?x3xf64>) -> ()
// FWD: }) : (tensor<i1>) -> (tensor<3xf64>, tensor<?x3xf64>)
// FWD-NOT: "onnx.If"
// REV-LABEL: func.func @if_capture
// REV: "onnx.If"(%arg2) ({
// REV: }) : (tensor<i1>) -> tensor<3xf64>
// REV: "onnx.If"(%arg2) ({
// REV: "onnx.Mul"
// REV: "onnx.Yield"(%{{.*}}, %{{.*}}) : (tensor<?x3xf64>, tensor<?x3xf64>) -> ()
// REV: "onnx.Expand"
// REV: }) : (tensor<i1>) -> (tensor<?x3xf64>, tensor<?x3xf64>)
// UNROLL-LABEL: func.func @if_capture
// UNROLL: "onnx.If"
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @if_capture(%x: tensor<3xf64>, %w: tensor<3xf64>, %c: tensor<i1>) -> tensor<3xf64> {
    %0 = "onnx.If"(%c) ({
      %1 = "onnx.Mul"(%x, %w) : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
      "onnx.Yield"(%1) : (tensor<3xf64>) -> ()
    }, {
      %1 = "onnx.Constant"() <{value = dense<1.0> : tensor<3xf64>}> : () -> tensor<3xf64>
      "onnx.Yield"(%1) : (tensor<3xf64>) -> ()
    }) : (tensor<i1>) -> tensor<3xf64>
    return %0 : tensor<3xf64>
  }
}

// -----

// Forward: one Scan, the tangent of h an extra state, the tangent of xs an extra
// scan input and the tangent of the scan output an extra scan output, both on
// axis 1 (the direction axis leads). Reverse: the primal Scan also emits its
// states; a second Scan runs backwards over them, over the cotangent of the
// stacked output and over 1 - tanh^2 of that output (each step's tanh, read
// instead of recomputed from the state: no Tanh, and xs is not read; the
// Mul and Sub of the stacked tanh and the transpose of the stacked states
// run once on the whole stacks, in front of the Scan), carrying the
// cotangent of h and stacking the step's cotangent d_t, once: it is xs's
// cotangent, and the captured w's, sum_t h_t^T d_t, is one MatMul of that
// stack after the Scan, the steps joined to the contracted axis ([3, T]
// times [nadj, T, 3]).
// FWD-LABEL: func.func @scan_rnn
// FWD: "onnx.Scan"(%arg0, %{{.*}}, %arg1, %{{.*}}) <{num_scan_inputs = 2 : si64, scan_input_axes = [0, 1], scan_input_directions = [0, 0], scan_output_axes = [0, 1], scan_output_directions = [0, 0]}>
// FWD-NEXT: ^bb0(%{{.*}}: tensor<1x3xf64>, %{{.*}}: tensor<?x1x3xf64>, %{{.*}}: tensor<1x3xf64>, %{{.*}}: tensor<?x1x3xf64>):
// FWD: "onnx.Tanh"
// FWD: "onnx.Yield"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<1x3xf64>, tensor<?x1x3xf64>, tensor<1x3xf64>, tensor<?x1x3xf64>)
// FWD-NOT: "onnx.Scan"
// REV-LABEL: func.func @scan_rnn
// REV: %[[P:.*]]:3 = "onnx.Scan"(%arg0, %arg1) <{num_scan_inputs = 1 : si64, scan_output_axes = [0, 0], scan_output_directions = [0, 0]}>
// REV-NEXT: ^bb0(%[[H:.*]]: tensor<1x3xf64>, %{{.*}}: tensor<1x3xf64>):
// REV: "onnx.Yield"(%[[T:.*]], %[[T]], %[[H]])
// REV: %[[SQ:.*]] = "onnx.Mul"(%[[P]]#1, %[[P]]#1) : (tensor<4x1x3xf64>, tensor<4x1x3xf64>) -> tensor<4x1x3xf64>
// REV: %[[D:.*]] = "onnx.Sub"(%{{.*}}, %[[SQ]]) : (tensor<f64>, tensor<4x1x3xf64>) -> tensor<4x1x3xf64>
// REV: %[[HT:.*]] = "onnx.Transpose"(%[[P]]#2) <{perm = [0, 2, 1]}> : (tensor<?x1x3xf64>) -> tensor<?x3x1xf64>
// REV: %[[R:.*]]:2 = "onnx.Scan"(%{{.*}}, %{{.*}}, %[[D]]) <{num_scan_inputs = 2 : si64, scan_input_axes = [1, 0], scan_input_directions = [1, 1], scan_output_axes = [1], scan_output_directions = [1]}>
// REV-NEXT: ^bb0(%{{.*}}: tensor<?x1x3xf64>, %{{.*}}: tensor<?x1x3xf64>, %{{.*}}: tensor<1x3xf64>):
// REV-NOT: "onnx.Tanh"
// REV-NOT: "onnx.Sub"
// REV-NOT: "onnx.Transpose"
// REV: "onnx.Yield"
// REV: }) : (tensor<?x1x3xf64>, tensor<?x4x1x3xf64>, tensor<4x1x3xf64>) -> (tensor<?x1x3xf64>, tensor<?x4x1x3xf64>)
// REV: %[[PT:.*]] = "onnx.Transpose"(%[[HT]]) <{perm = [1, 0, 2]}> : (tensor<?x3x1xf64>) -> tensor<3x?x1xf64>
// REV: %[[P2:.*]] = "onnx.Reshape"(%[[PT]], %{{.*}}) : (tensor<3x?x1xf64>, tensor<2xi64>) -> tensor<3x?xf64>
// REV: %[[Q2:.*]] = "onnx.Reshape"(%[[R]]#1, %{{.*}}) : (tensor<?x4x1x3xf64>, tensor<3xi64>) -> tensor<?x?x3xf64>
// REV: "onnx.MatMul"(%[[P2]], %[[Q2]]) : (tensor<3x?xf64>, tensor<?x?x3xf64>) -> tensor<?x3x3xf64>
// UNROLL-LABEL: func.func @scan_rnn
// UNROLL-NOT: "onnx.Scan"
// UNROLL-COUNT-4: "onnx.Tanh"
// UNROLL-NOT: "onnx.Scan"
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @scan_rnn(%h0: tensor<1x3xf64>, %xs: tensor<4x1x3xf64>, %w: tensor<3x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>) {
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.MatMul"(%h, %w) : (tensor<1x3xf64>, tensor<3x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Add"(%1, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %3 = "onnx.Tanh"(%2) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%3, %3) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    return %0#0, %0#1 : tensor<1x3xf64>, tensor<4x1x3xf64>
  }
}

// -----

// A data-dependent while loop carrying an int64 counter. Forward: the tangent of
// v is an extra loop-carried value, the counter gets none. Reverse: the primal
// Loop also emits the states of v (the counter's, which nothing reads, and
// its iteration numbers are not kept); the reverse is a Scan running
// backwards over them, in an If on a positive iteration count (the length
// of the stored states; ONNX Runtime's Scan cannot run zero steps) whose
// other branch passes the cotangent through. The Cos of each stored state
// runs once on the whole stack, in front of that Scan.
// FWD-LABEL: func.func @loop_while
// FWD: "onnx.Loop"(%arg1, %{{.*}}, %arg0, %arg1, %{{.*}})
// FWD-NEXT: ^bb0(%{{.*}}: tensor<i64>, %{{.*}}: tensor<i1>, %{{.*}}: tensor<2xf64>, %{{.*}}: tensor<i64>, %{{.*}}: tensor<?x2xf64>):
// FWD: "onnx.Yield"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<i1>, tensor<2xf64>, tensor<i64>, tensor<?x2xf64>)
// REV-LABEL: func.func @loop_while
// REV: %[[P:.*]]:3 = "onnx.Loop"(%arg1, %{{.*}}, %arg0, %arg1)
// REV: -> (tensor<2xf64>, tensor<i64>, tensor<?x2xf64>)
// REV: %[[N:.*]] = "onnx.Shape"(%[[P]]#2) <{end = 1 : si64, start = 0 : si64}>
// REV: %[[T:.*]] = "onnx.Gather"(%[[N]], %{{.*}}) <{axis = 0 : si64}> : (tensor<1xi64>, tensor<i64>) -> tensor<i64>
// REV: %[[RAN:.*]] = "onnx.Greater"(%[[T]], %{{.*}})
// REV: "onnx.If"(%[[RAN]]) ({
// REV: %[[COS:.*]] = "onnx.Cos"(%[[P]]#2)
// REV: "onnx.Scan"(%[[CT:.*]], %[[COS]]) <{num_scan_inputs = 1 : si64, scan_input_axes = [0], scan_input_directions = [1]}>
// REV: }, {
// REV-NEXT: "onnx.Yield"(%[[CT]])
// REV: }) : (tensor<i1>) -> tensor<?x2xf64>
// REV-NOT: "onnx.Loop"
// UNROLL-LABEL: func.func @loop_while
// UNROLL: "onnx.Loop"
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @loop_while(%v0: tensor<2xf64>, %n: tensor<i64>) -> tensor<2xf64> {
    %t = "onnx.Constant"() <{value = dense<true> : tensor<i1>}> : () -> tensor<i1>
    %lim = "onnx.Constant"() <{value = dense<10.0> : tensor<f64>}> : () -> tensor<f64>
    %none = "onnx.NoValue"() <{value}> : () -> none
    %0:2 = "onnx.Loop"(%n, %t, %v0, %n) ({
    ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xf64>, %cnt: tensor<i64>):
      %1 = "onnx.Sin"(%v) : (tensor<2xf64>) -> tensor<2xf64>
      %2 = "onnx.Add"(%v, %1) : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64>
      %3 = "onnx.ReduceSum"(%2, %none) <{keepdims = 0 : si64}> : (tensor<2xf64>, none) -> tensor<f64>
      %4 = "onnx.Less"(%3, %lim) : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %5 = "onnx.Add"(%cnt, %i) : (tensor<i64>, tensor<i64>) -> tensor<i64>
      "onnx.Yield"(%4, %2, %5) : (tensor<i1>, tensor<2xf64>, tensor<i64>) -> ()
    }) : (tensor<i64>, tensor<i1>, tensor<2xf64>, tensor<i64>) -> (tensor<2xf64>, tensor<i64>)
    return %0#0 : tensor<2xf64>
  }
}
