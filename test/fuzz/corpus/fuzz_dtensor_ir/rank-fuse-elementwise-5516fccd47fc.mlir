func.func @extra_output(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "sum"(%0) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4xf32>) -> tensor<f32>
  return %1, %2 : tensor<4xf32>, tensor<f32>
}
