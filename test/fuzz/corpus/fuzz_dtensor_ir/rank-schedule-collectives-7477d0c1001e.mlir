func.func @prefetch(%w0: tensor<2x4xf32>, %w1: tensor<2x4xf32>, %w2: tensor<2x4xf32>, %x: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %g0 = rank.all_gather %w0 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x4xf32> -> tensor<4x4xf32>
  %a = rank.kernel "matmul"(%x, %g0) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g1 = rank.all_gather %w1 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x4xf32> -> tensor<4x4xf32>
  %b = rank.kernel "matmul"(%a, %g1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g2 = rank.all_gather %w2 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x4xf32> -> tensor<4x4xf32>
  %c = rank.kernel "matmul"(%b, %g2) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}
