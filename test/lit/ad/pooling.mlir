// MaxPool (rules/pooling.py) with windows tiling the input: the derivative
// routes through a mask of the positions equal to the upsampled maximum
// (Resize), not through a scatter; the primal MaxPool is not recomputed.
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-forward{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=FWD
// RUN: onnx-ad-opt %s --pass-pipeline='builtin.module(onnx-ad-reverse{layout=onnx},func.func(canonicalize,cse))' | FileCheck %s --check-prefix=REV

// FWD-LABEL: func.func @maxpool
// FWD-COUNT-1: "onnx.MaxPool"
// FWD: "onnx.Resize"
// FWD: "onnx.Equal"
// FWD-NOT: "onnx.MaxPool"
// REV-LABEL: func.func @maxpool
// REV-COUNT-1: "onnx.MaxPool"
// REV-NOT: "onnx.ScatterElements"
// REV: return {{.*}} : tensor<1x1x2x2xf32>, tensor<1x1x4x4x?xf32>
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @maxpool(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32> {
    %y, %i = "onnx.MaxPool"(%x) <{kernel_shape = [2, 2], strides = [2, 2]}> : (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, none)
    return %y : tensor<1x1x2x2xf32>
  }
}
