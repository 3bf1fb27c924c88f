// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(rank-rematerialize-broadcasts))' | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(rank-rematerialize-broadcasts,rank-fuse-elementwise))' | FileCheck %s --check-prefix=FUSED
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(rank-fuse-elementwise))' | FileCheck %s --check-prefix=OFF

// A softmax-like forward and a backward after a GEMM that read the same
// broadcast row value and the same constant: the backward's readers get
// copies placed right before them; the first readers keep the originals.

// CHECK-LABEL: func.func @forward_and_backward
// CHECK: %[[B:.*]] = rank.kernel "broadcast_to"(%arg1) : (tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[C:.*]] = rank.kernel "full"() {value = 2.500000e-01 : f64} : () -> tensor<4x8xf32>
// CHECK-NEXT: %[[S:.*]] = rank.kernel "sub"(%arg0, %[[B]])
// CHECK-NEXT: %[[Y:.*]] = rank.kernel "mul"(%[[S]], %[[C]])
// CHECK-NEXT: %[[G:.*]] = rank.kernel "matmul"(%[[Y]], %arg2)
// CHECK-NEXT: %[[B2:.*]] = rank.kernel "broadcast_to"(%arg1) : (tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[D:.*]] = rank.kernel "mul"(%[[G]], %[[B2]])
// CHECK-NEXT: %[[C2:.*]] = rank.kernel "full"() {value = 2.500000e-01 : f64} : () -> tensor<4x8xf32>
// CHECK-NEXT: %[[E:.*]] = rank.kernel "mul"(%[[D]], %[[C2]])
// CHECK-NEXT: return %[[Y]], %[[E]]

// With fusion, the forward group stores its result only; without the
// copies, it also stores the broadcast and the constant for the backward.
// FUSED-LABEL: func.func @forward_and_backward
// FUSED: rank.fused(%arg1, %arg0) : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// FUSED: rank.kernel "matmul"
// FUSED: rank.fused(%arg1, %{{.*}}) : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// OFF-LABEL: func.func @forward_and_backward
// OFF: rank.fused(%arg1, %arg0) : (tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
func.func @forward_and_backward(%x: tensor<4x8xf32>, %m: tensor<4x1xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %b = rank.kernel "broadcast_to"(%m) : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %c = rank.kernel "full"() {value = 2.500000e-01 : f64} : () -> tensor<4x8xf32>
  %s = rank.kernel "sub"(%x, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = rank.kernel "mul"(%s, %c) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %g = rank.kernel "matmul"(%y, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = rank.kernel "mul"(%g, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = rank.kernel "mul"(%d, %c) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %e : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Readers that no group takes in (a GEMM, the return) keep the original:
// copying for them would only make the value again outside any group.
// CHECK-LABEL: func.func @unfusible_readers
// CHECK: %[[C:.*]] = rank.kernel "full"() {value = 1.000000e+00 : f64} : () -> tensor<8x8xf32>
// CHECK-NEXT: %[[Y:.*]] = rank.kernel "add"(%arg0, %[[C]])
// CHECK-NEXT: %[[G:.*]] = rank.kernel "matmul"(%[[Y]], %[[C]])
// CHECK-NEXT: return %[[G]], %[[C]]
// CHECK-NOT: "full"
func.func @unfusible_readers(%x: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %c = rank.kernel "full"() {value = 1.000000e+00 : f64} : () -> tensor<8x8xf32>
  %y = rank.kernel "add"(%x, %c) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %g = rank.kernel "matmul"(%y, %c) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %g, %c : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// An iota and a constant read by two comparisons with a reduction between:
// the later comparison gets its own iota and constant; the reduction's
// input, read once, stays as it is.
// CHECK-LABEL: func.func @iota_and_single_reader
// CHECK: %[[I:.*]] = rank.kernel "iota"() {dim = 0 : i64
// CHECK-NEXT: %[[K:.*]] = rank.kernel "full"() {value = 3.000000e+00 : f64} : () -> tensor<8xi64>
// CHECK-NEXT: %[[M:.*]] = rank.kernel "ge"(%[[I]], %[[K]])
// CHECK-NEXT: %[[A:.*]] = rank.kernel "sum"(%arg0)
// CHECK-NEXT: %[[I2:.*]] = rank.kernel "iota"() {dim = 0 : i64
// CHECK-NEXT: %[[K2:.*]] = rank.kernel "full"() {value = 3.000000e+00 : f64} : () -> tensor<8xi64>
// CHECK-NEXT: %[[N:.*]] = rank.kernel "ne"(%[[I2]], %[[K2]])
// CHECK-NOT: "iota"
func.func @iota_and_single_reader(%x: tensor<8xf32>) -> (tensor<8xi1>, tensor<f32>, tensor<8xi1>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %i = rank.kernel "iota"() {dim = 0 : i64, offset = array<i64: 0>, start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> tensor<8xi64>
  %k = rank.kernel "full"() {value = 3.000000e+00 : f64} : () -> tensor<8xi64>
  %m = rank.kernel "ge"(%i, %k) : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi1>
  %a = rank.kernel "sum"(%x) {dims = array<i64: 0>, keepdim = 0 : i64} : (tensor<8xf32>) -> tensor<f32>
  %n = rank.kernel "ne"(%i, %k) : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi1>
  return %m, %a, %n : tensor<8xi1>, tensor<f32>, tensor<8xi1>
}

// -----

// A function that --rank-plan-buffers already planned is left alone.
// CHECK-LABEL: func.func @planned
// CHECK-COUNT-1: "broadcast_to"
// CHECK-NOT: "broadcast_to"
func.func @planned(%x: tensor<4x8xf32>, %m: tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.arena_bytes = 0 : i64} {
  %b = rank.kernel "broadcast_to"(%m) : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %s = rank.kernel "sub"(%x, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %d = rank.kernel "mul"(%s, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s, %d : tensor<4x8xf32>, tensor<4x8xf32>
}
