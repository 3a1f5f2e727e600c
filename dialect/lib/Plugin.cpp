// Entry point for `mlir-opt --load-dialect-plugin=libONNXADPlugin.so`.
#include "onnx_ad/ONNXDialect.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"

extern "C" LLVM_ATTRIBUTE_WEAK ::mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "ONNX", LLVM_VERSION_STRING,
          [](::mlir::DialectRegistry *registry) {
            registry->insert<onnx_ad::ONNXDialect>();
          }};
}
