func.func @fused_holds_a_collective(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %r = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
    rank.yield %r : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}
