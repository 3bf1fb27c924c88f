func.func @gather_other_dim(%x: tensor<4x5xf32>) {
  %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x5xf32> -> tensor<8x6xf32>
  return
}
