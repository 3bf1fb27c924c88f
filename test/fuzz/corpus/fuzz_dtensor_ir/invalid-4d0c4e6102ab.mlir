func.func @axis_out_of_mesh(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2, 0, 2>]} {
  %0 = rank.all_reduce %x {axis = 2 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return
}
