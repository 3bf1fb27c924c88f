// RUN: dtorch-opt %s | dtorch-opt | FileCheck %s
// RUN: dtorch-opt %s --mlir-print-op-generic | dtorch-opt | FileCheck %s

// dtensor.fused_sgd: momentum after the first step (two parameters of
// different shapes, dtypes and placements in one op), the first step
// (the buffers start from the gradients), and plain SGD (no state).
#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>

// CHECK-LABEL: func @momentum
// CHECK: %{{.*}}:4 = dtensor.fused_sgd %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6 {dampening = 1.000000e-01 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 9.000000e-01 : f64, nesterov = 0 : i64, weight_decay = 1.000000e-04 : f64} : (!dtensor.tensor<f64, #mesh, [R, R]>, !dtensor.tensor<8x4xf32, #mesh, [R, S(0)]>, !dtensor.tensor<4xbf16, #mesh, [S(0), R]>
// CHECK-SAME: -> (!dtensor.tensor<8x4xf32, #mesh, [R, S(0)]>, !dtensor.tensor<4xbf16, #mesh, [S(0), R]>, !dtensor.tensor<8x4xf32, #mesh, [R, S(0)]>, !dtensor.tensor<4xbf16, #mesh, [S(0), R]>)
func.func @momentum(%lr: !dtensor.tensor<f64, #m, [R, R]>, %p0: !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, %p1: !dtensor.tensor<4xbf16, #m, [S(0), R]>, %g0: !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, %g1: !dtensor.tensor<4xbf16, #m, [S(0), R]>, %b0: !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, %b1: !dtensor.tensor<4xbf16, #m, [S(0), R]>) -> (!dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>) {
  %r:4 = dtensor.fused_sgd %lr, %p0, %p1, %g0, %g1, %b0, %b1 {dampening = 0.1 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0001 : f64} : (!dtensor.tensor<f64, #m, [R, R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>) -> (!dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>)
  return %r#0, %r#1 : !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>
}

// CHECK-LABEL: func @first_step
// CHECK: %{{.*}}:2 = dtensor.fused_sgd %arg0, %arg1, %arg2 {dampening = 0.000000e+00 : f64, first_step = 1 : i64, maximize = 1 : i64, momentum = 9.000000e-01 : f64, nesterov = 1 : i64
#r = #dtensor.mesh<[4]>
func.func @first_step(%lr: !dtensor.tensor<f64, #r, [R]>, %p: !dtensor.tensor<6xf64, #r, [S(0)]>, %g: !dtensor.tensor<6xf64, #r, [S(0)]>) -> (!dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>) {
  %r:2 = dtensor.fused_sgd %lr, %p, %g {dampening = 0.0 : f64, first_step = 1 : i64, maximize = 1 : i64, momentum = 0.9 : f64, nesterov = 1 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #r, [R]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>) -> (!dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>)
  return %r#0, %r#1 : !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>
}

// CHECK-LABEL: func @plain
// CHECK: %{{.*}} = dtensor.fused_sgd %arg0, %arg1, %arg2 {dampening = 0.000000e+00 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.000000e+00 : f64
func.func @plain(%lr: !dtensor.tensor<f64, #r, [R]>, %p: !dtensor.tensor<6xf64, #r, [S(0)]>, %g: !dtensor.tensor<6xf64, #r, [S(0)]>) -> !dtensor.tensor<6xf64, #r, [S(0)]> {
  %r = dtensor.fused_sgd %lr, %p, %g {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.01 : f64} : (!dtensor.tensor<f64, #r, [R]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>) -> !dtensor.tensor<6xf64, #r, [S(0)]>
  return %r : !dtensor.tensor<6xf64, #r, [S(0)]>
}
