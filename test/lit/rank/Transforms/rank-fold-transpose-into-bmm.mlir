// RUN: dtorch-opt %s --split-input-file --rank-fold-transpose-into-bmm | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --rank-fold-transpose-into-matmul --rank-fold-transpose-into-bmm | FileCheck %s --check-prefix=BOTH

// Attention's forward: q and k split into heads by a transpose of dims 1
// and 2 are read in place, and the transpose joining the heads of the
// output is written by the bmm.
// CHECK-LABEL: func.func @attention_forward
// CHECK-NOT: "transpose"
// CHECK: %[[S:.*]] = rank.kernel "bmm"(%arg0, %arg1) {a_perm = array<i64: 0, 2, 1, 3>, b_perm = array<i64: 0, 2, 1, 3>, trans_b = 1 : i64} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[O:.*]] = rank.kernel "bmm"(%[[S]], %arg2) {b_perm = array<i64: 0, 2, 1, 3>, out_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @attention_forward(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %qh = rank.kernel "transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %kh = rank.kernel "transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %vh = rank.kernel "transpose"(%v) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %s = rank.kernel "bmm"(%qh, %kh) {trans_b = 1 : i64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  %o = rank.kernel "bmm"(%s, %vh) : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %y = rank.kernel "transpose"(%o) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  return %y : tensor<2x8x4x16xf32>
}

// -----

// A transpose that another op also reads stays for that reader; the bmm
// still reads the transpose's input. A bmm result read twice keeps its
// transpose.
// CHECK-LABEL: func.func @other_readers
// CHECK: %[[T:.*]] = rank.kernel "transpose"(%arg0) {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: %[[P:.*]] = rank.kernel "bmm"(%arg0, %arg1) {a_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[U:.*]] = rank.kernel "transpose"(%[[P]]) {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: return %[[T]], %[[P]], %[[U]]
func.func @other_readers(%q: tensor<2x8x4x16xf32>, %k: tensor<2x4x16x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>, tensor<2x8x4x8xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %qh = rank.kernel "transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %p = rank.kernel "bmm"(%qh, %k) : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %u = rank.kernel "transpose"(%p) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
  return %qh, %p, %u : tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>, tensor<2x8x4x8xf32>
}

// -----

// A transpose that moves the last dim is not a layout the kernel reads
// (rows must stay contiguous): only --rank-fold-transpose-into-matmul
// folds a swap of the last two dims, into trans_b; then the head
// transpose of the same operand, beneath it, folds here.
// CHECK-LABEL: func.func @last_dim_moves
// CHECK: rank.kernel "transpose"(%arg1) {perm = array<i64: 0, 2, 3, 1>}
// CHECK: rank.kernel "bmm"(%arg0, %{{.*}}) : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>)
// BOTH-LABEL: func.func @last_dim_moves
// BOTH: %[[T:.*]] = rank.kernel "transpose"(%arg1) {perm = array<i64: 0, 2, 3, 1>}
// BOTH: rank.kernel "bmm"(%arg0, %[[T]])
// BOTH-LABEL: func.func @swap_then_heads
// BOTH-NOT: "transpose"
// BOTH: rank.kernel "bmm"(%arg0, %arg1) {b_perm = array<i64: 0, 2, 1, 3>, trans_b = 1 : i64} : (tensor<2x4x8x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x4x8x8xf32>
func.func @last_dim_moves(%q: tensor<2x4x8x16xf32>, %k: tensor<2x16x4x8xf32>) -> tensor<2x4x8x8xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %kt = rank.kernel "transpose"(%k) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x8x16xf32>
  %kk = rank.kernel "transpose"(%kt) {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %s = rank.kernel "bmm"(%q, %kk) : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  return %s : tensor<2x4x8x8xf32>
}
func.func @swap_then_heads(%q: tensor<2x4x8x16xf32>, %k: tensor<2x8x4x16xf32>) -> tensor<2x4x8x8xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %kh = rank.kernel "transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %kk = rank.kernel "transpose"(%kh) {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %s = rank.kernel "bmm"(%q, %kk) : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  return %s : tensor<2x4x8x8xf32>
}

// -----

// A function that --rank-plan-buffers already planned is left alone.
// CHECK-LABEL: func.func @planned
// CHECK: "transpose"
// CHECK: rank.kernel "bmm"(%0, %arg1)
func.func @planned(%q: tensor<2x8x4x16xf32>, %k: tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.arena_bytes = 0 : i64} {
  %qh = rank.kernel "transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %p = rank.kernel "bmm"(%qh, %k) : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  return %p : tensor<2x4x8x8xf32>
}

// -----

// Kernels without operands (a `full`) and other kernels around are passed
// over.
// CHECK-LABEL: func.func @constants_around
// CHECK: rank.kernel "full"
// CHECK: rank.kernel "bmm"(%arg0, %{{.*}}) {a_perm = array<i64: 0, 2, 1, 3>}
func.func @constants_around(%q: tensor<2x8x4x16xf32>) -> tensor<2x4x8x8xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %c = rank.kernel "full"() {value = 1.000000e+00 : f64} : () -> tensor<2x4x16x8xf32>
  %qh = rank.kernel "transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %p = rank.kernel "bmm"(%qh, %c) : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  return %p : tensor<2x4x8x8xf32>
}
