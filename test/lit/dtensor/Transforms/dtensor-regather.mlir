// RUN: dtorch-opt %s --pass-pipeline='builtin.module(func.func(dtensor-propagate-sharding, cse))' | FileCheck %s --check-prefix=SHARDED
// RUN: dtorch-opt %s --pass-pipeline='builtin.module(func.func(dtensor-propagate-sharding, cse, dtensor-lower-redistribute))' | FileCheck %s --check-prefix=LOWERED

// FSDP's backward gathers a parameter a second time (reshard_after_forward
// = True): the redistribute carries the discardable `dtorch.regather`
// attribute, so CSE keeps it apart from the forward's identical gather,
// chain folding keeps it, and its lowered all_gather is marked too. Two
// unmarked gathers of the same value still merge.

#m = #dtensor.mesh<[4]>

// SHARDED-LABEL: func @forward_and_backward_gather
// SHARDED: dtensor.redistribute %arg0 : {{.*}}[S(0)]> -> {{.*}}[R]>
// SHARDED-NOT: dtorch.regather
// SHARDED: dtensor.redistribute %arg0 {dtorch.regather = 1 : i64} : {{.*}}[S(0)]> -> {{.*}}[R]>
// SHARDED-NOT: dtensor.redistribute
// LOWERED-LABEL: func @forward_and_backward_gather
// LOWERED: dtensor.all_gather %arg0 on axis 0 : {{.*}}[S(0)]> -> {{.*}}[R]>
// LOWERED-NOT: dtorch.regather
// LOWERED: dtensor.all_gather %arg0 on axis 0 {dtorch.regather = 1 : i64} : {{.*}}[S(0)]> -> {{.*}}[R]>
// LOWERED-NOT: dtensor.all_gather
func.func @forward_and_backward_gather(%w: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %x: !dtensor.tensor<8x8xf32, #m, [S(0)]>) -> (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) {
  %g = dtensor.redistribute %w : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %g2 = dtensor.redistribute %w : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %again = dtensor.redistribute %w {dtorch.regather = 1 : i64} : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %0 = dtensor.matmul %x, %g : (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %1 = dtensor.matmul %x, %g2 : (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %2 = dtensor.matmul %x, %again : (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %0, %1, %2 : !dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>
}



// A chain that starts at a regather folds into one marked redistribute.
// SHARDED-LABEL: func @chain
// SHARDED: dtensor.redistribute %arg0 {dtorch.regather = 1 : i64} : {{.*}}[S(0)]> -> {{.*}}[S(1)]>
// SHARDED-NOT: dtensor.redistribute
func.func @chain(%w: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(1)]> {
  %g = dtensor.redistribute %w {dtorch.regather = 1 : i64} : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %s = dtensor.redistribute %g : !dtensor.tensor<8x4xf32, #m, [R]> -> !dtensor.tensor<8x4xf32, #m, [S(1)]>
  return %s : !dtensor.tensor<8x4xf32, #m, [S(1)]>
}
