// C API handle of the onnx dialect, for registration from Python (ctypes).
#ifndef ONNX_AD_ONNX_CAPI_H
#define ONNX_AD_ONNX_CAPI_H

#include "mlir-c/IR.h"

#ifdef __cplusplus
extern "C" {
#endif

MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(ONNX, onnx);

#ifdef __cplusplus
}
#endif

#endif // ONNX_AD_ONNX_CAPI_H
