// RUN: dtorch-opt %s | dtorch-opt | FileCheck %s
// RUN: dtorch-opt %s --mlir-print-op-generic | dtorch-opt | FileCheck %s

// CHECK-LABEL: func @program_class0
// CHECK-SAME: attributes {rank.mesh = array<i64: 2, 3>, rank.positions = [array<i64: 0, 1, 0, 3>]}
// CHECK: rank.kernel "add"(%arg0, %arg0) : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
// CHECK: rank.kernel "sum"(%{{.*}}) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.000000e+00 : f64} : (tensor<4x5xf32>) -> tensor<4xf32>
// CHECK: rank.all_reduce %{{.*}} {axis = 0 : i64, reduce = "max"} : tensor<4xf32> -> tensor<4xf32>
// CHECK: rank.all_gather %arg0 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
// CHECK: rank.reduce_scatter %{{.*}} {axis = 0 : i64, dim = 0 : i64, reduce = "sum", sizes = array<i64: 4, 3>} : tensor<7x5xf32> -> tensor<4x5xf32>
// CHECK: rank.all_to_all %arg0 {axis = 0 : i64, concat_dim = 0 : i64, concat_sizes = array<i64: 4, 3>, split_dim = 1 : i64, split_sizes = array<i64: 3, 2>} : tensor<4x5xf32> -> tensor<7x3xf32>
func.func @program_class0(%x: tensor<4x5xf32>) attributes {rank.mesh = array<i64: 2, 3>, rank.positions = [array<i64: 0, 1, 0, 3>]} {
  %0 = rank.kernel "add"(%x, %x) : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
  %1 = rank.kernel "sum"(%0) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x5xf32>) -> tensor<4xf32>
  %2 = rank.all_reduce %1 {axis = 0 : i64, reduce = "max"} : tensor<4xf32> -> tensor<4xf32>
  %3 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
  %4 = rank.reduce_scatter %3 {axis = 0 : i64, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<7x5xf32> -> tensor<4x5xf32>
  %5 = rank.all_to_all %x {axis = 0 : i64, split_dim = 1 : i64, split_sizes = array<i64: 3, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x3xf32>
  return
}

// Mesh-dependent attributes print and parse.
// CHECK-LABEL: func @mesh_values
// CHECK: rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [10, 4], shard_dims = [0, -1], dim = -1>} : () -> tensor<3x4xi64>
// CHECK: rank.kernel "slice"(%{{.*}}) {dim = 1 : i64, start = #rank.chunk_offset<axis = 1, extent = 4>}
// CHECK: rank.kernel "lead_or_zero"(%{{.*}}) {coord = #rank.mesh_coord<axis = 1>}
func.func @mesh_values(%x: tensor<3x4xi64>) attributes {rank.mesh = array<i64: 4, 2>, rank.positions = [array<i64: 0, 3, 0, 2>]} {
  %0 = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [10, 4], shard_dims = [0, -1], dim = -1>} : () -> tensor<3x4xi64>
  %1 = rank.kernel "slice"(%0) {dim = 1 : i64, start = #rank.chunk_offset<axis = 1, extent = 4>} : (tensor<3x4xi64>) -> tensor<3x2xi64>
  %2 = rank.kernel "lead_or_zero"(%x) {coord = #rank.mesh_coord<axis = 1>} : (tensor<3x4xi64>) -> tensor<3x4xi64>
  return
}

// A generated-kernel group: its body holds rank.kernel ops and ends in
// rank.yield; a multi-result op's arena offsets are one per result.
// CHECK-LABEL: func @fused_group
// CHECK: %[[F:.*]]:2 = rank.fused(%arg0) {rank.arena_offset = array<i64: 0, -1>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
// CHECK: rank.kernel "exp"
// CHECK: rank.kernel "neg"
// CHECK: rank.yield %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32>
func.func @fused_group(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0:2 = rank.fused(%x) {rank.arena_offset = array<i64: 0, -1>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %n = rank.kernel "neg"(%e) : (tensor<4xf32>) -> tensor<4xf32>
    rank.yield %e, %n : tensor<4xf32>, tensor<4xf32>
  }
  return %0#1 : tensor<4xf32>
}

// Point to point: a send, a receive and a batched exchange of one stage.
// CHECK-LABEL: func @stage_class1
// CHECK: rank.send %arg0 {axis = 0 : i64, peer = 2 : i64, tag = 0 : i64} : tensor<4x5xf32>
// CHECK: %[[R:.+]] = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 1 : i64} : tensor<4x5xf32>
// CHECK: %{{.+}}:2 = rank.batch_send_recv(%arg0, %[[R]]) {axis = 0 : i64, recv_peers = array<i64: 0, 2>, send_peers = array<i64: 0, 2>, tag = 2 : i64} : (tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
func.func @stage_class1(%x: tensor<4x5xf32>) attributes {rank.mesh = array<i64: 3, 2>, rank.positions = [array<i64: 1, 2, 0, 2>]} {
  rank.send %x {axis = 0 : i64, peer = 2 : i64, tag = 0 : i64} : tensor<4x5xf32>
  %0 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 1 : i64} : tensor<4x5xf32>
  %1:2 = rank.batch_send_recv(%x, %0) {axis = 0 : i64, send_peers = array<i64: 0, 2>, recv_peers = array<i64: 0, 2>, tag = 2 : i64} : (tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  return
}

// all_to_all with uneven counts: static upper-bound rows, counts as tensors.
// CHECK-LABEL: func @dispatch_class0
// CHECK: = rank.all_to_all_v %arg0, %arg1 {axis = 1 : i64} : (tensor<6x4xf32>, tensor<3xi64>) -> (tensor<18x4xf32>, tensor<3xi64>)
// CHECK-LABEL: func @dispatch_global_ranks_class0
// CHECK-SAME: rank.global_ranks = array<i64: 4, 5>
func.func @dispatch_class0(%x: tensor<6x4xf32>, %c: tensor<3xi64>) -> tensor<18x4xf32> attributes {rank.mesh = array<i64: 2, 3>, rank.positions = [array<i64: 0, 2, 0, 3>]} {
  %0, %1 = rank.all_to_all_v %x, %c {axis = 1 : i64} : (tensor<6x4xf32>, tensor<3xi64>) -> (tensor<18x4xf32>, tensor<3xi64>)
  return %0 : tensor<18x4xf32>
}
func.func @dispatch_global_ranks_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>], rank.global_ranks = array<i64: 4, 5>} {
  return
}

// The segmented form: fixed slots of 3 rows, 2 segments per coordinate.
// CHECK-LABEL: func @dispatch_segments_class0
// CHECK: = rank.all_to_all_v %arg0, %arg1 {axis = 0 : i64, segment_rows = 3 : i64} : (tensor<12x4xf32>, tensor<4xi64>) -> (tensor<12x4xf32>, tensor<4xi64>)
func.func @dispatch_segments_class0(%x: tensor<12x4xf32>, %c: tensor<4xi64>) -> tensor<12x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64, segment_rows = 3 : i64} : (tensor<12x4xf32>, tensor<4xi64>) -> (tensor<12x4xf32>, tensor<4xi64>)
  return %0 : tensor<12x4xf32>
}
