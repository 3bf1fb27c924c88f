func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "broadcast_to"(%b) : (tensor<8xf32>) -> tensor<4x8xf32>
  %1 = rank.kernel "mul"(%x, %0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = rank.kernel "full"() {value = 2.0 : f64} : () -> tensor<4x8xf32>
  %3 = rank.kernel "gelu"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = rank.kernel "mul"(%3, %2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}
