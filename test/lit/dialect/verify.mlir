// Verifier errors are diagnostics, never crashes.
// RUN: onnx-ad-opt %s -split-input-file -verify-diagnostics

func.func @wrong_operand_count(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Add' op expected 2 operands, but found 1}}
  %0 = "onnx.Add"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @wrong_element_type(%a: tensor<2xi1>) -> tensor<2xi1> {
  // expected-error @below {{'onnx.Relu' op operand #0 must be tensor of}}
  %0 = "onnx.Relu"(%a) : (tensor<2xi1>) -> tensor<2xi1>
  return %0 : tensor<2xi1>
}

// -----

// Operands and results bound to one ONNX type parameter (T) agree.
func.func @mixed_element_types(%a: tensor<2xf32>, %b: tensor<2xi64>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Add' op failed to verify that all of {A, B, C} have same element type}}
  %0 = "onnx.Add"(%a, %b) : (tensor<2xf32>, tensor<2xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @missing_required_attribute(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Concat' op requires attribute 'axis'}}
  %0 = "onnx.Concat"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @yield_outside_region(%a: tensor<2xf32>) {
  // expected-error @below {{'onnx.Yield' op expects parent op to be one of 'onnx.If, onnx.Loop, onnx.Scan}}
  "onnx.Yield"(%a) : (tensor<2xf32>) -> ()
  return
}

// -----

func.func @if_yield_count(%c: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.If' op else_branch yields 2 values but the op has 1 results}}
  %0 = "onnx.If"(%c) ({
    "onnx.Yield"(%a) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @if_yield_element_type(%c: tensor<i1>, %a: tensor<2xf32>, %b: tensor<2xi64>) -> tensor<2xf32> {
  // expected-error @below {{along control flow edge from Operation onnx.Yield to parent: successor operand type #0 'tensor<2xi64>' should match successor input type #0 'tensor<2xf32>'}}
  %0 = "onnx.If"(%c) ({
    "onnx.Yield"(%a) : (tensor<2xf32>) -> ()
  }, {
    // expected-note @below {{region branch point}}
    "onnx.Yield"(%b) : (tensor<2xi64>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @if_branch_arguments(%c: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.If' op then_branch must take no arguments}}
  %0 = "onnx.If"(%c) ({
  ^bb0(%x: tensor<2xf32>):
    "onnx.Yield"(%x) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%a) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @loop_body_arguments(%m: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Loop' op body must take 2 + 1 arguments (iter_num, cond, carried), got 2}}
  %0 = "onnx.Loop"(%m, %c, %a) ({
  ^bb0(%i: tensor<i64>, %v: tensor<2xf32>):
    "onnx.Yield"(%c, %v) : (tensor<i1>, tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @loop_yield_count(%m: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Loop' op body yields 1 values, expected 1 + 1 (cond, carried, scan outputs)}}
  %0 = "onnx.Loop"(%m, %c, %a) ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xf32>):
    "onnx.Yield"(%v) : (tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @loop_carried_type(%m: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-note @+2 {{region branch point}}
  // expected-error @+1 {{along control flow edge from parent to Region #0: successor operand type #0 'tensor<2xf32>' should match successor input type #0 'tensor<2xi64>'}}
  %0 = "onnx.Loop"(%m, %c, %a) ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %v: tensor<2xi64>):
    "onnx.Yield"(%cond, %a) : (tensor<i1>, tensor<2xf32>) -> ()
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @scan_num_scan_inputs_zero(%s: tensor<2xf32>, %xs: tensor<4x2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Scan' op num_scan_inputs = 0 must be in [1, 2]}}
  %0:2 = "onnx.Scan"(%s, %xs) ({
  ^bb0(%acc: tensor<2xf32>, %e: tensor<2xf32>):
    "onnx.Yield"(%acc, %e) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) {num_scan_inputs = 0 : si64} : (tensor<2xf32>, tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>)
  return %0#0 : tensor<2xf32>
}

// -----

func.func @scan_num_scan_inputs_too_many(%s: tensor<2xf32>, %xs: tensor<4x2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Scan' op num_scan_inputs = 3 must be in [1, 2]}}
  %0:2 = "onnx.Scan"(%s, %xs) ({
  ^bb0(%acc: tensor<2xf32>, %e: tensor<2xf32>):
    "onnx.Yield"(%acc, %e) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) {num_scan_inputs = 3 : si64} : (tensor<2xf32>, tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>)
  return %0#0 : tensor<2xf32>
}

// -----

func.func @scan_body_arguments(%s: tensor<2xf32>, %xs: tensor<4x2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Scan' op body must take 2 arguments (state, scan elements), got 1}}
  %0:2 = "onnx.Scan"(%s, %xs) ({
  ^bb0(%acc: tensor<2xf32>):
    "onnx.Yield"(%acc, %acc) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) {num_scan_inputs = 1 : si64} : (tensor<2xf32>, tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>)
  return %0#0 : tensor<2xf32>
}

// -----

func.func @scan_yield_count(%s: tensor<2xf32>, %xs: tensor<4x2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Scan' op body yields 1 values but the op has 2 results}}
  %0:2 = "onnx.Scan"(%s, %xs) ({
  ^bb0(%acc: tensor<2xf32>, %e: tensor<2xf32>):
    "onnx.Yield"(%acc) : (tensor<2xf32>) -> ()
  }) {num_scan_inputs = 1 : si64} : (tensor<2xf32>, tensor<4x2xf32>) -> (tensor<2xf32>, tensor<4x2xf32>)
  return %0#0 : tensor<2xf32>
}

// -----

func.func @region_without_yield(%c: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.If' op then_branch must end with onnx.Yield}}
  %0 = "onnx.If"(%c) ({
    "func.return"(%a) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%a) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// A body with no terminator at all (found by the fuzzer: it used to abort).
func.func @loop_body_without_terminator(%m: tensor<i64>, %c: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'onnx.Loop' op body must end with onnx.Yield}}
  %0 = "onnx.Loop"(%m, %c, %x) ({
  ^bb0(%i: tensor<i64>, %cc: tensor<i1>, %v: tensor<2xf32>):
    %n = "onnx.Neg"(%v) : (tensor<2xf32>) -> tensor<2xf32>
  }) : (tensor<i64>, tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
