// Recurrent ops (rules/recurrent.py): the fused op stays in the primal; the
// derivative is one Scan over time for all directions (state [k, D, B, H]),
// forward in forward mode, backward (all directions 1) in reverse mode.
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @gru
// FWD: "onnx.GRU"(%arg0, %arg1, %arg2, %arg3
// FWD: "onnx.Scan"({{.*}}) <{num_scan_inputs = 4 : si64, scan_input_axes = [1, 0, 0, 0], scan_input_directions = [0, 0, 0, 0], scan_output_axes = [1], scan_output_directions = [0]}>
// FWD-NEXT: ^bb0(%{{.*}}: tensor<?x2x2x2xf32>, %{{.*}}: tensor<?x2x2x6xf32>, %{{.*}}: tensor<2x2x6xf32>, %{{.*}}: tensor<2x2x6xf32>, %{{.*}}: tensor<2x2x2xf32>):
// FWD: "onnx.MatMul"
// FWD: "onnx.Yield"
// FWD-NOT: "onnx.GRU"
// FWD-NOT: "onnx.Scan"
// FWD: return
// REV-LABEL: func.func @gru
// REV: "onnx.GRU"(%arg0, %arg1, %arg2, %arg3
// GRU with linear_before_reset: the reverse state is carried four times over
// ([k, D, B, 4H]): one step is Add, Mul, MatMul (by [[R R R R]; [I I I I]]), Mul.
// REV: "onnx.Scan"({{.*}}) <{num_scan_inputs = 3 : si64, scan_input_axes = [1, 0, 0], scan_input_directions = [1, 1, 1], scan_output_axes = [1], scan_output_directions = [1]}>
// REV-NEXT: ^bb0(%{{.*}}: tensor<?x2x2x8xf32>, %{{.*}}: tensor<?x2x2x8xf32>, %{{.*}}: tensor<2x2x8xf32>, %{{.*}}: tensor<2x2x8xf32>):
// REV-NEXT: "onnx.Add"
// REV-NEXT: "onnx.Mul"
// REV-NEXT: "onnx.MatMul"({{.*}}) : (tensor<?x2x2x8xf32>, tensor<2x8x8xf32>)
// REV-NEXT: "onnx.Mul"
// REV-NEXT: "onnx.Yield"
// REV-NOT: "onnx.GRU"
// REV-NOT: "onnx.Scan"
// REV: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @gru(%x: tensor<3x2x2xf32>, %w: tensor<2x6x2xf32>, %r: tensor<2x6x2xf32>, %b: tensor<2x12xf32>) -> tensor<3x2x2x2xf32> {
    %none = "onnx.NoValue"() <{value}> : () -> none
    %y, %yh = "onnx.GRU"(%x, %w, %r, %b, %none, %none) <{direction = "bidirectional", hidden_size = 2 : si64, linear_before_reset = 1 : si64}> : (tensor<3x2x2xf32>, tensor<2x6x2xf32>, tensor<2x6x2xf32>, tensor<2x12xf32>, none, none) -> (tensor<3x2x2x2xf32>, tensor<2x2x2xf32>)
    return %y : tensor<3x2x2x2xf32>
  }
}
