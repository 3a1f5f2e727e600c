// RUN: onnx-ad-translate --export-onnx %s -o %t.onnx
// RUN: onnx-ad-translate --import-onnx %t.onnx | FileCheck %s
// IR as a transformation leaves it: an unnamed argument, duplicated location
// names, a newest-version op in an opset-11 module, results that are an
// argument or repeat another result.  Export names everything uniquely, raises
// the opset, and adds Identity nodes; re-import shows the result.

module attributes {onnx.opset_import = [["", 11]], onnx.ir_version = 6 : i64} {
  func.func @main_graph(%x: tensor<?x3xf32> {onnx.name = "x", onnx.dim_params = ["n", ""]},
                        %seed: tensor<?x3xf32>)
      -> (tensor<?x3xf32> {onnx.name = "y"}, tensor<?x3xf32> {onnx.name = "y_copy"},
          tensor<?x3xf32> {onnx.name = "x_out"}, tensor<1x1xf32> {onnx.name = "total"}) {
    %0 = "onnx.Abs"(%x) : (tensor<?x3xf32>) -> tensor<?x3xf32> loc("abs"("t"))
    %1 = "onnx.Abs"(%0) : (tensor<?x3xf32>) -> tensor<?x3xf32> loc("abs"("t"))
    %2 = "onnx.Mul"(%1, %seed) : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
    %none = "onnx.NoValue"() {value} : () -> none
    %3 = "onnx.ReduceSum"(%2, %none) : (tensor<?x3xf32>, none) -> tensor<1x1xf32>
    return %2, %2, %x, %3 : tensor<?x3xf32>, tensor<?x3xf32>, tensor<?x3xf32>, tensor<1x1xf32>
  }
}

// CHECK: module attributes {onnx.ir_version = 7 : i64, onnx.opset_import = {{\[\[}}"", 13]]}
// CHECK: func.func @main_graph(%[[X:.*]]: tensor<?x3xf32> {onnx.dim_params = ["n", ""], onnx.name = "x"} {{.*}}, %[[SEED:.*]]: tensor<?x3xf32> {onnx.name = "input__{{[0-9]+}}"}
// CHECK-SAME: onnx.name = "y"}, {{.*}}onnx.name = "y_copy"}, {{.*}}onnx.name = "x_out"}, {{.*}}onnx.name = "total"})
// CHECK: %[[A:.*]] = "onnx.Abs"(%[[X]]) {{.*}} loc(#[[LOC_A:loc[0-9]*]])
// CHECK: %[[B:.*]] = "onnx.Abs"(%[[A]]) {{.*}} loc(#[[LOC_B:loc[0-9]*]])
// CHECK: %[[Y:.*]] = "onnx.Mul"(%[[B]], %[[SEED]])
// CHECK: %[[T:.*]] = "onnx.ReduceSum"(%[[Y]], %{{.*}})
// CHECK: %[[YC:.*]] = "onnx.Identity"(%[[Y]])
// CHECK: %[[XO:.*]] = "onnx.Identity"(%[[X]])
// CHECK: return %[[Y]], %[[YC]], %[[XO]], %[[T]]
// CHECK-DAG: #[[T1:loc[0-9]*]] = loc("t")
// CHECK-DAG: #[[T2:loc[0-9]*]] = loc("t__{{[0-9]+}}")
// CHECK-DAG: #[[LOC_A]] = loc("abs"(#[[T1]]))
// CHECK-DAG: #[[LOC_B]] = loc("abs__{{[0-9]+}}"(#[[T2]]))
