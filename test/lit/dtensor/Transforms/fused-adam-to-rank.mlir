// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-to-rank)' | FileCheck %s
// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-to-rank, func.func(rank-mark-donations))' | FileCheck %s --check-prefix=DONATE

// dtensor.fused_adam on two parameters, one sharded unevenly (5 rows over
// 2 ranks: two local-shape classes) and one replicated: every class runs
// one rank.fused_adam on its pieces, and each result takes the storage of
// the input it replaces (parameter, exp_avg, exp_avg_sq).
#m = #dtensor.mesh<[2]>

// CHECK-LABEL: func.func @step_class0
// CHECK: rank.fused_adam(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9) {amsgrad = 0 : i64, beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, decoupled = 1 : i64, eps = 1.000000e-08 : f64, maximize = 0 : i64, weight_decay = 1.000000e-02 : f64} : (tensor<f64>, tensor<f64>, tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>)
// CHECK-LABEL: func.func @step_class1
// CHECK: rank.fused_adam({{.*}} : (tensor<f64>, tensor<f64>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>)

// Results: p0, p1, m0, m1, v0, v1; arguments: step, lr, p0, p1, g0, g1,
// m0, m1, v0, v1.
// DONATE-LABEL: func.func @step_class0
// DONATE-SAME: rank.output_donors = array<i64: 2, 3, 6, 7, 8, 9>
func.func @step(%s: !dtensor.tensor<f64, #m, [R]>, %lr: !dtensor.tensor<f64, #m, [R]>,
                %p0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %p1: !dtensor.tensor<4xf32, #m, [R]>,
                %g0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %g1: !dtensor.tensor<4xf32, #m, [R]>,
                %m0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %m1: !dtensor.tensor<4xf32, #m, [R]>,
                %v0: !dtensor.tensor<5x4xf32, #m, [S(0)]>, %v1: !dtensor.tensor<4xf32, #m, [R]>)
    -> (!dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>) {
  %r:6 = dtensor.fused_adam %s, %lr, %p0, %p1, %g0, %g1, %m0, %m1, %v0, %v1 {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.01 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>) -> (!dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>)
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>
}
