// RUN: dtorch-opt %s --split-input-file --rank-match-p2p --verify-diagnostics | FileCheck %s

// Stage 0 sends to stage 1, which sends back; the middle axis is a data
// parallel axis that both stages span. Every message has its receive.
// CHECK-LABEL: func @pipe_class0
// CHECK: rank.send
// CHECK-LABEL: func @pipe_class1
// CHECK: rank.recv
func.func @pipe_class0(%x: tensor<2x4xf32>) -> tensor<2x4xf32> attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 1, 0, 2>]} {
  rank.send %x {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<2x4xf32>
  %0 = rank.recv {axis = 0 : i64, peer = 1 : i64, tag = 1 : i64} : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}
func.func @pipe_class1(%x: tensor<2x4xf32>) -> tensor<2x4xf32> attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 1, 2, 0, 2>]} {
  %0 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<2x4xf32>
  rank.send %0 {axis = 0 : i64, peer = 0 : i64, tag = 1 : i64} : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// A ring of three stages, each exchanging with both neighbours in one batch.
// CHECK-LABEL: func @ring_class0
func.func @ring_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 3>, rank.positions = [array<i64: 0, 1>]} {
  %0:2 = rank.batch_send_recv(%x, %x) {axis = 0 : i64, send_peers = array<i64: 1, 2>, recv_peers = array<i64: 2, 1>, tag = 0 : i64} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}
func.func @ring_class1(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 3>, rank.positions = [array<i64: 1, 2>]} {
  %0:2 = rank.batch_send_recv(%x, %x) {axis = 0 : i64, send_peers = array<i64: 2, 0>, recv_peers = array<i64: 0, 2>, tag = 0 : i64} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}
func.func @ring_class2(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 3>, rank.positions = [array<i64: 2, 3>]} {
  %0:2 = rank.batch_send_recv(%x, %x) {axis = 0 : i64, send_peers = array<i64: 0, 1>, recv_peers = array<i64: 1, 0>, tag = 0 : i64} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// The receiver expects another shape: a compile error, not a hang.
func.func @shape_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  // expected-error @+1 {{sends 'tensor<4xf32>' (message 0 on axis 0, tag 0) but @shape_class1 at positions [1] receives 'tensor<8xf32>'}}
  rank.send %x {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @shape_class1() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  %0 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<8xf32>
  return
}

// -----

// A send whose receiver never receives (another tag).
func.func @lost_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  // expected-error @+1 {{sends 1 message(s) on axis 0 with tag 0 to coordinate 1 but @lost_class1 at positions [1] receives 0: message 0 ('tensor<4xf32>') is unmatched}}
  rank.send %x {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @lost_class1() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  %0 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 7 : i64} : tensor<4xf32>
  return
}

// -----

// The receiver waits for a second message that is never sent.
func.func @extra_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  rank.send %x {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @extra_class1() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  %0 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<4xf32>
  // expected-error @+1 {{receives 2 message(s) on axis 0 with tag 0 but @extra_class0 at coordinate 0 sends 1: message 1 is unmatched}}
  %1 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

// Only half of the peer positions run a program.
func.func @half_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 1, 0, 2>]} {
  // expected-error @+1 {{sends on axis 0 with peer 1 but no program runs at positions [1, 0..1]}}
  rank.send %x {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @half_class1() attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 1, 2, 0, 1>]} {
  %0 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

// A send to a global rank (one side of a move between meshes) is paired by
// the client, not here: no diagnostic.
// CHECK-LABEL: func @move_class0
// CHECK: rank.send %arg0 {peer = 5 : i64, tag = 0 : i64}
func.func @move_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  rank.send %x {peer = 5 : i64, tag = 0 : i64} : tensor<4xf32>
  %0 = rank.recv {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @move_class1(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  rank.send %x {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

// A move between two meshes (pipeline stages on ranks 0, 1 and 2, 3): the
// functions name their global ranks, so the pass pairs the sends of one
// segment with the receives of the other.
// CHECK-LABEL: func @stage0_class0
// CHECK: rank.send %arg0 {peer = 2 : i64, tag = 1048576 : i64}
// CHECK-LABEL: func @stage1_class1
// CHECK: rank.recv {peer = 1 : i64, tag = 1048576 : i64}
func.func @stage0_class0(%x: tensor<2x4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 0, 1>} {
  rank.send %x {peer = 2 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
  return
}
func.func @stage0_class1(%x: tensor<2x4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>], rank.global_ranks = array<i64: 0, 1>} {
  rank.send %x {peer = 3 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
  return
}
func.func @stage1_class0() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 2, 3>} {
  %0 = rank.recv {peer = 0 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
  return
}
func.func @stage1_class1() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>], rank.global_ranks = array<i64: 2, 3>} {
  %0 = rank.recv {peer = 1 : i64, tag = 1048576 : i64} : tensor<2x4xf32>
  return
}

// -----

// One function for both positions of a 2-D stage mesh (ranks 4..7 send to
// 0..3 of the other stage, which receives in one function too): matched.
// CHECK-LABEL: func @back_class0
func.func @back_class0(%x: tensor<3xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2, 0, 2>], rank.global_ranks = array<i64: 4, 5, 6, 7>} {
  rank.send %x {peer = 9 : i64, tag = 3 : i64} : tensor<3xf32>
  return
}
func.func @front_class0() attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 9>} {
  %0 = rank.recv {peer = 4 : i64, tag = 3 : i64} : tensor<3xf32>
  %1 = rank.recv {peer = 5 : i64, tag = 3 : i64} : tensor<3xf32>
  %2 = rank.recv {peer = 6 : i64, tag = 3 : i64} : tensor<3xf32>
  %3 = rank.recv {peer = 7 : i64, tag = 3 : i64} : tensor<3xf32>
  return
}

// -----

// The receiving stage expects another local shape: a compile error.
func.func @shape_stage0_class0(%x: tensor<2x4xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 0>} {
  // expected-error @+1 {{in @shape_stage0_class0 sends 'tensor<2x4xf32>' from global rank 0 to global rank 1 (message 0, tag 0) but @shape_stage1_class0 receives 'tensor<4x4xf32>'}}
  rank.send %x {peer = 1 : i64, tag = 0 : i64} : tensor<2x4xf32>
  return
}
func.func @shape_stage1_class0() attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 1>} {
  %0 = rank.recv {peer = 0 : i64, tag = 0 : i64} : tensor<4x4xf32>
  return
}

// -----

// The receivers swapped their peers: rank 2 waits for rank 1 and rank 3 for
// rank 0, so rank 0's message to rank 2 is never received.
func.func @swap_stage0_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 0, 1>} {
  // expected-error @+1 {{in @swap_stage0_class0 sends 1 message(s) from global rank 0 to global rank 2 with tag 0 but @swap_stage1_class0 at global rank 2 receive(s) 0: message 0 ('tensor<4xf32>') is unmatched}}
  rank.send %x {peer = 2 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @swap_stage0_class1(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>], rank.global_ranks = array<i64: 0, 1>} {
  rank.send %x {peer = 3 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @swap_stage1_class0() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 2, 3>} {
  %0 = rank.recv {peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @swap_stage1_class1() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>], rank.global_ranks = array<i64: 2, 3>} {
  %0 = rank.recv {peer = 0 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

// The receiver waits for a second message the sender never sends.
func.func @extra_stage0_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 0>} {
  rank.send %x {peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
func.func @extra_stage1_class0() attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 1>} {
  %0 = rank.recv {peer = 0 : i64, tag = 0 : i64} : tensor<4xf32>
  // expected-error @+1 {{in @extra_stage1_class0 receives 2 message(s) from global rank 0 at global rank 1 with tag 0 but @extra_stage0_class0 at global rank 0 send(s) 1: message 1 is unmatched}}
  %1 = rank.recv {peer = 0 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

// A send to a rank that no function of the module runs is compiled
// elsewhere: not checked here.
// CHECK-LABEL: func @elsewhere_class0
func.func @elsewhere_class0(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.global_ranks = array<i64: 0>} {
  rank.send %x {peer = 8 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}
