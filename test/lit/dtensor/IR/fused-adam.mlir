// RUN: dtorch-opt %s | dtorch-opt | FileCheck %s
// RUN: dtorch-opt %s --mlir-print-op-generic | dtorch-opt | FileCheck %s

// dtensor.fused_adam: two parameters of different shapes, dtypes and
// placements in one op (AdamW), and one with amsgrad (Adam).
#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>

// CHECK-LABEL: func @adamw
// CHECK: %{{.*}}:6 = dtensor.fused_adam %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9 {amsgrad = 0 : i64, beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, decoupled = 1 : i64, eps = 1.000000e-08 : f64, maximize = 0 : i64, weight_decay = 1.000000e-02 : f64} : (!dtensor.tensor<f64, #mesh, [R, R]>, !dtensor.tensor<f64, #mesh, [R, R]>, !dtensor.tensor<8x4xf32, #mesh, [R, S(0)]>, !dtensor.tensor<4xbf16, #mesh, [S(0), R]>
// CHECK-SAME: -> (!dtensor.tensor<8x4xf32, #mesh, [R, S(0)]>, !dtensor.tensor<4xbf16, #mesh, [S(0), R]>, !dtensor.tensor<8x4xf32, #mesh, [R, S(0)]>, !dtensor.tensor<4xbf16, #mesh, [S(0), R]>, !dtensor.tensor<8x4xf32, #mesh, [R, S(0)]>, !dtensor.tensor<4xbf16, #mesh, [S(0), R]>)
func.func @adamw(%s: !dtensor.tensor<f64, #m, [R, R]>, %lr: !dtensor.tensor<f64, #m, [R, R]>,
                 %p0: !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, %p1: !dtensor.tensor<4xbf16, #m, [S(0), R]>,
                 %g0: !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, %g1: !dtensor.tensor<4xbf16, #m, [S(0), R]>,
                 %m0: !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, %m1: !dtensor.tensor<4xbf16, #m, [S(0), R]>,
                 %v0: !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, %v1: !dtensor.tensor<4xbf16, #m, [S(0), R]>)
    -> (!dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>) {
  %r:6 = dtensor.fused_adam %s, %lr, %p0, %p1, %g0, %g1, %m0, %m1, %v0, %v1 {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.01 : f64} : (!dtensor.tensor<f64, #m, [R, R]>, !dtensor.tensor<f64, #m, [R, R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>) -> (!dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>, !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>)
  return %r#0, %r#1 : !dtensor.tensor<8x4xf32, #m, [R, S(0)]>, !dtensor.tensor<4xbf16, #m, [S(0), R]>
}

// CHECK-LABEL: func @adam_amsgrad
// CHECK: %{{.*}}:4 = dtensor.fused_adam %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6 {amsgrad = 1 : i64
#r = #dtensor.mesh<[4]>
func.func @adam_amsgrad(%s: !dtensor.tensor<f64, #r, [R]>, %lr: !dtensor.tensor<f64, #r, [R]>,
                        %p: !dtensor.tensor<6xf64, #r, [S(0)]>, %g: !dtensor.tensor<6xf64, #r, [S(0)]>,
                        %m: !dtensor.tensor<6xf64, #r, [S(0)]>, %v: !dtensor.tensor<6xf64, #r, [S(0)]>,
                        %vmax: !dtensor.tensor<6xf64, #r, [S(0)]>) -> !dtensor.tensor<6xf64, #r, [S(0)]> {
  %r:4 = dtensor.fused_adam %s, %lr, %p, %g, %m, %v, %vmax {amsgrad = 1 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 0 : i64, eps = 1.0e-08 : f64, maximize = 1 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #r, [R]>, !dtensor.tensor<f64, #r, [R]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>) -> (!dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>, !dtensor.tensor<6xf64, #r, [S(0)]>)
  return %r#0 : !dtensor.tensor<6xf64, #r, [S(0)]>
}
