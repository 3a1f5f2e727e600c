// Extents known only at run time (rules/shape.py, signature.py). The Reshape
// JVP reads its target at run time with allowzero (a batch of 0 is an
// extent, not "copy"); the seed of an output whose extent is provably an
// input's named one carries that name, so the reverse model needs no
// run-time unbroadcasting of it (no NonZero).
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @flat
// FWD: %[[T:.*]] = "onnx.Concat"
// FWD: "onnx.Reshape"({{.*}}, %[[T]]) <{allowzero = 1 : si64}> : (tensor<?x?x2x3xf32>, tensor<3xi64>) -> tensor<?x?x6xf32>
// REV-LABEL: func.func @flat
// REV-SAME: tensor<?x6x?xf32> {onnx.dim_params = ["N", "", "nadj"], onnx.name = "adj_output0"}
// REV-NOT: onnx.NonZero
// REV: "onnx.Reshape"({{.*}}) <{allowzero = 1 : si64}> : (tensor<?x?x6xf32>, tensor<4xi64>) -> tensor<?x?x2x3xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @flat(%x: tensor<?x2x3xf32> {onnx.dim_params = ["N", "", ""]}) -> tensor<?x6xf32> {
    %s = "onnx.Constant"() <{value = dense<[-1, 6]> : tensor<2xi64>}> : () -> tensor<2xi64>
    %r = "onnx.Reshape"(%x, %s) : (tensor<?x2x3xf32>, tensor<2xi64>) -> tensor<?x6xf32>
    %y = "onnx.Tanh"(%r) : (tensor<?x6xf32>) -> tensor<?x6xf32>
    return %y : tensor<?x6xf32>
  }
}
