// RUN: dtorch-opt %s --pass-pipeline='builtin.module(func.func(dtensor-cse))' | FileCheck %s
// RUN: dtorch-opt %s --pass-pipeline='builtin.module(func.func(cse))' > %t.cse.mlir
// RUN: dtorch-opt %s --pass-pipeline='builtin.module(func.func(dtensor-cse))' > %t.checked.mlir
// RUN: diff %t.cse.mlir %t.checked.mlir

// --dtensor-cse gives what MLIR's cse gives (the diff above), and skips the
// functions where nothing can merge or be erased: here @distinct_chain;
// @duplicates merges, @dead_op erases, @regather keeps its marked gather
// apart and merges the two unmarked ones.

#m = #dtensor.mesh<[4]>

// CHECK-LABEL: func @distinct_chain
// CHECK: %[[A:.*]] = dtensor.add %arg0, %arg1
// CHECK: %[[B:.*]] = dtensor.add %[[A]], %arg1
// CHECK: %[[C:.*]] = dtensor.mul %[[B]], %arg1
// CHECK: return %[[C]]
func.func @distinct_chain(%x: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %y: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.add %x, %y : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %1 = dtensor.add %0, %y : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %2 = dtensor.mul %1, %y : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %2 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}

// CHECK-LABEL: func @duplicates
// CHECK: %[[R:.*]] = dtensor.relu %arg0
// CHECK-NOT: dtensor.relu
// CHECK: dtensor.add %[[R]], %[[R]]
func.func @duplicates(%x: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.relu %x : (!dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %1 = dtensor.relu %x : (!dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %2 = dtensor.add %0, %1 : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %2 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}

// CHECK-LABEL: func @dead_op
// CHECK-NOT: dtensor.neg
// CHECK: dtensor.relu
func.func @dead_op(%x: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.neg %x : (!dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %1 = dtensor.relu %x : (!dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %1 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}

// CHECK-LABEL: func @regather
// CHECK: %[[G:.*]] = dtensor.redistribute %arg0 :
// CHECK-NOT: dtensor.redistribute %arg0 :
// CHECK: %[[AGAIN:.*]] = dtensor.redistribute %arg0 {dtorch.regather = 1 : i64}
// CHECK: return %[[G]], %[[G]], %[[AGAIN]]
func.func @regather(%w: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> (!dtensor.tensor<8x4xf32, #m, [R]>, !dtensor.tensor<8x4xf32, #m, [R]>, !dtensor.tensor<8x4xf32, #m, [R]>) {
  %g = dtensor.redistribute %w : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %g2 = dtensor.redistribute %w : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %again = dtensor.redistribute %w {dtorch.regather = 1 : i64} : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  return %g, %g2, %again : !dtensor.tensor<8x4xf32, #m, [R]>, !dtensor.tensor<8x4xf32, #m, [R]>, !dtensor.tensor<8x4xf32, #m, [R]>
}
