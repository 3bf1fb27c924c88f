func.func @not_mixed(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf64>, %e: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf64>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2, 0, 2>]} {
  %r1 = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r2 = rank.all_reduce %b {axis = 1 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r3 = rank.all_reduce %c {axis = 1 : i64, reduce = "max"} : tensor<4xf32> -> tensor<4xf32>
  %r4 = rank.all_reduce %d {axis = 1 : i64, reduce = "max"} : tensor<4xf64> -> tensor<4xf64>
  %r5 = rank.all_reduce %e {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %n = rank.kernel "neg"(%r5) : (tensor<4xf32>) -> tensor<4xf32>
  %r6 = rank.all_reduce %n {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2, %r3, %r4, %r6 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf64>, tensor<4xf32>
}
