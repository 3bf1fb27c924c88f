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

// A value of the group used after it becomes a second result.

// CHECK-LABEL: func.func @extra_output
// CHECK: %[[F:.*]]:2 = rank.fused(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK: rank.yield
// CHECK: %[[S:.*]] = rank.kernel "sum"(%[[F]]#0)
// CHECK: return %[[F]]#1, %[[S]]
func.func @extra_output(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "sum"(%0) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4xf32>) -> tensor<f32>
  return %1, %2 : tensor<4xf32>, tensor<f32>
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

// Another shape or element type starts a new group; a lone op, and a group
// of constants only, stay unfused; integer division is never fused, nor is
// an empty piece.

// CHECK-LABEL: func.func @kept
// CHECK-NEXT: rank.kernel "relu"
// CHECK-NEXT: rank.kernel "full"
// CHECK-NEXT: rank.kernel "full"
// CHECK-NEXT: rank.kernel "div"
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
