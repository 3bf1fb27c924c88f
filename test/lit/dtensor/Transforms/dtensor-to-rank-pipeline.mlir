// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-to-rank)' | FileCheck %s

// The whole pipeline on a sharded MLP layer: a row-sharded activation times
// column-sharded weights, then a row-wise projection whose partial sums are
// reduce-scattered into the declared output.

#m = #dtensor.mesh<[2]>

// Even shards: one program for both ranks.
// CHECK-LABEL: func @mlp_class0
// CHECK-SAME: (%[[X:.+]]: tensor<8x4xf32>, %[[W1:.+]]: tensor<4x8xf32>, %[[W2:.+]]: tensor<8x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>], rank.scheduled}
// CHECK-NEXT: %[[H:.+]] = rank.kernel "matmul"(%[[X]], %[[W1]]) : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[A:.+]] = rank.kernel "relu"(%[[H]]) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[P:.+]] = rank.kernel "matmul"(%[[A]], %[[W2]]) : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[Y:.+]] = rank.reduce_scatter %[[P]] {axis = 0 : i64, dim = 0 : i64, reduce = "sum", sizes = array<i64: 4, 4>} : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: return %[[Y]]
// CHECK-NOT: func.func
func.func @mlp(%x: !dtensor.tensor<8x4xf32, #m, [R]>, %w1: !dtensor.tensor<4x16xf32, #m, [S(1)]>, %w2: !dtensor.tensor<16x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %h = dtensor.matmul %x, %w1 : (!dtensor.tensor<8x4xf32, #m, [R]>, !dtensor.tensor<4x16xf32, #m, [S(1)]>) -> !dtensor.tensor<8x16xf32, #m, [S(1)]>
  %a = dtensor.relu %h : (!dtensor.tensor<8x16xf32, #m, [S(1)]>) -> !dtensor.tensor<8x16xf32, #m, [S(1)]>
  %y = dtensor.matmul %a, %w2 : (!dtensor.tensor<8x16xf32, #m, [S(1)]>, !dtensor.tensor<16x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %y : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}
