func.func @gather_sizes(%x: tensor<4x5xf32>) {
  %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x5xf32> -> tensor<7x5xf32>
  return
}
