// RUN: dtorch-opt %s --split-input-file --verify-diagnostics

#m = #dtensor.mesh<[2]>
func.func @count(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{expects 3 tensors per parameter (params, grads, momentum_buffers), got 2}}
  %r:2 = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>)
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @results(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{expects 2 results for 1 parameters, got 1}}
  %r = dtensor.fused_sgd %lr, %p, %p, %p {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @no_state_results(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{expects 1 results for 1 parameters, got 2}}
  %r:2 = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>)
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @lr_type(%lr: !dtensor.tensor<f32, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{lr must be a 0-d f64 tensor}}
  %r = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f32, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @first_step_without_momentum(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{first_step and nesterov need a momentum}}
  %r = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 1 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @flag(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{nesterov, maximize and first_step must be 0 or 1}}
  %r = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 2 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

// A gradient placed otherwise than its parameter (here still Partial).
#m = #dtensor.mesh<[2]>
func.func @grad_placement(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [R]>, %g: !dtensor.tensor<4xf32, #m, [P(sum)]>) {
  // expected-error @+1 {{grad 0 must have its parameter's type}}
  %r = dtensor.fused_sgd %lr, %p, %g {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [P(sum)]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @buffer_type(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>, %b: !dtensor.tensor<4xf32, #m, [R]>) {
  // expected-error @+1 {{momentum_buffer 0 must have its parameter's type}}
  %r:2 = dtensor.fused_sgd %lr, %p, %p, %b {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>)
  return
}

// -----

// Every tensor of a Partial parameter's group is Partial: no local
// elementwise update exists.
#m = #dtensor.mesh<[2]>
func.func @partial_param(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [P(sum)]>) {
  // expected-error @+1 {{parameter 0 is placed [P(sum)], not a local strategy of an elementwise update}}
  %r = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [P(sum)]>, !dtensor.tensor<4xf32, #m, [P(sum)]>) -> !dtensor.tensor<4xf32, #m, [P(sum)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @int_param(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xi32, #m, [S(0)]>) {
  // expected-error @+1 {{parameter 0 must have a float element type, got 'i32'}}
  %r = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.0 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xi32, #m, [S(0)]>, !dtensor.tensor<4xi32, #m, [S(0)]>) -> !dtensor.tensor<4xi32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @result_type(%lr: !dtensor.tensor<f64, #m, [R]>, %p: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{result momentum_buffer 0 must have its parameter's type}}
  %r:2 = dtensor.fused_sgd %lr, %p, %p {dampening = 0.0 : f64, first_step = 1 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (!dtensor.tensor<f64, #m, [R]>, !dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [S(0)]>) -> (!dtensor.tensor<4xf32, #m, [S(0)]>, !dtensor.tensor<4xf32, #m, [R]>)
  return
}
