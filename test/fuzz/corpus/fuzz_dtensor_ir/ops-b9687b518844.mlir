func.func @program_class0(%x: tensor<4x5xf32>) attributes {rank.mesh = array<i64: 2, 3>, rank.positions = [array<i64: 0, 1, 0, 3>]} {
  %0 = rank.kernel "add"(%x, %x) : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
  %1 = rank.kernel "sum"(%0) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x5xf32>) -> tensor<4xf32>
  %2 = rank.all_reduce %1 {axis = 0 : i64, reduce = "max"} : tensor<4xf32> -> tensor<4xf32>
  %3 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
  %4 = rank.reduce_scatter %3 {axis = 0 : i64, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<7x5xf32> -> tensor<4x5xf32>
  %5 = rank.all_to_all %x {axis = 0 : i64, split_dim = 1 : i64, split_sizes = array<i64: 3, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x3xf32>
  return
}
func.func @mesh_values(%x: tensor<3x4xi64>) attributes {rank.mesh = array<i64: 4, 2>, rank.positions = [array<i64: 0, 3, 0, 2>]} {
  %0 = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [10, 4], shard_dims = [0, -1], dim = -1>} : () -> tensor<3x4xi64>
  %1 = rank.kernel "slice"(%0) {dim = 1 : i64, start = #rank.chunk_offset<axis = 1, extent = 4>} : (tensor<3x4xi64>) -> tensor<3x2xi64>
  %2 = rank.kernel "lead_or_zero"(%x) {coord = #rank.mesh_coord<axis = 1>} : (tensor<3x4xi64>) -> tensor<3x4xi64>
  return
}
func.func @fused_group(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0:2 = rank.fused(%x) {rank.arena_offset = array<i64: 0, -1>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %n = rank.kernel "neg"(%e) : (tensor<4xf32>) -> tensor<4xf32>
    rank.yield %e, %n : tensor<4xf32>, tensor<4xf32>
  }
  return %0#1 : tensor<4xf32>
}
