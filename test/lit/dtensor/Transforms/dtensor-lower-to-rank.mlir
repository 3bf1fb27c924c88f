// RUN: dtorch-opt %s --split-input-file --dtensor-lower-to-rank --verify-diagnostics | FileCheck %s

#m = #dtensor.mesh<[2]>

// Uneven shards: 5 rows over 2 ranks are 3 + 2.
// CHECK-LABEL: func @gather_uneven_rank0
// CHECK-SAME: (%[[X:.+]]: tensor<3x4xf32>) -> tensor<5x4xf32> attributes {rank.rank = 0 : i64}
// CHECK: %[[G:.+]] = rank.all_gather %[[X]] {dim = 0 : i64, group = array<i64: 0, 1>, sizes = array<i64: 3, 2>} : tensor<3x4xf32> -> tensor<5x4xf32>
// CHECK: %[[E:.+]] = rank.kernel "exp"(%[[G]]) : (tensor<5x4xf32>) -> tensor<5x4xf32>
// CHECK: return %[[E]]
// CHECK-LABEL: func @gather_uneven_rank1
// CHECK-SAME: (%{{.+}}: tensor<2x4xf32>) -> tensor<5x4xf32> attributes {rank.rank = 1 : i64}
func.func @gather_uneven(%x: !dtensor.tensor<5x4xf32, #m, [S(0)]>) -> !dtensor.tensor<5x4xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<5x4xf32, #m, [S(0)]> -> !dtensor.tensor<5x4xf32, #m, [R]>
  %1 = dtensor.exp %0 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  return %1 : !dtensor.tensor<5x4xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// Groups follow the mesh axis; a sharded mean divides by the global count.
// CHECK-LABEL: func @groups_rank1
// CHECK: %[[P:.+]] = rank.kernel "sum"(%arg0) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.250000e-01 : f64} : (tensor<2x4xf32>) -> tensor<2xf32>
// CHECK: %[[R:.+]] = rank.all_reduce %[[P]] {group = array<i64: 0, 1>, reduce = "sum"} : tensor<2xf32> -> tensor<2xf32>
// CHECK: rank.kernel "slice"(%[[R]]) {dim = 0 : i64, start = 1 : i64} : (tensor<2xf32>) -> tensor<1xf32>
// CHECK-LABEL: func @groups_rank2
// CHECK: rank.all_reduce %{{.+}} {group = array<i64: 2, 3>, reduce = "sum"}
// CHECK: rank.kernel "slice"(%{{.+}}) {dim = 0 : i64, start = 0 : i64}
func.func @groups(%x: !dtensor.tensor<4x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.mean %x dims = [1] : (!dtensor.tensor<4x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4xf32, #m, [S(0), P(sum)]>
  %1 = dtensor.all_reduce %0 on axis 1 : !dtensor.tensor<4xf32, #m, [S(0), P(sum)]> -> !dtensor.tensor<4xf32, #m, [S(0), R]>
  %2 = dtensor.local_slice %1 on axis 1 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [S(0), S(0)]>
  return %2 : !dtensor.tensor<4xf32, #m, [S(0), S(0)]>
}

// -----

#m = #dtensor.mesh<[2]>

// R -> P(sum): rank 0 keeps the value, rank 1 holds zeros; random and
// constant values are cut out of the global tensor.
// CHECK-LABEL: func @creation_rank0
// CHECK: rank.kernel "random"() {dist = "uniform", global_shape = array<i64: 3, 2>, offset = array<i64: 0, 0>, seed = 5 : i64} : () -> tensor<2x2xf32>
// CHECK: rank.kernel "constant"() {value = dense<[1, 2]> : tensor<2xi64>}
// CHECK: rank.kernel "copy"
// CHECK-LABEL: func @creation_rank1
// CHECK: rank.kernel "random"() {dist = "uniform", global_shape = array<i64: 3, 2>, offset = array<i64: 2, 0>, seed = 5 : i64} : () -> tensor<1x2xf32>
// CHECK: rank.kernel "constant"() {value = dense<3> : tensor<1xi64>}
// CHECK: rank.kernel "full"() {value = 0.000000e+00 : f64}
func.func @creation() -> (!dtensor.tensor<3x2xf32, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [P(sum)]>) {
  %0 = dtensor.random seed = 5 distribution = "uniform" : !dtensor.tensor<3x2xf32, #m, [S(0)]>
  %1 = dtensor.constant dense<[1, 2, 3]> : tensor<3xi64> : !dtensor.tensor<3xi64, #m, [S(0)]>
  %2 = dtensor.constant dense<[1, 2, 3]> : tensor<3xi64> : !dtensor.tensor<3xi64, #m, [R]>
  %3 = dtensor.to_partial %2 on axis 0 : !dtensor.tensor<3xi64, #m, [R]> -> !dtensor.tensor<3xi64, #m, [P(sum)]>
  return %0, %1, %3 : !dtensor.tensor<3x2xf32, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [P(sum)]>
}

// -----

#m = #dtensor.mesh<[2]>

// all_to_all with uneven pieces on both sides.
// CHECK-LABEL: func @a2a_rank0
// CHECK: rank.all_to_all %arg0 {concat_dim = 0 : i64, concat_sizes = array<i64: 3, 2>, group = array<i64: 0, 1>, split_dim = 1 : i64, split_sizes = array<i64: 2, 1>} : tensor<3x3xf32> -> tensor<5x2xf32>
func.func @a2a(%x: !dtensor.tensor<5x3xf32, #m, [S(0)]>) -> !dtensor.tensor<5x3xf32, #m, [S(1)]> {
  %0 = dtensor.all_to_all %x on axis 0 : !dtensor.tensor<5x3xf32, #m, [S(0)]> -> !dtensor.tensor<5x3xf32, #m, [S(1)]>
  return %0 : !dtensor.tensor<5x3xf32, #m, [S(1)]>
}

// -----

#m = #dtensor.mesh<[2]>

func.func @unlowered(%x: !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [R]> {
  // expected-error @+1 {{must be lowered first (run --dtensor-lower-redistribute)}}
  %0 = dtensor.redistribute %x : !dtensor.tensor<4xf32, #m, [S(0)]> -> !dtensor.tensor<4xf32, #m, [R]>
  return %0 : !dtensor.tensor<4xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[2]>

func.func @not_local(%x: !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [R]> {
  // expected-error @+1 {{placements are not a local strategy of its sharding rule}}
  %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return %0 : !dtensor.tensor<4xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[2]>

// A vocab-sharded table looks up only its own rows (offset, masked); a
// sharded tril knows its piece's global column; a slice of whole sharded
// dims reads this rank's piece.
// CHECK-LABEL: func @lower_indexing_rank0
// CHECK: rank.kernel "index_select"(%{{.*}}) {dim = 0 : i64, masked = 1 : i64, offset = 0 : i64}
// CHECK: rank.kernel "tril"(%{{.*}}) {col_offset = 0 : i64, diagonal = 0 : i64, row_offset = 0 : i64}
// CHECK: rank.kernel "extract_slice"(%{{.*}}) {offsets = array<i64: 1, 0>, sizes = array<i64: 2, 3>, strides = array<i64: 2, 1>}
// CHECK-LABEL: func @lower_indexing_rank1
// CHECK: rank.kernel "index_select"(%{{.*}}) {dim = 0 : i64, masked = 1 : i64, offset = 3 : i64}
// CHECK: rank.kernel "tril"(%{{.*}}) {col_offset = 3 : i64, diagonal = 0 : i64, row_offset = 0 : i64}
func.func @lower_indexing(%t: !dtensor.tensor<6x4xf32, #m, [S(0)]>, %v: !dtensor.tensor<3xi64, #m, [R]>, %a: !dtensor.tensor<4x6xf32, #m, [S(1)]>) -> (!dtensor.tensor<3x4xf32, #m, [P(sum)]>, !dtensor.tensor<4x6xf32, #m, [S(1)]>, !dtensor.tensor<2x6xf32, #m, [S(1)]>) {
  %0 = dtensor.index_select %t, %v {dim = 0 : i64} : (!dtensor.tensor<6x4xf32, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [R]>) -> !dtensor.tensor<3x4xf32, #m, [P(sum)]>
  %1 = dtensor.tril %a {diagonal = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<4x6xf32, #m, [S(1)]>
  %2 = dtensor.slice %a {offsets = array<i64: 1, 0>, sizes = array<i64: 2, 6>, strides = array<i64: 2, 1>} : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<2x6xf32, #m, [S(1)]>
  return %0, %1, %2 : !dtensor.tensor<3x4xf32, #m, [P(sum)]>, !dtensor.tensor<4x6xf32, #m, [S(1)]>, !dtensor.tensor<2x6xf32, #m, [S(1)]>
}

// -----

#m = #dtensor.mesh<[4]>

// A merge that keeps S(0): each rank reshapes its 2 rows into 12 elements.
// CHECK-LABEL: func @reshape_keeps_shard_rank0
// CHECK-SAME: (%[[X:.+]]: tensor<2x6xf32>) -> tensor<12xf32>
// CHECK: rank.kernel "reshape"(%[[X]]) {{.*}}: (tensor<2x6xf32>) -> tensor<12xf32>
// CHECK-LABEL: func @reshape_keeps_shard_rank3
// CHECK: rank.kernel "reshape"(%{{.+}}) {{.*}}: (tensor<2x6xf32>) -> tensor<12xf32>
func.func @reshape_keeps_shard(%x: !dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]> {
  %0 = dtensor.reshape %x : (!dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<48xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// The split keeps the nested S(0) of [B*H] on the new dim 0.
// CHECK-LABEL: func @reshape_split_nested_rank2
// CHECK-SAME: (%[[X:.+]]: tensor<12xf32>) -> tensor<2x6xf32>
// CHECK: rank.kernel "reshape"(%[[X]]) {{.*}}: (tensor<12xf32>) -> tensor<2x6xf32>
func.func @reshape_split_nested(%x: !dtensor.tensor<48xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.reshape %x : (!dtensor.tensor<48xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]>
  return %0 : !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]>
}

// -----

#m = #dtensor.mesh<[4]>

// 6 rows over 4 ranks (2, 2, 2, 0) are not the merged 24 elements' pieces
// (6, 6, 6, 6): the shard cannot be kept.
func.func @reshape_uneven_not_local(%x: !dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]> {
  // expected-error @+1 {{placements are not a local strategy of its sharding rule}}
  %0 = dtensor.reshape %x : (!dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<24xf32, #m, [S(0)]>
}
