func.func @kept(%x: tensor<4xf32>, %i: tensor<4xi32>, %e: tensor<3x0xf64>) -> (tensor<4xf32>, tensor<2xf32>, tensor<4xi32>, tensor<4xi32>, tensor<3x0xf64>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "full"() {value = 1.0 : f64} : () -> tensor<2xf32>
  %2 = rank.kernel "full"() {value = 3.0 : f64} : () -> tensor<4xi32>
  %3 = rank.kernel "div"(%i, %2) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %4 = rank.kernel "exp"(%e) : (tensor<3x0xf64>) -> tensor<3x0xf64>
  %5 = rank.kernel "neg"(%4) : (tensor<3x0xf64>) -> tensor<3x0xf64>
  %6 = rank.kernel "relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %7 = rank.kernel "full"() {value = 1.0 : f64} : () -> tensor<4xf32>
  %8 = rank.kernel "add"(%6, %7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3, %5 : tensor<4xf32>, tensor<2xf32>, tensor<4xi32>, tensor<4xi32>, tensor<3x0xf64>
}
