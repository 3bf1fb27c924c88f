func.func @fused_yield_types(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = rank.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "sum"(%a) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4xf32>) -> tensor<f32>
    rank.yield %e : tensor<f32>
  }
  return %0 : tensor<4xf32>
}
