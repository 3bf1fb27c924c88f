// RUN: dtorch-opt %s --split-input-file --rank-mark-donations | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --rank-mark-donations=any-argument=false | FileCheck %s --check-prefix=NEAR

// An SGD-like update: the sub writes elementwise over %p, its last use, so
// the new value may take %p's storage; %g is still read by nothing after
// the mul but the result prefers the argument it is computed from.
// CHECK-LABEL: func @update
// CHECK-SAME: rank.output_donors = array<i64: 0>
func.func @update(%p: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "mul"(%g, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "sub"(%p, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Adam's three updates, each a chain: every result takes its own argument
// (p, m, v in order), and the gradient, still read by the v chain after m
// is written, is nobody's donor.
// CHECK-LABEL: func @adam
// CHECK-SAME: rank.output_donors = array<i64: 0, 1, 2>
func.func @adam(%p: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %g: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %d = rank.kernel "sub"(%g, %m) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %m1 = rank.kernel "add"(%m, %d) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %gg = rank.kernel "mul"(%g, %g) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %v1 = rank.kernel "add"(%v, %gg) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %s = rank.kernel "sqrt"(%v1) : (tensor<8xf32>) -> tensor<8xf32>
  %q = rank.kernel "div"(%m1, %s) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %p1 = rank.kernel "sub"(%p, %q) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %p1, %m1, %v1 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// An argument read after the result is written cannot give its storage
// (%x, read by the transpose after the add), nor can one read by a writer
// that is not elementwise (the transpose reads %x in another order than
// it writes). %y, dead before either, goes to the first result that may
// take it; without any-argument only to the result computed from it.
// CHECK-LABEL: func @still_read
// CHECK-SAME: rank.output_donors = array<i64: 1, -1>
// NEAR-LABEL: func @still_read
// NEAR-SAME: rank.output_donors = array<i64: -1, 1>
func.func @still_read(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %e = rank.kernel "exp"(%y) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.kernel "add"(%e, %x) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %0 = rank.kernel "transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0, %1 : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Nothing to pair: an argument returned as it is, a size that differs, and
// a result returned twice.
// CHECK-LABEL: func @nothing
// CHECK-NOT: rank.output_donors
// CHECK: return
func.func @nothing(%x: tensor<4xf32>, %y: tensor<2xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "exp"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "broadcast_to"(%y) : (tensor<2xf32>) -> tensor<4xf32>
  return %x, %1, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// The all_reduce reads %p on the communication stream; the exp does not
// wait for it, so %p may still be read while the exp writes: no donor for
// the exp (%q, returned as it is, gives nothing). The add waits for the
// all_reduce: %p is dead by then, and the add is computed from it.
// CHECK-LABEL: func @comm_reader
// CHECK-SAME: rank.output_donors = array<i64: -1, -1, 0>
func.func @comm_reader(%p: tensor<4xf32>, %q: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %r = rank.all_reduce %p {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %e = rank.kernel "exp"(%q) : (tensor<4xf32>) -> tensor<4xf32>
  %s = rank.kernel "add"(%r, %e) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %q, %e, %s : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A generated group writes its results elementwise over its inputs (here
// an AdamW-like pair of updates in one rank.fused): each takes its own.
// CHECK-LABEL: func @fused_in_place
// CHECK-SAME: rank.output_donors = array<i64: 0, 1>
func.func @fused_in_place(%p: tensor<4xf32>, %m: tensor<4xf32>, %g: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0:2 = rank.fused(%p, %m, %g) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>):
    %m1 = rank.kernel "add"(%b, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %p1 = rank.kernel "sub"(%a, %m1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    rank.yield %p1, %m1 : tensor<4xf32>, tensor<4xf32>
  }
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Through a group, a result prefers the inputs its yielded value is
// computed from, not the group's operand order: the new %p takes %p.
// CHECK-LABEL: func @fused_pairing
// CHECK-SAME: rank.output_donors = array<i64: 0, 1>
func.func @fused_pairing(%p: tensor<4xf32>, %m: tensor<4xf32>, %g: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0:2 = rank.fused(%m, %g, %p) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%b: tensor<4xf32>, %c: tensor<4xf32>, %a: tensor<4xf32>):
    %m1 = rank.kernel "add"(%b, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %p1 = rank.kernel "sub"(%a, %m1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    rank.yield %p1, %m1 : tensor<4xf32>, tensor<4xf32>
  }
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A group that reduces rows (softmax) reads a whole row before writing it:
// it may not write over its input.
// CHECK-LABEL: func @fused_rows
// CHECK-NOT: rank.output_donors
// CHECK: return
func.func @fused_rows(%x: tensor<2x4xf32>) -> tensor<2x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.fused(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %s = rank.kernel "sum"(%a) {dims = array<i64: 1>, keepdim = 1 : i64, scale = 1.0 : f64} : (tensor<2x4xf32>) -> tensor<2x1xf32>
    %b = rank.kernel "broadcast_to"(%s) : (tensor<2x1xf32>) -> tensor<2x4xf32>
    %d = rank.kernel "div"(%a, %b) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    rank.yield %d : tensor<2x4xf32>
  }
  return %0 : tensor<2x4xf32>
}
