func.func @early(%a: tensor<4x4xf32>, %x: tensor<8x8xf32>, %b: tensor<4xf32>) -> (tensor<8x8xf32>, tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %m = rank.kernel "matmul"(%x, %x) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %m2 = rank.kernel "matmul"(%m, %x) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %g1 = rank.kernel "transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %g2 = rank.kernel "neg"(%b) : (tensor<4xf32>) -> tensor<4xf32>
  %r1 = rank.all_reduce %g1 {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %r2 = rank.all_reduce %g2 {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %u = rank.kernel "relu"(%r2) : (tensor<4xf32>) -> tensor<4xf32>
  return %m2, %r1, %u : tensor<8x8xf32>, tensor<4x4xf32>, tensor<4xf32>
}
