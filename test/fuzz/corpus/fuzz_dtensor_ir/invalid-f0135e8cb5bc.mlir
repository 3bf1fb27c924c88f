func.func @coord_axis(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "lead_or_zero"(%x) {coord = #rank.mesh_coord<axis = 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}
