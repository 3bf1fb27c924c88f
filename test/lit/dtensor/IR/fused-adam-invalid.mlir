// RUN: dtorch-opt %s --split-input-file --verify-diagnostics

#m = #dtensor.mesh<[2]>
func.func @count(%s: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{expects 4 tensors per parameter (params, grads, exp_avgs, exp_avg_sqs), got 3}}
  %r:3 = dtensor.fused_adam %s, %s, %p, %p, %p {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>)
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @results(%s: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{expects 3 results for 1 parameters, got 2}}
  %r:2 = dtensor.fused_adam %s, %s, %p, %p, %p, %p {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>)
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @step_type(%s: !dtensor.tensor<f32, #m, [R]>, %l: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{step must be a 0-d f64 tensor}}
  %r:3 = dtensor.fused_adam %s, %l, %p, %p, %p, %p {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f32, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>)
  return
}

// -----

// A gradient placed otherwise than its parameter (here still Partial).
#m = #dtensor.mesh<[2]>
func.func @grad_placement(%s: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [R]>, %g: !dtensor.tensor<4xf32, #m, [P(sum)]>) {
  // expected-error @+1 {{grad 0 must have its parameter's type}}
  %r:3 = dtensor.fused_adam %s, %s, %p, %g, %p, %p {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [P(sum)]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>) -> (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>)
  return
}

// -----

// Every tensor of a Partial parameter's group is Partial: no local
// elementwise update exists.
#m = #dtensor.mesh<[2]>
func.func @partial_param(%s: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [P(sum)]>) {
  // expected-error @+1 {{parameter 0 is placed [P(sum)], not a local strategy of an elementwise update}}
  %r:3 = dtensor.fused_adam %s, %s, %p, %p, %p, %p {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [P(sum)]>, !dtensor.tensor<4xf32, #m, [P(sum)]>, !dtensor.tensor<4xf32, #m, [P(sum)]>, !dtensor.tensor<4xf32, #m, [P(sum)]>) -> (!dtensor.tensor<4xf32, #m, [P(sum)]>, !dtensor.tensor<4xf32, #m, [P(sum)]>, !dtensor.tensor<4xf32, #m, [P(sum)]>)
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @int_param(%s: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xi32, #m, [S(0)]>) {
  // expected-error @+1 {{parameter 0 must have a float element type, got 'i32'}}
  %r:3 = dtensor.fused_adam %s, %s, %p, %p, %p, %p {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xi32, #m, [S(0)]>, !dtensor.tensor<4xi32, #m, [S(0)]>, !dtensor.tensor<4xi32, #m, [S(0)]>, !dtensor.tensor<4xi32, #m, [S(0)]>) -> (!dtensor.tensor<4xi32, #m, [S(0)]>, !dtensor.tensor<4xi32, #m, [S(0)]>, !dtensor.tensor<4xi32, #m, [S(0)]>)
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @result_type(%s: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{result exp_avg_sq 0 must have its parameter's type}}
  %r:3 = dtensor.fused_adam %s, %s, %p, %p, %p, %p {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>)
  return
}
