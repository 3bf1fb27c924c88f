func.func @a2a_dims(%x: tensor<4x5xf32>) {
  %0 = rank.all_to_all %x {axis = 0 : i64, split_dim = 0 : i64, split_sizes = array<i64: 2, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 2, 2>} : tensor<4x5xf32> -> tensor<4x5xf32>
  return
}
