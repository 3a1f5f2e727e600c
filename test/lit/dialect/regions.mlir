// Upstream passes that use RegionBranchOpInterface (sccp, remove-dead-values,
// control-flow-sink) and the canonicalizer run on If/Loop/Scan without
// crashing and keep their semantics.
// RUN: onnx-ad-opt %s -split-input-file --sccp | FileCheck %s --check-prefix=SCCP
// RUN: onnx-ad-opt %s -split-input-file --canonicalize --cse | FileCheck %s --check-prefix=CANON
// RUN: onnx-ad-opt %s -split-input-file --remove-dead-values | FileCheck %s --check-prefix=RDV
// RUN: onnx-ad-opt %s -split-input-file --control-flow-sink --loop-invariant-code-motion | FileCheck %s --check-prefix=SINK

// Both branches yield the same constant: sccp replaces the If's result.
// SCCP-LABEL: func.func @if_same_constant
// SCCP: %[[K:.*]] = "onnx.Constant"
// SCCP-NEXT: return %[[K]]
// CANON-LABEL: func.func @if_same_constant
// CANON: "onnx.If"
// SINK-LABEL: func.func @if_same_constant
// SINK: "onnx.If"
func.func @if_same_constant(%c: tensor<i1>) -> tensor<2xf32> {
  %k = "onnx.Constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = "onnx.If"(%c) ({
    "onnx.Yield"(%k) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%k) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// A carried value that the body changes is not a constant, however it starts;
// one the body passes through unchanged is.
// SCCP-LABEL: func.func @loop_carried
// SCCP: %[[K:.*]] = "onnx.Constant"
// SCCP: %[[L:.*]]:2 = "onnx.Loop"
// SCCP: return %[[L]]#0, %[[K]]
func.func @loop_carried(%m: tensor<i64>, %c: tensor<i1>) -> (tensor<2xf32>, tensor<2xf32>) {
  %k = "onnx.Constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %0:2 = "onnx.Loop"(%m, %c, %k, %k) ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xf32>, %w: tensor<2xf32>):
    %s = "onnx.Add"(%v, %v) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "onnx.Yield"(%cond, %s, %w) : (tensor<i1>, tensor<2xf32>, tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// The cond a Loop body yields decides termination: it must survive
// remove-dead-values even though no body op reads the cond argument.
// (Dead carried values may become ub.poison: legal, though not exportable.)
// RDV-LABEL: func.func @loop_condition
// RDV-NOT: ub.poison : tensor<i1>
// RDV: %[[LT:.*]] = "onnx.Less"
// RDV: "onnx.Yield"(%[[LT]],
// SCCP-LABEL: func.func @loop_condition
// SCCP: "onnx.Less"
// SCCP: "onnx.Yield"
// CANON-LABEL: func.func @loop_condition
// CANON: "onnx.Loop"
// CANON-NOT: "onnx.Exp"
// CANON: return
func.func @loop_condition(%m: tensor<i64>, %c: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %0:2 = "onnx.Loop"(%m, %c, %x, %x) ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xf32>, %w: tensor<2xf32>):
    %s = "onnx.Add"(%v, %x) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %t = "onnx.Mul"(%w, %w) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %dead = "onnx.Exp"(%s) : (tensor<2xf32>) -> tensor<2xf32>
    %lt = "onnx.Less"(%i, %m) : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "onnx.Yield"(%lt, %s, %t) : (tensor<i1>, tensor<2xf32>, tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  return %0#0 : tensor<2xf32>
}

// -----

// Scan: the state starts as a constant but accumulates; scan outputs are
// made by the op, so nothing is assumed about them.
// SCCP-LABEL: func.func @scan
// SCCP: %[[S:.*]]:2 = "onnx.Scan"
// SCCP: return %[[S]]#0, %[[S]]#1
// CANON-LABEL: func.func @scan
// CANON: %[[S:.*]]:2 = "onnx.Scan"
// CANON: return %[[S]]#0, %[[S]]#1
// RDV-LABEL: func.func @scan
// RDV: %[[S:.*]]:2 = "onnx.Scan"
// RDV: "onnx.Add"
// RDV: return %[[S]]#0, %[[S]]#1
func.func @scan(%xs: tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>) {
  %k = "onnx.Constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %0:2 = "onnx.Scan"(%k, %xs) ({
  ^bb0(%acc: tensor<2xf32>, %e: tensor<2xf32>):
    %n = "onnx.Add"(%acc, %e) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "onnx.Yield"(%n, %e) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) {num_scan_inputs = 1 : si64} : (tensor<2xf32>, tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<4x2xf32>
}

// -----

// Unused region ops are Pure when their bodies are: the canonicalizer
// removes them.
// CANON-LABEL: func.func @dead_region_ops
// CANON-NEXT: return
func.func @dead_region_ops(%c: tensor<i1>, %x: tensor<2xf32>, %m: tensor<i64>) {
  %0 = "onnx.If"(%c) ({
    "onnx.Yield"(%x) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%x) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  %1 = "onnx.Loop"(%m, %c, %x) ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xf32>):
    "onnx.Yield"(%cond, %v) : (tensor<i1>, tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

// A random op inside a branch makes the If effectful: it stays.
// CANON-LABEL: func.func @effectful_region
// CANON: "onnx.If"
// CANON: "onnx.RandomNormal"
func.func @effectful_region(%c: tensor<i1>) {
  %0 = "onnx.If"(%c) ({
    %r = "onnx.RandomNormal"() {shape = [2]} : () -> tensor<2xf32>
    "onnx.Yield"(%r) : (tensor<2xf32>) -> ()
  }, {
    %z = "onnx.Constant"() {value = dense<0.0> : tensor<2xf32>} : () -> tensor<2xf32>
    "onnx.Yield"(%z) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return
}

// -----

// control-flow-sink moves an op used by one branch only into that branch.
// SINK-LABEL: func.func @sink_into_branch
// SINK: "onnx.If"
// SINK-NEXT: "onnx.Exp"
// SINK-NEXT: "onnx.Yield"
func.func @sink_into_branch(%c: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %e = "onnx.Exp"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  %0 = "onnx.If"(%c) ({
    "onnx.Yield"(%e) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%x) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Loop and Scan are LoopLikeOpInterface ops: loop-invariant-code-motion
// hoists Pure ops that read only outer values (a transposed weight, and the
// MatMul reading it only when its other operand is outer too); ops reading
// block arguments, and effectful ones (RandomNormal), stay in the body.
// SINK-LABEL: func.func @hoist_from_scan
// SINK: %[[WT:.*]] = "onnx.Transpose"(%arg1)
// SINK-NEXT: %[[B:.*]] = "onnx.MatMul"(%arg2, %[[WT]])
// SINK-NEXT: "onnx.Scan"
// SINK-NEXT: ^bb0
// SINK-NEXT: "onnx.MatMul"(%{{.*}}, %[[WT]])
// SINK-NEXT: "onnx.RandomNormal"
// SINK-NEXT: "onnx.Add"
// SINK-NEXT: "onnx.Add"({{.*}}, %[[B]])
func.func @hoist_from_scan(%xs: tensor<5x4xf32>, %w: tensor<4x4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %k = "onnx.Constant"() {value = dense<0.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %0:2 = "onnx.Scan"(%k, %xs) ({
  ^bb0(%acc: tensor<4xf32>, %e: tensor<4xf32>):
    %wt = "onnx.Transpose"(%w) {perm = [1, 0]} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %m = "onnx.MatMul"(%e, %wt) : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
    %bw = "onnx.MatMul"(%b, %wt) : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
    %r = "onnx.RandomNormal"() {shape = [4]} : () -> tensor<4xf32>
    %n = "onnx.Add"(%m, %r) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %s = "onnx.Add"(%n, %bw) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "onnx.Yield"(%s, %s) : (tensor<4xf32>, tensor<4xf32>) -> ()
  }) {num_scan_inputs = 1 : si64} : (tensor<4xf32>, tensor<5x4xf32>) -> (tensor<4xf32>, tensor<5x4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

// SINK-LABEL: func.func @hoist_from_loop
// SINK: %[[E:.*]] = "onnx.Exp"(%arg2)
// SINK-NEXT: "onnx.Loop"
// SINK-NEXT: ^bb0
// SINK-NEXT: "onnx.Add"(%{{.*}}, %[[E]])
func.func @hoist_from_loop(%m: tensor<i64>, %c: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "onnx.Loop"(%m, %c, %x) ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xf32>):
    %e = "onnx.Exp"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    %s = "onnx.Add"(%v, %e) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "onnx.Yield"(%cond, %s) : (tensor<i1>, tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
