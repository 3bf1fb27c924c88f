// RUN: dtorch-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func @update
// CHECK: %{{.*}}:4 = rank.fused_sgd(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6) {dampening = 0.000000e+00 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 9.000000e-01 : f64, nesterov = 0 : i64, weight_decay = 0.000000e+00 : f64} : (tensor<f64>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>) -> (tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>)
func.func @update(%lr: tensor<f64>, %p0: tensor<4x2xf32>, %p1: tensor<3xbf16>, %g0: tensor<4x2xf32>, %g1: tensor<3xbf16>, %b0: tensor<4x2xf32>, %b1: tensor<3xbf16>) -> (tensor<4x2xf32>, tensor<3xbf16>) {
  %r:4 = rank.fused_sgd(%lr, %p0, %p1, %g0, %g1, %b0, %b1) {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>) -> (tensor<4x2xf32>, tensor<3xbf16>, tensor<4x2xf32>, tensor<3xbf16>)
  return %r#0, %r#1 : tensor<4x2xf32>, tensor<3xbf16>
}

// -----

func.func @bad_count(%lr: tensor<f64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{expects lr and 3 tensors per parameter, got 3 inputs}}
  %r:2 = rank.fused_sgd(%lr, %p, %p) {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @bad_lr(%lr: tensor<1xf64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{lr must be a 0-d f64 tensor}}
  %r = rank.fused_sgd(%lr, %p, %p) {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (tensor<1xf64>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @bad_buffer(%lr: tensor<f64>, %p: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{input 3 must have parameter 0's type 'tensor<4xf32>'}}
  %r:2 = rank.fused_sgd(%lr, %p, %p, %b) {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf16>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @nesterov_without_momentum(%lr: tensor<f64>, %p: tensor<4xf32>) {
  // expected-error @+1 {{first_step and nesterov need a momentum}}
  %r = rank.fused_sgd(%lr, %p, %p) {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 1 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}
