func.func @in_place(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "reshape"(%1) : (tensor<4xf32>) -> tensor<2x2xf32>
  %3 = rank.kernel "reshape"(%2) : (tensor<2x2xf32>) -> tensor<4xf32>
  %4 = rank.kernel "add"(%3, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}
