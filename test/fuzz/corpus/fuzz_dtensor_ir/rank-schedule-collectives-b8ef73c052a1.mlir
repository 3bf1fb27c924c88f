func.func @mixed_class0(%a: tensor<4x4xf32>, %b: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  %m = rank.kernel "matmul"(%a, %a) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %r1 = rank.all_reduce %m {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %r2 = rank.all_reduce %b {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2 : tensor<4x4xf32>, tensor<4xf32>
}
func.func @mixed_class1(%a: tensor<4x4xf32>, %b: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  %m = rank.kernel "matmul"(%a, %a) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %r1 = rank.all_reduce %m {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %n = rank.kernel "neg"(%r1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %s = rank.kernel "sum"(%n) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  %r2 = rank.all_reduce %s {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2 : tensor<4x4xf32>, tensor<4xf32>
}
