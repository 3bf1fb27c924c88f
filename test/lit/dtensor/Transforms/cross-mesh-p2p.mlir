// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(dtensor-to-rank)' --verify-diagnostics | FileCheck %s

// Two pipeline stages, each a segment on its own ranks (0, 1 and 2, 3): the
// functions name their global ranks (dtensor.global_ranks, which the
// controller sets on a segment that moves values between meshes), SPMD
// lowering copies them onto every class function as rank.global_ranks, and
// --rank-match-p2p pairs every send of one stage with a receive of the other.
#m = #dtensor.mesh<[2], names = ["dp"]>

// CHECK-LABEL: func @stage0_class0
// CHECK-SAME: rank.global_ranks = array<i64: 0, 1>
// CHECK: rank.send %{{.+}} {peer = 2 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
// CHECK-LABEL: func @stage0_class1
// CHECK-SAME: rank.global_ranks = array<i64: 0, 1>
// CHECK: rank.send %{{.+}} {peer = 3 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
// CHECK-LABEL: func @stage1_class0
// CHECK-SAME: rank.global_ranks = array<i64: 2, 3>
// CHECK: rank.recv {peer = 0 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
// CHECK-LABEL: func @stage1_class1
// CHECK-SAME: rank.global_ranks = array<i64: 2, 3>
// CHECK: rank.recv {peer = 1 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
func.func @stage0(%x: !dtensor.tensor<4x4xf32, #m, [S(0)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 0, 1>} {
  %0 = dtensor.relu %x : (!dtensor.tensor<4x4xf32, #m, [S(0)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0)]>
  %1 = dtensor.send %0 {peers = array<i64: 2, 3>, tag = 1048576 : i64} : !dtensor.tensor<4x4xf32, #m, [S(0)]>
  return %1 : !dtensor.tensor<4x4xf32, #m, [S(0)]>
}
func.func @stage1() -> !dtensor.tensor<4x4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 2, 3>} {
  %0 = dtensor.recv {peers = array<i64: 0, 1>, tag = 1048576 : i64} : !dtensor.tensor<4x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4x4xf32, #m, [S(0)]>
}

// -----

// A function without dtensor.global_ranks keeps its class functions without
// rank.global_ranks (a segment that moves nothing between meshes).
#m = #dtensor.mesh<[2]>
// CHECK-LABEL: func @plain_class0
// CHECK-NOT: rank.global_ranks
// CHECK: return
func.func @plain(%x: !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]> {
  %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4xf32, #m, [S(0)]>
}

// -----

// The receiving stage expects another shape: a compile error naming both
// programs, not a hang.
#m = #dtensor.mesh<[2]>
func.func @bad0(%x: !dtensor.tensor<4x4xf32, #m, [S(0)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 0, 1>} {
  // expected-error @+1 {{in @bad0_class0 sends 'tensor<2x4xf32>' from global rank 0 to global rank 2 (message 0, tag 1048576) but @bad1_class0 receives 'tensor<2x8xf32>'}}
  %0 = dtensor.send %x {peers = array<i64: 2, 3>, tag = 1048576 : i64} : !dtensor.tensor<4x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4x4xf32, #m, [S(0)]>
}
func.func @bad1() -> !dtensor.tensor<4x8xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 2, 3>} {
  %0 = dtensor.recv {peers = array<i64: 0, 1>, tag = 1048576 : i64} : !dtensor.tensor<4x8xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4x8xf32, #m, [S(0)]>
}

// -----

// The receiver names the sender's ranks swapped: rank 2 waits for rank 1,
// so rank 0's message to rank 2 is never received.
#m = #dtensor.mesh<[2]>
func.func @swap0(%x: !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 0, 1>} {
  // expected-error @+1 {{in @swap0_class0 sends 1 message(s) from global rank 0 to global rank 2 with tag 7 but @swap1_class0 at global rank 2 receive(s) 0: message 0 ('tensor<2xf32>') is unmatched}}
  %0 = dtensor.send %x {peers = array<i64: 2, 3>, tag = 7 : i64} : !dtensor.tensor<4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4xf32, #m, [S(0)]>
}
func.func @swap1() -> !dtensor.tensor<4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 2, 3>} {
  %0 = dtensor.recv {peers = array<i64: 1, 0>, tag = 7 : i64} : !dtensor.tensor<4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4xf32, #m, [S(0)]>
}

// -----

// dtensor.global_ranks must name one rank per mesh position.
#m = #dtensor.mesh<[2]>
// expected-error @+1 {{'dtensor.global_ranks' has 3 ranks for a mesh of 2 positions}}
func.func @short(%x: !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 0, 1, 2>} {
  %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[2]>
// expected-error @+1 {{'dtensor.global_ranks' names rank 1 twice}}
func.func @twice(%x: !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 1, 1>} {
  %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4xf32, #m, [S(0)]>
}
