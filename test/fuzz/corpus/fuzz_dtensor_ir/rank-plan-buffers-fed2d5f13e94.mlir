func.func @escaping(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = rank.kernel "sin"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = rank.kernel "mul"(%1, %2) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = rank.kernel "sum"(%3) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  return %0, %4 : tensor<4x4xf32>, tensor<4xf32>
}
