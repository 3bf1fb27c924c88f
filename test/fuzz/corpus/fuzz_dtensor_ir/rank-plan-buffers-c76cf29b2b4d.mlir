func.func @fused_two_results(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0:2 = rank.fused(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %n = rank.kernel "neg"(%e) : (tensor<4xf32>) -> tensor<4xf32>
    rank.yield %e, %n : tensor<4xf32>, tensor<4xf32>
  }
  %1 = rank.kernel "add"(%0#0, %0#1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "exp"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
