func.func @fused_arena_offset_alignment(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0:2 = rank.fused(%x) {rank.arena_offset = array<i64: 0, 8>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    rank.yield %e, %e : tensor<4xf32>, tensor<4xf32>
  }
  return %0#0 : tensor<4xf32>
}
