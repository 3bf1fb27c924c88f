func.func @box_outside_mesh(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 2, 3>]} {
  return
}
