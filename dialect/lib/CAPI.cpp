// The dialect handle that Python inserts into the bindings' DialectRegistry.
#include "onnx_ad/ONNXCAPI.h"
#include "onnx_ad/ONNXDialect.h"

#include "mlir/CAPI/Registration.h"

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(ONNX, onnx, onnx_ad::ONNXDialect)
