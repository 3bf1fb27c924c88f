func.func @readiness(%s: tensor<4x4xf32>, %b: tensor<4x4xf32>, %x: tensor<4x4xf32>) -> (tensor<8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %sr = rank.all_reduce %s {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %m = rank.kernel "matmul"(%x, %x) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %u = rank.kernel "mul"(%m, %sr) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %l = rank.kernel "relu"(%u) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %ag = rank.all_gather %l {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x4xf32> -> tensor<8x4xf32>
  %g = rank.kernel "neg"(%b) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %r = rank.all_reduce %g {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %n = rank.kernel "exp"(%sr) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %a = rank.all_reduce %n {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  return %ag, %r, %a : tensor<8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
