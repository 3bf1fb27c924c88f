func.func @box_offset_dim(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [8], shard_dims = [1], dim = -1>} : () -> tensor<4xf32>
  return
}
