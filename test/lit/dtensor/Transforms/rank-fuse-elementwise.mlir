// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(rank-fuse-elementwise))' | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(rank-fuse-elementwise{max-ops=2}))' | FileCheck %s --check-prefix=MAX2

// A chain with a constant and a broadcast operand becomes one group; the
// broadcast's input and the chain's input are its inputs.

// CHECK-LABEL: func.func @chain
// With at most two ops per group, the five ops make two groups and a lone
// kernel (a group of constants and broadcasts only is left alone).
// MAX2-LABEL: func.func @chain
// MAX2: rank.fused(%arg1, %arg0)
// MAX2: rank.kernel "broadcast_to"
// MAX2-NEXT: rank.kernel "mul"
// MAX2-NEXT: rank.yield
// MAX2: rank.fused
// MAX2: rank.kernel "full"
// MAX2-NEXT: rank.kernel "gelu"
// MAX2-NEXT: rank.yield
// MAX2: rank.kernel "mul"
// MAX2-NEXT: return
// CHECK-NEXT: %[[F:.*]] = rank.fused(%arg1, %arg0) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[B:.*]]: tensor<8xf32>, %[[A:.*]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[BB:.*]] = rank.kernel "broadcast_to"(%[[B]])
// CHECK-NEXT: %[[M:.*]] = rank.kernel "mul"(%[[A]], %[[BB]])
// CHECK-NEXT: %[[C:.*]] = rank.kernel "full"() {value = 2.000000e+00 : f64}
// CHECK-NEXT: %[[G:.*]] = rank.kernel "gelu"(%[[M]])
// CHECK-NEXT: %[[R:.*]] = rank.kernel "mul"(%[[G]], %[[C]])
// CHECK-NEXT: rank.yield %[[R]] : tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "broadcast_to"(%b) : (tensor<8xf32>) -> tensor<4x8xf32>
  %1 = rank.kernel "mul"(%x, %0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = rank.kernel "full"() {value = 2.0 : f64} : () -> tensor<4x8xf32>
  %3 = rank.kernel "gelu"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = rank.kernel "mul"(%3, %2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// A value of the group used after it becomes a second result (a sum over a
// leading dim is no row reduction: it reads the group from outside).

// CHECK-LABEL: func.func @extra_output
// CHECK: %[[F:.*]]:2 = rank.fused(%arg0) : (tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
// CHECK: rank.yield
// CHECK: %[[S:.*]] = rank.kernel "sum"(%[[F]]#0)
// CHECK: return %[[F]]#1, %[[S]]
func.func @extra_output(%x: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %2 = rank.kernel "sum"(%0) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x3xf32>) -> tensor<3xf32>
  return %1, %2 : tensor<4x3xf32>, tensor<3xf32>
}

// -----

// A kernel that reads the group ends it; so does a collective. Ops the
// group does not feed may sit between its members.

// CHECK-LABEL: func.func @breaks
// CHECK: %[[F1:.*]] = rank.fused(%arg0, %arg1)
// CHECK: rank.kernel "add"
// CHECK: rank.kernel "relu"
// CHECK: rank.yield
// CHECK: %[[MM:.*]] = rank.kernel "matmul"(%[[F1]], %arg1)
// CHECK: %[[AR:.*]] = rank.all_reduce %[[MM]]
// CHECK: %[[MM2:.*]] = rank.kernel "matmul"(%[[AR]], %arg1)
// CHECK: %[[F2:.*]] = rank.fused(%[[AR]], %[[MM2]])
// CHECK: rank.kernel "exp"
// CHECK: rank.kernel "neg"
// CHECK: rank.kernel "sub"
// CHECK: rank.kernel "tanh"
// CHECK: return %[[F2]]
func.func @breaks(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "add"(%x, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.kernel "relu"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = rank.kernel "matmul"(%1, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = rank.all_reduce %2 {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %4 = rank.kernel "exp"(%3) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %5 = rank.kernel "neg"(%4) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %6 = rank.kernel "matmul"(%3, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %7 = rank.kernel "sub"(%5, %6) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %8 = rank.kernel "tanh"(%7) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %8 : tensor<4x4xf32>
}

// -----

// Another shape starts a new group, another element type does not (the
// int32 constant joins the relu of its shape); a lone op, and a group of
// constants only, stay unfused; integer division is never fused, nor is an
// empty piece.

// CHECK-LABEL: func.func @kept
// CHECK-NEXT: rank.kernel "full"() {value = 1.000000e+00 : f64} : () -> tensor<2xf32>
// CHECK-NEXT: %[[F:.*]]:2 = rank.fused(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: rank.kernel "relu"
// CHECK-NEXT: rank.kernel "full"() {value = 3.000000e+00 : f64} : () -> tensor<4xi32>
// CHECK-NEXT: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: rank.kernel "div"(%arg1, %[[F]]#1)
// CHECK-NEXT: rank.kernel "exp"
// CHECK-NEXT: rank.kernel "neg"
// CHECK-NEXT: rank.kernel "relu"
// CHECK-NEXT: rank.kernel "full"
// CHECK-NEXT: rank.kernel "add"
// CHECK-NEXT: return
func.func @kept(%x: tensor<4xf32>, %i: tensor<4xi32>, %e: tensor<3x0xf64>) -> (tensor<4xf32>, tensor<2xf32>, tensor<4xi32>, tensor<4xi32>, tensor<3x0xf64>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "full"() {value = 1.0 : f64} : () -> tensor<2xf32>
  %2 = rank.kernel "full"() {value = 3.0 : f64} : () -> tensor<4xi32>
  %3 = rank.kernel "div"(%i, %2) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %4 = rank.kernel "exp"(%e) : (tensor<3x0xf64>) -> tensor<3x0xf64>
  %5 = rank.kernel "neg"(%4) : (tensor<3x0xf64>) -> tensor<3x0xf64>
  // Dead: nothing reads the group, so it is not fused.
  %6 = rank.kernel "relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %7 = rank.kernel "full"() {value = 1.0 : f64} : () -> tensor<4xf32>
  %8 = rank.kernel "add"(%6, %7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3, %5 : tensor<4xf32>, tensor<2xf32>, tensor<4xi32>, tensor<4xi32>, tensor<3x0xf64>
}

// -----

// softmax: the reductions over the last dim join the chain they end and the
// chain that reads them back (through broadcast_to of the kept-dims value):
// one group.

// CHECK-LABEL: func.func @softmax
// CHECK-NEXT: %[[F:.*]] = rank.fused(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[M:.*]] = rank.kernel "max"(%[[X]]) {dims = array<i64: 1>, keepdim = 1 : i64}
// CHECK-NEXT: %[[MB:.*]] = rank.kernel "broadcast_to"(%[[M]])
// CHECK-NEXT: %[[S:.*]] = rank.kernel "sub"(%[[X]], %[[MB]])
// CHECK-NEXT: %[[E:.*]] = rank.kernel "exp"(%[[S]])
// CHECK-NEXT: %[[T:.*]] = rank.kernel "sum"(%[[E]])
// CHECK-NEXT: %[[TB:.*]] = rank.kernel "broadcast_to"(%[[T]])
// CHECK-NEXT: %[[Y:.*]] = rank.kernel "div"(%[[E]], %[[TB]])
// CHECK-NEXT: rank.yield %[[Y]] : tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %m = rank.kernel "max"(%x) {dims = array<i64: 1>, keepdim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %mb = rank.kernel "broadcast_to"(%m) : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %s = rank.kernel "sub"(%x, %mb) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = rank.kernel "exp"(%s) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = rank.kernel "sum"(%e) {dims = array<i64: 1>, keepdim = 1 : i64, scale = 1.0 : f64} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %tb = rank.kernel "broadcast_to"(%t) : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = rank.kernel "div"(%e, %tb) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// layer_norm over the last two dims: per-row ops (eps, rsqrt) on the
// reduced type join the group; the weight, broadcast from outside, is an
// input; the mean used after the group is a second, per-row result.

// CHECK-LABEL: func.func @layer_norm
// CHECK-NEXT: %[[F:.*]]:2 = rank.fused(%arg0, %arg1) : (tensor<2x3x8xf32>, tensor<3x8xf32>) -> (tensor<2x1x1xf32>, tensor<2x3x8xf32>)
// CHECK: rank.kernel "sum"({{.*}}) {dims = array<i64: 1, 2>, keepdim = 1 : i64, scale = 0.041666666666666664 : f64}
// CHECK: rank.kernel "full"() {value = 1.000000e-05 : f64} : () -> tensor<2x1x1xf32>
// CHECK-NEXT: rank.kernel "add"
// CHECK-NEXT: rank.kernel "rsqrt"
// CHECK: rank.kernel "broadcast_to"(%{{.*}}) : (tensor<3x8xf32>) -> tensor<2x3x8xf32>
// CHECK: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]#1, %[[F]]#0
func.func @layer_norm(%x: tensor<2x3x8xf32>, %w: tensor<3x8xf32>) -> (tensor<2x3x8xf32>, tensor<2x1x1xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %mean = rank.kernel "sum"(%x) {dims = array<i64: 1, 2>, keepdim = 1 : i64, scale = 0.041666666666666664 : f64} : (tensor<2x3x8xf32>) -> tensor<2x1x1xf32>
  %mb = rank.kernel "broadcast_to"(%mean) : (tensor<2x1x1xf32>) -> tensor<2x3x8xf32>
  %c = rank.kernel "sub"(%x, %mb) : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %sq = rank.kernel "mul"(%c, %c) : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %var = rank.kernel "sum"(%sq) {dims = array<i64: 1, 2>, keepdim = 1 : i64, scale = 0.041666666666666664 : f64} : (tensor<2x3x8xf32>) -> tensor<2x1x1xf32>
  %eps = rank.kernel "full"() {value = 1.0e-5 : f64} : () -> tensor<2x1x1xf32>
  %ve = rank.kernel "add"(%var, %eps) : (tensor<2x1x1xf32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %inv = rank.kernel "rsqrt"(%ve) : (tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %ib = rank.kernel "broadcast_to"(%inv) : (tensor<2x1x1xf32>) -> tensor<2x3x8xf32>
  %n = rank.kernel "mul"(%c, %ib) : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %wb = rank.kernel "broadcast_to"(%w) : (tensor<3x8xf32>) -> tensor<2x3x8xf32>
  %y = rank.kernel "mul"(%n, %wb) : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y, %mean : tensor<2x3x8xf32>, tensor<2x1x1xf32>
}

// -----

// Kept out of groups: a reduction over a leading dim (it ends the group it
// reads), an integer reduction, and a reduction over other dims than the
// group's (it starts a group of its own, here one op: unfused).

// CHECK-LABEL: func.func @not_row_reductions
// CHECK-NEXT: %[[F:.*]] = rank.fused(%arg0)
// CHECK: rank.kernel "exp"
// CHECK-NEXT: rank.kernel "neg"
// CHECK-NEXT: rank.yield
// CHECK: rank.kernel "sum"(%[[F]]) {dims = array<i64: 0>
// CHECK-NEXT: rank.kernel "sum"(%arg1)
// CHECK-NEXT: rank.fused(%arg0)
// CHECK: rank.kernel "max"({{.*}}) {dims = array<i64: 1>
// CHECK-NEXT: rank.kernel "relu"
// CHECK-NEXT: rank.yield
// CHECK: rank.kernel "sum"(%arg2) {dims = array<i64: 1, 2>
// CHECK-NEXT: return
func.func @not_row_reductions(%x: tensor<4x8xf32>, %i: tensor<4x8xi32>, %z: tensor<2x4x8xf32>) -> (tensor<8xf32>, tensor<4xi32>, tensor<4x1xf32>, tensor<2xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = rank.kernel "sum"(%1) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x8xf32>) -> tensor<8xf32>
  %3 = rank.kernel "sum"(%i) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x8xi32>) -> tensor<4xi32>
  %4 = rank.kernel "max"(%x) {dims = array<i64: 1>, keepdim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %5 = rank.kernel "relu"(%4) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %6 = rank.kernel "sum"(%z) {dims = array<i64: 1, 2>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<2x4x8xf32>) -> tensor<2xf32>
  return %2, %3, %5, %6 : tensor<8xf32>, tensor<4xi32>, tensor<4x1xf32>, tensor<2xf32>
}

// -----

// A per-row value whose reduced dims are dropped is a result of the group,
// but its broadcast back over the rows is not taken in (numpy would align
// it with the last dim): that broadcast and what follows form their own
// group.

// CHECK-LABEL: func.func @dropped_broadcast
// CHECK-NEXT: %[[F:.*]] = rank.fused(%arg0) : (tensor<4x4xf32>) -> tensor<4xf32>
// CHECK: rank.kernel "sum"
// CHECK-NEXT: rank.kernel "neg"
// CHECK-NEXT: rank.yield
// CHECK: %[[G:.*]] = rank.fused(%[[F]], %arg0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: rank.kernel "broadcast_to"
// CHECK-NEXT: rank.kernel "add"
// CHECK: return %[[G]]
func.func @dropped_broadcast(%x: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "sum"(%x) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "broadcast_to"(%1) : (tensor<4xf32>) -> tensor<4x4xf32>
  %3 = rank.kernel "add"(%2, %x) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %3 : tensor<4x4xf32>
}
