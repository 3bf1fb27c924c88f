#m = #dtensor.mesh<[4]>
func.func @slice_replicated_operand(%a: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %b: !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.mul %a, %b : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}
