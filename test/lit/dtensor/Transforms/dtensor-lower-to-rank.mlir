// RUN: dtorch-opt %s --split-input-file --dtensor-lower-to-rank --verify-diagnostics | FileCheck %s

#m = #dtensor.mesh<[2]>

// Uneven shards: 5 rows over 2 ranks are 3 + 2, two local-shape classes.
// CHECK-LABEL: func @gather_uneven_class0
// CHECK-SAME: (%[[X:.+]]: tensor<3x4xf32>) -> tensor<5x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]}
// CHECK: %[[G:.+]] = rank.all_gather %[[X]] {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 3, 2>} : tensor<3x4xf32> -> tensor<5x4xf32>
// CHECK: %[[E:.+]] = rank.kernel "exp"(%[[G]]) : (tensor<5x4xf32>) -> tensor<5x4xf32>
// CHECK: return %[[E]]
// CHECK-LABEL: func @gather_uneven_class1
// CHECK-SAME: (%{{.+}}: tensor<2x4xf32>) -> tensor<5x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]}
// CHECK-NOT: func.func
func.func @gather_uneven(%x: !dtensor.tensor<5x4xf32, #m, [S(0)]>) -> !dtensor.tensor<5x4xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<5x4xf32, #m, [S(0)]> -> !dtensor.tensor<5x4xf32, #m, [R]>
  %1 = dtensor.exp %0 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  return %1 : !dtensor.tensor<5x4xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// Collectives name their mesh axis; a local slice starts at this rank's
// chunk of the axis; a sharded mean divides by the global count. Even
// shards: one class for the whole mesh.
// CHECK-LABEL: func @groups_class0
// CHECK-SAME: attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2, 0, 2>]}
// CHECK: %[[P:.+]] = rank.kernel "sum"(%arg0) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.250000e-01 : f64} : (tensor<2x4xf32>) -> tensor<2xf32>
// CHECK: %[[R:.+]] = rank.all_reduce %[[P]] {axis = 1 : i64, reduce = "sum"} : tensor<2xf32> -> tensor<2xf32>
// CHECK: rank.kernel "slice"(%[[R]]) {dim = 0 : i64, start = #rank.chunk_offset<axis = 1, extent = 2>} : (tensor<2xf32>) -> tensor<1xf32>
// CHECK-NOT: func.func
func.func @groups(%x: !dtensor.tensor<4x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.mean %x dims = [1] : (!dtensor.tensor<4x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4xf32, #m, [S(0), P(sum)]>
  %1 = dtensor.all_reduce %0 on axis 1 : !dtensor.tensor<4xf32, #m, [S(0), P(sum)]> -> !dtensor.tensor<4xf32, #m, [S(0), R]>
  %2 = dtensor.local_slice %1 on axis 1 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [S(0), S(0)]>
  return %2 : !dtensor.tensor<4xf32, #m, [S(0), S(0)]>
}

// -----

#m = #dtensor.mesh<[2]>

// R -> P(sum): the rank at coordinate 0 keeps the value, the others hold
// zeros (lead_or_zero reads the coordinate); random and constant values are
// described globally and each rank cuts out its box.
// CHECK-LABEL: func @creation_class0
// CHECK: rank.kernel "random"() {dist = "uniform", global_shape = array<i64: 3, 2>, offset = #rank.box_offset<global_shape = [3, 2], shard_dims = [0], dim = -1>, seed = 5 : i64} : () -> tensor<2x2xf32>
// CHECK: rank.kernel "constant"() {data = dense<[1, 2, 3]> : tensor<3xi64>, global_shape = array<i64: 3>, offset = #rank.box_offset<global_shape = [3], shard_dims = [0], dim = -1>} : () -> tensor<2xi64>
// CHECK: rank.kernel "lead_or_zero"(%{{.+}}) {coord = #rank.mesh_coord<axis = 0>}
// CHECK-LABEL: func @creation_class1
// CHECK: rank.kernel "random"() {{.*}} : () -> tensor<1x2xf32>
// CHECK: rank.kernel "constant"() {{.*}} : () -> tensor<1xi64>
// CHECK: rank.kernel "lead_or_zero"
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
// CHECK-LABEL: func @a2a_class0
// CHECK: rank.all_to_all %arg0 {axis = 0 : i64, concat_dim = 0 : i64, concat_sizes = array<i64: 3, 2>, split_dim = 1 : i64, split_sizes = array<i64: 2, 1>} : tensor<3x3xf32> -> tensor<5x2xf32>
// CHECK-LABEL: func @a2a_class1
// CHECK: rank.all_to_all %arg0 {{.*}} : tensor<2x3xf32> -> tensor<5x1xf32>
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
// CHECK-LABEL: func @lower_indexing_class0
// CHECK-SAME: rank.positions = [array<i64: 0, 2>]
// CHECK: rank.kernel "index_select"(%{{.*}}) {dim = 0 : i64, masked = 1 : i64, offset = #rank.box_offset<global_shape = [6, 4], shard_dims = [0], dim = 0>}
// CHECK: rank.kernel "tril"(%{{.*}}) {col_offset = #rank.box_offset<global_shape = [4, 6], shard_dims = [1], dim = 1>, diagonal = 0 : i64, row_offset = #rank.box_offset<global_shape = [4, 6], shard_dims = [1], dim = 0>}
// CHECK: rank.kernel "extract_slice"(%{{.*}}) {offsets = array<i64: 1, 0>, sizes = array<i64: 2, 3>, strides = array<i64: 2, 1>}
// CHECK-NOT: func.func
func.func @lower_indexing(%t: !dtensor.tensor<6x4xf32, #m, [S(0)]>, %v: !dtensor.tensor<3xi64, #m, [R]>, %a: !dtensor.tensor<4x6xf32, #m, [S(1)]>) -> (!dtensor.tensor<3x4xf32, #m, [P(sum)]>, !dtensor.tensor<4x6xf32, #m, [S(1)]>, !dtensor.tensor<2x6xf32, #m, [S(1)]>) {
  %0 = dtensor.index_select %t, %v {dim = 0 : i64} : (!dtensor.tensor<6x4xf32, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [R]>) -> !dtensor.tensor<3x4xf32, #m, [P(sum)]>
  %1 = dtensor.tril %a {diagonal = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<4x6xf32, #m, [S(1)]>
  %2 = dtensor.slice %a {offsets = array<i64: 1, 0>, sizes = array<i64: 2, 6>, strides = array<i64: 2, 1>} : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<2x6xf32, #m, [S(1)]>
  return %0, %1, %2 : !dtensor.tensor<3x4xf32, #m, [P(sum)]>, !dtensor.tensor<4x6xf32, #m, [S(1)]>, !dtensor.tensor<2x6xf32, #m, [S(1)]>
}

// -----

#m = #dtensor.mesh<[4]>

// A merge that keeps S(0): each rank reshapes its 2 rows into 12 elements.
// CHECK-LABEL: func @reshape_keeps_shard_class0
// CHECK-SAME: (%[[X:.+]]: tensor<2x6xf32>) -> tensor<12xf32>
// CHECK: rank.kernel "reshape"(%[[X]]) {{.*}}: (tensor<2x6xf32>) -> tensor<12xf32>
// CHECK-NOT: func.func
func.func @reshape_keeps_shard(%x: !dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]> {
  %0 = dtensor.reshape %x : (!dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<48xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// The split keeps the nested S(0) of [B*H] on the new dim 0.
// CHECK-LABEL: func @reshape_split_nested_class0
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

// -----

#m = #dtensor.mesh<[1024]>

// Even shards on 1,024 ranks: one program for the whole mesh, whatever its
// size; collectives name the axis, not 1,024 ranks.
// CHECK-LABEL: func @even_1024_class0
// CHECK-SAME: (%{{.+}}: tensor<4x64xf32>, %{{.+}}: tensor<64x32xf32>) -> tensor<f32> attributes {rank.mesh = array<i64: 1024>, rank.positions = [array<i64: 0, 1024>]}
// CHECK: rank.kernel "matmul"
// CHECK: rank.kernel "relu"
// CHECK: rank.kernel "sum"
// CHECK: rank.all_reduce %{{.+}} {axis = 0 : i64, reduce = "sum"} : tensor<f32> -> tensor<f32>
// CHECK-NOT: func.func
func.func @even_1024(%x: !dtensor.tensor<4096x64xf32, #m, [S(0)]>, %w: !dtensor.tensor<64x32xf32, #m, [R]>) -> !dtensor.tensor<f32, #m, [R]> {
  %0 = dtensor.matmul %x, %w : (!dtensor.tensor<4096x64xf32, #m, [S(0)]>, !dtensor.tensor<64x32xf32, #m, [R]>) -> !dtensor.tensor<4096x32xf32, #m, [S(0)]>
  %1 = dtensor.relu %0 : (!dtensor.tensor<4096x32xf32, #m, [S(0)]>) -> !dtensor.tensor<4096x32xf32, #m, [S(0)]>
  %2 = dtensor.sum %1 dims = [0, 1] : (!dtensor.tensor<4096x32xf32, #m, [S(0)]>) -> !dtensor.tensor<f32, #m, [P(sum)]>
  %3 = dtensor.all_reduce %2 on axis 0 : !dtensor.tensor<f32, #m, [P(sum)]> -> !dtensor.tensor<f32, #m, [R]>
  return %3 : !dtensor.tensor<f32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[4]>

// 10 rows on 4 ranks are 3, 3, 3, 1: ranks 0-2 share one program, rank 3
// runs the remainder's.
// CHECK-LABEL: func @uneven_10_on_4_class0
// CHECK-SAME: (%{{.+}}: tensor<3x2xf32>) -> tensor<10x2xf32> attributes {rank.mesh = array<i64: 4>, rank.positions = [array<i64: 0, 3>]}
// CHECK: rank.all_gather %{{.+}} {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 3, 3, 3, 1>} : tensor<3x2xf32> -> tensor<10x2xf32>
// CHECK-LABEL: func @uneven_10_on_4_class1
// CHECK-SAME: (%{{.+}}: tensor<1x2xf32>) -> tensor<10x2xf32> attributes {rank.mesh = array<i64: 4>, rank.positions = [array<i64: 3, 4>]}
// CHECK: rank.all_gather %{{.+}} {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 3, 3, 3, 1>} : tensor<1x2xf32> -> tensor<10x2xf32>
// CHECK-NOT: func.func
func.func @uneven_10_on_4(%x: !dtensor.tensor<10x2xf32, #m, [S(0)]>) -> !dtensor.tensor<10x2xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<10x2xf32, #m, [S(0)]> -> !dtensor.tensor<10x2xf32, #m, [R]>
  return %0 : !dtensor.tensor<10x2xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[4, 8]>

// A 2-D mesh with a remainder on each axis: 10 rows on 4 (3, 3, 3, 1) and
// 20 columns on 8 (3 x 6, 2, 0): 2 x 3 = 6 classes of boxes, whatever the
// number of ranks in each.
// CHECK-LABEL: func @remainders_2d_class0
// CHECK-SAME: (%{{.+}}: tensor<3x3xf32>) -> tensor<3x20xf32> attributes {rank.mesh = array<i64: 4, 8>, rank.positions = [array<i64: 0, 3, 0, 6>]}
// CHECK: rank.all_gather %{{.+}} {axis = 1 : i64, dim = 1 : i64, sizes = array<i64: 3, 3, 3, 3, 3, 3, 2, 0>}
// CHECK-LABEL: func @remainders_2d_class1
// CHECK-SAME: (%{{.+}}: tensor<3x2xf32>) -> tensor<3x20xf32> attributes {rank.mesh = array<i64: 4, 8>, rank.positions = [array<i64: 0, 3, 6, 7>]}
// CHECK-LABEL: func @remainders_2d_class2
// CHECK-SAME: (%{{.+}}: tensor<3x0xf32>) -> tensor<3x20xf32> attributes {rank.mesh = array<i64: 4, 8>, rank.positions = [array<i64: 0, 3, 7, 8>]}
// CHECK-LABEL: func @remainders_2d_class3
// CHECK-SAME: (%{{.+}}: tensor<1x3xf32>) -> tensor<1x20xf32> attributes {rank.mesh = array<i64: 4, 8>, rank.positions = [array<i64: 3, 4, 0, 6>]}
// CHECK-LABEL: func @remainders_2d_class4
// CHECK-SAME: rank.positions = [array<i64: 3, 4, 6, 7>]
// CHECK-LABEL: func @remainders_2d_class5
// CHECK-SAME: rank.positions = [array<i64: 3, 4, 7, 8>]
// CHECK-NOT: func.func
func.func @remainders_2d(%x: !dtensor.tensor<10x20xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<10x20xf32, #m, [S(0), R]> {
  %0 = dtensor.all_gather %x on axis 1 : !dtensor.tensor<10x20xf32, #m, [S(0), S(1)]> -> !dtensor.tensor<10x20xf32, #m, [S(0), R]>
  return %0 : !dtensor.tensor<10x20xf32, #m, [S(0), R]>
}

// -----

#m = #dtensor.mesh<[2, 3]>

// Nested uneven shards (one tensor dim on both axes, 11 rows: 6 | 5, then
// 2, 2, 2 | 2, 2, 1): boxes with the same local shapes share a class, and
// boxes that touch along one axis are joined.
// CHECK-LABEL: func @nested_uneven_class0
// CHECK-SAME: (%{{.+}}: tensor<2xf32>) -> tensor<2xf32> attributes {rank.mesh = array<i64: 2, 3>, rank.positions = [array<i64: 0, 1, 0, 3>, array<i64: 1, 2, 0, 2>]}
// CHECK-LABEL: func @nested_uneven_class1
// CHECK-SAME: (%{{.+}}: tensor<1xf32>) -> tensor<1xf32> attributes {rank.mesh = array<i64: 2, 3>, rank.positions = [array<i64: 1, 2, 2, 3>]}
// CHECK-NOT: func.func
func.func @nested_uneven(%x: !dtensor.tensor<11xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<11xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.exp %x : (!dtensor.tensor<11xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<11xf32, #m, [S(0), S(0)]>
  return %0 : !dtensor.tensor<11xf32, #m, [S(0), S(0)]>
}

// -----

// Steps that leave the rank's piece as it is make no op: every step on a
// mesh axis of one rank (here the 1 of a (2, 1) mesh), and a local slice
// that keeps the whole piece (1 row over 2 ranks: the rank holding it
// keeps all of it; the other class slices out nothing and keeps its kernel).
#m21 = #dtensor.mesh<[2, 1]>
// CHECK-LABEL: func.func @identity_steps_class0
// CHECK-SAME: (%[[X:.*]]: tensor<1x4xf32>)
// CHECK-NEXT: return %[[X]], %[[X]] : tensor<1x4xf32>, tensor<1x4xf32>
// CHECK-LABEL: func.func @identity_steps_class1
// CHECK-SAME: (%[[Y:.*]]: tensor<1x4xf32>)
// CHECK-NEXT: %[[S:.*]] = rank.kernel "slice"(%[[Y]])
// CHECK-NEXT: return %[[Y]], %[[S]] : tensor<1x4xf32>, tensor<0x4xf32>
func.func @identity_steps(%x: !dtensor.tensor<1x4xf32, #m21, [R, R]>) -> (!dtensor.tensor<1x4xf32, #m21, [R, P(sum)]>, !dtensor.tensor<1x4xf32, #m21, [S(0), R]>) {
  %0 = dtensor.to_partial %x on axis 1 : !dtensor.tensor<1x4xf32, #m21, [R, R]> -> !dtensor.tensor<1x4xf32, #m21, [R, P(sum)]>
  %1 = dtensor.local_slice %x on axis 0 : !dtensor.tensor<1x4xf32, #m21, [R, R]> -> !dtensor.tensor<1x4xf32, #m21, [S(0), R]>
  return %0, %1 : !dtensor.tensor<1x4xf32, #m21, [R, P(sum)]>, !dtensor.tensor<1x4xf32, #m21, [S(0), R]>
}

// -----

#m = #dtensor.mesh<[3]>

// A transfer along the axis: each coordinate that sends or receives is a
// class of its own. Coordinate 0 only sends (its block becomes zero), 1
// sends and receives in one batch, 2 only receives; one tag per transfer.
// CHECK-LABEL: func @shift_class0
// CHECK-SAME: attributes {rank.mesh = array<i64: 3>, rank.positions = [array<i64: 0, 1>]}
// CHECK: rank.send %arg0 {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<2x4xf32>
// CHECK: %[[Z:.+]] = rank.kernel "full"() {value = 0.000000e+00 : f64} : () -> tensor<2x4xf32>
// CHECK: return %[[Z]]
// CHECK-LABEL: func @shift_class1
// CHECK-SAME: rank.positions = [array<i64: 1, 2>]
// CHECK: %[[B:.+]] = rank.batch_send_recv(%arg0) {axis = 0 : i64, recv_peers = array<i64: 0>, send_peers = array<i64: 2>, tag = 0 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: return %[[B]]
// CHECK-LABEL: func @shift_class2
// CHECK-SAME: rank.positions = [array<i64: 2, 3>]
// CHECK: %[[R:.+]] = rank.recv {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<2x4xf32>
// CHECK: return %[[R]]
func.func @shift(%x: !dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<6x4xf32, #m, [S(0)]> {
  %0 = dtensor.transfer %x {axis = 0 : i64, sources = array<i64: 0, 1>, destinations = array<i64: 1, 2>} : !dtensor.tensor<6x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<6x4xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[2, 2], names = ["pp", "dp"]>

// Two stages that are data parallel inside: stage 0's activation goes to
// stage 1 (tag 0) and its gradient comes back (tag 1), between the ranks
// of the same "dp" coordinate.
// CHECK-LABEL: func @stages_class0
// CHECK-SAME: rank.positions = [array<i64: 0, 1, 0, 2>]
// CHECK: rank.send %{{.+}} {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<2x3xf32>
// CHECK: rank.recv {axis = 0 : i64, peer = 1 : i64, tag = 1 : i64} : tensor<2x3xf32>
// CHECK-LABEL: func @stages_class1
// CHECK-SAME: rank.positions = [array<i64: 1, 2, 0, 2>]
// CHECK: rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<2x3xf32>
// CHECK: rank.send %{{.+}} {axis = 0 : i64, peer = 0 : i64, tag = 1 : i64} : tensor<2x3xf32>
func.func @stages(%x: !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]> {
  %0 = dtensor.transfer %x {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
  %1 = dtensor.exp %0 : (!dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
  %2 = dtensor.transfer %1 {axis = 0 : i64, sources = array<i64: 1>, destinations = array<i64: 0>} : !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
  return %2 : !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
}

// -----

#m = #dtensor.mesh<[2], names = ["dp"]>

// A move to another mesh: every position is a class of its own and sends
// its piece to the global rank the op names for it; the result is the input.
// CHECK-LABEL: func @to_next_stage_class0
// CHECK-SAME: rank.positions = [array<i64: 0, 1>]
// CHECK: rank.send %arg0 {peer = 2 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
// CHECK: return %arg0
// CHECK-LABEL: func @to_next_stage_class1
// CHECK-SAME: rank.positions = [array<i64: 1, 2>]
// CHECK: rank.send %arg0 {peer = 3 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
func.func @to_next_stage(%x: !dtensor.tensor<4x4xf32, #m, [S(0)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0)]> {
  %0 = dtensor.send %x {peers = array<i64: 2, 3>, tag = 1048576 : i64} : !dtensor.tensor<4x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4x4xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[2], names = ["dp"]>

// CHECK-LABEL: func @from_previous_stage_class1
// CHECK: %[[R:.+]] = rank.recv {peer = 1 : i64, tag = 1048576 : i64} : tensor<4x2xf32>
// CHECK: rank.kernel "relu"(%[[R]])
func.func @from_previous_stage() -> !dtensor.tensor<4x4xf32, #m, [S(1)]> {
  %0 = dtensor.recv {peers = array<i64: 0, 1>, tag = 1048576 : i64} : !dtensor.tensor<4x4xf32, #m, [S(1)]>
  %1 = dtensor.relu %0 : (!dtensor.tensor<4x4xf32, #m, [S(1)]>) -> !dtensor.tensor<4x4xf32, #m, [S(1)]>
  return %1 : !dtensor.tensor<4x4xf32, #m, [S(1)]>
}

// -----

#m = #dtensor.mesh<[2], names = ["tp"]>

// A received partial is a local strategy of recv's rule (each rank receives
// its summand): it lowers with no collective.
// CHECK-LABEL: func @receive_a_partial_class0
// CHECK: rank.recv {peer = 2 : i64, tag = 1048576 : i64} : tensor<4x4xf32>
// CHECK-NOT: rank.all_reduce
// CHECK-LABEL: func @receive_a_partial_class1
// CHECK: rank.recv {peer = 3 : i64, tag = 1048576 : i64} : tensor<4x4xf32>
func.func @receive_a_partial() -> !dtensor.tensor<4x4xf32, #m, [P(sum)]> {
  %0 = dtensor.recv {peers = array<i64: 2, 3>, tag = 1048576 : i64} : !dtensor.tensor<4x4xf32, #m, [P(sum)]>
  return %0 : !dtensor.tensor<4x4xf32, #m, [P(sum)]>
}

// -----

#m = #dtensor.mesh<[2, 2], names = ["dp", "ep"]>

// The exchange of counted rows on axis 1: each rank's [1, 8, 2] piece and
// [1, 4] counts flattened into the segmented rank.all_to_all_v (4 segments
// of 2 rows) and its result back; the feature dim split on axis 0.
// CHECK-LABEL: func @dispatch_class0
// CHECK-SAME: (%[[X:.+]]: tensor<1x8x2xf32>, %[[C:.+]]: tensor<1x4xi64>) -> tensor<1x8x2xf32>
// CHECK: %[[XF:.+]] = rank.kernel "reshape"(%[[X]]) : (tensor<1x8x2xf32>) -> tensor<8x2xf32>
// CHECK: %[[CF:.+]] = rank.kernel "reshape"(%[[C]]) : (tensor<1x4xi64>) -> tensor<4xi64>
// CHECK: %[[R:.+]], %{{.+}} = rank.all_to_all_v %[[XF]], %[[CF]] {axis = 1 : i64, segment_rows = 2 : i64} : (tensor<8x2xf32>, tensor<4xi64>) -> (tensor<8x2xf32>, tensor<4xi64>)
// CHECK: %[[Y:.+]] = rank.kernel "reshape"(%[[R]]) : (tensor<8x2xf32>) -> tensor<1x8x2xf32>
// CHECK: return %[[Y]]
// CHECK-NOT: func.func
func.func @dispatch(%x: !dtensor.tensor<2x8x4xf32, #m, [S(2), S(0)]>, %c: !dtensor.tensor<2x4xi64, #m, [R, S(0)]>) -> !dtensor.tensor<2x8x4xf32, #m, [S(2), S(0)]> {
  %0 = dtensor.all_to_all_v %x, %c {axis = 1 : i64} : (!dtensor.tensor<2x8x4xf32, #m, [S(2), S(0)]>, !dtensor.tensor<2x4xi64, #m, [R, S(0)]>) -> !dtensor.tensor<2x8x4xf32, #m, [S(2), S(0)]>
  return %0 : !dtensor.tensor<2x8x4xf32, #m, [S(2), S(0)]>
}
