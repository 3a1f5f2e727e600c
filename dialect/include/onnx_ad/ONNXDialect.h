// The onnx dialect: C++ declarations generated from ONNXOps.td.
#ifndef ONNX_AD_ONNX_DIALECT_H
#define ONNX_AD_ONNX_DIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/TypeUtilities.h" // AllElementTypesMatch
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "onnx_ad/ONNXDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "onnx_ad/ONNXTypes.h.inc"

#define GET_OP_CLASSES
#include "onnx_ad/ONNXOps.h.inc"

#endif // ONNX_AD_ONNX_DIALECT_H
