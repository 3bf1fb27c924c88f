// RUN: dtorch-opt %s | dtorch-opt | FileCheck %s
// RUN: dtorch-opt %s --mlir-print-op-generic | dtorch-opt | FileCheck %s

// CHECK-LABEL: func @program_rank0
// CHECK: rank.kernel "add"(%arg0, %arg0) : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
// CHECK: rank.kernel "sum"(%{{.*}}) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.000000e+00 : f64} : (tensor<4x5xf32>) -> tensor<4xf32>
// CHECK: rank.all_reduce %{{.*}} {group = array<i64: 0, 1>, reduce = "max"} : tensor<4xf32> -> tensor<4xf32>
// CHECK: rank.all_gather %arg0 {dim = 0 : i64, group = array<i64: 0, 1>, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
// CHECK: rank.reduce_scatter %{{.*}} {dim = 0 : i64, group = array<i64: 0, 1>, reduce = "sum", sizes = array<i64: 4, 3>} : tensor<7x5xf32> -> tensor<4x5xf32>
// CHECK: rank.all_to_all %arg0 {concat_dim = 0 : i64, concat_sizes = array<i64: 4, 3>, group = array<i64: 0, 1>, split_dim = 1 : i64, split_sizes = array<i64: 3, 2>} : tensor<4x5xf32> -> tensor<7x3xf32>
func.func @program_rank0(%x: tensor<4x5xf32>) attributes {rank.rank = 0 : i64} {
  %0 = rank.kernel "add"(%x, %x) : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
  %1 = rank.kernel "sum"(%0) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x5xf32>) -> tensor<4xf32>
  %2 = rank.all_reduce %1 {group = array<i64: 0, 1>, reduce = "max"} : tensor<4xf32> -> tensor<4xf32>
  %3 = rank.all_gather %x {group = array<i64: 0, 1>, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
  %4 = rank.reduce_scatter %3 {group = array<i64: 0, 1>, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<7x5xf32> -> tensor<4x5xf32>
  %5 = rank.all_to_all %x {group = array<i64: 0, 1>, split_dim = 1 : i64, split_sizes = array<i64: 3, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x3xf32>
  return
}
