func.func @box_rank(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2>]} {
  return
}
