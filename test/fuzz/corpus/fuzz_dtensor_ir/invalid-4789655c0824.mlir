func.func @scatter_count(%x: tensor<7x5xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  %0 = rank.reduce_scatter %x {axis = 0 : i64, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 2, 1>} : tensor<7x5xf32> -> tensor<4x5xf32>
  return
}
