func.func @breaks(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "add"(%x, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.kernel "relu"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = rank.kernel "matmul"(%1, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = rank.all_reduce %2 {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %4 = rank.kernel "exp"(%3) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %5 = rank.kernel "neg"(%4) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %6 = rank.kernel "matmul"(%3, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %7 = rank.kernel "sub"(%5, %6) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %8 = rank.kernel "tanh"(%7) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %8 : tensor<4x4xf32>
}
