func.func @cap(%a: tensor<4x4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %r1 = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %r2 = rank.all_reduce %b {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r3 = rank.all_reduce %c {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2, %r3 : tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>
}
