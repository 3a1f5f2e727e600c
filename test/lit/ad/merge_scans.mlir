// onnx-ad-merge-scans (merge_scans.py): independent Scans of one block with
// the same trip count become one Scan (states of the first, then of the
// second, then their scan inputs, then their scan outputs; axes and
// directions kept per input/output). The op between them that reads the
// first (Sin) moves after the merged Scan. Dependent Scans stay apart.
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s -split-input-file --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @two
// FWD: %[[S:.*]]:8 = "onnx.Scan"(%arg0, %{{.*}}, %arg0, %{{.*}}, %arg1, %{{.*}}, %arg2, %{{.*}}) <{num_scan_inputs = 4 : si64, scan_input_axes = [0, 1, 0, 1], scan_input_directions = [0, 0, 0, 0], scan_output_axes = [0, 1, 0, 1], scan_output_directions = [0, 0, 0, 0]}>
// FWD: "onnx.Tanh"
// FWD: "onnx.Sigmoid"
// FWD: "onnx.Yield"
// FWD-NOT: "onnx.Scan"
// FWD: "onnx.Sin"(%[[S]]#0)
// FWD-NOT: "onnx.Scan"
// FWD: return
// The primal Scans merge; so do the two reverse Scans (one per primal Scan:
// their scan inputs are the cotangent of the stacked output (axis 1), the
// stacked output itself (read, not recomputed), and for the first, whose Mul
// needs them, the stored states and xs; the sigmoid's reverse needs neither;
// the derivative coefficients of the stacked outputs are computed on the
// whole stacks in front of the Scan, and read as slices).
// REV-LABEL: func.func @two
// REV: "onnx.Scan"(%arg0, %arg0, %arg1, %arg2) <{num_scan_inputs = 2 : si64, scan_input_axes = [0, 0], scan_input_directions = [0, 0], scan_output_axes = [0, 0, 0], scan_output_directions = [0, 0, 0]}>
// REV-NOT: "onnx.Scan"
// REV: "onnx.Sin"
// REV: %[[R:.*]]:4 = "onnx.Scan"({{.*}}) <{num_scan_inputs = 6 : si64, scan_input_axes = [1, 0, 0, 1, 0, 0], scan_input_directions = [1, 1, 1, 1, 1, 1], scan_output_axes = [1, 1], scan_output_directions = [1, 1]}>
// REV-NOT: "onnx.Scan"
// REV: "onnx.Add"(%[[R]]#0, %[[R]]#1)
// REV-NOT: "onnx.Scan"
// REV: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @two(%h0: tensor<1x3xf64>, %xs: tensor<4x1x3xf64>, %ys: tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>, tensor<4x1x3xf64>) {
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.Mul"(%h, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Tanh"(%1) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%2, %2) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    %s = "onnx.Sin"(%0#0) : (tensor<1x3xf64>) -> tensor<1x3xf64>
    %5:2 = "onnx.Scan"(%h0, %ys) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %yt: tensor<1x3xf64>):
      %6 = "onnx.Add"(%h, %yt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %7 = "onnx.Sigmoid"(%6) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%7, %7) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    %8 = "onnx.Mul"(%s, %5#0) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
    return %8, %0#1, %5#1 : tensor<1x3xf64>, tensor<4x1x3xf64>, tensor<4x1x3xf64>
  }
}

// -----

// The second Scan starts from the first's final state (through Sin): no merge.
// FWD-LABEL: func.func @chain
// FWD-COUNT-2: "onnx.Scan"
// FWD-NOT: "onnx.Scan"
// FWD: return
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @chain(%h0: tensor<1x3xf64>, %xs: tensor<4x1x3xf64>, %ys: tensor<4x1x3xf64>) -> tensor<1x3xf64> {
    %0:2 = "onnx.Scan"(%h0, %xs) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %xt: tensor<1x3xf64>):
      %1 = "onnx.Mul"(%h, %xt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %2 = "onnx.Tanh"(%1) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%2, %2) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    %s = "onnx.Sin"(%0#0) : (tensor<1x3xf64>) -> tensor<1x3xf64>
    %5:2 = "onnx.Scan"(%s, %ys) <{num_scan_inputs = 1 : si64}> ({
    ^bb0(%h: tensor<1x3xf64>, %yt: tensor<1x3xf64>):
      %6 = "onnx.Add"(%h, %yt) : (tensor<1x3xf64>, tensor<1x3xf64>) -> tensor<1x3xf64>
      %7 = "onnx.Sigmoid"(%6) : (tensor<1x3xf64>) -> tensor<1x3xf64>
      "onnx.Yield"(%7, %7) : (tensor<1x3xf64>, tensor<1x3xf64>) -> ()
    }) : (tensor<1x3xf64>, tensor<4x1x3xf64>) -> (tensor<1x3xf64>, tensor<4x1x3xf64>)
    return %5#0 : tensor<1x3xf64>
  }
}
