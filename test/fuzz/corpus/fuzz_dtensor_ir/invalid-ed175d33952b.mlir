func.func @gather_axis_size(%x: tensor<2x5xf32>) attributes {rank.mesh = array<i64: 3>, rank.positions = [array<i64: 0, 3>]} {
  %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x5xf32> -> tensor<4x5xf32>
  return
}
