// RUN: dtorch-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func @update
// CHECK: %{{.*}}:6 = rank.fused_adam(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9) {amsgrad = 0 : i64, beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, decoupled = 1 : i64, eps = 1.000000e-08 : f64, maximize = 0 : i64, weight_decay = 1.000000e-02 : f64} : (tensor<f64>, tensor<f64>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>) -> (tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>)
func.func @update(%s: tensor<f64>, %lr: tensor<f64>, %p0: tensor<4x2xf32>, %p1: tensor<3xbf16>, %g0: tensor<4x2xf32>, %g1: tensor<3xbf16>, %m0: tensor<4x2xf32>, %m1: tensor<3xbf16>, %v0: tensor<4x2xf32>, %v1: tensor<3xbf16>) -> (tensor<4x2xf32>, tensor<3xbf16>) {
  %r:6 = rank.fused_adam(%s, %lr, %p0, %p1, %g0, %g1, %m0, %m1, %v0, %v1) {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.01 : f64} : (tensor<f64>, tensor<f64>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>) -> (tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>)
  return %r#0, %r#1 : tensor<4x2xf32>, tensor<3xbf16>
}

// -----

func.func @bad_count(%s: tensor<f64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{expects step, lr and 4 tensors per parameter, got 5 inputs}}
  %r:3 = rank.fused_adam(%s, %s, %p, %p, %p) {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<f64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @bad_lr(%s: tensor<f64>, %lr: tensor<1xf64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{lr must be a 0-d f64 tensor}}
  %r:3 = rank.fused_adam(%s, %lr, %p, %p, %p, %p) {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<1xf64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @bad_state(%s: tensor<f64>, %p: tensor<4xf32>, %m: tensor<4xf16>) {
  // expected-error @+1 {{input 4 must have parameter 0's type 'tensor<4xf32>'}}
  %r:3 = rank.fused_adam(%s, %s, %p, %p, %m, %p) {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<f64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf16>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}
