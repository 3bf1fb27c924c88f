func.func @no_kernel_name(%x: tensor<4xf32>) {
  %0 = rank.kernel ""(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return
}
