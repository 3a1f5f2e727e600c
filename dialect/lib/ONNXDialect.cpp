// Dialect registration, types and the constant materializer.
#include "onnx_ad/ONNXDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace onnx_ad;

#include "onnx_ad/ONNXDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "onnx_ad/ONNXTypes.cpp.inc"

void ONNXDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "onnx_ad/ONNXTypes.cpp.inc"
      >();
  registerONNXDialectOperations(this);
}

Operation *ONNXDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                            Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  OperationState state(loc, ONNXConstantOp::getOperationName());
  state.addAttribute("value", elements);
  state.addTypes(type);
  return builder.create(state);
}
