// RUN: dtorch-opt %s --split-input-file --rank-fold-transpose-into-matmul | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --dtensor-lower-redistribute --dtensor-lower-to-rank --rank-fold-transpose-into-matmul | FileCheck %s --check-prefix=LOWERED

// linear's forward x @ w^T: the transpose becomes trans_b and goes away.
// CHECK-LABEL: func.func @rhs_transposed
// CHECK-NOT: "transpose"
// CHECK: %[[Y:.*]] = rank.kernel "matmul"(%arg0, %arg1) {trans_b = 1 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rhs_transposed(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.kernel "transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %1 = rank.kernel "matmul"(%x, %0) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %1 : tensor<4x16xf32>
}

// -----

// A transposed left operand becomes trans_a.
// CHECK-LABEL: func.func @lhs_transposed
// CHECK-NOT: "transpose"
// CHECK: rank.kernel "matmul"(%arg0, %arg1) {trans_a = 1 : i64} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
func.func @lhs_transposed(%x: tensor<8x4xf32>, %g: tensor<8x16xf32>) -> tensor<4x16xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.kernel "transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %1 = rank.kernel "matmul"(%0, %g) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %1 : tensor<4x16xf32>
}

// -----

// The input gradient of linear, g @ (w^T)^T: two transposes fold twice, the
// flag stays clear, and both transposes go. The forward's transpose has a
// reader left until the backward's is folded into the matmul.
// CHECK-LABEL: func.func @double_transpose
// CHECK-NOT: "transpose"
// CHECK: %[[Y:.*]] = rank.kernel "matmul"(%arg0, %arg1) {trans_b = 1 : i64}
// CHECK: %[[DX:.*]] = rank.kernel "matmul"(%arg2, %arg1) : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK: return %[[Y]], %[[DX]]
func.func @double_transpose(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %g: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x8xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.kernel "transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %1 = rank.kernel "matmul"(%x, %0) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %2 = rank.kernel "transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %3 = rank.kernel "matmul"(%g, %2) : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %1, %3 : tensor<4x16xf32>, tensor<4x8xf32>
}

// -----

// The weight gradient (x^T g)^T: the transpose of the matmul's result swaps
// the operands and flips both flags, g^T x.
// CHECK-LABEL: func.func @result_transposed
// CHECK-NOT: "transpose"
// CHECK: %[[DW:.*]] = rank.kernel "matmul"(%arg1, %arg0) {trans_a = 1 : i64} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: return %[[DW]]
func.func @result_transposed(%x: tensor<4x8xf32>, %g: tensor<4x16xf32>) -> tensor<16x8xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.kernel "transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %1 = rank.kernel "matmul"(%0, %g) : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %2 = rank.kernel "transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  return %2 : tensor<16x8xf32>
}

// -----

// A matmul result read by something else besides the transpose keeps both.
// CHECK-LABEL: func.func @result_read_twice
// CHECK: %[[M:.*]] = rank.kernel "matmul"(%arg0, %arg1) :
// CHECK: rank.kernel "transpose"(%[[M]])
// CHECK: rank.kernel "neg"(%[[M]])
func.func @result_read_twice(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> (tensor<2x4xf32>, tensor<4x2xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.kernel "matmul"(%a, %b) : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %1 = rank.kernel "transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  %2 = rank.kernel "neg"(%0) : (tensor<4x2xf32>) -> tensor<4x2xf32>
  return %1, %2 : tensor<2x4xf32>, tensor<4x2xf32>
}

// -----

// A transpose that something else reads stays for it; the matmul reads its
// input.
// CHECK-LABEL: func.func @transpose_kept_for_other_reader
// CHECK: %[[T:.*]] = rank.kernel "transpose"(%arg1)
// CHECK: rank.kernel "matmul"(%arg0, %arg1) {trans_b = 1 : i64}
// CHECK: rank.kernel "exp"(%[[T]])
func.func @transpose_kept_for_other_reader(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> (tensor<4x16xf32>, tensor<8x16xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.kernel "transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %1 = rank.kernel "matmul"(%x, %0) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %2 = rank.kernel "exp"(%0) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %1, %2 : tensor<4x16xf32>, tensor<8x16xf32>
}

// -----

// Batched: attention's q @ k^T on [B, H, T, D] folds into the bmm; its
// backward's transposes of transposes and of the bmm's result fold too. A
// transpose of other dims than the last two (the heads' [B, T, H, D] ->
// [B, H, T, D]) stays.
// CHECK-LABEL: func.func @batched
// CHECK: %[[H:.*]] = rank.kernel "transpose"(%arg0) {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NOT: "transpose"
// CHECK: %[[S:.*]] = rank.kernel "bmm"(%[[H]], %arg1) {trans_b = 1 : i64} : (tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x5x5xf32>
// CHECK: %[[DQ:.*]] = rank.kernel "bmm"(%arg2, %arg1) : (tensor<2x3x5x5xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x5x4xf32>
// CHECK: %[[DK:.*]] = rank.kernel "bmm"(%arg2, %[[H]]) {trans_a = 1 : i64} : (tensor<2x3x5x5xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x5x4xf32>
// CHECK: return %[[S]], %[[DQ]], %[[DK]]
func.func @batched(%x: tensor<2x5x3x4xf32>, %k: tensor<2x3x5x4xf32>, %g: tensor<2x3x5x5xf32>) -> (tensor<2x3x5x5xf32>, tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %q = rank.kernel "transpose"(%x) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x3x4xf32>) -> tensor<2x3x5x4xf32>
  %kt = rank.kernel "transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x5x4xf32>) -> tensor<2x3x4x5xf32>
  %s = rank.kernel "bmm"(%q, %kt) : (tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32>) -> tensor<2x3x5x5xf32>
  // dq = g @ (k^T)^T
  %ktt = rank.kernel "transpose"(%kt) {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x4x5xf32>) -> tensor<2x3x5x4xf32>
  %dq = rank.kernel "bmm"(%g, %ktt) : (tensor<2x3x5x5xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x5x4xf32>
  // d(k^T) = q^T @ g, dk = (d(k^T))^T = g^T q
  %qt = rank.kernel "transpose"(%q) {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x5x4xf32>) -> tensor<2x3x4x5xf32>
  %dkt = rank.kernel "bmm"(%qt, %g) : (tensor<2x3x4x5xf32>, tensor<2x3x5x5xf32>) -> tensor<2x3x4x5xf32>
  %dk = rank.kernel "transpose"(%dkt) {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x4x5xf32>) -> tensor<2x3x5x4xf32>
  return %s, %dq, %dk : tensor<2x3x5x5xf32>, tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>
}

// -----

// A transpose of a transpose reads the first one's input with the composed
// permutation; the identity disappears.
// CHECK-LABEL: func.func @composed
// CHECK-NEXT: %[[T:.*]] = rank.kernel "transpose"(%arg0) {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NEXT: return %[[T]], %arg0
func.func @composed(%x: tensor<2x3x4xf32>) -> (tensor<4x2x3xf32>, tensor<2x3x4xf32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.kernel "transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %1 = rank.kernel "transpose"(%0) {perm = array<i64: 2, 1, 0>} : (tensor<3x2x4xf32>) -> tensor<4x2x3xf32>
  %2 = rank.kernel "transpose"(%0) {perm = array<i64: 1, 0, 2>} : (tensor<3x2x4xf32>) -> tensor<2x3x4xf32>
  return %1, %2 : tensor<4x2x3xf32>, tensor<2x3x4xf32>
}

// -----

// A planned function (arena offsets assigned) is left as it is.
// CHECK-LABEL: func.func @planned
// CHECK: rank.kernel "transpose"
// CHECK: rank.kernel "matmul"(%arg0, %{{.*}}) {rank.arena_offset
func.func @planned(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>], rank.arena_bytes = 1024 : i64} {
  %0 = rank.kernel "transpose"(%w) {perm = array<i64: 1, 0>, rank.arena_offset = 0 : i64} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %1 = rank.kernel "matmul"(%x, %0) {rank.arena_offset = 512 : i64} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %2 = rank.kernel "sum"(%1) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x16xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// Sharded, from the dtensor level: x [4, 8] sharded on the contracted dim
// and w [16, 8] sharded on its dim 1 (the transpose's dim 0): each rank
// multiplies its [4, 4] piece by its [16, 4] piece read transposed, and the
// partial sums are all-reduced.
#mesh = #dtensor.mesh<[2]>
// LOWERED-LABEL: func.func @sharded_contraction_class0
// LOWERED-NOT: "transpose"
// LOWERED: %[[P:.*]] = rank.kernel "matmul"(%arg0, %arg1) {trans_b = 1 : i64} : (tensor<4x4xf32>, tensor<16x4xf32>) -> tensor<4x16xf32>
// LOWERED: rank.all_reduce %[[P]]
func.func @sharded_contraction(%x: !dtensor.tensor<4x8xf32, #mesh, [S(1)]>, %w: !dtensor.tensor<16x8xf32, #mesh, [S(1)]>) -> !dtensor.tensor<4x16xf32, #mesh, [R]> {
  %0 = dtensor.transpose %w perm = [1, 0] : (!dtensor.tensor<16x8xf32, #mesh, [S(1)]>) -> !dtensor.tensor<8x16xf32, #mesh, [S(0)]>
  %1 = dtensor.matmul %x, %0 : (!dtensor.tensor<4x8xf32, #mesh, [S(1)]>, !dtensor.tensor<8x16xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x16xf32, #mesh, [P(sum)]>
  %2 = dtensor.redistribute %1 : !dtensor.tensor<4x16xf32, #mesh, [P(sum)]> -> !dtensor.tensor<4x16xf32, #mesh, [R]>
  return %2 : !dtensor.tensor<4x16xf32, #mesh, [R]>
}
