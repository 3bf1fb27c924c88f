#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"], device = "cuda">
func.func @operand_needs_all_reduce(%a: !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, %b: !dtensor.tensor<4x6xf32, #m, [R, S(0)]>, %c: !dtensor.tensor<8x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), R]> {
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<4x6xf32, #m, [R, S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), P(sum)]>
  %1 = dtensor.add %0, %c : (!dtensor.tensor<8x6xf32, #m, [S(0), P(sum)]>, !dtensor.tensor<8x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), R]>
  return %1 : !dtensor.tensor<8x6xf32, #m, [S(0), R]>
}
