#m1 = #dtensor.mesh<[4]>
#m2 = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @linalg_and_reductions(%a: !dtensor.tensor<8x4xf32, #m1, [S(1)]>, %b: !dtensor.tensor<4x6xf32, #m1, [S(0)]>, %c: !dtensor.tensor<2x8x4xf32, #m1, [S(0)]>, %d: !dtensor.tensor<2x4x6xf32, #m1, [S(0)]>) {
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>, !dtensor.tensor<4x6xf32, #m1, [S(0)]>) -> !dtensor.tensor<8x6xf32, #m1, [P(sum)]>
  %1 = dtensor.bmm %c, %d : (!dtensor.tensor<2x8x4xf32, #m1, [S(0)]>, !dtensor.tensor<2x4x6xf32, #m1, [S(0)]>) -> !dtensor.tensor<2x8x6xf32, #m1, [S(0)]>
  %2 = dtensor.sum %a dims = [1] : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>) -> !dtensor.tensor<8xf32, #m1, [P(sum)]>
  %3 = dtensor.mean %a dims = [0, 1] keepdim : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>) -> !dtensor.tensor<1x1xf32, #m1, [P(sum)]>
  %4 = dtensor.max %a dims = [1] : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>) -> !dtensor.tensor<8xf32, #m1, [P(max)]>
  return
}
