// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-to-rank)' | FileCheck %s
// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-to-rank, func.func(rank-mark-donations))' | FileCheck %s --check-prefix=DONATE

// dtensor.fused_sgd on two parameters, one sharded unevenly (5 rows over
// 2 ranks: two local-shape classes) and one replicated: every class runs
// one rank.fused_sgd on its pieces, and each result takes the storage of
// the input it replaces (the parameter and the momentum buffer; on the
// first step the gradient the buffer starts from).
#m = #dtensor.mesh<[2]>

// CHECK-LABEL: func.func @step_class0
// CHECK: rank.fused_sgd(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6) {dampening = 0.000000e+00 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 9.000000e-01 : f64, nesterov = 1 : i64, weight_decay = 1.000000e-02 : f64} : (tensor<f64>, tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>)
// CHECK-LABEL: func.func @step_class1
// CHECK: rank.fused_sgd({{.*}} : (tensor<f64>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>)

// Results: p0, p1, buf0, buf1; arguments: lr, p0, p1, g0, g1, buf0, buf1.
// DONATE-LABEL: func.func @step_class0
// DONATE-SAME: rank.output_donors = array<i64: 1, 2, 5, 6>
func.func @step(%lr: !dtensor.tensor<f64, #m, [R]>, %p0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %p1: !dtensor.tensor<4xf32, #m, [R]>, %g0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %g1: !dtensor.tensor<4xf32, #m, [R]>, %b0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %b1: !dtensor.tensor<4xf32, #m, [R]>) -> (!dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>) {
  %r:4 = dtensor.fused_sgd %lr, %p0, %p1, %g0, %g1, %b0, %b1 {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 1 : i64, weight_decay = 0.01 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>) -> (!dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>)
  return %r#0, %r#1, %r#2, %r#3 : !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>
}

// The first step: the buffers take the gradients' storage.
// Results: p0, p1, buf0, buf1; arguments: lr, p0, p1, g0, g1.
// CHECK-LABEL: func.func @first_class0
// CHECK: rank.fused_sgd(%arg0, %arg1, %arg2, %arg3, %arg4) {{.*}}first_step = 1 : i64
// DONATE-LABEL: func.func @first_class0
// DONATE-SAME: rank.output_donors = array<i64: 1, 2, 3, 4>
func.func @first(%lr: !dtensor.tensor<f64, #m, [R]>, %p0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %p1: !dtensor.tensor<4xf32, #m, [R]>, %g0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %g1: !dtensor.tensor<4xf32, #m, [R]>) -> (!dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>) {
  %r:4 = dtensor.fused_sgd %lr, %p0, %p1, %g0, %g1 {dampening = 0.0 : f64, first_step = 1 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>) -> (!dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>)
  return %r#0, %r#1, %r#2, %r#3 : !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>
}
