func.func @rank_ops(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = rank.kernel "relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
