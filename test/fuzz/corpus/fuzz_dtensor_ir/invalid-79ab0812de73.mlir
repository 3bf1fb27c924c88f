func.func @fused_body_argument(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = rank.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf64>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf64>) -> tensor<4xf32>
    rank.yield %e : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}
